/* Asynchronous demand as a consumer that overlaps its work with data movement uses it, in a
 * local pool (one process, MSTRO_TIMEOUT=1 set by the test): 16 CDOs of 64 KiB demanded
 * with mstro_cdo_demand_async, all in flight from one thread, tested until done, waited
 * and checked; then the bad uses (a second request of a CDO in flight, a demand or dispose
 * of it meanwhile, waiting on a disposed request, a NULL request pointer), a request for a
 * CDO nobody offers (its wait times out; a disposed one cancels, and the CDO may be
 * demanded again), and finalize with a request in flight. Prints one line per check and
 * "async_demand: all hold" at the end; exits non-zero if a check fails. */
#include "expect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 16, SIZE = 64 << 10 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void) {
  static unsigned char data[N][SIZE];
  mstro_cdo offers[N], wants[N], nobody, again;
  mstro_request requests[N], extra = NULL, lost = NULL;
  char name[32];
  int i, done = 0, polls = 0;
  int64_t size = SIZE;
  double deadline;

  EXPECT(mstro_init("async-demand", "tester", 0), MSTRO_OK, NULL);
  for (i = 0; i < N; i++) {
    memset(data[i], 'a' + i, SIZE);
    snprintf(name, sizeof name, "async-%d", i);
    EXPECT(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &offers[i]), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_attribute_set(offers[i], MSTRO_ATTR_CORE_CDO_RAW_PTR, data[i], false, true),
           MSTRO_OK, NULL);
    EXPECT(mstro_cdo_attribute_set(offers[i], MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true,
                                   false),
           MSTRO_OK, NULL);
    EXPECT(mstro_cdo_seal(offers[i]), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_offer(offers[i]), MSTRO_OK, NULL);
  }

  /* All in flight at once, from this thread. */
  for (i = 0; i < N; i++) {
    snprintf(name, sizeof name, "async-%d", i);
    EXPECT(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &wants[i]), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_demand_async(wants[i], &requests[i]), MSTRO_OK, NULL);
  }
  /* While in flight: no second request, no demand, no dispose of the CDO. */
  EXPECT(mstro_cdo_demand_async(wants[0], &extra), MSTRO_INVSTATE, "in flight");
  EXPECT(mstro_cdo_demand(wants[1]), MSTRO_INVSTATE, "in flight");
  EXPECT(mstro_cdo_dispose(wants[2]), MSTRO_INVSTATE, "in flight");
  EXPECT(mstro_cdo_demand_async(wants[3], NULL), MSTRO_INVARG, "NULL");
  deadline = now() + 30;
  while (done < N && now() < deadline) {
    done = 0;
    for (i = 0; i < N; i++) {
      done += mstro_request_test(requests[i]) ? 1 : 0;
    }
    polls++;
  }
  printf("%s %d of %d requests finished (tested %d times)\n", done == N ? "ok  " : "FAIL", done, N,
         polls);
  failures += done != N;
  for (i = 0; i < N; i++) {
    void *got = NULL;
    int64_t len = 0;
    unsigned char want[SIZE];
    EXPECT(mstro_request_wait(requests[i]), MSTRO_OK, NULL);
    EXPECT(mstro_request_wait(requests[i]), MSTRO_OK, NULL); /* the same answer again */
    EXPECT(mstro_cdo_access_ptr(wants[i], &got, &len), MSTRO_OK, NULL);
    memset(want, 'a' + i, SIZE);
    if (len != SIZE || got == NULL || memcmp(got, want, SIZE) != 0) {
      printf("FAIL bytes of async-%d\n", i);
      failures++;
    }
    EXPECT(mstro_request_dispose(requests[i]), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_dispose(wants[i]), MSTRO_OK, NULL);
  }
  EXPECT(mstro_request_wait(requests[0]), MSTRO_INVARG, NULL);
  EXPECT(mstro_request_dispose(requests[0]), MSTRO_INVARG, NULL);
  printf("%s a disposed request tests false\n", mstro_request_test(requests[0]) ? "FAIL" : "ok  ");
  failures += mstro_request_test(requests[0]) ? 1 : 0;

  /* Nobody offers it: the wait says so after MSTRO_TIMEOUT. */
  EXPECT(mstro_cdo_declare("async-nobody", MSTRO_ATTR_DEFAULT, &nobody), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_demand_async(nobody, &lost), MSTRO_OK, NULL);
  EXPECT(mstro_request_wait(lost), MSTRO_TIMEOUT, NULL);
  EXPECT(mstro_request_dispose(lost), MSTRO_OK, NULL);
  /* Cancelled by dispose while in flight: the CDO may be demanded again. */
  EXPECT(mstro_cdo_declare("async-nobody-2", MSTRO_ATTR_DEFAULT, &again), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_demand_async(again, &lost), MSTRO_OK, NULL);
  EXPECT(mstro_request_dispose(lost), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_demand(again), MSTRO_TIMEOUT, NULL);
  /* Finalize with one in flight. */
  EXPECT(mstro_cdo_demand_async(nobody, &lost), MSTRO_OK, NULL);
  for (i = 0; i < N; i++) {
    EXPECT(mstro_cdo_withdraw(offers[i]), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_dispose(offers[i]), MSTRO_OK, NULL);
  }
  EXPECT(mstro_finalize(), MSTRO_OK, NULL);
  if (failures == 0) {
    printf("async_demand: all hold\n");
  }
  return failures == 0 ? 0 : 1;
}
