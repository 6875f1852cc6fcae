/*
 * store_arr.h — private to libax/src/store: typed arrays to the text form
 * of array parameters ($1::bigint[]). (Written for the schedule, ledger
 * and hold families; fold into store_int.h when another family has one.)
 */
#ifndef AX_STORE_ARR_H
#define AX_STORE_ARR_H

#include <stddef.h>
#include <stdint.h>

#include "ax/common.h"
#include "ax/pg.h"

/* "{1,2,3}" of v[0..n) into b (begun and ended here); 0 or AX_ERR_NOMEM. */
static inline int ax_arr_ints(ax_strbuf_t *b, const int64_t *v, size_t n) {
    int rc = ax_pgarr_begin(b);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ax_pgarr_int(b, v[i]);
    if (rc == 0)
        rc = ax_pgarr_end(b);
    return rc < 0 ? AX_ERR_NOMEM : 0;
}

/* Text elements; NULL elements are SQL NULL. */
static inline int ax_arr_texts(ax_strbuf_t *b, const char *const *v, size_t n) {
    int rc = ax_pgarr_begin(b);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ax_pgarr_text(b, v[i]);
    if (rc == 0)
        rc = ax_pgarr_end(b);
    return rc < 0 ? AX_ERR_NOMEM : 0;
}

#endif
