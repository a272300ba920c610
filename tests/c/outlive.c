/* Data that outlives its producer, as a forecast job and a later product job use it: with
 * the global file system (MSTRO_TRANSPORT_GFS_DIR; each field asks for it with
 * MSTRO_ATTR_CORE_CDO_TRANSPORT, whatever MSTRO_TRANSPORT_DEFAULT says) and a pool manager
 * that keeps such offers, the producer offers N fields of 64 KiB (`field-I`, each byte I +
 * its offset, modulo 251), the last one with `.maestro.core.cdo.persist`, withdraws and
 * disposes each at once, and finalizes; the consumer, started once the producer has
 * ended, demands every field and checks its bytes, its size and that
 * `.maestro.core.cdo.provider` names the producer.
 *
 *   outlive produce N      then      outlive consume N
 *
 * Prints one line per check and "outlive: all hold"; exits non-zero if a check fails. */
#include "expect.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD (64 * 1024)

static unsigned char byte_of(long field, size_t at) { return (unsigned char)((field + at) % 251); }

static void produce(long n) {
  static unsigned char data[FIELD];
  int64_t size = FIELD;
  uint64_t forever = 0;
  long i;
  size_t at;
  EXPECT(mstro_init(NULL, "forecast", 0), MSTRO_OK, NULL);
  for (i = 0; i < n; i++) {
    char name[32];
    mstro_cdo cdo;
    bool persist = i == n - 1;
    for (at = 0; at < FIELD; at++) {
      data[at] = byte_of(i, at);
    }
    snprintf(name, sizeof name, "field-%ld", i);
    EXPECT(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &cdo), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_RAW_PTR, data, false, true),
           MSTRO_OK, NULL);
    EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true,
                                   false),
           MSTRO_OK, NULL);
    EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_LIFETIME, &forever, true, false),
           MSTRO_OK, NULL);
    EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_PERSIST, &persist, true, false),
           MSTRO_OK, NULL);
    /* Through the global file system whatever MSTRO_TRANSPORT_DEFAULT says. */
    EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_TRANSPORT, (void *)"GFS", true,
                                   false),
           MSTRO_OK, NULL);
    EXPECT(mstro_cdo_seal(cdo), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_offer(cdo), MSTRO_OK, NULL);
    /* At once: nobody has demanded it yet, and the buffer is reused for the next field. */
    EXPECT(mstro_cdo_withdraw(cdo), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_dispose(cdo), MSTRO_OK, NULL);
  }
  EXPECT(mstro_finalize(), MSTRO_OK, NULL);
}

static void consume(long n) {
  long i;
  EXPECT(mstro_init(NULL, "products", 0), MSTRO_OK, NULL);
  for (i = 0; i < n; i++) {
    char name[32];
    mstro_cdo cdo;
    void *data = NULL;
    int64_t len = 0;
    enum mstro_cdo_attr_value_type type = MSTRO_CDO_ATTR_VALUE_INVALID;
    const void *provider = NULL;
    size_t at, wrong = 0;
    snprintf(name, sizeof name, "field-%ld", i);
    EXPECT(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &cdo), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_demand(cdo), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_access_ptr(cdo, &data, &len), MSTRO_OK, NULL);
    for (at = 0; data != NULL && at < (size_t)len; at++) {
      wrong += ((unsigned char *)data)[at] != byte_of(i, at);
    }
    printf("%s %s: %lld bytes, %zu wrong\n", len == FIELD && wrong == 0 ? "ok  " : "FAIL",
           name, (long long)len, wrong);
    failures += !(len == FIELD && wrong == 0);
    EXPECT(mstro_cdo_attribute_get(cdo, MSTRO_ATTR_CORE_CDO_PROVIDER, &type, &provider),
           MSTRO_OK, NULL);
    printf("%s %s comes from %s\n",
           type == MSTRO_CDO_ATTR_VALUE_cstring && strcmp(provider, "forecast:0") == 0 ? "ok  "
                                                                                        : "FAIL",
           name, type == MSTRO_CDO_ATTR_VALUE_cstring ? (const char *)provider : "?");
    failures += !(type == MSTRO_CDO_ATTR_VALUE_cstring && strcmp(provider, "forecast:0") == 0);
    EXPECT(mstro_cdo_dispose(cdo), MSTRO_OK, NULL);
  }
  EXPECT(mstro_finalize(), MSTRO_OK, NULL);
}

int main(int argc, char **argv) {
  long n = argc > 2 ? atol(argv[2]) : 4;
  if (argc < 2 || (strcmp(argv[1], "produce") != 0 && strcmp(argv[1], "consume") != 0) ||
      n < 1) {
    fprintf(stderr, "usage: outlive produce|consume N\n");
    return 2;
  }
  if (strcmp(argv[1], "produce") == 0) {
    produce(n);
  } else {
    consume(n);
  }
  if (failures == 0) {
    printf("outlive: all hold\n");
  }
  return failures == 0 ? 0 : 1;
}
