/* A PMIx tool as an intruder would write it: connects to a launcher's tool port given by
 * URI (no rendezvous file needed), then asks for the process table, looks up a key,
 * asks for a credential and publishes a key. Prints one line per step:
 * "<step> OK ..." or "<step> REFUSED <status>". Run by tests/security.rs as a second Unix
 * user against `maestro run --tool-support`.
 * Usage: intruder_tool URI LOOKUP_KEY PUBLISH_KEY */
#include <pmix_tool.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s URI LOOKUP_KEY PUBLISH_KEY\n", argv[0]);
        return 2;
    }
    pmix_proc_t me;
    pmix_info_t init[2];
    bool yes = true;
    PMIX_INFO_LOAD(&init[0], PMIX_SERVER_URI, argv[1], PMIX_STRING);
    PMIX_INFO_LOAD(&init[1], PMIX_TOOL_CONNECT_OPTIONAL, &yes, PMIX_BOOL);
    pmix_status_t rc = PMIx_tool_init(&me, init, 2);
    if (rc != PMIX_SUCCESS) {
        printf("init REFUSED %s\n", PMIx_Error_string(rc));
        return 0;
    }
    printf("init OK %s:%u\n", me.nspace, me.rank);

    pmix_query_t query;
    PMIX_QUERY_CONSTRUCT(&query);
    PMIX_ARGV_APPEND(rc, query.keys, PMIX_QUERY_PROC_TABLE);
    pmix_info_t *res = NULL;
    size_t nres = 0;
    rc = PMIx_Query_info(&query, 1, &res, &nres);
    printf("proc-table %s %s %zu\n", rc == PMIX_SUCCESS ? "OK" : "REFUSED", PMIx_Error_string(rc), nres);

    pmix_pdata_t pdata;
    PMIX_PDATA_CONSTRUCT(&pdata);
    strncpy(pdata.key, argv[2], PMIX_MAX_KEYLEN);
    pmix_info_t wait[1];
    int zero = 0;
    PMIX_INFO_LOAD(&wait[0], PMIX_TIMEOUT, &zero, PMIX_INT);
    rc = PMIx_Lookup(&pdata, 1, NULL, 0);
    if (rc == PMIX_SUCCESS && pdata.value.type == PMIX_STRING)
        printf("lookup OK %s\n", pdata.value.data.string);
    else
        printf("lookup REFUSED %s\n", PMIx_Error_string(rc));

    pmix_byte_object_t cred;
    pmix_info_t *cinfo = NULL;
    size_t ncinfo = 0;
    PMIX_BYTE_OBJECT_CONSTRUCT(&cred);
    rc = PMIx_Get_credential(NULL, 0, &cred);
    (void)cinfo;
    (void)ncinfo;
    printf("credential %s %s %zu\n", rc == PMIX_SUCCESS ? "OK" : "REFUSED", PMIx_Error_string(rc),
           cred.size);

    pmix_info_t pub[2];
    PMIX_INFO_LOAD(&pub[0], argv[3], "mstro-pm-v1:hijacked", PMIX_STRING);
    pmix_data_range_t range = PMIX_RANGE_GLOBAL;
    PMIX_INFO_LOAD(&pub[1], PMIX_RANGE, &range, PMIX_DATA_RANGE);
    rc = PMIx_Publish(pub, 2);
    printf("publish %s %s\n", rc == PMIX_SUCCESS ? "OK" : "REFUSED", PMIx_Error_string(rc));
    PMIx_tool_finalize();
    return 0;
}
