/* local_pool: two threads of one program exchange a CDO through a local pool (no pool
 * manager anywhere else, no PMIx host): the consumer reads the producer's own buffer,
 * without a copy, and the producer's withdraw returns once the consumer let go. */
#include "common.h"

#include <pthread.h>

enum { SIZE = 8 << 20 };
static unsigned char *buffer;
static pthread_barrier_t offered, consumed;

static void *produce(void *arg) {
  mstro_cdo cdo;
  int64_t size = SIZE;
  (void)arg;
  CHECK(mstro_cdo_declare("local-field", MSTRO_ATTR_DEFAULT, &cdo));
  CHECK(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_RAW_PTR, buffer, false, true));
  CHECK(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true, false));
  CHECK(mstro_cdo_seal(cdo));
  CHECK(mstro_cdo_offer(cdo));
  pthread_barrier_wait(&offered);
  pthread_barrier_wait(&consumed);
  CHECK(mstro_cdo_withdraw(cdo));
  CHECK(mstro_cdo_dispose(cdo));
  return NULL;
}

int main(void) {
  pthread_t producer;
  mstro_cdo cdo;
  void *data = NULL;
  int64_t len = 0;
  buffer = malloc(SIZE);
  fill(buffer, SIZE, 7);
  pthread_barrier_init(&offered, NULL, 2);
  pthread_barrier_init(&consumed, NULL, 2);

  CHECK(mstro_init("local-demo", "local-pool", 0));
  pthread_create(&producer, NULL, produce, NULL);
  CHECK(mstro_cdo_declare("local-field", MSTRO_ATTR_DEFAULT, &cdo));
  CHECK(mstro_cdo_require(cdo));
  pthread_barrier_wait(&offered);
  CHECK(mstro_cdo_demand(cdo));
  CHECK(mstro_cdo_access_ptr(cdo, &data, &len));
  if (len != SIZE || fnv1a(data, SIZE) != fnv1a(buffer, SIZE)) {
    fprintf(stderr, "local_pool: wrong bytes\n");
    return 1;
  }
  printf("local_pool: %lld bytes, %s\n", (long long)len,
         data == buffer ? "zero copy (the producer's own buffer)" : "COPIED");
  CHECK(mstro_cdo_dispose(cdo));
  pthread_barrier_wait(&consumed);
  pthread_join(producer, NULL);
  CHECK(mstro_finalize());
  free(buffer);
  return data == buffer ? 0 : 1;
}
