/* A plain C PMIx client using only the PMIx API (no Rust): reads the job keys every launcher
 * should provide, exchanges a value through put/commit/fence/get and finalizes. Built and
 * run under `maestro run` by tests/foreign.rs. Prints "OK <key>" or "FAIL <key> <status>". */
#include <pmix.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
static pmix_proc_t me;

static void check_get(const pmix_proc_t *p, const char *key)
{
    pmix_value_t *val = NULL;
    pmix_status_t rc = PMIx_Get(p, key, NULL, 0, &val);
    if (rc == PMIX_SUCCESS) {
        printf("R%u OK %s\n", me.rank, key);
        PMIX_VALUE_RELEASE(val);
    } else {
        printf("R%u FAIL %s %s\n", me.rank, key, PMIx_Error_string(rc));
        failures++;
    }
}

int main(void)
{
    pmix_proc_t wild, root;
    pmix_value_t v;
    pmix_info_t info;
    bool collect = true;
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 2;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    /* NODE_MAP and PROC_MAP are consumed by the PMIx library (under Slurm as well), not
     * stored as keys, so they are not read back here. */
    const char *job_keys[] = {PMIX_JOB_SIZE, PMIX_UNIV_SIZE, PMIX_LOCAL_SIZE, PMIX_LOCAL_PEERS,
                              PMIX_JOBID, PMIX_MAX_PROCS, PMIX_NUM_NODES, PMIX_NODE_LIST};
    for (size_t i = 0; i < sizeof(job_keys) / sizeof(job_keys[0]); i++) check_get(&wild, job_keys[i]);
    const char *proc_keys[] = {PMIX_LOCAL_RANK, PMIX_NODE_RANK, PMIX_HOSTNAME, PMIX_LOCALITY_STRING};
    for (size_t i = 0; i < sizeof(proc_keys) / sizeof(proc_keys[0]); i++) check_get(&me, proc_keys[i]);

    PMIX_VALUE_LOAD(&v, &me.rank, PMIX_UINT32);
    PMIx_Put(PMIX_GLOBAL, "c.client.rank", &v);
    PMIX_VALUE_DESTRUCT(&v);
    PMIx_Commit();
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(&wild, 1, &info, 1);
    printf("R%u %s fence %s\n", me.rank, rc == PMIX_SUCCESS ? "OK" : "FAIL", PMIx_Error_string(rc));
    if (rc != PMIX_SUCCESS) failures++;
    PMIX_LOAD_PROCID(&root, me.nspace, 0);
    check_get(&root, "c.client.rank");
    PMIx_Finalize(NULL, 0);
    return failures ? 1 : 0;
}
