"""consumer.py: a one-pass analytics job (the Python twin of examples/c/consumer.c).

    python consumer.py [--expect N] [--selector S] [--as-told]

Subscribes to OFFER events matching the selector (default "(.maestro.ecmwf.step = 2)") with
REQUIRE_ACK and NO_LOCAL_EVENTS, tells producers it listens (a 0-byte ``consumer-ready``
CDO), polls; for each offer it requires the CDO and acknowledges the event; then demands
each, reads its size and bytes (a memoryview without a copy; ``numpy.frombuffer`` on it)
and checks the checksum. Finally it offers ``consumer-done`` and withdraws it once the
producer took it.

With ``--as-told`` it is the plain event-driven consumer instead (ECMWF's syphon): no
acknowledgement, and each CDO demanded as its event arrives, which the lease that came
with the event serves without a round trip to the pool manager.
"""

import argparse
import time

import numpy as np

import maestro_core as M
from common import fnv1a


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", type=int, default=2)
    ap.add_argument("--selector", default="(.maestro.ecmwf.step = 2)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--as-told", action="store_true", help="demand each CDO as its event arrives")
    args = ap.parse_args()
    with M.pool(component="py-consumer"):
        sel = M.mstro_cdo_selector_create(None, None, args.selector)
        ack = 0 if args.as_told else M.MSTRO_SUBSCRIPTION_OPTS_REQUIRE_ACK
        sub = M.mstro_subscribe(sel, M.MSTRO_POOL_EVENT_OFFER, ack | M.MSTRO_SUBSCRIPTION_OPTS_NO_LOCAL_EVENTS)
        M.mstro_cdo_selector_dispose(sel)
        ready = M.mstro_cdo_declare("consumer-ready", None)
        M.mstro_cdo_seal(ready)
        M.mstro_cdo_offer(ready)

        cdos, start = [], M.mstro_clock()
        deadline = time.monotonic() + args.timeout
        while len(cdos) < args.expect:
            events = M.mstro_subscription_poll(sub)
            if events is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"py-consumer: heard of {len(cdos)} offers, expected {args.expect}")
                time.sleep(0.005)
                continue
            for e in events:
                name = e.payload.offer.cdo_name
                print(f"py-consumer: {M.mstro_pool_event_description(e.kind)} of {name} "
                      f"from {e.payload.offer.component_name} (needs ack: {int(e.needs_ack)})", flush=True)
                cdo = M.mstro_cdo_declare(name, None)
                if args.as_told:
                    M.mstro_cdo_demand(cdo)
                else:
                    M.mstro_cdo_require(cdo)
                cdos.append(cdo)
            if not args.as_told:
                M.mstro_subscription_ack(sub, events)

        total = 0
        for cdo in cdos:
            if not args.as_told:
                M.mstro_cdo_demand(cdo)
            size = M.mstro_cdo_attribute_get(cdo, M.MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, None)
            view = M.mstro_cdo_access_ptr(cdo)
            values = np.frombuffer(view, dtype=np.uint8)
            if size != len(view) or M.mstro_cdo_attribute_get(cdo, ".maestro.ecmwf.step") != 2:
                raise SystemExit(f"py-consumer: {cdo.name}: size {size}, view {len(view)}")
            if fnv1a(values) != M.mstro_cdo_attribute_get(cdo, ".maestro.ecmwf.checksum"):
                raise SystemExit(f"py-consumer: {cdo.name}: checksum mismatch")
            total += size
            del view, values
            M.mstro_cdo_dispose(cdo)
        secs = (M.mstro_clock() - start) / 1e9
        print(f"py-consumer: {len(cdos)} CDOs, {total} bytes, all checksums match ({secs:.2f} s)", flush=True)

        M.mstro_cdo_withdraw(ready)
        M.mstro_cdo_dispose(ready)
        done = M.mstro_cdo_declare("consumer-done", None)
        M.mstro_cdo_seal(done)
        M.mstro_cdo_offer(done)
        M.mstro_cdo_withdraw(done)
        M.mstro_cdo_dispose(done)
        M.mstro_subscription_dispose(sub)


if __name__ == "__main__":
    main()
