/* A PMIx tool that controls a job it did not start, as schedulers and debuggers do:
 * connects to a launcher's tool port by URI, asks for the namespace's process table,
 * then for the whole namespace to be killed. Prints "proc-table <status> <n>" and
 * "kill <status>". Run by tests/pmix_host.rs against maestro run --tool-support.
 * Usage: pmix_tool_control URI NSPACE */
#include <pmix_tool.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s URI NSPACE\n", argv[0]);
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
    pmix_info_t kill;
    bool yes = true;
    PMIX_INFO_LOAD(&kill, PMIX_JOB_CTRL_KILL, &yes, PMIX_BOOL);
    pmix_info_t *out = NULL;
    size_t nout = 0;
    rc = PMIx_Job_control(&job, 1, &kill, 1, &out, &nout);
    printf("kill %s\n", PMIx_Error_string(rc));
    fflush(stdout);
    PMIx_tool_finalize();
    return rc == PMIX_SUCCESS ? 0 : 1;
}
