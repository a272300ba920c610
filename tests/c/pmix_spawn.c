/* PMIx_Spawn, PMIx_Connect and PMIx_Disconnect as PMIx programs and MPI libraries use them.
 *
 * Started as a job of N ranks ("parents"): rank 0 registers for PMIX_EVENT_JOB_END, spawns
 * two copies of this program ("children", argv "child", env PMIX_SPAWN_TEST=yes, working
 * directory /) with PMIX_NOTIFY_COMPLETION, and shares the children's namespace with the other parents
 * through a fence. Each parent puts "spawn.msg", then parents and children connect (all of
 * both namespaces), read each other's "spawn.msg", and disconnect. Rank 0 then waits
 * (bounded) for the children's job-end event, and tries two spawns that must fail: a
 * program that does not exist, and zero processes.
 *
 * Prints "P<rank> <step> <status> [<value>]" for parents and "C<rank> ..." for children.
 * Run by tests/pmix_host.rs. */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pmix_proc_t me;
static volatile int job_end_seen = 0;
static char ended_nspace[PMIX_MAX_NSLEN + 1];
static int ended_exit = -1;

static void on_job_end(size_t id, pmix_status_t status, const pmix_proc_t *source,
                       pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                       pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)status; (void)source; (void)results; (void)nresults;
    for (size_t i = 0; i < ninfo; i++) {
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC))
            snprintf(ended_nspace, sizeof ended_nspace, "%s", info[i].value.data.proc->nspace);
        if (PMIX_CHECK_KEY(&info[i], PMIX_EXIT_CODE))
            ended_exit = info[i].value.data.integer;
    }
    job_end_seen = 1;
    if (cbfunc) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static int wait_for(volatile int *flag, int seconds)
{
    for (int i = 0; i < seconds * 100 && !*flag; i++) usleep(10000);
    return *flag;
}

/* Puts "spawn.msg" = "<who> <rank>" and commits it. */
static void put_msg(const char *who)
{
    char msg[64];
    snprintf(msg, sizeof msg, "%s %u", who, me.rank);
    pmix_value_t v;
    PMIX_VALUE_LOAD(&v, msg, PMIX_STRING);
    PMIx_Put(PMIX_GLOBAL, "spawn.msg", &v);
    PMIX_VALUE_DESTRUCT(&v);
    PMIx_Commit();
}

/* Reads "spawn.msg" of rank `rank` of `nspace` and prints it. */
static int read_msg(char tag, const char *nspace, pmix_rank_t rank)
{
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, nspace, rank);
    pmix_value_t *val = NULL;
    pmix_info_t timeout;
    int secs = 10;
    PMIX_INFO_LOAD(&timeout, PMIX_TIMEOUT, &secs, PMIX_INT);
    pmix_status_t rc = PMIx_Get(&peer, "spawn.msg", &timeout, 1, &val);
    printf("%c%u read-peer %s %s\n", tag, me.rank, PMIx_Error_string(rc),
           rc == PMIX_SUCCESS ? val->data.string : "-");
    if (val) PMIX_VALUE_RELEASE(val);
    return rc != PMIX_SUCCESS;
}

/* Connects, reads the other side's message, disconnects: the same on both sides. */
static int connect_and_talk(char tag, const char *parents, const char *children, const char *other)
{
    pmix_proc_t both[2];
    PMIX_LOAD_PROCID(&both[0], parents, PMIX_RANK_WILDCARD);
    PMIX_LOAD_PROCID(&both[1], children, PMIX_RANK_WILDCARD);
    pmix_status_t rc = PMIx_Connect(both, 2, NULL, 0);
    printf("%c%u connect %s\n", tag, me.rank, PMIx_Error_string(rc));
    int failures = rc != PMIX_SUCCESS;
    failures += read_msg(tag, other, 0);
    rc = PMIx_Disconnect(both, 2, NULL, 0);
    printf("%c%u disconnect %s\n", tag, me.rank, PMIx_Error_string(rc));
    fflush(stdout);
    return failures + (rc != PMIX_SUCCESS);
}

static int child(void)
{
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = NULL;
    char parents[PMIX_MAX_NSLEN + 1] = "";
    pmix_status_t rc = PMIx_Get(&wild, PMIX_PARENT_ID, NULL, 0, &val);
    if (rc == PMIX_SUCCESS) {
        snprintf(parents, sizeof parents, "%s", val->data.proc->nspace);
        PMIX_VALUE_RELEASE(val);
    }
    printf("C%u parent-id %s\n", me.rank, PMIx_Error_string(rc));
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
    printf("C%u job-size %s %u\n", me.rank, PMIx_Error_string(rc),
           rc == PMIX_SUCCESS ? val->data.uint32 : 0);
    if (rc == PMIX_SUCCESS) PMIX_VALUE_RELEASE(val);
    const char *env = getenv("PMIX_SPAWN_TEST");
    printf("C%u env %s\n", me.rank, env ? env : "unset");
    char cwd[256] = "";
    printf("C%u cwd %s\n", me.rank, getcwd(cwd, sizeof cwd) ? cwd : "?");
    fflush(stdout);
    put_msg("child");
    int failures = connect_and_talk('C', parents, me.nspace, parents);
    PMIx_Finalize(NULL, 0);
    return failures ? 1 : 0;
}

/* A spawn that must fail; prints its status. */
static void bad_spawn(const char *step, const char *cmd, int maxprocs)
{
    pmix_app_t app;
    PMIX_APP_CONSTRUCT(&app);
    app.cmd = strdup(cmd);
    app.maxprocs = maxprocs;
    char nspace[PMIX_MAX_NSLEN + 1] = "";
    pmix_status_t rc = PMIx_Spawn(NULL, 0, &app, 1, nspace);
    printf("P0 %s %s\n", step, PMIx_Error_string(rc));
    fflush(stdout);
    PMIX_APP_DESTRUCT(&app);
}

int main(int argc, char **argv)
{
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 2;
    if (argc > 1 && strcmp(argv[1], "child") == 0) return child();

    char children[PMIX_MAX_NSLEN + 1] = "";
    int failures = 0;
    if (me.rank == 0) {
        pmix_status_t code = PMIX_EVENT_JOB_END;
        PMIx_Register_event_handler(&code, 1, NULL, 0, on_job_end, NULL, NULL);
        pmix_app_t app;
        PMIX_APP_CONSTRUCT(&app);
        app.cmd = strdup(argv[0]);
        app.argv = calloc(3, sizeof(char *));
        app.argv[0] = strdup(argv[0]);
        app.argv[1] = strdup("child");
        app.env = calloc(2, sizeof(char *));
        app.env[0] = strdup("PMIX_SPAWN_TEST=yes");
        app.cwd = strdup("/");
        app.maxprocs = 2;
        pmix_info_t notify;
        bool yes = true;
        PMIX_INFO_LOAD(&notify, PMIX_NOTIFY_COMPLETION, &yes, PMIX_BOOL);
        pmix_status_t rc = PMIx_Spawn(&notify, 1, &app, 1, children);
        printf("P0 spawn %s\n", PMIx_Error_string(rc));
        fflush(stdout);
        failures += rc != PMIX_SUCCESS;
        PMIX_APP_DESTRUCT(&app);
        pmix_value_t v;
        PMIX_VALUE_LOAD(&v, children, PMIX_STRING);
        PMIx_Put(PMIX_GLOBAL, "spawn.children", &v);
        PMIX_VALUE_DESTRUCT(&v);
    }
    put_msg("parent");
    pmix_info_t collect;
    bool yes = true;
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    PMIx_Fence(NULL, 0, &collect, 1);
    if (me.rank != 0) {
        pmix_proc_t root;
        PMIX_LOAD_PROCID(&root, me.nspace, 0);
        pmix_value_t *val = NULL;
        if (PMIx_Get(&root, "spawn.children", NULL, 0, &val) == PMIX_SUCCESS) {
            snprintf(children, sizeof children, "%s", val->data.string);
            PMIX_VALUE_RELEASE(val);
        }
    }
    failures += connect_and_talk('P', me.nspace, children, children);
    if (me.rank == 0) {
        int seen = wait_for(&job_end_seen, 20);
        printf("P0 job-end %s %s %d\n", seen ? "SEEN" : "NOT-SEEN",
               strcmp(ended_nspace, children) == 0 ? "children" : ended_nspace, ended_exit);
        failures += !seen;
        bad_spawn("spawn-missing-program", "/nonexistent/program", 1);
        bad_spawn("spawn-zero-procs", argv[0], 0);
        /* Issue #36: one request for 65,534 processes. */
        bad_spawn("spawn-too-many", argv[0], 65534);
    }
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return failures ? 1 : 0;
}
