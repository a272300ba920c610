"""maestro_core in one process (a local pool): every function, errors as exceptions, NumPy
without copies, events, the GIL released while blocking."""

import gc
import subprocess
import sys
import threading

import numpy as np
import pytest

import maestro_core as M


def status_of(call, *args):
    with pytest.raises(M.MaestroError) as e:
        call(*args)
    assert isinstance(e.value.message, str) and e.value.message
    return e.value.status


def test_version_clock_descriptions_and_constants():
    assert M.mstro_version().startswith("maestro-rs ")
    a = M.mstro_clock()
    assert M.mstro_clock() >= a
    assert M.mstro_status_description(M.MSTRO_TIMEOUT) == "timed out"
    assert M.mstro_status_description(12345) == "unknown status"
    assert M.mstro_pool_event_description(M.MSTRO_POOL_EVENT_APP_JOIN) == "app-join"
    assert M.mstro_pool_event_description(3) == "invalid"
    assert M.MSTRO_OK == 0 and M.MSTRO_POOL_EVENT_OFFER == 4
    assert M.MSTRO_ATTR_CORE_CDO_RAW_PTR == ".maestro.core.cdo.raw-ptr"


def test_failures_raise_maestro_error_with_status_and_message():
    assert status_of(M.mstro_cdo_declare, "early", None) == M.MSTRO_UNINIT
    assert status_of(M.mstro_finalize) == M.MSTRO_UNINIT
    M.mstro_init("py-errors", "tester", 0)
    assert status_of(M.mstro_init) == M.MSTRO_NOT_TWICE
    assert status_of(M.mstro_cdo_declare, "", None) == M.MSTRO_INVARG
    # A NUL byte: no C program could name the CDO.
    assert status_of(M.mstro_cdo_declare, "a\0b", None) == M.MSTRO_INVARG
    assert status_of(M.mstro_cdo_declare, "x", {"a": 1}) == M.MSTRO_INVARG
    c = M.mstro_cdo_declare("c", None)
    assert status_of(M.mstro_cdo_offer, c) == M.MSTRO_INVSTATE
    assert status_of(M.mstro_cdo_access_ptr, c) == M.MSTRO_INVSTATE
    assert status_of(M.mstro_cdo_attribute_set, c, ".no.such", 1) == M.MSTRO_NOENT
    assert status_of(M.mstro_cdo_attribute_set, c, ".test.i", "one") == M.MSTRO_INVARG
    assert status_of(M.mstro_cdo_attribute_set, c, ".test.b", 1) == M.MSTRO_INVARG
    assert status_of(M.mstro_cdo_attribute_set, c, ".test.u", -1) == M.MSTRO_INVARG
    assert status_of(M.mstro_cdo_attribute_set, c, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, 7) == M.MSTRO_INVARG
    assert status_of(M.mstro_cdo_attribute_get, c, ".test.s") == M.MSTRO_NOENT
    with pytest.raises(M.MaestroError) as e:
        M.mstro_cdo_selector_create(None, None, "(.test.i step 2)")
    assert e.value.status == M.MSTRO_INVARG and "column" in e.value.message
    assert status_of(M.mstro_subscribe, None, 0, 0) == M.MSTRO_INVARG
    assert status_of(M.mstro_pm_getinfo) == M.MSTRO_INVSTATE
    M.mstro_cdo_dispose(c)
    assert status_of(M.mstro_cdo_seal, c) == M.MSTRO_INVARG  # used after dispose
    nobody = M.mstro_cdo_declare("nobody-offers-this", None)
    M.mstro_cdo_require(nobody)
    M.mstro_cdo_retract(nobody)
    M.mstro_cdo_dispose(nobody)
    M.mstro_finalize()


@pytest.mark.parametrize(
    "variable,value",
    [
        ("MSTRO_WAIT_SPIN", "soon"),
        ("MSTRO_TIMEOUT", "soon"),
        ("MSTRO_TIMEOUT", "0"),
        ("MSTRO_OFI_PROGRESS", "fast"),
        ("MSTRO_OFI_CMA", "maybe"),
        ("MSTRO_OFI_IFACE", "nosuchnic"),
        ("MSTRO_OFI_IFACE_EXCLUDE", "eth0,a/b"),
        ("MSTRO_INLINE_MAX", "lots"),
        ("MSTRO_INLINE_MAX", "99999999"),
    ],
)
def test_a_bad_setting_in_the_environment_is_named_at_init(variable, value, env_for_children):
    env = dict(env_for_children, **{variable: value})
    script = (
        "import maestro_core as M\n"
        "try:\n"
        "    M.mstro_init('py-env', 'tester', 0)\n"
        "except M.MaestroError as e:\n"
        "    print(e.status == M.MSTRO_INVARG, e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("True ") and variable in out.stdout, out.stdout + out.stderr


def test_attributes_typed_by_the_schemas_round_trip(capfd):
    with M.pool("py-attrs", "tester", 2):
        c = M.mstro_cdo_declare("typed", None)
        values = {
            ".test.i": -5,
            ".test.u": 2**63,
            ".test.d": 2.5,
            ".test.b": True,
            ".test.s": "héllo",
            ".test.t": 1_700_000_000_123_456_789,
            ".test.blob": b"\x00\x01\xff",
            M.MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER: 1,
        }
        for k, v in values.items():
            M.mstro_cdo_attribute_set(c, k, v)
        for k, v in values.items():
            assert M.mstro_cdo_attribute_get(c, k, None) == v, k  # readable before seal
        assert M.mstro_cdo_attribute_get(c, M.MSTRO_ATTR_CORE_CDO_NAME) == "typed"
        M.mstro_cdo_seal(c)
        assert status_of(M.mstro_cdo_attribute_set, c, ".test.i", 1) == M.MSTRO_INVSTATE
        M.mstro_cdo_offer(c)
        got = M.mstro_cdo_declare("typed", None)
        M.mstro_cdo_demand(got)
        attrs = M.mstro_cdo_attributes(got)
        for k, v in values.items():
            assert attrs[k] == v, k  # travelled with the CDO
        assert attrs[M.MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE] == 0
        M.mstro_cdo_attributes_print(got)
        assert ".test.s = 'héllo'" in capfd.readouterr().out
        M.mstro_cdo_dispose(got)
        M.mstro_cdo_withdraw(c)
        M.mstro_cdo_dispose(c)


def test_numpy_arrays_travel_without_copies():
    big = np.arange(8 << 20, dtype=np.float64)  # 64 MiB
    with M.pool("py-numpy", "tester", 0):
        p = M.mstro_cdo_declare("big", None)
        M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, big)
        assert M.mstro_cdo_attribute_get(p, M.MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE) == big.nbytes
        M.mstro_cdo_seal(p)
        M.mstro_cdo_offer(p)
        c = M.mstro_cdo_declare("big", None)
        M.mstro_cdo_demand(c)
        view = M.mstro_cdo_access_ptr(c)
        assert view.readonly and view.nbytes == big.nbytes
        arr = np.frombuffer(view, dtype=np.float64)
        address = arr.__array_interface__["data"][0]
        # The view is the library's buffer (here the producer's array itself), not a copy.
        assert address == M.mstro_cdo_attribute_get(c, M.MSTRO_ATTR_CORE_CDO_RAW_PTR)
        assert address == big.__array_interface__["data"][0]
        assert np.array_equal(arr, big)
        del arr, view
        M.mstro_cdo_dispose(c)
        M.mstro_cdo_withdraw(p)
        M.mstro_cdo_dispose(p)


def test_numpy_order_is_the_layout_and_a_consumer_gets_its_own():
    c_order = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with M.pool("py-layout", "tester", 0):
        p = M.mstro_cdo_declare("cube", None)
        M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, c_order)
        assert M.mstro_cdo_attribute_get(p, M.MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER) == 0
        assert M.mstro_cdo_attribute_get(p, M.MSTRO_ATTR_CORE_CDO_LAYOUT_ELEMENT_SIZE) == 4
        assert M.mstro_cdo_attribute_get(p, M.MSTRO_ATTR_CORE_CDO_LAYOUT_NDIMS) == 3
        dims = M.mstro_cdo_attribute_get(p, M.MSTRO_ATTR_CORE_CDO_LAYOUT_DIMS_SIZE)
        assert np.frombuffer(dims, dtype="<u8").tolist() == [2, 3, 4]
        M.mstro_cdo_seal(p)
        M.mstro_cdo_offer(p)
        # A Fortran-order array of the same shape gets the same array, in its order.
        fortran = np.zeros((2, 3, 4), dtype=np.float32, order="F")
        c = M.mstro_cdo_declare("cube", None)
        M.mstro_cdo_attribute_set(c, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, fortran)
        assert M.mstro_cdo_attribute_get(c, M.MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER) == 1
        M.mstro_cdo_demand(c)
        assert np.array_equal(fortran, c_order) and fortran.flags.f_contiguous
        M.mstro_cdo_dispose(c)
        # Another shape is another array: refused, naming both layouts.
        wrong = np.zeros((4, 3, 2), dtype=np.float32, order="F")
        c = M.mstro_cdo_declare("cube", None)
        M.mstro_cdo_attribute_set(c, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, wrong)
        with pytest.raises(M.MaestroError) as e:
            M.mstro_cdo_demand(c)
        assert e.value.status == M.MSTRO_INVARG
        assert "row-major 2x3x4 of 4-byte elements" in e.value.message
        assert "column-major 4x3x2 of 4-byte elements" in e.value.message
        M.mstro_cdo_dispose(c)
        M.mstro_cdo_withdraw(p)
        M.mstro_cdo_dispose(p)


def test_asynchronous_demands_overlap_and_await_from_asyncio(monkeypatch):
    import asyncio

    monkeypatch.setenv("MSTRO_TIMEOUT", "1")
    arrays = [np.full(1 << 14, i, dtype=np.float64) for i in range(8)]
    with M.pool("py-async", "tester", 0):
        offers = []
        for i, a in enumerate(arrays):
            p = M.mstro_cdo_declare(f"async-{i}", None)
            M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, a)
            M.mstro_cdo_seal(p)
            M.mstro_cdo_offer(p)
            offers.append(p)
        wants = [M.mstro_cdo_declare(f"async-{i}", None) for i in range(8)]
        requests = [M.mstro_cdo_demand_async(c) for c in wants]  # all in flight
        assert repr(requests[0]) == '<maestro_core.Request for "async-0">'
        with pytest.raises(M.MaestroError) as e:
            M.mstro_cdo_demand_async(wants[0])
        assert e.value.status == M.MSTRO_INVSTATE and "in flight" in e.value.message

        async def gather():
            await asyncio.gather(*(M.mstro_request_wait_async(r) for r in requests[:4]))

        asyncio.run(gather())
        for r in requests[4:]:
            M.mstro_request_wait(r)
        for i, (c, r) in enumerate(zip(wants, requests)):
            assert M.mstro_request_test(r)
            got = np.frombuffer(M.mstro_cdo_access_ptr(c), dtype=np.float64)
            assert got.shape == arrays[i].shape and (got == i).all()
            del got
            M.mstro_request_dispose(r)
            M.mstro_cdo_dispose(c)
        with pytest.raises(M.MaestroError) as e:
            M.mstro_request_wait(requests[0])
        assert e.value.status == M.MSTRO_INVARG
        # Nobody offers it: the wait raises the demand's timeout; dispose cancels another.
        nobody = M.mstro_cdo_declare("async-nobody", None)
        r = M.mstro_cdo_demand_async(nobody)
        with pytest.raises(M.MaestroError) as e:
            M.mstro_request_wait(r)
        assert e.value.status == M.MSTRO_TIMEOUT
        M.mstro_request_dispose(r)
        M.mstro_request_dispose(M.mstro_cdo_demand_async(nobody))
        M.mstro_cdo_dispose(nobody)
        for p in offers:
            M.mstro_cdo_withdraw(p)
            M.mstro_cdo_dispose(p)


def test_library_memory_is_writable_lent_in_place_and_checked():
    with pytest.raises(M.MaestroError) as e:
        M.mstro_mem_alloc(0)
    assert e.value.status == M.MSTRO_INVARG
    buf = M.mstro_mem_alloc(3 << 20)
    assert not buf.readonly and buf.nbytes == 3 << 20 and not any(buf[:4096])
    arr = np.frombuffer(buf, dtype=np.float64)
    arr[:] = np.arange(arr.size) * 0.5
    with M.pool("py-mem", "tester", 0):
        p = M.mstro_cdo_declare("mem", None)
        M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, arr)
        M.mstro_cdo_seal(p)
        M.mstro_cdo_offer(p)
        c = M.mstro_cdo_declare("mem", None)
        M.mstro_cdo_demand(c)
        got = np.frombuffer(M.mstro_cdo_access_ptr(c), dtype=np.float64)
        # The consumer in this process sees the allocation itself.
        assert got.__array_interface__["data"][0] == arr.__array_interface__["data"][0]
        assert np.array_equal(got, np.arange(arr.size) * 0.5)
        del got
        M.mstro_cdo_dispose(c)
        M.mstro_cdo_withdraw(p)
        M.mstro_cdo_dispose(p)
    # Still the program's memory after withdraw and dispose, until it lets go of it.
    arr[0] = 7.0
    assert np.frombuffer(buf, dtype=np.float64)[0] == 7.0


def test_a_consumer_lends_its_own_buffer():
    src = np.random.default_rng(1).integers(0, 255, 1 << 20, dtype=np.uint8)
    with M.pool("py-lend", "tester", 0):
        p = M.mstro_cdo_declare("lent", None)
        M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, src)
        M.mstro_cdo_seal(p)
        M.mstro_cdo_offer(p)
        landing = np.zeros(2 << 20, dtype=np.uint8)
        c = M.mstro_cdo_declare("lent", None)
        M.mstro_cdo_attribute_set(c, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, landing)
        M.mstro_cdo_demand(c)
        assert np.array_equal(landing[: src.size], src)
        view = M.mstro_cdo_access_ptr(c)
        assert np.frombuffer(view, np.uint8).__array_interface__["data"][0] == landing.__array_interface__["data"][0]
        del view
        M.mstro_cdo_dispose(c)
        # Read-only memory cannot receive a demand.
        ro = M.mstro_cdo_declare("lent", None)
        M.mstro_cdo_attribute_set(ro, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, bytes(4 << 20))
        assert status_of(M.mstro_cdo_demand, ro) == M.MSTRO_INVARG
        M.mstro_cdo_dispose(ro)
        M.mstro_cdo_withdraw(p)
        M.mstro_cdo_dispose(p)


def test_a_view_outlives_its_handle():
    with M.pool("py-view", "tester", 0):
        p = M.mstro_cdo_declare("v", None)
        M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, bytearray(b"kept alive"))
        M.mstro_cdo_seal(p)
        M.mstro_cdo_offer(p)
        c = M.mstro_cdo_declare("v", None)
        M.mstro_cdo_demand(c)
        view = M.mstro_cdo_access_ptr(c)
        M.mstro_cdo_dispose(c)
        assert bytes(view) == b"kept alive"
        del view
        gc.collect()
        M.mstro_cdo_withdraw(p)  # returns once no view holds the producer's buffer
        M.mstro_cdo_dispose(p)


def test_subscriptions_poll_wait_and_ack_hold_the_offer():
    with M.pool("py-events", "tester", 0):
        sel = M.mstro_cdo_selector_create(None, ".maestro.ecmwf.", "(step = 2)")
        sub = M.mstro_subscribe(sel, M.MSTRO_POOL_EVENT_OFFER, M.MSTRO_SUBSCRIPTION_OPTS_REQUIRE_ACK)
        M.mstro_cdo_selector_dispose(sel)
        assert M.mstro_subscription_poll(sub) is None
        assert M.mstro_subscription_wait(sub, timeout=0.05) is None
        offered = threading.Event()

        def offer():
            c = M.mstro_cdo_declare("held", None)
            M.mstro_cdo_attribute_set(c, ".maestro.ecmwf.step", 2)
            M.mstro_cdo_seal(c)
            M.mstro_cdo_offer(c)  # returns only after the ack
            offered.set()
            M.mstro_cdo_withdraw(c)
            M.mstro_cdo_dispose(c)

        t = threading.Thread(target=offer)
        t.start()
        events = M.mstro_subscription_wait(sub, timeout=30)
        assert len(events) == 1
        e = events[0]
        assert e.kind == M.MSTRO_POOL_EVENT_OFFER and e.needs_ack and not e.before
        assert e.payload.offer.cdo_name == "held"
        assert e.payload.offer.component_name == "tester"
        assert e.serial > 0 and e.time_ns > 0
        assert not offered.wait(0.2), "the offer waits for the acknowledgement"
        M.mstro_subscription_ack(sub, events)
        assert offered.wait(30)
        t.join(30)
        M.mstro_subscription_dispose(sub)
        assert status_of(M.mstro_subscription_poll, sub) == M.MSTRO_INVARG


def test_a_late_subscription_asks_for_the_current_state_first():
    with M.pool("py-state", "tester", 0):
        early = M.mstro_cdo_declare("early", None)
        M.mstro_cdo_attribute_set(early, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, bytearray(b"before"))
        M.mstro_cdo_seal(early)
        M.mstro_cdo_offer(early)
        sel = M.mstro_cdo_selector_create(None, None, "(has .maestro.core.cdo.name)")
        sub = M.mstro_subscribe(sel, M.MSTRO_POOL_EVENT_OFFER, M.MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE)
        events = M.mstro_subscription_wait(sub, timeout=30)
        assert [e.payload.offer.cdo_name for e in events] == ["early"]
        assert events[0].kind == M.MSTRO_POOL_EVENT_OFFER
        # Without the option, nothing from before.
        plain = M.mstro_subscribe(None, M.MSTRO_POOL_EVENT_OFFER, M.MSTRO_SUBSCRIPTION_OPTS_DEFAULT)
        assert M.mstro_subscription_wait(plain, timeout=0.2) is None
        for s in (sub, plain):
            M.mstro_subscription_dispose(s)
        M.mstro_cdo_selector_dispose(sel)
        M.mstro_cdo_withdraw(early)
        M.mstro_cdo_dispose(early)


def test_a_blocking_demand_does_not_hold_the_gil():
    with M.pool("py-gil", "tester", 0):
        sub = M.mstro_subscribe(None, M.MSTRO_POOL_EVENT_DEMAND, M.MSTRO_SUBSCRIPTION_OPTS_DEFAULT)
        c = M.mstro_cdo_declare("later", None)
        done = threading.Event()

        def demand():
            M.mstro_cdo_demand(c)
            done.set()

        t = threading.Thread(target=demand)
        t.start()
        # The pool saw the demand, which cannot return before the offer below: the other
        # thread is inside it, and this one runs Python (it would block here if the demand
        # held the GIL).
        events = M.mstro_subscription_wait(sub, timeout=30)
        assert [e.payload.demand.cdo_name for e in events] == ["later"]
        assert t.is_alive() and not done.is_set()
        M.mstro_subscription_dispose(sub)
        p = M.mstro_cdo_declare("later", None)
        M.mstro_cdo_seal(p)
        M.mstro_cdo_offer(p)
        assert done.wait(30)
        t.join(30)
        M.mstro_cdo_dispose(c)
        M.mstro_cdo_withdraw(p)
        M.mstro_cdo_dispose(p)


def test_context_managers_init_declare_withdraw_and_dispose():
    with M.pool("py-with", "tester", 0):
        with M.cdo("scoped") as c:
            M.mstro_cdo_seal(c)
            M.mstro_cdo_offer(c)  # withdrawn and disposed by the block's end
        assert status_of(M.mstro_cdo_seal, c) == M.MSTRO_INVARG
    assert status_of(M.mstro_cdo_declare, "after", None) == M.MSTRO_UNINIT


def test_integrity_is_checked_when_asked():
    data = np.arange(4096, dtype=np.uint8)
    with M.pool("py-integrity", "tester", 0):
        p = M.mstro_cdo_declare("checked", None)
        M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, data)
        M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_INTEGRITY, True)
        M.mstro_cdo_seal(p)
        M.mstro_cdo_offer(p)
        c = M.mstro_cdo_declare("checked", None)
        M.mstro_cdo_demand(c)
        assert isinstance(M.mstro_cdo_attribute_get(c, M.MSTRO_ATTR_CORE_CDO_CHECKSUM), int)
        assert M.mstro_cdo_attribute_get(c, M.MSTRO_ATTR_CORE_CDO_PROVIDER) == "tester:0"
        M.mstro_cdo_dispose(c)
        # Bytes changed while offered (against the contract) are an error, not data.
        data[0] ^= 0xFF
        c = M.mstro_cdo_declare("checked", None)
        with pytest.raises(M.MaestroError) as e:
            M.mstro_cdo_demand(c)
        assert e.value.status == M.MSTRO_FAIL and "checksum" in e.value.message
        M.mstro_cdo_dispose(c)
        M.mstro_cdo_withdraw(p)
        M.mstro_cdo_dispose(p)


def test_a_python_pool_manager():
    M.mstro_init("py-pm", "pm", 0)
    M.mstro_pm_start()
    assert status_of(M.mstro_pm_start) == M.MSTRO_NOT_TWICE
    info = M.mstro_pm_getinfo()
    assert info.startswith("mstro-pm-v1:")
    sub = M.mstro_subscribe(None, M.MSTRO_POOL_EVENT_APP_JOIN | M.MSTRO_POOL_EVENT_APP_LEAVE, 0)
    M.mstro_subscription_dispose(sub)
    M.mstro_pm_terminate()
    assert status_of(M.mstro_cdo_declare, "x", None) == M.MSTRO_NO_PM
    M.mstro_finalize()


def test_a_mistyped_provider_is_an_error_not_a_slow_fallback(env_for_children):
    env = dict(env_for_children, MSTRO_OFI_PROVIDER="tpc")
    script = (
        "import maestro_core as M\n"
        "M.mstro_init('py-provider', 'tester', 0)\n"
        "try:\n"
        "    M.mstro_cdo_declare('x', None)\n"
        "except M.MaestroError as e:\n"
        "    print(e.status == M.MSTRO_INVARG, e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("True ") and "MSTRO_OFI_PROVIDER=tpc" in out.stdout, out.stdout + out.stderr


def test_a_local_pool_says_what_it_is_and_why_a_demand_waits(env_for_children):
    env = dict(env_for_children, MSTRO_TIMEOUT="2", MSTRO_LOG_LEVEL="info")
    env.pop("MSTRO_POOL_MANAGER_INFO", None)
    script = (
        "import maestro_core as M\n"
        "M.mstro_init('py-local', 'tester', 0)\n"
        "c = M.mstro_cdo_declare('nobody-offers-this', None)\n"
        "try:\n"
        "    M.mstro_cdo_demand(c)\n"
        "except M.MaestroError as e:\n"
        "    print(e.status == M.MSTRO_TIMEOUT)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stdout + out.stderr
    assert "a local pool inside this process" in out.stderr, out.stderr
    assert "waits in a local pool" in out.stderr, out.stderr


def test_ctrl_c_interrupts_a_demand_and_a_wait_and_the_pool_stays_consistent(env_for_children):
    env = dict(env_for_children, MSTRO_TIMEOUT="30")
    script = (
        "import os, signal, threading, time, maestro_core as M\n"
        "M.mstro_init('py-interrupt', 'tester', 0)\n"
        "def ctrl_c_in(s):\n"
        "    threading.Timer(s, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "c = M.mstro_cdo_declare('later', None)\n"
        "ctrl_c_in(0.5)\n"
        "t0 = time.monotonic()\n"
        "try:\n"
        "    M.mstro_cdo_demand(c)\n"
        "    print('no interrupt')\n"
        "except KeyboardInterrupt:\n"
        "    print('demand interrupted after', round(time.monotonic() - t0, 2))\n"
        "sub = M.mstro_subscribe(None, M.MSTRO_POOL_EVENT_OFFER, 0)\n"
        "ctrl_c_in(0.5)\n"
        "t0 = time.monotonic()\n"
        "try:\n"
        "    M.mstro_subscription_wait(sub)\n"
        "    print('no interrupt')\n"
        "except KeyboardInterrupt:\n"
        "    print('wait interrupted after', round(time.monotonic() - t0, 2))\n"
        "p = M.mstro_cdo_declare('later', None)\n"
        "M.mstro_cdo_attribute_set(p, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, b'x' * 16)\n"
        "M.mstro_cdo_seal(p)\n"
        "M.mstro_cdo_offer(p)\n"
        "M.mstro_cdo_demand(c)\n"
        "print('demanded again', len(M.mstro_cdo_access_ptr(c)))\n"
        "print('the offer was seen', len(M.mstro_subscription_wait(sub, timeout=5) or []))\n"
        "M.mstro_subscription_dispose(sub)\n"
        "M.mstro_cdo_dispose(c)\n"
        "M.mstro_cdo_withdraw(p)\n"
        "M.mstro_cdo_dispose(p)\n"
        "M.mstro_finalize()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert len(lines) == 4, out.stdout + out.stderr
    for line, what in zip(lines[:2], ["demand", "wait"]):
        assert line.startswith(what + " interrupted after"), out.stdout + out.stderr
        # Within 100 ms of the signal (0.5 s after the call began), with room for a slow VM.
        assert float(line.split()[-1]) < 0.5 + 0.4, line
    assert lines[2] == "demanded again 16", out.stdout + out.stderr
    assert lines[3] == "the offer was seen 1", out.stdout + out.stderr



def test_the_type_stub_lists_exactly_what_the_module_exports():
    """`__init__.pyi` is written by hand: every public name of the module is in it, and
    every name in it exists, so the two cannot drift apart unnoticed."""
    import ast
    import pathlib

    stub = pathlib.Path(M.__file__).with_name("__init__.pyi")
    tree = ast.parse(stub.read_text())
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stubbed.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed.add(node.target.id)
        elif isinstance(node, ast.Assign):
            stubbed.update(t.id for t in node.targets if isinstance(t, ast.Name))
    exported = {n for n in dir(M) if not n.startswith("_")}
    # Modules the package imports for itself are not part of its API.
    exported -= {n for n in exported if type(getattr(M, n)).__name__ == "module"}
    assert exported - stubbed == set(), "exported but not in the stub"
    assert stubbed - exported == set(), "in the stub but not exported"


def test_groups_move_whole_and_refuse_bad_use():
    with M.pool("py-groups", "tester", 0):
        g = M.mstro_group_declare("arrays")
        produced = []
        for i in range(5):
            c = M.mstro_cdo_declare(f"array-{i}", None)
            M.mstro_cdo_attribute_set(c, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, np.full(100, i, dtype=np.float64))
            M.mstro_group_add(g, c)
            produced.append(c)
        assert status_of(M.mstro_group_add, g, produced[0]) == M.MSTRO_INVARG
        M.mstro_group_size_set(g, 5)
        assert M.mstro_group_size_get(g) == 5
        M.mstro_group_seal(g)
        late = M.mstro_cdo_declare("late", None)
        assert status_of(M.mstro_group_add, g, late) == M.MSTRO_INVSTATE
        M.mstro_group_offer(g)

        wanted = M.mstro_group_declare("arrays")
        assert status_of(M.mstro_group_next, wanted) == M.MSTRO_INVSTATE
        M.mstro_group_demand(wanted)
        assert M.mstro_group_size_get(wanted) == 5
        names = []
        while (m := M.mstro_group_next(wanted)) is not None:
            names.append(m.name)
            got = np.frombuffer(M.mstro_cdo_access_ptr(m), dtype=np.float64)
            assert got.shape == (100,) and (got == len(names) - 1).all()
        assert names == [f"array-{i}" for i in range(5)]
        assert status_of(M.mstro_group_demand, wanted) == M.MSTRO_INVSTATE
        M.mstro_group_dispose(wanted)
        # Same process: the views are the producer's memory; let go before its withdraw.
        del got
        gc.collect()

        assert status_of(M.mstro_group_dispose, g) == M.MSTRO_INVSTATE
        M.mstro_group_withdraw(g)
        M.mstro_group_dispose(g)
        for c in produced + [late]:
            M.mstro_cdo_dispose(c)
        empty = M.mstro_group_declare("empty")
        assert status_of(M.mstro_group_seal, empty) == M.MSTRO_INVARG
        M.mstro_group_dispose(empty)


def test_a_demand_nobody_answers_says_what_it_waited_for(env_for_children):
    env = dict(env_for_children, MSTRO_TIMEOUT="1")
    script = (
        "import maestro_core as M\n"
        "M.mstro_init('py-nobody', 'tester', 0)\n"
        "c = M.mstro_cdo_declare('nobody-offers-this', None)\n"
        "try:\n"
        "    M.mstro_cdo_demand(c)\n"
        "except M.MaestroError as e:\n"
        "    print(e.status == M.MSTRO_TIMEOUT, e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("True "), out.stdout + out.stderr
    assert 'nobody offered "nobody-offers-this" within 1s' in out.stdout, out.stdout
