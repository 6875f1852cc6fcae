/*
 * outcome_params.h — private to libax/src/store (and its unit test): the
 * array parameters of the finish statement made from typed results, and
 * the per-job statistics read back from its 's' rows.
 */
#ifndef AX_STORE_OUTCOME_PARAMS_H
#define AX_STORE_OUTCOME_PARAMS_H

#include "ax/store_outcome.h"
#include "store_int.h"

/* $1..$10 of "outcome.finish": instance, attempt, outcome, exit code,
 * error class, error, output, worker, started (ms), retry delay (ms). */
enum { AX__FIN_ARGS = 10 };

/* Fill a[0..AX__FIN_ARGS) ("{...}" each, begun and ended here; free with
 * ax_strbuf_free, also on failure) from in[0..n) in instance id order (the
 * order the update visits the rows in), a result of the same instance and
 * attempt as an earlier one in `in` left out (the first consumed takes
 * effect; the other is stale): an exit code not set, a start time <= 0 and
 * a retry delay < 0 are NULL elements. *lo and *hi: the least and
 * greatest instance ($12, $13, the update's id range; 0 for an empty
 * batch). 0 or AX_ERR_NOMEM. */
int ax__outcome_finish_params(ax_strbuf_t *a, const ax_outcome_in_t *in, size_t n, int64_t *lo,
                              int64_t *hi);

/* The value of an 's' row, "slots,n,ok,bad[,mean_ms]", into *j (job_id
 * untouched). */
void ax__outcome_parse_jobstat(const char *t, ax_outcome_jobstat_t *j);

#endif
