/* What the C programs of the pgen workflow (pgen_c.c, product.c) agree on with `pgen`
 * (main.rs): the fields (names, sizes, bytes), the marker CDOs and the options. */
#ifndef PGEN_H
#define PGEN_H

#include "../c/common.h"

/* Parameters of the fields, in order (--params takes the first ones). */
static const char *const PGEN_PARAMS[] = {"2t", "msl", "10u", "10v", "tp", "q", "z", "t"};
/* The 0-byte CDO the archiver offers once it holds every field. */
#define PGEN_ARCHIVED "pgen/archive-complete"
/* The 0-byte CDO the manager offers once every product is made. */
#define PGEN_DONE "pgen/done"
/* The selector of the forecast's fields (namespace .user.pgen.). */
#define PGEN_FORECAST_FIELDS "(and (kind = \"field\") (source = \"forecast\"))"

/* Which fields there are and their sizes (--steps --params --levels --min-size --max-size). */
struct pgen_shape {
  long steps, params, levels, min, max;
};

/* The value of number option `name`, or `dflt`; exits saying which option is wrong. */
static inline long pgen_number(const char *prog, int argc, char **argv, const char *name, long dflt) {
  int i;
  for (i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], name) == 0) {
      char *end = NULL;
      long v = strtol(argv[i + 1], &end, 10);
      if (end == argv[i + 1] || *end != '\0' || v < 0) {
        fprintf(stderr, "%s: %s %s: not a number\n", prog, name, argv[i + 1]);
        exit(2);
      }
      return v;
    }
  }
  return dflt;
}

/* The value of text option `name`, or NULL. */
static inline const char *pgen_text(int argc, char **argv, const char *name) {
  int i;
  for (i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], name) == 0) {
      return argv[i + 1];
    }
  }
  return NULL;
}

/* Whether flag `name` is given. */
static inline int pgen_flag(int argc, char **argv, const char *name) {
  int i;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], name) == 0) {
      return 1;
    }
  }
  return 0;
}

/* The shape from the options (pgen's defaults); exits with `usage` when it makes no sense. */
static inline struct pgen_shape pgen_shape(const char *prog, int argc, char **argv, const char *usage) {
  struct pgen_shape s;
  s.steps = pgen_number(prog, argc, argv, "--steps", 4);
  s.params = pgen_number(prog, argc, argv, "--params", 3);
  s.levels = pgen_number(prog, argc, argv, "--levels", 2);
  s.min = pgen_number(prog, argc, argv, "--min-size", 1 << 20);
  s.max = pgen_number(prog, argc, argv, "--max-size", 16 << 20);
  if (s.steps < 1 || s.params < 1 || s.params > 8 || s.levels < 1 || s.max < s.min) {
    fprintf(stderr, "usage: %s %s [--steps N --params 1-8 --levels L --min-size B --max-size B]\n",
            prog, usage);
    exit(2);
  }
  return s;
}

/* Fields per step. */
static inline long pgen_per_step(const struct pgen_shape *s) { return s->params * s->levels; }

/* The name of field `i` of `step` (pgen/field/sS/PARAM/lL) into `buf`. */
static inline void pgen_field_name(char *buf, size_t len, const struct pgen_shape *s, long step,
                            long i) {
  snprintf(buf, len, "pgen/field/s%ld/%s/l%ld", step, PGEN_PARAMS[i / s->levels],
           i % s->levels);
}

/* The size of field `name`: min-size plus its name's FNV-1a modulo the range. */
static inline int64_t pgen_field_size(const struct pgen_shape *s, const char *name) {
  return s->min + (int64_t)(fnv1a((const unsigned char *)name, strlen(name)) %
                            (uint64_t)(s->max - s->min + 1));
}

/* The bytes of field `name` into `data` (its size): common.h's pattern seeded by the low
 * byte of the name's FNV-1a. */
static inline void pgen_field_compute(const char *name, unsigned char *data, int64_t len) {
  fill(data, (size_t)len, (unsigned)(fnv1a((const unsigned char *)name, strlen(name)) & 0xff));
}

/* Whether `data` is field `name` as the forecast computed it: its size, then every byte. */
static inline int pgen_is_field(const struct pgen_shape *s, const char *name, const unsigned char *data,
                         int64_t len) {
  unsigned char *expected;
  int same;
  if (len != pgen_field_size(s, name)) {
    return 0;
  }
  expected = malloc((size_t)len + 1);
  if (expected == NULL) {
    return 0;
  }
  pgen_field_compute(name, expected, len);
  same = memcmp(expected, data, (size_t)len) == 0;
  free(expected);
  return same;
}

#endif
