/* A subscriber that starts late, as a monitoring component of a workflow does: two CDOs are
 * offered before it subscribes; with MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE it first hears of
 * both (OFFER events, detail "before this subscription"), then of the next offer as it
 * happens; without the option it hears only of what happens after; with SIGNAL_BEFORE too it
 * hears of the past after the fact, then of each new offer before it happens. A local pool,
 * one process. Prints one line per check and "late_subscriber: all hold" at the end; exits
 * non-zero if a check fails. */
#include "expect.h"

#include <stdio.h>
#include <string.h>

/* Offers `name` (8 bytes) and returns its handle. */
static mstro_cdo offer(const char *name) {
  static char bytes[8] = "payload";
  static int64_t size = sizeof bytes;
  mstro_cdo cdo = NULL;
  EXPECT(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &cdo), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_RAW_PTR, bytes, false, true), MSTRO_OK,
         NULL);
  EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true, false),
         MSTRO_OK, NULL);
  EXPECT(mstro_cdo_seal(cdo), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_offer(cdo), MSTRO_OK, NULL);
  return cdo;
}

/* Waits for the next `n` events of `sub` (wait returns every event queued, as a list) and
 * checks they are the OFFERs of `names`, in order, from before the subscription or not. */
static void expect_offers(mstro_subscription sub, const char *const *names, int n, int before) {
  int seen = 0;
  while (seen < n) {
    mstro_pool_event list = NULL, ev;
    EXPECT(mstro_subscription_wait(sub, &list), MSTRO_OK, NULL);
    for (ev = list; ev != NULL; ev = ev->next, seen++) {
      int ok = seen < n && ev->kind == MSTRO_POOL_EVENT_OFFER &&
               strcmp(ev->payload.offer.cdo_name, names[seen]) == 0 &&
               (strcmp(ev->payload.offer.detail, "before this subscription") == 0) == before;
      printf("%s offer of %s%s\n", ok ? "ok  " : "FAIL", ev->payload.offer.cdo_name,
             before ? " from before" : "");
      failures += !ok;
    }
    EXPECT(mstro_pool_event_dispose(list), MSTRO_OK, NULL);
  }
}

int main(void) {
  mstro_cdo a, b, c, d;
  mstro_subscription late = NULL, plain = NULL, held = NULL;
  const char *before[] = {"before-1", "before-2"}, *after[] = {"after"};
  const char *all[] = {"before-1", "before-2", "after"};
  mstro_pool_event ev = NULL;

  EXPECT(mstro_init("late-subscriber", "tester", 0), MSTRO_OK, NULL);
  a = offer("before-1");
  b = offer("before-2");
  EXPECT(mstro_subscribe(NULL, MSTRO_POOL_EVENT_OFFER, MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE,
                         &late),
         MSTRO_OK, NULL);
  EXPECT(mstro_subscribe(NULL, MSTRO_POOL_EVENT_OFFER, MSTRO_SUBSCRIPTION_OPTS_DEFAULT, &plain),
         MSTRO_OK, NULL);
  expect_offers(late, before, 2, 1);
  c = offer("after");
  expect_offers(late, after, 1, 0);
  expect_offers(plain, after, 1, 0);
  EXPECT(mstro_subscription_poll(plain, &ev), MSTRO_OK, NULL);
  printf("%s the plain subscription heard of nothing from before\n", ev == NULL ? "ok  " : "FAIL");
  failures += ev != NULL;
  EXPECT(mstro_subscribe(NULL, MSTRO_POOL_EVENT_OFFER,
                         MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE | MSTRO_SUBSCRIPTION_OPTS_SIGNAL_BEFORE,
                         &held),
         MSTRO_OK, NULL);
  expect_offers(held, all, 3, 1);
  d = offer("later");
  EXPECT(mstro_subscription_wait(held, &ev), MSTRO_OK, NULL);
  {
    int ok = ev != NULL && ev->kind == MSTRO_POOL_EVENT_OFFER && ev->before &&
             strcmp(ev->payload.offer.cdo_name, "later") == 0;
    printf("%s with SIGNAL_BEFORE a new offer comes before it happens\n", ok ? "ok  " : "FAIL");
    failures += !ok;
  }
  EXPECT(mstro_pool_event_dispose(ev), MSTRO_OK, NULL);
  EXPECT(mstro_subscription_dispose(held), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_withdraw(d), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(d), MSTRO_OK, NULL);
  EXPECT(mstro_subscription_dispose(late), MSTRO_OK, NULL);
  EXPECT(mstro_subscription_dispose(plain), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_withdraw(a), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_withdraw(b), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_withdraw(c), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(a), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(b), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(c), MSTRO_OK, NULL);
  EXPECT(mstro_finalize(), MSTRO_OK, NULL);
  printf("%s\n", failures == 0 ? "late_subscriber: all hold" : "late_subscriber: FAILURES");
  return failures == 0 ? 0 : 1;
}
