// maestro.h from C++: compiles with -Wall -Wextra -pedantic, and runs what real C++
// programs (multio's syphon and pool manager) write: both payload spellings, kind masks
// built with | and cast, events walked through `next`. A local pool, one process.
#include <maestro.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    mstro_status s_ = (call);                                                             \
    if (s_ != MSTRO_OK) {                                                                 \
      std::fprintf(stderr, "%s: %s (%s)\n", #call, mstro_status_description(s_),          \
                   mstro_last_error_message());                                           \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int main() {
  CHECK(mstro_init("cxx-demo", "cxx", 0));
  mstro_subscription sub = nullptr;
  mstro_cdo_selector sel = nullptr;
  CHECK(mstro_cdo_selector_create(nullptr, nullptr, "(has .maestro.core.cdo.name)", &sel));
  CHECK(mstro_subscribe(sel, (mstro_pool_event_kinds)(MSTRO_POOL_EVENT_OFFER |
                                                      MSTRO_POOL_EVENT_WITHDRAW),
                        MSTRO_SUBSCRIPTION_OPTS_DEFAULT, &sub));
  CHECK(mstro_cdo_selector_dispose(sel));

  std::string text = "hello from C++";
  int64_t size = (int64_t)text.size();
  mstro_cdo cdo = nullptr;
  CHECK(mstro_cdo_declare("cxx-field", MSTRO_ATTR_DEFAULT, &cdo));
  CHECK(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_RAW_PTR, &text[0], false, true));
  CHECK(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &size, true, false));
  CHECK(mstro_cdo_seal(cdo));
  CHECK(mstro_cdo_offer(cdo));
  CHECK(mstro_cdo_withdraw(cdo));
  CHECK(mstro_cdo_dispose(cdo));

  int seen = 0;
  while (seen < 2) {
    mstro_pool_event ev = nullptr;
    CHECK(mstro_subscription_wait(sub, &ev));
    for (mstro_pool_event e = ev; e != nullptr; e = e->next, seen++) {
      // The same memory, spelled both ways.
      if (e->payload.offer.cdo_name != e->offer.cdo_name ||
          std::strcmp(e->offer.cdo_name, "cxx-field") != 0) {
        std::fprintf(stderr, "payload spellings disagree\n");
        return 1;
      }
      std::printf("c++: %s of %s by %s\n", mstro_pool_event_description(e->kind),
                  e->payload.withdraw.cdo_name, e->offer.component_name);
    }
    CHECK(mstro_pool_event_dispose(ev));
  }
  CHECK(mstro_subscription_dispose(sub));
  CHECK(mstro_finalize());
  std::printf("c++: ok\n");
  return 0;
}
