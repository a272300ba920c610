/* PMIx queries and job control as ordinary PMIx programs use them. Run by
 * tests/pmix_host.rs under maestro run (and mpirun as the reference).
 *   pmix_control query   rank 0 asks one query of two keys (one the host cannot know), the
 *                        namespace info and debug support; prints "query <what> <status> <n>"
 *   pmix_control signal  rank 0 registers as preemptible, then has rank 1 sent SIGUSR1;
 *                        rank 1 prints "R1 got SIGUSR1" when it arrives (exit 3 if it does not
 *                        within 10 s)
 *   pmix_control kill    rank 0 asks for its whole job to be killed; everyone then sleeps */
#include <pmix.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pmix_proc_t me;
static volatile sig_atomic_t got = 0;

static void on_usr1(int sig) { (void)sig; got = 1; }

static void query(const char *what, const char *k1, const char *k2)
{
    pmix_query_t q;
    PMIX_QUERY_CONSTRUCT(&q);
    pmix_status_t rc;
    PMIX_ARGV_APPEND(rc, q.keys, k1);
    if (k2) PMIX_ARGV_APPEND(rc, q.keys, k2);
    pmix_info_t *res = NULL;
    size_t n = 0;
    rc = PMIx_Query_info(&q, 1, &res, &n);
    printf("query %s %s %zu\n", what, PMIx_Error_string(rc), n);
    fflush(stdout);
}

static pmix_status_t control(const pmix_proc_t *targets, size_t ntargets, pmix_info_t *dirs,
                             size_t ndirs)
{
    pmix_info_t *res = NULL;
    size_t nres = 0;
    return PMIx_Job_control(targets, ntargets, dirs, ndirs, &res, &nres);
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    signal(SIGUSR1, on_usr1);
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 2;
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    int rc = 0;
    if (0 == strcmp(argv[1], "query")) {
        if (me.rank == 0) {
            query("mixed", PMIX_QUERY_SPAWN_SUPPORT, "pmix.qry.nosuchkey");
            query("nsinfo", PMIX_QUERY_NAMESPACE_INFO, NULL);
            query("debug", PMIX_QUERY_DEBUG_SUPPORT, NULL);
        }
    } else if (0 == strcmp(argv[1], "signal")) {
        if (me.rank == 0) {
            pmix_info_t pre;
            bool yes = true;
            PMIX_INFO_LOAD(&pre, PMIX_JOB_CTRL_PREEMPTIBLE, &yes, PMIX_BOOL);
            printf("control preemptible %s\n", PMIx_Error_string(control(NULL, 0, &pre, 1)));
            pmix_proc_t one;
            PMIX_LOAD_PROCID(&one, me.nspace, 1);
            pmix_info_t sig;
            int usr1 = SIGUSR1;
            PMIX_INFO_LOAD(&sig, PMIX_JOB_CTRL_SIGNAL, &usr1, PMIX_INT);
            printf("control signal %s\n", PMIx_Error_string(control(&one, 1, &sig, 1)));
            fflush(stdout);
        } else {
            for (int i = 0; i < 1000 && !got; i++) usleep(10000);
            if (got) printf("R%u got SIGUSR1\n", me.rank); else rc = 3;
            fflush(stdout);
        }
        PMIx_Fence(&wild, 1, NULL, 0);
    } else if (0 == strcmp(argv[1], "kill")) {
        if (me.rank == 0) {
            pmix_info_t kill;
            bool yes = true;
            PMIX_INFO_LOAD(&kill, PMIX_JOB_CTRL_KILL, &yes, PMIX_BOOL);
            printf("control kill %s\n", PMIx_Error_string(control(&wild, 1, &kill, 1)));
            fflush(stdout);
        }
        sleep(30);
        rc = 4; /* should have been killed */
    }
    PMIx_Finalize(NULL, 0);
    return rc;
}
