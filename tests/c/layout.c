/* Layout transformation as a C producer and a Fortran-order consumer use it: the producer
 * offers a 2x3 int32 matrix, row-major (layout order 0, element size 4, 2 dimensions of 2
 * and 3), and the same bytes as `matrix-flat`, a 6-element vector; a consumer that declares
 * `matrix` column-major (order 1) gets 0 3 1 4 2 5 and its own layout in the attributes,
 * in library memory or in memory it lent; one that declares `matrix-flat` as the 2x3
 * matrix is refused, naming both layouts.
 *
 *   layout producer | layout consumer   (two processes of one pool: roles.sh, ranks 1, 2)
 *   layout                              (both in one process, a local pool)
 *
 * The producer requires `layout-done` before offering and withdraws once it has it.
 * Prints one line per check and "layout: all hold"; exits non-zero if a check fails. */
#include "expect.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int32_t matrix[6] = {0, 1, 2, 3, 4, 5};

/* Sets the layout attributes of `cdo`: `order`, 4-byte elements, `ndims` dims of `dims`. */
static void set_layout(mstro_cdo cdo, int64_t order, uint64_t ndims, const uint64_t *dims) {
  static uint64_t elem = 4;
  mstro_blob blob = {(size_t)ndims * sizeof(uint64_t), dims};
  EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER, &order, true, true),
         MSTRO_OK, NULL);
  EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_LAYOUT_ELEMENT_SIZE, &elem, true,
                                 true),
         MSTRO_OK, NULL);
  EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_LAYOUT_NDIMS, &ndims, true, true),
         MSTRO_OK, NULL);
  EXPECT(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_LAYOUT_DIMS_SIZE, &blob, true, true),
         MSTRO_OK, NULL);
}

static const uint64_t dims2x3[2] = {2, 3};
static const uint64_t dims6[1] = {6};

static void offer(const char *name, mstro_cdo *cdo, uint64_t ndims, const uint64_t *dims) {
  static int64_t size = sizeof matrix;
  EXPECT(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, cdo), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_attribute_set(*cdo, MSTRO_ATTR_CORE_CDO_RAW_PTR, matrix, false, true),
         MSTRO_OK, NULL);
  EXPECT(mstro_cdo_attribute_set(*cdo, MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true, false),
         MSTRO_OK, NULL);
  set_layout(*cdo, 0, ndims, dims);
  EXPECT(mstro_cdo_seal(*cdo), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_offer(*cdo), MSTRO_OK, NULL);
}

static void check(const char *what, const int32_t *got, const int32_t *want) {
  int ok = memcmp(got, want, 6 * sizeof *got) == 0;
  printf("%s %s: %d %d %d %d %d %d\n", ok ? "ok  " : "FAIL", what, got[0], got[1], got[2],
         got[3], got[4], got[5]);
  failures += !ok;
}

static void consume(void) {
  static const int32_t fortran[6] = {0, 3, 1, 4, 2, 5};
  mstro_cdo cdo, lent, flat;
  const void *p = NULL;
  void *bytes = NULL;
  int64_t len = 0;
  enum mstro_cdo_attr_value_type ty;
  int32_t mine[6] = {0};
  int64_t size = sizeof mine;

  /* Into library memory. */
  EXPECT(mstro_cdo_declare("matrix", MSTRO_ATTR_DEFAULT, &cdo), MSTRO_OK, NULL);
  set_layout(cdo, 1, 2, dims2x3);
  EXPECT(mstro_cdo_demand(cdo), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_access_ptr(cdo, &bytes, &len), MSTRO_OK, NULL);
  if (bytes != NULL && len == (int64_t)sizeof mine)
    check("column-major in library memory", bytes, fortran);
  else
    failures++;
  EXPECT(mstro_cdo_attribute_get(cdo, MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER, &ty, &p), MSTRO_OK, NULL);
  printf("%s the attributes say column-major\n",
         p != NULL && *(const int64_t *)p == 1 ? "ok  " : "FAIL");
  failures += !(p != NULL && *(const int64_t *)p == 1);
  EXPECT(mstro_cdo_dispose(cdo), MSTRO_OK, NULL);

  /* Into the consumer's own memory. */
  EXPECT(mstro_cdo_declare("matrix", MSTRO_ATTR_DEFAULT, &lent), MSTRO_OK, NULL);
  EXPECT(mstro_cdo_attribute_set(lent, MSTRO_ATTR_CORE_CDO_RAW_PTR, mine, false, true), MSTRO_OK,
         NULL);
  EXPECT(mstro_cdo_attribute_set(lent, MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true, false),
         MSTRO_OK, NULL);
  set_layout(lent, 1, 2, dims2x3);
  EXPECT(mstro_cdo_demand(lent), MSTRO_OK, NULL);
  check("column-major in the lent memory", mine, fortran);
  EXPECT(mstro_cdo_dispose(lent), MSTRO_OK, NULL);

  /* Not the same array: refused, naming both layouts. */
  EXPECT(mstro_cdo_declare("matrix-flat", MSTRO_ATTR_DEFAULT, &flat), MSTRO_OK, NULL);
  set_layout(flat, 1, 2, dims2x3);
  EXPECT(mstro_cdo_demand(flat), MSTRO_INVARG, "row-major 6 of 4-byte elements");
  EXPECT(mstro_cdo_demand(flat), MSTRO_INVSTATE, NULL);
  EXPECT(mstro_cdo_dispose(flat), MSTRO_OK, NULL);
}

int main(int argc, char **argv) {
  const char *role = argc > 1 ? argv[1] : "both";
  int produce = strcmp(role, "consumer") != 0, consumer = strcmp(role, "producer") != 0;
  int alone = produce && consumer;
  mstro_cdo m, flat, done;

  EXPECT(mstro_init("layout", alone ? "both" : role, 0), MSTRO_OK, NULL);
  if (produce) {
    if (!alone) { /* wait for the consumer's word before leaving */
      EXPECT(mstro_cdo_declare("layout-done", MSTRO_ATTR_DEFAULT, &done), MSTRO_OK, NULL);
      EXPECT(mstro_cdo_require(done), MSTRO_OK, NULL);
    }
    offer("matrix", &m, 2, dims2x3);
    offer("matrix-flat", &flat, 1, dims6);
  }
  if (consumer)
    consume();
  if (consumer && !alone) {
    EXPECT(mstro_cdo_declare("layout-done", MSTRO_ATTR_DEFAULT, &done), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_seal(done), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_offer(done), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_withdraw(done), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_dispose(done), MSTRO_OK, NULL);
  }
  if (produce) {
    if (!alone) {
      EXPECT(mstro_cdo_demand(done), MSTRO_OK, NULL);
      EXPECT(mstro_cdo_dispose(done), MSTRO_OK, NULL);
    }
    EXPECT(mstro_cdo_withdraw(m), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_withdraw(flat), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_dispose(m), MSTRO_OK, NULL);
    EXPECT(mstro_cdo_dispose(flat), MSTRO_OK, NULL);
  }
  EXPECT(mstro_finalize(), MSTRO_OK, NULL);
  printf("layout: %s\n", failures ? "FAILED" : "all hold");
  return failures != 0;
}
