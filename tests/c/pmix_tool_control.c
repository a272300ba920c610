/* A PMIx tool that controls jobs, as schedulers, workflow tools and debuggers do:
 * connects to a launcher's tool port by URI, asks for the namespace's process table,
 * then either has the whole namespace killed ("kill"), or, as a debugger that attached to
 * ranks held in PMIx_Init, releases them ("release": PMIX_DEBUGGER_RELEASE to the job), or
 * starts a job of two copies of CMD ARGS in the launcher ("spawn", with
 * PMIX_NOTIFY_COMPLETION and PMIX_FWD_STDOUT: libpmix prints the job's stdout on the
 * tool's) and waits (bounded) for its PMIX_EVENT_JOB_END; "debug" is "spawn" as a
 * debugger launches: with PMIX_DEBUG_STOP_IN_INIT, releasing the job ("releasing") after
 * a second.
 * Prints "proc-table <status> <n>" and "<mode> <status>", for spawn also
 * "job-end SEEN|NOT-SEEN <exit code>". Run by tests/pmix_host.rs against maestro run
 * --tool-support / --stop-in-init.
 * Usage: pmix_tool_control URI NSPACE kill|release|spawn|debug [CMD ARGS...] */
#include <pmix_tool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int ended = 0;
static int end_code = -1;

static void on_job_end(size_t id, pmix_status_t status, const pmix_proc_t *source,
                       pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                       pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)status; (void)source; (void)results; (void)nresults;
    for (size_t i = 0; i < ninfo; i++)
        if (PMIX_CHECK_KEY(&info[i], PMIX_EXIT_CODE)) end_code = info[i].value.data.integer;
    ended = 1;
    if (cbfunc) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

/* Sends PMIX_DEBUGGER_RELEASE to the ranks of `job` held in PMIx_Init. */
static pmix_status_t release(pmix_proc_t *me, pmix_proc_t *job)
{
    pmix_info_t range[2];
    pmix_data_array_t targets = {.type = PMIX_PROC, .size = 1, .array = job};
    bool yes = true;
    PMIX_INFO_LOAD(&range[0], PMIX_EVENT_CUSTOM_RANGE, &targets, PMIX_DATA_ARRAY);
    PMIX_INFO_LOAD(&range[1], PMIX_EVENT_NON_DEFAULT, &yes, PMIX_BOOL);
    return PMIx_Notify_event(PMIX_DEBUGGER_RELEASE, me, PMIX_RANGE_CUSTOM, range, 2, NULL, NULL);
}

/* Spawns two copies of argv[0..] (held in PMIx_Init, then released, when `held`) and
 * waits up to 20 s for their end. */
static pmix_status_t spawn(pmix_proc_t *me, char **argv, bool held)
{
    pmix_status_t code = PMIX_EVENT_JOB_END;
    PMIx_Register_event_handler(&code, 1, NULL, 0, on_job_end, NULL, NULL);
    pmix_app_t app;
    PMIX_APP_CONSTRUCT(&app);
    app.cmd = strdup(argv[0]);
    int n = 0;
    while (argv[n]) n++;
    app.argv = calloc(n + 1, sizeof(char *));
    for (int i = 0; i < n; i++) app.argv[i] = strdup(argv[i]);
    app.maxprocs = 2;
    pmix_info_t job[3];
    bool yes = true;
    PMIX_INFO_LOAD(&job[0], PMIX_NOTIFY_COMPLETION, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&job[1], PMIX_FWD_STDOUT, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&job[2], PMIX_DEBUG_STOP_IN_INIT, &yes, PMIX_BOOL);
    char nspace[PMIX_MAX_NSLEN + 1] = "";
    pmix_status_t rc = PMIx_Spawn(job, held ? 3 : 2, &app, 1, nspace);
    printf("spawn %s %s\n", PMIx_Error_string(rc), nspace);
    fflush(stdout);
    PMIX_APP_DESTRUCT(&app);
    if (held && rc == PMIX_SUCCESS) {
        sleep(1);
        printf("releasing\n");
        fflush(stdout);
        pmix_proc_t spawned;
        PMIX_LOAD_PROCID(&spawned, nspace, PMIX_RANK_WILDCARD);
        rc = release(me, &spawned);
    }
    for (int i = 0; i < 2000 && !ended && rc == PMIX_SUCCESS; i++) usleep(10000);
    printf("job-end %s %d\n", ended ? "SEEN" : "NOT-SEEN", end_code);
    return rc == PMIX_SUCCESS && !ended ? PMIX_ERR_TIMEOUT : rc;
}

int main(int argc, char **argv)
{
    bool spawning = 0 == strcmp(argv[3], "spawn") || 0 == strcmp(argv[3], "debug");
    if (argc < 4 || spawning != (argc > 4)) {
        fprintf(stderr, "usage: %s URI NSPACE kill|release|spawn|debug [CMD ARGS...]\n",
                argv[0]);
        return 2;
    }
    pmix_proc_t me;
    pmix_info_t init;
    PMIX_INFO_LOAD(&init, PMIX_SERVER_URI, argv[1], PMIX_STRING);
    pmix_status_t rc = PMIx_tool_init(&me, &init, 1);
    if (rc != PMIX_SUCCESS) {
        printf("init %s\n", PMIx_Error_string(rc));
        return 1;
    }
    pmix_query_t q;
    PMIX_QUERY_CONSTRUCT(&q);
    PMIX_ARGV_APPEND(rc, q.keys, PMIX_QUERY_PROC_TABLE);
    q.nqual = 1;
    PMIX_INFO_CREATE(q.qualifiers, 1);
    PMIX_INFO_LOAD(&q.qualifiers[0], PMIX_NSPACE, argv[2], PMIX_STRING);
    pmix_info_t *res = NULL;
    size_t n = 0;
    rc = PMIx_Query_info(&q, 1, &res, &n);
    printf("proc-table %s %zu\n", PMIx_Error_string(rc), n);
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, argv[2], PMIX_RANK_WILDCARD);
    if (spawning) {
        rc = spawn(&me, &argv[4], 0 == strcmp(argv[3], "debug"));
    } else if (0 == strcmp(argv[3], "release")) {
        rc = release(&me, &job);
        printf("release %s\n", PMIx_Error_string(rc));
    } else {
        pmix_info_t kill;
        bool yes = true;
        PMIX_INFO_LOAD(&kill, PMIX_JOB_CTRL_KILL, &yes, PMIX_BOOL);
        pmix_info_t *out = NULL;
        size_t nout = 0;
        rc = PMIx_Job_control(&job, 1, &kill, 1, &out, &nout);
        printf("kill %s\n", PMIx_Error_string(rc));
    }
    fflush(stdout);
    PMIx_tool_finalize();
    return rc == PMIX_SUCCESS ? 0 : 1;
}
