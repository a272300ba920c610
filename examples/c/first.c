/* first.c: a producer and a consumer of one CDO in one process (a pool inside it). */
#include <maestro.h>
#include <stdio.h>
#include <stdlib.h>

static void ok(mstro_status s) {
  if (s != MSTRO_OK) {
    fprintf(stderr, "first: %s\n", mstro_last_error_message());
    exit(1);
  }
}

int main(void) {
  static double field[1 << 17]; /* 1 MiB, offered in place */
  int64_t size = sizeof field, len = 0;
  mstro_cdo out, in;
  void *data = NULL;
  ok(mstro_init("first", "demo", 0));
  ok(mstro_cdo_declare("field", MSTRO_ATTR_DEFAULT, &out));
  ok(mstro_cdo_attribute_set(out, MSTRO_ATTR_CORE_CDO_RAW_PTR, field, false, true));
  ok(mstro_cdo_attribute_set(out, MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true, false));
  ok(mstro_cdo_seal(out));
  ok(mstro_cdo_offer(out));
  ok(mstro_cdo_declare("field", MSTRO_ATTR_DEFAULT, &in)); /* the consumer's handle */
  ok(mstro_cdo_demand(in));
  ok(mstro_cdo_access_ptr(in, &data, &len));
  printf("%lld bytes: %s\n", (long long)len, data == field ? "the producer's memory" : "a copy");
  ok(mstro_cdo_dispose(in));
  ok(mstro_cdo_withdraw(out));
  ok(mstro_cdo_dispose(out));
  ok(mstro_finalize());
  return 0;
}
