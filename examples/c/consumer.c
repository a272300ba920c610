/* consumer: a syphon that hears of matching offers and demands them.
 *
 *   consumer [--expect N] [--selector S]
 *
 * Subscribes to OFFER events matching the selector (default "(.maestro.ecmwf.step = 2)")
 * with REQUIRE_ACK and NO_LOCAL_EVENTS, tells producers it listens (a 0-byte
 * `consumer-ready` CDO), and for each of the N (default 2) offers it hears of: requires the
 * CDO, acknowledges the event (only then does the producer's offer return), demands it and
 * checks its size, step and checksum; every other CDO lands in a buffer the consumer lends
 * (raw-ptr before demand). Then it offers `consumer-done` and withdraws it once the
 * producer took it. */
#include "common.h"

int main(int argc, char **argv) {
  long expect = option(argc, argv, "--expect", 2);
  const char *query = "(.maestro.ecmwf.step = 2)";
  long heard = 0, i;
  int64_t bytes = 0;
  mstro_cdo_selector sel = NULL;
  mstro_subscription sub = NULL;
  mstro_cdo ready, done;
  mstro_cdo *cdos = calloc((size_t)expect, sizeof *cdos);
  const char *component = getenv("MSTRO_COMPONENT_NAME") ? NULL : "consumer";
  for (i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--selector") == 0) {
      query = argv[i + 1];
    }
  }
  if (cdos == NULL) {
    return 1;
  }

  CHECK(mstro_init(NULL, component, 0));
  CHECK(mstro_cdo_selector_create(NULL, NULL, query, &sel));
  CHECK(mstro_subscribe(sel, MSTRO_POOL_EVENT_OFFER,
                        MSTRO_SUBSCRIPTION_OPTS_REQUIRE_ACK |
                            MSTRO_SUBSCRIPTION_OPTS_NO_LOCAL_EVENTS,
                        &sub));
  CHECK(mstro_cdo_selector_dispose(sel));
  CHECK(mstro_cdo_declare("consumer-ready", MSTRO_ATTR_DEFAULT, &ready));
  CHECK(mstro_cdo_seal(ready));
  CHECK(mstro_cdo_offer(ready));

  while (heard < expect) {
    mstro_pool_event ev = NULL, e;
    CHECK(mstro_subscription_wait(sub, &ev));
    for (e = ev; e != NULL; e = e->next) {
      if (heard == expect) {
        fprintf(stderr, "consumer: more offers match than expected: %s\n", e->offer.cdo_name);
        return 1;
      }
      printf("consumer: heard of %s from %s (needs ack: %d)\n", e->payload.offer.cdo_name,
             e->offer.component_name, (int)e->needs_ack);
      CHECK(mstro_cdo_declare(e->offer.cdo_name, MSTRO_ATTR_DEFAULT, &cdos[heard]));
      CHECK(mstro_cdo_require(cdos[heard]));
      heard++;
    }
    CHECK(mstro_subscription_ack(sub, ev));
    CHECK(mstro_pool_event_dispose(ev));
  }
  fflush(stdout);

  for (i = 0; i < expect; i++) {
    void *data = NULL, *lent = NULL;
    int64_t len = -1, *size = NULL;
    const int64_t *step = NULL;
    const uint64_t *sum = NULL;
    const char *name = NULL;
    enum mstro_cdo_attr_value_type ty;
    int64_t room = 64 << 20;
    if (i % 2 == 1) {
      /* Lend a buffer: the bytes land in it. */
      lent = malloc((size_t)room);
      CHECK(mstro_cdo_attribute_set(cdos[i], MSTRO_ATTR_CORE_CDO_RAW_PTR, lent, false, true));
      CHECK(mstro_cdo_attribute_set(cdos[i], MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &room, true,
                                    false));
    }
    CHECK(mstro_cdo_demand(cdos[i]));
    CHECK(mstro_cdo_access_ptr(cdos[i], &data, &len));
    CHECK(mstro_cdo_attribute_get(cdos[i], MSTRO_ATTR_CORE_CDO_NAME, &ty, (const void **)&name));
    CHECK(mstro_cdo_attribute_get(cdos[i], MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &ty,
                                  (const void **)&size));
    CHECK(mstro_cdo_attribute_get(cdos[i], ".maestro.ecmwf.step", &ty, (const void **)&step));
    CHECK(mstro_cdo_attribute_get(cdos[i], ".maestro.ecmwf.checksum", &ty,
                                  (const void **)&sum));
    if (ty != MSTRO_CDO_ATTR_VALUE_uint64 || *step != 2 || *size != len ||
        (lent != NULL && data != lent) || fnv1a(data, (size_t)len) != *sum) {
      fprintf(stderr, "consumer: %s: %lld bytes, step %lld, checksum %s\n", name,
              (long long)len, (long long)*step,
              fnv1a(data, (size_t)len) == *sum ? "ok" : "WRONG");
      return 1;
    }
    bytes += len;
    CHECK(mstro_cdo_dispose(cdos[i]));
    free(lent);
  }
  printf("consumer: %ld CDOs, %lld bytes, all checksums match\n", expect, (long long)bytes);

  CHECK(mstro_cdo_withdraw(ready));
  CHECK(mstro_cdo_dispose(ready));
  CHECK(mstro_cdo_declare("consumer-done", MSTRO_ATTR_DEFAULT, &done));
  CHECK(mstro_cdo_seal(done));
  CHECK(mstro_cdo_offer(done));
  CHECK(mstro_cdo_withdraw(done));
  CHECK(mstro_cdo_dispose(done));
  CHECK(mstro_subscription_dispose(sub));
  CHECK(mstro_finalize());
  free(cdos);
  return 0;
}
