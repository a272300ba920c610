/* CDO groups as a program uses them, in a local pool (one process, MSTRO_TIMEOUT=1 set by
 * the test): a producer declares 8 CDOs with their bytes (two with an attribute set by
 * pointer), groups them, seals and offers the group; a consumer demands the group of that
 * name and walks its members with mstro_group_next, checking names, order and bytes; then
 * the bad uses: a member added twice or after seal, a size that does not match, an empty
 * group, next before demand, a second demand, disposing an offered group, demanding a CDO
 * that is no group, and a group nobody offers (its demand times out). Prints one line per
 * check and "groups: all hold" at the end; exits non-zero if a check fails. */
#include "expect.h"

#include <stdio.h>
#include <string.h>

enum { N = 8, SIZE = 1000 };

int main(void) {
  static char data[N][SIZE];
  static int64_t size = SIZE;
  static int64_t order = 1;
  mstro_cdo members[N], got, extra, plain;
  mstro_group offered, wanted, empty, wrong, nobody;
  char name[32];
  size_t count = 0;
  int i;

  EXPECT(mstro_init("groups", "tester", 0), MSTRO_OK, NULL);
  EXPECT(mstro_group_declare("fields", &offered), MSTRO_OK, NULL);
  EXPECT(mstro_group_size_set(offered, N), MSTRO_OK, NULL);
  for (i = 0; i < N; i++) {
    memset(data[i], 'A' + i, SIZE);
    snprintf(name, sizeof name, "field-%d", i);
    EXPECT(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &members[i]), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_attribute_set(members[i], MSTRO_ATTR_CORE_CDO_RAW_PTR, data[i], false, true),
           MSTRO_OK, NULL);
    EXPECT(mstro_cdo_attribute_set(members[i], MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true,
                                   false),
           MSTRO_OK, NULL);
    if (i < 2) /* kept by pointer: read when the group's offer seals the member */
      EXPECT(mstro_cdo_attribute_set(members[i], MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER, &order, false,
                                     true),
             MSTRO_OK, NULL);
    if (i == 7) /* one member sealed beforehand */
      EXPECT(mstro_cdo_seal(members[i]), MSTRO_OK, NULL);
    EXPECT(mstro_group_add(offered, members[i]), MSTRO_OK, NULL);
  }
  EXPECT(mstro_group_add(offered, members[0]), MSTRO_INVARG, "member already");
  EXPECT(mstro_group_size_get(offered, &count), MSTRO_OK, NULL);
  printf("%s the producer's group has %zu members\n", count == N ? "ok  " : "FAIL", count);
  failures += count != N;
  EXPECT(mstro_group_seal(offered), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_declare("late", MSTRO_ATTR_DEFAULT, &extra), MSTRO_OK, NULL);
  EXPECT(mstro_group_add(offered, extra), MSTRO_INVSTATE, "before seal");
  EXPECT(mstro_group_offer(offered), MSTRO_OK, NULL);
  EXPECT(mstro_group_dispose(offered), MSTRO_INVSTATE, "withdraw it before dispose");

  /* The consumer. */
  EXPECT(mstro_group_declare("fields", &wanted), MSTRO_OK, NULL);
  EXPECT(mstro_group_next(wanted, &got), MSTRO_INVSTATE, "demand it first");
  EXPECT(mstro_group_demand(wanted), MSTRO_OK, NULL);
  EXPECT(mstro_group_demand(wanted), MSTRO_INVSTATE, "demanded once");
  EXPECT(mstro_group_size_get(wanted, &count), MSTRO_OK, NULL);
  printf("%s the demanded group has %zu members\n", count == N ? "ok  " : "FAIL", count);
  failures += count != N;
  for (i = 0; i <= N; i++) {
    void *bytes = NULL;
    int64_t len = 0;
    const int64_t *layout = NULL;
    EXPECT(mstro_group_next(wanted, &got), MSTRO_OK, NULL);
    if (i == N) {
      printf("%s next gives NULL after the last member\n", got == NULL ? "ok  " : "FAIL");
      failures += got != NULL;
      break;
    }
    if (got == NULL) {
      printf("FAIL member %d missing\n", i);
      failures++;
      break;
    }
    snprintf(name, sizeof name, "field-%d", i);
    const char *got_name = NULL;
    EXPECT(mstro_cdo_attribute_get(got, MSTRO_ATTR_CORE_CDO_NAME, NULL, (const void **)&got_name),
           MSTRO_OK, NULL);
    EXPECT(mstro_cdo_access_ptr(got, &bytes, &len), MSTRO_OK, NULL);
    int ok = got_name != NULL && strcmp(got_name, name) == 0 && len == SIZE &&
             memcmp(bytes, data[i], SIZE) == 0;
    if (i < 2) {
      EXPECT(mstro_cdo_attribute_get(got, MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER, NULL,
                                     (const void **)&layout),
             MSTRO_OK, NULL);
      ok = ok && layout != NULL && *layout == 1;
    }
    printf("%s member %d is %s with its %d bytes\n", ok ? "ok  " : "FAIL", i, name, SIZE);
    failures += !ok;
  }
  EXPECT(mstro_group_dispose(wanted), MSTRO_OK, NULL);
  EXPECT(mstro_group_withdraw(offered), MSTRO_OK, NULL);
  EXPECT(mstro_group_dispose(offered), MSTRO_OK, NULL);
  for (i = 0; i < N; i++) /* the producer's members are still its own */
    EXPECT(mstro_cdo_dispose(members[i]), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(extra), MSTRO_OK, NULL);

  /* Bad uses. */
  EXPECT(mstro_group_declare("empty", &empty), MSTRO_OK, NULL);
  EXPECT(mstro_group_seal(empty), MSTRO_INVARG, "no members");
  EXPECT(mstro_group_offer(empty), MSTRO_INVSTATE, "seal it");
  EXPECT(mstro_group_dispose(empty), MSTRO_OK, NULL);
  EXPECT(mstro_group_declare("sized", &wrong), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_declare("one", MSTRO_ATTR_DEFAULT, &extra), MSTRO_OK, NULL);
  EXPECT(mstro_group_add(wrong, extra), MSTRO_OK, NULL);
  EXPECT(mstro_group_size_set(wrong, 2), MSTRO_OK, NULL);
  EXPECT(mstro_group_seal(wrong), MSTRO_INVARG, "size was set to 2");
  EXPECT(mstro_group_dispose(wrong), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(extra), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_declare("plain", MSTRO_ATTR_DEFAULT, &plain), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_seal(plain), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_offer(plain), MSTRO_OK, NULL);
  EXPECT(mstro_group_declare("plain", &wanted), MSTRO_OK, NULL);
  EXPECT(mstro_group_demand(wanted), MSTRO_INVARG, "not a group");
  EXPECT(mstro_group_dispose(wanted), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_withdraw(plain), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_dispose(plain), MSTRO_OK, NULL);
  EXPECT(mstro_group_declare("nobody-offers-this", &nobody), MSTRO_OK, NULL);
  EXPECT(mstro_group_demand(nobody), MSTRO_TIMEOUT, NULL);
  EXPECT(mstro_group_dispose(nobody), MSTRO_OK, NULL);
  EXPECT(mstro_group_add(nobody, extra), MSTRO_INVARG, "group");
  EXPECT(mstro_group_size_get(NULL, &count), MSTRO_INVARG, NULL);

  EXPECT(mstro_finalize(), MSTRO_OK, NULL);
  printf("%s\n", failures == 0 ? "groups: all hold" : "groups: FAILURES");
  return failures == 0 ? 0 : 1;
}
