/*
 * ax/schedule.h — when a job fires: cron, fixed rate, fixed delay or once.
 *
 * Pure computation (time is a parameter, epoch ms UTC); shared by ax-trigger
 * and `axctl job next`, so the preview is exactly what the trigger does.
 *
 *   cron         ax_cron_next() in the job's zone with its DST policy
 *   fixed_rate   anchor + k * interval for k = 0, 1, ... (anchor = the job's
 *                start time, else when its schedule was last set)
 *   fixed_delay  first at the anchor; every later fire is `interval` after
 *                the previous instance FINISHED, which only the caller knows:
 *                ax_schedule_next() returns the anchor or AX_ERR_NOTFOUND
 *   once         at the anchor only
 */
#ifndef AX_SCHEDULE_H
#define AX_SCHEDULE_H

#include <stdint.h>

#include "ax/cron.h"

typedef enum {
    AX_SCHED_NONE = 0,
    AX_SCHED_CRON,
    AX_SCHED_FIXED_RATE,
    AX_SCHED_FIXED_DELAY,
    AX_SCHED_ONCE,
} ax_sched_kind_t;

typedef struct ax_schedule {
    ax_sched_kind_t kind;
    ax_cron_t *cron;     /* AX_SCHED_CRON */
    int64_t interval_ms; /* fixed_rate, fixed_delay */
    int64_t anchor_ms;   /* fixed_rate, fixed_delay: first fire; once: the time */
} ax_schedule_t;

/* "none", "cron", "fixed_rate", "fixed_delay", "once" (the job table's
 * schedule_kind); -1 if unknown. */
int ax_sched_kind_parse(const char *s);
const char *ax_sched_kind_name(ax_sched_kind_t k);

/* Build from the job's columns. `expr` is the cron expression (cron only),
 * `tz` an IANA zone (cron only), `dst` the DST policy. Errors name the
 * problem (for cron: "position N: reason"). */
int ax_schedule_init(ax_schedule_t *s, ax_sched_kind_t kind, const char *expr, const char *tz,
                     ax_dst_policy_t dst, int64_t interval_ms, int64_t anchor_ms, char *errbuf,
                     size_t errlen);
void ax_schedule_clear(ax_schedule_t *s);

/* The first nominal fire time strictly after `after_ms` (see the top for
 * fixed_delay). ret_flags (may be NULL) gets AX_CRON_SHIFTED/REPEATED.
 * AX_ERR_NOTFOUND when the schedule has no further fire. */
int ax_schedule_next(const ax_schedule_t *s, int64_t after_ms, int64_t *ret_next_ms,
                     int *ret_flags);

#endif
