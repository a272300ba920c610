/* A PMIx tool that pulls a running job's output (PMIx_IOF_pull), as debuggers and
 * workflow monitors do: connects to a launcher's tool port by URI, pulls stdout and
 * stderr of every rank of NSPACE, prints "pull <status>", then prints every chunk it
 * receives as "iof <stdout|stderr> <rank> <text>" until it has seen WANT chunks or 20 s
 * passed, and exits 0 only if it saw them all.
 * Usage: pmix_tool_iof URI NSPACE WANT. Run by tests/pmix_host.rs. */
#include <pmix_tool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int seen = 0;

static void on_output(size_t ref, pmix_iof_channel_t channel, pmix_proc_t *source,
                      pmix_byte_object_t *payload, pmix_info_t info[], size_t ninfo)
{
    (void)ref; (void)info; (void)ninfo;
    if (payload == NULL || payload->size == 0) return;
    int len = (int)payload->size;
    if (payload->bytes[len - 1] == '\n') len--;
    printf("iof %s %u %.*s\n", channel & PMIX_FWD_STDERR_CHANNEL ? "stderr" : "stdout",
           source ? source->rank : 0, len, payload->bytes);
    fflush(stdout);
    seen++;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s URI NSPACE WANT\n", argv[0]);
        return 2;
    }
    int want = atoi(argv[3]);
    pmix_proc_t me;
    pmix_info_t init;
    PMIX_INFO_LOAD(&init, PMIX_SERVER_URI, argv[1], PMIX_STRING);
    pmix_status_t rc = PMIx_tool_init(&me, &init, 1);
    if (rc != PMIX_SUCCESS) {
        printf("init %s\n", PMIx_Error_string(rc));
        return 1;
    }
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, argv[2], PMIX_RANK_WILDCARD);
    rc = PMIx_IOF_pull(&job, 1, NULL, 0, PMIX_FWD_STDOUT_CHANNEL | PMIX_FWD_STDERR_CHANNEL,
                       on_output, NULL, NULL);
    /* Blocking registration answers with the handler's reference (>= 0) on success. */
    printf("pull %s\n", rc >= 0 ? "SUCCESS" : PMIx_Error_string(rc));
    fflush(stdout);
    for (int i = 0; i < 2000 && rc >= 0 && seen < want; i++) usleep(10000);
    printf("seen %d\n", seen);
    fflush(stdout);
    PMIx_tool_finalize();
    return seen >= want ? 0 : 1;
}
