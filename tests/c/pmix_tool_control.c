/* A PMIx tool that controls a job it did not start, as schedulers and debuggers do:
 * connects to a launcher's tool port by URI, asks for the namespace's process table,
 * then either has the whole namespace killed ("kill") or, as a debugger that attached to
 * ranks held in PMIx_Init, releases them ("release": PMIX_DEBUGGER_RELEASE to the job).
 * Prints "proc-table <status> <n>" and "<mode> <status>". Run by tests/pmix_host.rs
 * against maestro run --tool-support / --stop-in-init.
 * Usage: pmix_tool_control URI NSPACE kill|release */
#include <pmix_tool.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s URI NSPACE kill|release\n", argv[0]);
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
    if (0 == strcmp(argv[3], "release")) {
        pmix_info_t range[2];
        pmix_data_array_t targets = {.type = PMIX_PROC, .size = 1, .array = &job};
        bool yes = true;
        PMIX_INFO_LOAD(&range[0], PMIX_EVENT_CUSTOM_RANGE, &targets, PMIX_DATA_ARRAY);
        PMIX_INFO_LOAD(&range[1], PMIX_EVENT_NON_DEFAULT, &yes, PMIX_BOOL);
        rc = PMIx_Notify_event(PMIX_DEBUGGER_RELEASE, &me, PMIX_RANGE_CUSTOM, range, 2, NULL,
                               NULL);
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
