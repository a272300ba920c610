"""maestro_core: Maestro Core's Python API on the Rust CDO pool.

The functions mirror the C API (``mstro_init``, ``mstro_cdo_declare``, ...) with Pythonic
returns: handles and values are returned, failures raise :class:`MaestroError` (``.status``
is an ``MSTRO_*`` value, ``.message`` says what was wrong and what to do). Data moves
without copies: ``mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_RAW_PTR, array)`` offers
any buffer (bytes, bytearray, memoryview, a C-contiguous NumPy array) in place, and
``mstro_cdo_access_ptr(cdo)`` returns a memoryview over the demanded bytes
(``numpy.frombuffer`` works on it). Blocking calls release the GIL.

Beyond Maestro Core: ``with pool(...)`` (init/finalize), ``with cdo(name) as c``
(declare/dispose) and ``await mstro_request_wait_async(request)`` (asyncio).

The pool is joined at the first operation: ``MSTRO_POOL_MANAGER_INFO`` if set, else the
pool manager of the PMIx job (``maestro run``, ``srun --mpi=pmix``, ``mpirun``), else a
local pool inside the process.
"""

import asyncio as _asyncio
import contextlib as _contextlib
import ctypes as _ctypes

from ._native import *  # noqa: F401,F403  (the C API's names)
from ._native import (  # noqa: F401
    Cdo,
    MaestroError,
    _mstro_cdo_access,
    _mstro_mem_alloc,
    mstro_cdo_declare,
    mstro_request_test,
    mstro_request_wait,
    mstro_cdo_dispose,
    mstro_cdo_withdraw,
    mstro_finalize,
    mstro_init,
)


async def mstro_request_wait_async(request, poll=0.0005):
    """Awaits an asynchronous demand (``mstro_cdo_demand_async``) from asyncio.

    The event loop runs on while the demand is in flight: the request is tested every
    ``poll`` seconds (never blocking the loop), then waited for, which raises the demand's
    error if it failed. Cancelling the awaiting task leaves the request in flight.
    """
    while not mstro_request_test(request):
        await _asyncio.sleep(poll)
    mstro_request_wait(request)


def mstro_cdo_access_ptr(cdo):
    """The demanded bytes of ``cdo`` as a read-only memoryview, without a copy.

    The view keeps the bytes alive even after ``mstro_cdo_dispose`` (library memory), or
    is the buffer lent with ``MSTRO_ATTR_CORE_CDO_RAW_PTR``. Raises MaestroError
    (MSTRO_INVSTATE) before the demand.
    """
    address, length, keeper = _mstro_cdo_access(cdo)
    if length == 0:
        return memoryview(b"")
    array = (_ctypes.c_ubyte * length).from_address(address)
    array._maestro_keep = keeper  # the view holds the array, the array holds the bytes
    return memoryview(array).cast("B").toreadonly()


def mstro_mem_alloc(size):
    """``size`` bytes (zeroed) for CDO data, as a writable memoryview.

    Fill it (``numpy.frombuffer(view, dtype)`` gives an array over it, no copy) and lend it
    with ``MSTRO_ATTR_CORE_CDO_RAW_PTR``: where the system makes that pay, the memory lives
    in a memory file that consumers on this node map instead of copying (huge pages for
    shared memory from 1 MiB, else from 16 MiB). The memory is freed once nothing refers to
    the view (a CDO lending it holds it until disposed). Raises MaestroError (MSTRO_INVARG)
    for 0 bytes, (MSTRO_NOMEM) when the memory cannot be had.
    """
    address, length, owner = _mstro_mem_alloc(size)
    array = (_ctypes.c_ubyte * length).from_address(address)
    array._maestro_keep = owner  # the view holds the array, the array holds the memory
    return memoryview(array).cast("B")


@_contextlib.contextmanager
def pool(workflow=None, component=None, index=0):
    """``mstro_init`` on entry, ``mstro_finalize`` on exit."""
    mstro_init(workflow, component, index)
    try:
        yield
    finally:
        mstro_finalize()


@_contextlib.contextmanager
def cdo(name):
    """A declared CDO for the block; withdrawn if still offered, then disposed, on exit."""
    handle = mstro_cdo_declare(name, None)
    try:
        yield handle
    finally:
        try:
            mstro_cdo_dispose(handle)
        except MaestroError as e:
            if e.status != MSTRO_INVSTATE:  # noqa: F405
                raise
            mstro_cdo_withdraw(handle)
            mstro_cdo_dispose(handle)
