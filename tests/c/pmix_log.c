/* PMIx_Log as ordinary PMIx programs call it: each rank logs one line to stderr, one to
 * stdout (with a timestamp and its name as the source), one to the local syslog, and one
 * with an unknown channel, then finalizes. Prints "R<rank> log <channel> <status>" for
 * each call. Run by tests/pmix_host.rs under maestro run and mpirun. */
#include <pmix.h>
#include <stdio.h>
#include <string.h>

static pmix_proc_t me;

static void log_one(const char *channel, const char *text, bool stamp, bool source)
{
    pmix_info_t data, dirs[2];
    size_t ndirs = 0;
    PMIX_INFO_LOAD(&data, channel, text, PMIX_STRING);
    if (stamp) {
        bool yes = true;
        PMIX_INFO_LOAD(&dirs[ndirs], PMIX_LOG_GENERATE_TIMESTAMP, &yes, PMIX_BOOL);
        ndirs++;
    }
    if (source) {
        PMIX_INFO_LOAD(&dirs[ndirs], PMIX_LOG_SOURCE, &me, PMIX_PROC);
        ndirs++;
    }
    pmix_status_t rc = PMIx_Log(&data, 1, ndirs ? dirs : NULL, ndirs);
    printf("R%u log %s %s\n", me.rank, channel, PMIx_Error_string(rc));
    fflush(stdout);
}

int main(void)
{
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 2;
    char text[128];
    snprintf(text, sizeof text, "pmix-log-test stderr from rank %u", me.rank);
    log_one(PMIX_LOG_STDERR, text, false, false);
    snprintf(text, sizeof text, "pmix-log-test stdout from rank %u", me.rank);
    log_one(PMIX_LOG_STDOUT, text, true, true);
    snprintf(text, sizeof text, "pmix-log-test syslog from rank %u", me.rank);
    log_one(PMIX_LOG_SYSLOG, text, false, false);
    log_one("pmix.log.nosuchchannel", "nowhere", false, false);
    PMIx_Finalize(NULL, 0);
    return 0;
}
