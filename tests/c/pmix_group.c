/* PMIx groups as Open MPI 5 and other PMIx programs use them: every rank constructs group
 * "all" of the whole job with a context id assigned, reads the id, constructs and destructs
 * a second group "evens" of the even ranks (a subset), then destructs "all". Prints
 * "R<rank> <step> <status> [<value>]" per step. Run by tests/pmix_host.rs. */
#include <pmix.h>
#include <stdio.h>
#include <string.h>

static pmix_proc_t me;

static size_t context_id(pmix_info_t *results, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (PMIX_CHECK_KEY(&results[i], PMIX_GROUP_CONTEXT_ID)) {
            size_t id = 0;
            pmix_status_t rc;
            PMIX_VALUE_GET_NUMBER(rc, &results[i].value, id, size_t);
            return rc == PMIX_SUCCESS ? id : 0;
        }
    return 0;
}

int main(void)
{
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 2;
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = NULL;
    uint32_t size = 0;
    if (PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val) == PMIX_SUCCESS) {
        size = val->data.uint32;
        PMIX_VALUE_RELEASE(val);
    }
    pmix_info_t dirs[2];
    bool yes = true;
    int timeout = 20;
    PMIX_INFO_LOAD(&dirs[0], PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&dirs[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
    pmix_info_t *results = NULL;
    size_t nres = 0;
    pmix_status_t rc = PMIx_Group_construct("all", &wild, 1, dirs, 2, &results, &nres);
    printf("R%u construct-all %s %zu\n", me.rank, PMIx_Error_string(rc), context_id(results, nres));
    fflush(stdout);
    int failures = rc != PMIX_SUCCESS;
    if (me.rank % 2 == 0) {
        pmix_proc_t evens[64];
        size_t n = 0;
        for (uint32_t r = 0; r < size && n < 64; r += 2, n++) /* (the macro reads its
                                                                  argument twice) */
            PMIX_LOAD_PROCID(&evens[n], me.nspace, r);
        pmix_info_t *res2 = NULL;
        size_t nres2 = 0;
        rc = PMIx_Group_construct("evens", evens, n, dirs, 2, &res2, &nres2);
        printf("R%u construct-evens %s %zu\n", me.rank, PMIx_Error_string(rc), context_id(res2, nres2));
        failures += rc != PMIX_SUCCESS;
        rc = PMIx_Group_destruct("evens", NULL, 0);
        printf("R%u destruct-evens %s\n", me.rank, PMIx_Error_string(rc));
        failures += rc != PMIX_SUCCESS;
        fflush(stdout);
    }
    rc = PMIx_Group_destruct("all", NULL, 0);
    printf("R%u destruct-all %s\n", me.rank, PMIx_Error_string(rc));
    failures += rc != PMIX_SUCCESS;
    PMIx_Finalize(NULL, 0);
    return failures ? 1 : 0;
}
