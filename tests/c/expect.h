/* The check the C API's test programs share: EXPECT(call, status, needle) runs `call`,
 * prints one line saying whether it returned `status` (and, if `needle` is not NULL,
 * whether the last error message contains it), and counts failures in `failures`. */
#ifndef MAESTRO_TEST_EXPECT_H
#define MAESTRO_TEST_EXPECT_H

#include <maestro.h>
#include <stdio.h>
#include <string.h>

static int failures;

/* True if `needle` is NULL or occurs in `text`. */
static int says(const char *text, const char *needle) {
  return needle == NULL || strstr(text, needle) != NULL;
}

/* Checks that `call` returns `want` and, if `needle` is not NULL, that the message says it. */
#define EXPECT(call, want, needle)                                                          \
  do {                                                                                      \
    mstro_status s_ = (call);                                                               \
    const char *m_ = mstro_last_error_message();                                            \
    int ok_ = s_ == (want) && says(m_, (needle));                                            \
    printf("%s %s -> %d (%s)\n", ok_ ? "ok  " : "FAIL", #call, (int)s_, m_);                \
    if (!ok_) {                                                                             \
      failures++;                                                                           \
    }                                                                                       \
  } while (0)

#endif
