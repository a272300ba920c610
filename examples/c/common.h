/* Helpers the C examples share: status checks and the data pattern. */
#ifndef MAESTRO_EXAMPLE_COMMON_H
#define MAESTRO_EXAMPLE_COMMON_H

#include <maestro.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exits with a message naming the call, the status and why, unless `call` returns MSTRO_OK. */
#define CHECK(call)                                                                        \
  do {                                                                                     \
    mstro_status s_ = (call);                                                              \
    if (s_ != MSTRO_OK) {                                                                  \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,                   \
              mstro_status_description(s_), mstro_last_error_message());                   \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* FNV-1a over `len` bytes. */
static inline uint64_t fnv1a(const unsigned char *p, size_t len) {
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t i;
  for (i = 0; i < len; i++) {
    h = (h ^ p[i]) * 0x100000001b3ULL;
  }
  return h;
}

/* Fills `len` bytes with a pattern seeded by `seed`. */
static inline void fill(unsigned char *p, size_t len, unsigned seed) {
  size_t i;
  for (i = 0; i < len; i++) {
    p[i] = (unsigned char)((i * 29u + seed) ^ (i >> 8));
  }
}

/* The value of option `name` (e.g. "--cdos") in argv, or `dflt`. */
static inline long option(int argc, char **argv, const char *name, long dflt) {
  int i;
  for (i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], name) == 0) {
      return strtol(argv[i + 1], NULL, 10);
    }
  }
  return dflt;
}

#endif
