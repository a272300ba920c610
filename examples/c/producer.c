/* producer: offers CDOs from its own buffers, without a copy.
 *
 *   producer [--cdos N] [--size BYTES] [--library-memory 1]
 *
 * Waits for the consumer's 0-byte `consumer-ready` CDO, then offers N CDOs (default 8) of
 * BYTES each (default 1 MiB) from page-aligned buffers it owns (raw-ptr + local-size;
 * with --library-memory 1 allocated with mstro_mem_alloc, which consumers on this node
 * map instead of copying where that pays),
 * with the attributes of examples/c/ecmwf.yaml (step = i % 4, param, checksum). It
 * required `consumer-done` before offering, demands it, then withdraws, disposes and
 * frees everything. Joins the pool however it was started: MSTRO_POOL_MANAGER_INFO, or
 * the PM of its PMIx job. */
#include "common.h"

int main(int argc, char **argv) {
  long n = option(argc, argv, "--cdos", 8);
  int64_t size = option(argc, argv, "--size", 1 << 20);
  long library = option(argc, argv, "--library-memory", 0);
  long i;
  mstro_cdo ready, done;
  mstro_cdo *cdos = calloc((size_t)n, sizeof *cdos);
  unsigned char **bufs = calloc((size_t)n, sizeof *bufs);
  const char *component = getenv("MSTRO_COMPONENT_NAME") ? NULL : "producer";
  if (cdos == NULL || bufs == NULL) {
    return 1;
  }

  CHECK(mstro_init(NULL, component, 0));
  printf("producer: %s\n", mstro_version());
  /* Intent first: the consumer's `consumer-done` moves here as soon as it is offered, so
   * the consumer's withdraw waits for it. */
  CHECK(mstro_cdo_declare("consumer-done", MSTRO_ATTR_DEFAULT, &done));
  CHECK(mstro_cdo_require(done));
  CHECK(mstro_cdo_declare("consumer-ready", MSTRO_ATTR_DEFAULT, &ready));
  CHECK(mstro_cdo_demand(ready));
  CHECK(mstro_cdo_dispose(ready));

  for (i = 0; i < n; i++) {
    char name[64];
    int64_t step = i % 4;
    uint64_t sum;
    void *mem = NULL;
    if (library) {
      CHECK(mstro_mem_alloc((size_t)size > 0 ? (size_t)size : 1, &mem));
    } else if (posix_memalign(&mem, 4096, (size_t)size > 0 ? (size_t)size : 1) != 0) {
      return 1;
    }
    bufs[i] = mem;
    fill(bufs[i], (size_t)size, (unsigned)i);
    sum = fnv1a(bufs[i], (size_t)size);
    snprintf(name, sizeof name, "field-%ld", i);
    CHECK(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &cdos[i]));
    CHECK(mstro_cdo_attribute_set(cdos[i], MSTRO_ATTR_CORE_CDO_RAW_PTR, bufs[i], false, true));
    CHECK(mstro_cdo_attribute_set(cdos[i], MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true,
                                  false));
    CHECK(mstro_cdo_attribute_set(cdos[i], ".maestro.ecmwf.step", &step, true, false));
    CHECK(mstro_cdo_attribute_set(cdos[i], ".maestro.ecmwf.param", (void *)"2t", true, false));
    CHECK(mstro_cdo_attribute_set(cdos[i], ".maestro.ecmwf.checksum", &sum, true, false));
    CHECK(mstro_cdo_seal(cdos[i]));
    CHECK(mstro_cdo_offer(cdos[i]));
  }
  printf("producer: offered %ld CDOs of %lld bytes from %s\n", n, (long long)size,
         library ? "library memory" : "its own buffers");
  fflush(stdout);

  CHECK(mstro_cdo_demand(done));
  CHECK(mstro_cdo_dispose(done));
  for (i = 0; i < n; i++) {
    CHECK(mstro_cdo_withdraw(cdos[i]));
    CHECK(mstro_cdo_dispose(cdos[i]));
    if (library) {
      CHECK(mstro_mem_free(bufs[i]));
    } else {
      free(bufs[i]);
    }
  }
  CHECK(mstro_finalize());
  printf("producer: withdrew everything\n");
  free(cdos);
  free(bufs);
  return 0;
}
