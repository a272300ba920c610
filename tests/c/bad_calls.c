/* Bad calls get statuses and messages, never crashes: NULL handles and pointers, use after
 * dispose, handles of the wrong kind, calls in the wrong state, a demand nobody serves
 * (MSTRO_TIMEOUT=1 set by the test), a selector that does not parse, double init and
 * finalize, event lists that are not live. A local pool, one process. Prints one line per
 * check and exits non-zero at the first that does not hold. */
#include "expect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


int main(void) {
  mstro_cdo cdo = NULL, other = NULL, stale;
  mstro_cdo_selector sel = NULL;
  mstro_subscription sub = NULL;
  mstro_pool_event ev = NULL;
  void *data = NULL;
  int64_t len = 0;
  struct timespec when;

  EXPECT(mstro_cdo_declare("early", MSTRO_ATTR_DEFAULT, &cdo), MSTRO_UNINIT, "mstro_init");
  EXPECT(mstro_finalize(), MSTRO_UNINIT, NULL);
  EXPECT(mstro_init("bad-calls", "tester", 0), MSTRO_OK, NULL);
  EXPECT(mstro_init("bad-calls", "tester", 0), MSTRO_NOT_TWICE, "already");

  /* NULL arguments. */
  EXPECT(mstro_cdo_declare(NULL, MSTRO_ATTR_DEFAULT, &cdo), MSTRO_INVARG, "name is NULL");
  EXPECT(mstro_cdo_declare("x", MSTRO_ATTR_DEFAULT, NULL), MSTRO_INVARG, "NULL");
  EXPECT(mstro_cdo_declare("", MSTRO_ATTR_DEFAULT, &cdo), MSTRO_INVARG, "1 to");
  EXPECT(mstro_cdo_seal(NULL), MSTRO_INVARG, "NULL CDO handle");
  EXPECT(mstro_cdo_offer(NULL), MSTRO_INVARG, "NULL CDO handle");
  EXPECT(mstro_cdo_demand(NULL), MSTRO_INVARG, "NULL CDO handle");
  EXPECT(mstro_cdo_dispose(NULL), MSTRO_INVARG, "NULL CDO handle");
  EXPECT(mstro_cdo_access_ptr(NULL, &data, &len), MSTRO_INVARG, "NULL CDO handle");
  EXPECT(mstro_subscription_poll(NULL, &ev), MSTRO_INVARG, "NULL subscription handle");
  EXPECT(mstro_pool_event_dispose(NULL), MSTRO_INVARG, NULL);
  EXPECT(mstro_mem_alloc(0, &data), MSTRO_INVARG, "0 bytes");
  EXPECT(mstro_mem_alloc(64, NULL), MSTRO_INVARG, "NULL");
  EXPECT(mstro_mem_free(&len), MSTRO_INVARG, "was not allocated by mstro_mem_alloc");
  {
    void *mem = NULL;
    EXPECT(mstro_mem_alloc(4096, &mem), MSTRO_OK, NULL);
    EXPECT(mstro_mem_free(mem), MSTRO_OK, NULL);
    EXPECT(mstro_mem_free(mem), MSTRO_INVARG, "freed already");
  }
  EXPECT(mstro_pm_getinfo(NULL), MSTRO_INVARG, NULL);

  /* State. */
  EXPECT(mstro_cdo_declare("field", MSTRO_ATTR_DEFAULT, &cdo), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_offer(cdo), MSTRO_INVSTATE, "seal");
  EXPECT(mstro_cdo_access_ptr(cdo, &data, &len), MSTRO_INVSTATE, "demand it first");
  EXPECT(mstro_cdo_attribute_set(cdo, ".no.such.key", &len, true, true), MSTRO_NOENT, "no schema");
  EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER, NULL, true, true),
         MSTRO_INVARG, "NULL");
  EXPECT(mstro_cdo_seal(cdo), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_seal(cdo), MSTRO_INVSTATE, "sealed already");
  EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER, &len, true, true),
         MSTRO_INVSTATE, "frozen");
  EXPECT(mstro_cdo_offer(cdo), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(cdo), MSTRO_INVSTATE, "withdraw it before dispose");
  EXPECT(mstro_cdo_withdraw(cdo), MSTRO_OK, NULL);
  stale = cdo;
  EXPECT(mstro_cdo_dispose(cdo), MSTRO_OK, NULL);

  /* Use after dispose. */
  EXPECT(mstro_cdo_seal(stale), MSTRO_INVARG, "disposed");
  EXPECT(mstro_cdo_dispose(stale), MSTRO_INVARG, "disposed");
  EXPECT(mstro_cdo_attribute_get(stale, MSTRO_ATTR_CORE_CDO_NAME, NULL, (const void **)&data),
         MSTRO_INVARG, "disposed");

  /* A demand nobody serves times out, and the handle stays usable. */
  EXPECT(mstro_cdo_declare("nobody-offers-this", MSTRO_ATTR_DEFAULT, &other), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_demand(other), MSTRO_TIMEOUT, "nobody-offers-this");
  EXPECT(mstro_cdo_retract(other), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(other), MSTRO_OK, NULL);

  /* Selectors and subscriptions. */
  EXPECT(mstro_cdo_selector_create(NULL, NULL, "(.maestro.core.cdo.name step 2)", &sel),
         MSTRO_INVARG, "column");
  EXPECT(mstro_cdo_selector_create(NULL, NULL, "(has .maestro.core.cdo.name)", &sel), MSTRO_OK,
         NULL);
  EXPECT(mstro_subscribe(sel, 0, MSTRO_SUBSCRIPTION_OPTS_DEFAULT, &sub), MSTRO_INVARG, "mask");
  EXPECT(mstro_subscribe(sel, MSTRO_POOL_EVENT_OFFER, 1u << 7, &sub), MSTRO_INVARG, "option");
  EXPECT(mstro_subscribe((mstro_cdo_selector)cdo, MSTRO_POOL_EVENT_OFFER, 0, &sub), MSTRO_INVARG,
         NULL);
  EXPECT(mstro_subscribe(sel, MSTRO_POOL_EVENT_OFFER, 0, &sub), MSTRO_OK, NULL);
  EXPECT(mstro_subscription_poll(sub, &ev), MSTRO_OK, NULL);
  printf("%s poll with nothing queued gives NULL\n", ev == NULL ? "ok  " : "FAIL");
  failures += ev != NULL;
  clock_gettime(CLOCK_REALTIME, &when);
  when.tv_nsec += 100 * 1000 * 1000;
  if (when.tv_nsec >= 1000000000L) {
    when.tv_sec++;
    when.tv_nsec -= 1000000000L;
  }
  EXPECT(mstro_subscription_timedwait(sub, &when, &ev), MSTRO_TIMEOUT, NULL);
  EXPECT(mstro_subscription_ack(sub, (mstro_pool_event)&when), MSTRO_INVARG, "live event list");
  EXPECT(mstro_pool_event_dispose((mstro_pool_event)&when), MSTRO_INVARG, "live event list");
  EXPECT(mstro_cdo_selector_dispose(sel), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_selector_dispose(sel), MSTRO_INVARG, "disposed");
  EXPECT(mstro_subscription_dispose(sub), MSTRO_OK, NULL);
  EXPECT(mstro_subscription_dispose(sub), MSTRO_INVARG, "disposed");
  EXPECT(mstro_subscription_dispose((mstro_subscription)sel), MSTRO_INVARG, "selector handle");

  /* The pool manager: this process joined a local pool already. */
  EXPECT(mstro_pm_start(), MSTRO_NOT_TWICE, "joined a pool already");
  EXPECT(mstro_pm_terminate(), MSTRO_INVSTATE, "serves no pool manager");

  EXPECT(mstro_finalize(), MSTRO_OK, NULL);
  EXPECT(mstro_finalize(), MSTRO_UNINIT, NULL);
  EXPECT(mstro_cdo_seal(other), MSTRO_UNINIT, NULL);
  printf("%s\n", failures == 0 ? "bad_calls: all hold" : "bad_calls: FAILURES");
  return failures == 0 ? 0 : 1;
}
