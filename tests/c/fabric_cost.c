/* A PMIx client asking its host about the fabric the way a scheduler or a tool written
 * against OpenPMIx's fabric API does: PMIx_Fabric_register, then the standard keys of the
 * answer: PMIX_FABRIC_IDENTIFIER, PMIX_FABRIC_GROUPS, PMIX_FABRIC_SWITCH and
 * PMIX_FABRIC_COST_MATRIX (a uint16_t array, row by row), with the hosts of its rows
 * (maestro.fabric.hosts). With a FILE argument it then waits (up to 60 s) for FILE to
 * exist, asks again with PMIx_Fabric_update and prints the new answer. Prints:
 *   register OK <ninfo> | register FAILED <status>
 *   id <identifier>
 *   groups <groups>
 *   switch <this node's leaf switches>
 *   hosts <n> <host>,<host>,...
 *   cost <host> <host> <hops>      (every pair, 65535: no path)
 *   update OK <ninfo>              (then the lines above again)
 * Run by tests/fabric_topology.rs under `maestro run --fabric` / `--discover-fabric`.
 * Usage: fabric_cost [FILE] */
#include <pmix.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void print_answer(const pmix_fabric_t *fabric)
{
    const pmix_data_array_t *hosts = NULL, *matrix = NULL;
    for (size_t i = 0; i < fabric->ninfo; i++) {
        const pmix_info_t *info = &fabric->info[i];
        const pmix_value_t *v = &info->value;
        if (PMIX_CHECK_KEY(info, PMIX_FABRIC_IDENTIFIER) && v->type == PMIX_STRING) {
            printf("id %s\n", v->data.string);
        } else if (PMIX_CHECK_KEY(info, PMIX_FABRIC_GROUPS) && v->type == PMIX_STRING) {
            printf("groups %s\n", v->data.string);
        } else if (PMIX_CHECK_KEY(info, PMIX_FABRIC_SWITCH) && v->type == PMIX_STRING) {
            printf("switch %s\n", v->data.string);
        } else if (PMIX_CHECK_KEY(info, "maestro.fabric.hosts") && v->type == PMIX_DATA_ARRAY
                   && v->data.darray->type == PMIX_STRING) {
            hosts = v->data.darray;
        } else if (PMIX_CHECK_KEY(info, PMIX_FABRIC_COST_MATRIX) && v->type == PMIX_DATA_ARRAY
                   && v->data.darray->type == PMIX_UINT16) {
            matrix = v->data.darray;
        }
    }
    if (hosts == NULL || matrix == NULL) {
        printf("no cost matrix\n");
        return;
    }
    char **names = (char **) hosts->array;
    size_t n = hosts->size;
    printf("hosts %zu ", n);
    for (size_t i = 0; i < n; i++) {
        printf("%s%s", i ? "," : "", names[i]);
    }
    printf("\n");
    if (matrix->size != n * n) {
        printf("cost matrix of %zu entries for %zu hosts\n", matrix->size, n);
        return;
    }
    const uint16_t *cost = (const uint16_t *) matrix->array;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            printf("cost %s %s %u\n", names[i], names[j], (unsigned) cost[i * n + j]);
        }
    }
}

int main(int argc, char **argv)
{
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        printf("init FAILED %s\n", PMIx_Error_string(rc));
        return 1;
    }
    pmix_fabric_t fabric;
    PMIX_FABRIC_CONSTRUCT(&fabric);
    rc = PMIx_Fabric_register(&fabric, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        printf("register FAILED %s\n", PMIx_Error_string(rc));
        PMIx_Finalize(NULL, 0);
        return 1;
    }
    printf("register OK %zu\n", fabric.ninfo);
    print_answer(&fabric);
    fflush(stdout);
    int code = 0;
    if (argc > 1) {
        int waited = 0;
        while (access(argv[1], F_OK) != 0 && waited < 600) {
            usleep(100 * 1000);
            waited++;
        }
        rc = PMIx_Fabric_update(&fabric);
        if (rc == PMIX_SUCCESS) {
            printf("update OK %zu\n", fabric.ninfo);
            print_answer(&fabric);
        } else {
            printf("update FAILED %s\n", PMIx_Error_string(rc));
            code = 1;
        }
    }
    PMIx_Fabric_deregister(&fabric);
    PMIx_Finalize(NULL, 0);
    return code;
}
