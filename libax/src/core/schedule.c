/* schedule.c — see ax/schedule.h. */
#include "ax/schedule.h"

#include <string.h>

static const char *const kind_names[] = {"none", "cron", "fixed_rate", "fixed_delay", "once"};

int ax_sched_kind_parse(const char *s) {
    for (int i = 0; s && i < (int)(sizeof kind_names / sizeof *kind_names); i++)
        if (strcmp(s, kind_names[i]) == 0)
            return i;
    return -1;
}

const char *ax_sched_kind_name(ax_sched_kind_t k) {
    return (unsigned)k < sizeof kind_names / sizeof *kind_names ? kind_names[k] : "?";
}

int ax_schedule_init(ax_schedule_t *s, ax_sched_kind_t kind, const char *expr, const char *tz,
                     ax_dst_policy_t dst, int64_t interval_ms, int64_t anchor_ms, char *errbuf,
                     size_t errlen) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->interval_ms = interval_ms;
    s->anchor_ms = anchor_ms;
    switch (kind) {
    case AX_SCHED_NONE:
    case AX_SCHED_ONCE:
        return AX_OK;
    case AX_SCHED_CRON:
        if (!expr || !*expr)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "cron schedule without expression");
        return ax_cron_new(expr, tz, dst, &s->cron, errbuf, errlen);
    case AX_SCHED_FIXED_RATE:
    case AX_SCHED_FIXED_DELAY:
        if (interval_ms <= 0)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "interval must be > 0 ms");
        return AX_OK;
    }
    return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "unknown schedule kind %d", (int)kind);
}

void ax_schedule_clear(ax_schedule_t *s) {
    ax_cron_destroy(s->cron);
    s->cron = NULL;
}

int ax_schedule_next(const ax_schedule_t *s, int64_t after_ms, int64_t *ret_next_ms,
                     int *ret_flags) {
    if (ret_flags)
        *ret_flags = 0;
    switch (s->kind) {
    case AX_SCHED_CRON:
        return ax_cron_next(s->cron, after_ms, ret_next_ms, ret_flags);
    case AX_SCHED_FIXED_RATE:
        if (after_ms < s->anchor_ms) {
            *ret_next_ms = s->anchor_ms;
        } else {
            int64_t k = (after_ms - s->anchor_ms) / s->interval_ms + 1;
            *ret_next_ms = s->anchor_ms + k * s->interval_ms;
        }
        return AX_OK;
    case AX_SCHED_FIXED_DELAY:
    case AX_SCHED_ONCE:
        if (after_ms < s->anchor_ms) {
            *ret_next_ms = s->anchor_ms;
            return AX_OK;
        }
        return AX_ERR_NOTFOUND;
    case AX_SCHED_NONE:
        break;
    }
    return AX_ERR_NOTFOUND;
}
