/* pmix-sys shim: the PMIx helpers that exist only as header macros or static inline
 * functions, exported as real symbols so that Rust can call them. Nothing else lives here. */
#ifndef MAESTRO_PMIX_SHIM_H
#define MAESTRO_PMIX_SHIM_H
#include <pmix_common.h>

/* PMIX_INFO_CREATE: zeroed array of n infos, last one flagged PMIX_INFO_ARRAY_END. NULL if n == 0. */
pmix_info_t *mpmix_info_create(size_t n);
/* PMIX_INFO_FREE: destructs every value and frees the array. NULL-safe. */
void mpmix_info_free(pmix_info_t *info, size_t n);
/* PMIX_VALUE_RELEASE: destructs and frees one heap value. NULL-safe. */
void mpmix_value_release(pmix_value_t *v);
/* PMIX_PDATA_CREATE / PMIX_PDATA_FREE */
pmix_pdata_t *mpmix_pdata_create(size_t n);
void mpmix_pdata_free(pmix_pdata_t *pd, size_t n);
/* PMIX_QUERY_CREATE / PMIX_QUERY_FREE */
pmix_query_t *mpmix_query_create(size_t n);
void mpmix_query_free(pmix_query_t *q, size_t n);
/* PMIX_ARGV_APPEND / pmix_argv_free: NULL-terminated malloc'ed string arrays. */
pmix_status_t mpmix_argv_append(char ***argv, const char *arg);
void mpmix_argv_free(char **argv);
/* PMIX_DATA_ARRAY_CREATE / PMIX_DATA_ARRAY_FREE */
pmix_data_array_t *mpmix_data_array_create(size_t n, pmix_data_type_t type);
void mpmix_data_array_free(pmix_data_array_t *d);
/* PMIX_BYTE_OBJECT_DESTRUCT */
void mpmix_byte_object_destruct(pmix_byte_object_t *bo);
/* PMIX_PROC_INFO_CREATE / PMIX_PROC_INFO_FREE */
pmix_proc_info_t *mpmix_proc_info_create(size_t n);
void mpmix_proc_info_free(pmix_proc_info_t *p, size_t n);
#endif
