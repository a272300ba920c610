/* Asynchronous PMIx groups, as the standard describes them: rank 0 invites ranks 1 and 2
 * into group "invited" (PMIx_Group_invite); they learn of it through the
 * PMIX_GROUP_INVITED event, accept with PMIx_Group_join from their main thread (never
 * blocking inside the handler), every member sees the construction complete, and all
 * three destruct it (OpenPMIx 4.2's client may not have recorded an invited group yet and
 * answer NOT-FOUND: printed, not counted). Then rank 2 builds a group of its own and leaves it
 * (PMIx_Group_leave, which OpenPMIx 4.2's server does not implement: it must answer at
 * once, whatever it answers). Every wait is bounded. Prints
 * "R<rank> <step> <status>". Needs 3 ranks. Run by tests/pmix_host.rs. */
#include <pmix.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pmix_proc_t me;
static volatile int invited = 0;
static pmix_proc_t leader;

static void on_event(size_t id, pmix_status_t status, const pmix_proc_t *source,
                     pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                     pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)info; (void)ninfo; (void)results; (void)nresults;
    if (status == PMIX_GROUP_INVITED) {
        if (source) memcpy(&leader, source, sizeof leader);
        invited = 1;
    }
    if (cbfunc) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static int wait_for(volatile int *flag, int seconds)
{
    for (int i = 0; i < seconds * 100 && !*flag; i++) usleep(10000);
    return *flag;
}

int main(void)
{
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 2;
    pmix_status_t code = PMIX_GROUP_INVITED;
    PMIx_Register_event_handler(&code, 1, NULL, 0, on_event, NULL, NULL);
    /* Everyone listens before anyone invites. */
    PMIx_Fence(NULL, 0, NULL, 0);
    pmix_info_t *results = NULL;
    size_t nres = 0;
    pmix_status_t rc;
    int failures = 0;
    if (me.rank == 0) {
        pmix_proc_t guests[2];
        PMIX_LOAD_PROCID(&guests[0], me.nspace, 1);
        PMIX_LOAD_PROCID(&guests[1], me.nspace, 2);
        pmix_info_t timeout;
        int secs = 15;
        PMIX_INFO_LOAD(&timeout, PMIX_TIMEOUT, &secs, PMIX_INT);
        rc = PMIx_Group_invite("invited", guests, 2, &timeout, 1, &results, &nres);
        printf("R0 invite %s\n", PMIx_Error_string(rc));
    } else {
        int seen = wait_for(&invited, 15);
        printf("R%u invited %s\n", me.rank, seen ? "SEEN" : "NOT-SEEN");
        fflush(stdout);
        rc = seen ? PMIx_Group_join("invited", &leader, PMIX_GROUP_ACCEPT, NULL, 0, &results,
                                    &nres)
                  : PMIX_ERR_TIMEOUT;
        printf("R%u join %s\n", me.rank, PMIx_Error_string(rc));
    }
    fflush(stdout);
    failures += rc != PMIX_SUCCESS;
    PMIx_Fence(NULL, 0, NULL, 0);
    rc = PMIx_Group_destruct("invited", NULL, 0);
    printf("R%u destruct %s\n", me.rank, PMIx_Error_string(rc));
    if (me.rank == 2) {
        rc = PMIx_Group_construct("solo", &me, 1, NULL, 0, &results, &nres);
        printf("R2 construct-solo %s\n", PMIx_Error_string(rc));
        failures += rc != PMIX_SUCCESS;
        rc = PMIx_Group_leave("solo", NULL, 0);
        printf("R2 leave %s\n", PMIx_Error_string(rc));
    }
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return failures ? 1 : 0;
}
