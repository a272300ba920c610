/* pm_tool: a pool manager as a program, like multio's pool manager tool.
 *
 *   pm_tool [--clients N]
 *
 * Starts the workflow's pool manager in this process (mstro_pm_start: under a PMIx host
 * it is announced through PMIx, so the job's other ranks find it with no environment
 * plumbing), prints `MSTRO_POOL_MANAGER_INFO;<info>;` for processes of other jobs, then
 * counts applications joining and leaving through its own APP_JOIN/APP_LEAVE subscription
 * and stops once N clients (default 2) have left. */
#include "common.h"

int main(int argc, char **argv) {
  long clients = option(argc, argv, "--clients", 2);
  long joined = 0, left = 0;
  char *info = NULL;
  mstro_subscription sub = NULL;

  CHECK(mstro_init(NULL, "pm-tool", 0));
  CHECK(mstro_pm_start());
  CHECK(mstro_pm_getinfo(&info));
  printf("%s;%s;\n", MSTRO_ENV_POOL_INFO, info);
  fflush(stdout);
  free(info);

  CHECK(mstro_subscribe(NULL, MSTRO_POOL_EVENT_APP_JOIN | MSTRO_POOL_EVENT_APP_LEAVE,
                        MSTRO_SUBSCRIPTION_OPTS_DEFAULT, &sub));
  while (left < clients) {
    mstro_pool_event ev = NULL, e;
    mstro_status s = mstro_subscription_wait(sub, &ev);
    if (s == MSTRO_TIMEOUT) {
      continue;
    }
    CHECK(s);
    for (e = ev; e != NULL; e = e->next) {
      if (e->kind == MSTRO_POOL_EVENT_APP_JOIN) {
        joined++;
        printf("pm-tool: %s #%lld joined as app %llu\n", e->payload.join.component_name,
               (long long)e->payload.join.component_index,
               (unsigned long long)e->payload.join.appid);
      } else if (e->kind == MSTRO_POOL_EVENT_APP_LEAVE) {
        left++;
        printf("pm-tool: app %llu (%s) left\n", (unsigned long long)e->payload.leave.appid,
               e->payload.leave.component_name);
      }
    }
    CHECK(mstro_pool_event_dispose(ev));
    fflush(stdout);
  }
  CHECK(mstro_subscription_dispose(sub));
  printf("pm-tool: %ld joined, %ld left; stopping\n", joined, left);
  CHECK(mstro_pm_terminate());
  CHECK(mstro_finalize());
  return 0;
}
