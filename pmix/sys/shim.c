/* See shim.h: each function is exactly the PMIx macro it is named after. */
#include <stdlib.h>
#include <string.h>
#include "shim.h"

pmix_info_t *mpmix_info_create(size_t n)
{
    pmix_info_t *m = NULL;
    PMIX_INFO_CREATE(m, n);
    return m;
}

void mpmix_info_free(pmix_info_t *info, size_t n) { PMIX_INFO_FREE(info, n); }

void mpmix_value_release(pmix_value_t *v)
{
    if (v) PMIX_VALUE_RELEASE(v);
}

pmix_pdata_t *mpmix_pdata_create(size_t n)
{
    pmix_pdata_t *m = NULL;
    PMIX_PDATA_CREATE(m, n);
    return m;
}

void mpmix_pdata_free(pmix_pdata_t *pd, size_t n) { PMIX_PDATA_FREE(pd, n); }

pmix_query_t *mpmix_query_create(size_t n)
{
    pmix_query_t *m = NULL;
    PMIX_QUERY_CREATE(m, n);
    return m;
}

void mpmix_query_free(pmix_query_t *q, size_t n) { PMIX_QUERY_FREE(q, n); }

pmix_status_t mpmix_argv_append(char ***argv, const char *arg)
{
    pmix_status_t rc;
    PMIX_ARGV_APPEND(rc, *argv, arg);
    return rc;
}

void mpmix_argv_free(char **argv) { PMIX_ARGV_FREE(argv); }

pmix_data_array_t *mpmix_data_array_create(size_t n, pmix_data_type_t type)
{
    pmix_data_array_t *d = NULL;
    PMIX_DATA_ARRAY_CREATE(d, n, type);
    return d;
}

void mpmix_data_array_free(pmix_data_array_t *d)
{
    if (d) PMIX_DATA_ARRAY_FREE(d);
}

void mpmix_byte_object_destruct(pmix_byte_object_t *bo) { PMIX_BYTE_OBJECT_DESTRUCT(bo); }

pmix_proc_info_t *mpmix_proc_info_create(size_t n)
{
    pmix_proc_info_t *m = NULL;
    PMIX_PROC_INFO_CREATE(m, n);
    return m;
}

void mpmix_proc_info_free(pmix_proc_info_t *p, size_t n) { PMIX_PROC_INFO_FREE(p, n); }
