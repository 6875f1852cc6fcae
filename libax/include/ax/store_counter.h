/*
 * ax/store_counter.h — the ax_counter table: named totals the services
 * keep (duplicate submissions, stale results, lost claims, alerts), shown
 * by axctl counters.
 *
 * Functions return 0 or an ax error (ax/common.h; AX_ERR_IO: retry later)
 * with the reason in errbuf (which may be NULL).
 */
#ifndef AX_STORE_COUNTER_H
#define AX_STORE_COUNTER_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

/* Add `delta` to counter `name` (created at 0 if new). */
int ax_store_counter_add(ax_pg_t *pg, const char *name, int64_t delta, char *errbuf,
                         size_t errlen);

typedef struct ax_counter {
    char *name;
    int64_t value;
} ax_counter_t;

/* Every counter, by name. *ret_rows (malloc'd, *ret_n of them; NULL if
 * none) is freed with ax_counters_free. */
int ax_store_counter_list(ax_pg_t *pg, ax_counter_t **ret_rows, size_t *ret_n, char *errbuf,
                          size_t errlen);
void ax_counters_free(ax_counter_t *rows, size_t n);

#endif
