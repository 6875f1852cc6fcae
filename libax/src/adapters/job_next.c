/*
 * job_next.c — a job's next fire times by ax-trigger's rule
 * (ax/job_next.h), computed with ax/schedule.h, the code the trigger uses.
 */
#include "ax/common.h"
#include "ax/cron.h"
#include "ax/fire.h"
#include "ax/job_next.h"
#include "ax/schedule.h"

static int kind_of(const ax_job_t *j) { return ax_sched_kind_parse(j->schedule_kind); }

static ax_dst_policy_t dst_of(const ax_job_t *j) {
    int g = ax_dst_gap_parse(j->dst_gap), o = ax_dst_overlap_parse(j->dst_overlap);
    return (ax_dst_policy_t)((g > 0 ? g : 0) | (o > 0 ? o : 0));
}

/* schedule_from as the trigger will see it: a disabled job gets a new one
 * (now) when it is enabled. */
static int64_t eff_from(const ax_job_t *j) { return j->enabled ? j->schedule_from_ms : j->now_ms; }

static int sched_open(const ax_job_t *j, ax_schedule_t *s, char *errbuf, size_t errlen) {
    int kind = kind_of(j);
    int64_t anchor = kind == AX_SCHED_ONCE ? j->start_ms
                     : j->has_start        ? j->start_ms
                                           : eff_from(j);
    if (kind < 0)
        kind = AX_SCHED_NONE;
    if (ax_schedule_init(s, (ax_sched_kind_t)kind, j->schedule_expr, j->time_zone, dst_of(j),
                         j->interval_ms, anchor, errbuf, errlen) < 0)
        return AX_ERR_INVALID;
    return 0;
}

int ax_job_next_fires(const ax_job_t *j, int has_from, int64_t from, int n, ax_fire_time_t *out,
                      int *ret_waiting, char *errbuf, size_t errlen) {
    ax_schedule_t s;
    int kind = kind_of(j);
    *ret_waiting = 0;
    if (kind == AX_SCHED_NONE || n < 1)
        return 0;
    if (sched_open(j, &s, errbuf, errlen) < 0)
        return AX_ERR_INVALID;
    int64_t after = eff_from(j) - 1;
    if (has_from)
        after = from;
    else if (j->has_last_fire && j->last_fire_ms > after)
        after = j->last_fire_ms;
    int k = 0;
    while (k < n) {
        int64_t t;
        int flags;
        if (ax_schedule_next(&s, after, &t, &flags) < 0)
            break;
        out[k].t = t;
        out[k].flags = flags;
        k++;
        after = t;
        if (kind == AX_SCHED_FIXED_DELAY)
            break;
    }
    if (kind == AX_SCHED_FIXED_DELAY && k == 0 && !has_from && j->has_last_fire &&
        j->last_fire_ms >= eff_from(j)) {
        if (j->has_last_finished) {
            out[0].t = j->last_finished_ms + j->interval_ms;
            out[0].flags = 0;
            k = 1;
        } else if (j->has_last_instance) {
            *ret_waiting = 1;
        }
    }
    ax_schedule_clear(&s);
    return k;
}
