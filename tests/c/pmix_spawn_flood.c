/* A rank that asks PMIx_Spawn for N processes (argv[1]) again and again (argv[2] times),
 * each a `sleep SECONDS` (argv[3]), without waiting for any to end; then, after waiting
 * SECONDS + 2, once more. Prints "spawn <i> <status>" for each request. Run by
 * tests/pmix_host.rs under `maestro run --max-procs`: requests past the cap of processes
 * alive are refused, and room comes back as the spawned ones end. */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pmix_status_t spawn(int n, const char *seconds)
{
    pmix_app_t app;
    PMIX_APP_CONSTRUCT(&app);
    app.cmd = strdup("/bin/sleep");
    app.argv = calloc(3, sizeof(char *));
    app.argv[0] = strdup("sleep");
    app.argv[1] = strdup(seconds);
    app.maxprocs = n;
    char nspace[PMIX_MAX_NSLEN + 1] = "";
    pmix_status_t rc = PMIx_Spawn(NULL, 0, &app, 1, nspace);
    PMIX_APP_DESTRUCT(&app);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4) return 2;
    pmix_proc_t me;
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 2;
    int n = atoi(argv[1]), times = atoi(argv[2]);
    for (int i = 0; i < times; i++) {
        printf("spawn %d %s\n", i, PMIx_Error_string(spawn(n, argv[3])));
        fflush(stdout);
    }
    sleep((unsigned)atoi(argv[3]) + 2);
    printf("spawn later %s\n", PMIx_Error_string(spawn(n, argv[3])));
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return 0;
}
