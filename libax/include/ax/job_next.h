/*
 * ax/job_next.h — a job's next nominal fire times as ax-trigger will fire
 * them (axctl job next/show and ax-api's /jobs/{name}/next share this).
 *
 * The next fire is the first one strictly after max(the job's last ledger
 * nominal_time, schedule_from - 1 ms) (a disabled job gets a new
 * schedule_from, now, when enabled); the anchor of fixed_rate and
 * fixed_delay is COALESCE(start_at, schedule_from).
 */
#ifndef AX_JOB_NEXT_H
#define AX_JOB_NEXT_H

#include <stddef.h>
#include <stdint.h>

#include "ax/store_job.h"

typedef struct ax_fire_time {
    int64_t t;  /* epoch ms */
    int flags;  /* AX_CRON_SHIFTED, AX_CRON_REPEATED (ax/cron.h) */
} ax_fire_time_t;

/* Up to n next fire times of j into out (strictly after `from` if
 * has_from). For fixed_delay past its first fire: the last fired
 * instance's finish + interval, or *ret_waiting = 1 while that instance
 * has not finished. Returns the count, or AX_ERR_INVALID when the stored
 * schedule is not usable (the reason in errbuf). */
int ax_job_next_fires(const ax_job_t *j, int has_from, int64_t from, int n, ax_fire_time_t *out,
                      int *ret_waiting, char *errbuf, size_t errlen);

#endif
