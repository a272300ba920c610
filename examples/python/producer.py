"""producer.py: offers NumPy arrays without a copy (the Python twin of examples/c/producer.c).

    python producer.py [--cdos N] [--size BYTES] [--library-memory] [--no-handshake]

Waits for the consumer's 0-byte ``consumer-ready`` CDO, then offers N float64 arrays (their
own memory, through MSTRO_ATTR_CORE_CDO_RAW_PTR) with the attributes of
examples/c/ecmwf.yaml (step = i % 4, param, checksum = FNV-1a of the bytes). It required
``consumer-done`` first, demands it, then withdraws and disposes everything. With
``--no-handshake`` it skips both CDOs: for consumers that hold offers through REQUIRE_ACK
subscriptions (``pool_archiver``), whose requires come before the offers return, so the
withdraws wait for their transfers. With ``--library-memory`` the arrays live in memory
from ``mstro_mem_alloc``, which consumers on this node map instead of copying.
Environment: MSTRO_SCHEMA_PATH=examples/c MSTRO_SCHEMA_LIST=ecmwf.yaml, and the pool
(MSTRO_POOL_MANAGER_INFO, or a PMIx job).
"""

import argparse

import numpy as np

import maestro_core as M
from common import fnv1a


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cdos", type=int, default=8)
    ap.add_argument("--size", type=int, default=64 * 1024, help="bytes per CDO (a multiple of 8)")
    ap.add_argument("--no-handshake", action="store_true")
    ap.add_argument("--library-memory", action="store_true", help="arrays in mstro_mem_alloc memory")
    args = ap.parse_args()
    with M.pool(component="py-producer"):
        if not args.no_handshake:
            done = M.mstro_cdo_declare("consumer-done", None)
            M.mstro_cdo_require(done)
            ready = M.mstro_cdo_declare("consumer-ready", None)
            M.mstro_cdo_demand(ready)
            M.mstro_cdo_dispose(ready)
        arrays, cdos = [], []
        for i in range(args.cdos):
            values = np.arange(args.size // 8, dtype=np.float64) * (i + 1)
            if args.library_memory:
                a = np.frombuffer(M.mstro_mem_alloc(args.size), dtype=np.float64)
                a[:] = values
            else:
                a = values
            cdo = M.mstro_cdo_declare(f"field-{i}", None)
            M.mstro_cdo_attribute_set(cdo, M.MSTRO_ATTR_CORE_CDO_RAW_PTR, a)
            M.mstro_cdo_attribute_set(cdo, ".maestro.ecmwf.step", i % 4)
            M.mstro_cdo_attribute_set(cdo, ".maestro.ecmwf.param", "2t")
            M.mstro_cdo_attribute_set(cdo, ".maestro.ecmwf.checksum", fnv1a(a.data))
            M.mstro_cdo_seal(cdo)
            M.mstro_cdo_offer(cdo)
            arrays.append(a)
            cdos.append(cdo)
        where = "from library memory" if args.library_memory else "in place"
        print(f"py-producer: offered {args.cdos} arrays of {args.size} bytes {where}", flush=True)
        if not args.no_handshake:
            M.mstro_cdo_demand(done)
            M.mstro_cdo_dispose(done)
        for cdo in cdos:
            M.mstro_cdo_withdraw(cdo)
            M.mstro_cdo_dispose(cdo)
    print("py-producer: withdrew everything", flush=True)


if __name__ == "__main__":
    main()
