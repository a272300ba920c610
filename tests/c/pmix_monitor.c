/* Heartbeat monitoring as long-running PMIx programs use it: rank 0 asks its server to
 * watch for its heartbeats (PMIx_Process_monitor with PMIX_MONITOR_HEARTBEAT, a 1 s
 * period, 1 drop allowed), beats every 0.2 s for 2 s (no alert may come), then falls
 * silent; its peers (PMIx sends an event to the others of its namespace, not back to its
 * source) wait, bounded (10 s), for PMIX_MONITOR_HEARTBEAT_ALERT. Prints "R0 monitor
 * <status>", "R<rank> beating <alerts seen>" and "R<rank> silent alert SEEN|NOT-SEEN".
 * Needs 2 ranks or more. Run by tests/pmix_host.rs. */
#include <pmix.h>
#include <stdio.h>
#include <unistd.h>

static volatile int alerts = 0;

static void on_alert(size_t id, pmix_status_t status, const pmix_proc_t *source,
                     pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                     pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)status; (void)source; (void)info; (void)ninfo; (void)results;
    (void)nresults;
    alerts++;
    if (cbfunc) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

int main(void)
{
    pmix_proc_t me;
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 2;
    pmix_status_t code = PMIX_MONITOR_HEARTBEAT_ALERT;
    PMIx_Register_event_handler(&code, 1, NULL, 0, on_alert, NULL, NULL);
    pmix_info_t monitor, dirs[2];
    bool yes = true;
    uint32_t period = 1, drops = 1;
    PMIX_INFO_LOAD(&monitor, PMIX_MONITOR_HEARTBEAT, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&dirs[0], PMIX_MONITOR_HEARTBEAT_TIME, &period, PMIX_UINT32);
    PMIX_INFO_LOAD(&dirs[1], PMIX_MONITOR_HEARTBEAT_DROPS, &drops, PMIX_UINT32);
    pmix_info_t *results = NULL;
    size_t nres = 0;
    PMIx_Fence(NULL, 0, NULL, 0); /* every handler in place */
    if (me.rank == 0) {
        pmix_status_t rc = PMIx_Process_monitor(&monitor, PMIX_MONITOR_HEARTBEAT_ALERT, dirs,
                                                2, &results, &nres);
        printf("R0 monitor %s\n", PMIx_Error_string(rc));
        fflush(stdout);
        for (int i = 0; i < 10; i++) {
            PMIx_Heartbeat();
            usleep(200000);
        }
    } else {
        usleep(2000000);
    }
    printf("R%u beating %d\n", me.rank, alerts);
    fflush(stdout);
    if (me.rank != 0) {
        for (int i = 0; i < 1000 && !alerts; i++) usleep(10000);
        printf("R%u silent alert %s\n", me.rank, alerts ? "SEEN" : "NOT-SEEN");
        fflush(stdout);
    }
    PMIx_Fence(NULL, 0, NULL, 0);
    PMIx_Finalize(NULL, 0);
    return 0;
}
