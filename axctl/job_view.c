/*
 * job_view.c — a job's schedule and fire times as axctl shows them.
 *
 * Fire times are computed with ax/schedule.h, the code ax-trigger uses, by
 * the trigger's rule: the next fire is the first one strictly after
 * max(the job's last ledger nominal_time, schedule_from - 1 ms); the
 * anchor of fixed_rate and fixed_delay is COALESCE(start_at, schedule_from).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/fire.h"
#include "ax/common.h"
#include "ax/job_next.h"
#include "ax/schedule.h"
#include "job_int.h"

ax_tz_t *job_zone_open(const char *name) {
    char err[512];
    ax_tz_t *tz = NULL;
    if (ax_tz_new(name, &tz, err, sizeof err) == 0)
        return tz;
    fprintf(stderr, "axctl: warning: time zone '%s' cannot be loaded (%s); showing UTC\n", name,
            err);
    if (ax_tz_new("UTC", &tz, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", err);
        return NULL;
    }
    return tz;
}

const char *job_fmt_time(const ax_tz_t *tz, int64_t ms, char *buf, size_t len) {
    if (!tz || ax_tz_format(tz, ms, buf, len) < 0)
        snprintf(buf, len, "%" PRId64, ms);
    return buf;
}

const char *job_dst_mark(int flags) {
    return flags & AX_CRON_SHIFTED    ? " # DST: shifted"
           : flags & AX_CRON_REPEATED ? " # DST: repeated hour"
                                      : "";
}

static int kind_of(const ax_job_t *j) { return ax_sched_kind_parse(j->schedule_kind); }

static ax_dst_policy_t dst_of(const ax_job_t *j) {
    int g = ax_dst_gap_parse(j->dst_gap), o = ax_dst_overlap_parse(j->dst_overlap);
    return (ax_dst_policy_t)((g > 0 ? g : 0) | (o > 0 ? o : 0));
}

typedef ax_fire_time_t fire_t;

/* ax_job_next_fires, saying why on stderr when the stored schedule is not usable. */
static int next_fires(const ax_job_t *j, int has_from, int64_t from, int n, fire_t *out,
                      int *ret_waiting) {
    char err[512];
    int k = ax_job_next_fires(j, has_from, from, n, out, ret_waiting, err, sizeof err);
    if (k < 0)
        fprintf(stderr, "axctl: job %s: the stored schedule is not usable: %s\n", j->name, err);
    return k < 0 ? -1 : k;
}

void job_next_summary(const ax_job_t *j, const ax_tz_t *tz, int verbose, char *buf,
                      size_t len) {
    fire_t f;
    int waiting;
    if (!j->enabled) {
        snprintf(buf, len, "%s", verbose ? "none (disabled)" : "-");
        return;
    }
    if (kind_of(j) == AX_SCHED_NONE) {
        snprintf(buf, len, "%s", verbose ? "none (no schedule: runs when submitted)" : "-");
        return;
    }
    int k = next_fires(j, 0, 0, 1, &f, &waiting);
    if (k == 1) {
        char t[64];
        snprintf(buf, len, "%s%s", job_fmt_time(tz, f.t, t, sizeof t), job_dst_mark(f.flags));
    } else if (waiting) {
        snprintf(buf, len, "after instance %" PRId64 " finishes", j->last_instance_id);
    } else {
        snprintf(buf, len, "%s", k < 0 ? "?" : verbose ? "none" : "-");
    }
}

char *job_sched_summary(const ax_job_t *j, const ax_tz_t *tz) {
    char *s = NULL, t[64];
    int rc = -1;
    ax_dst_policy_t dst = dst_of(j);
    switch (kind_of(j)) {
    case AX_SCHED_CRON:
        rc = asprintf(&s, "cron '%s' %s%s%s", j->schedule_expr ? j->schedule_expr : "",
                      j->time_zone, dst & AX_DST_GAP_SKIP ? " dst-gap=skip" : "",
                      dst & AX_DST_OVERLAP_TWICE ? " dst-overlap=twice" : "");
        break;
    case AX_SCHED_FIXED_RATE:
    case AX_SCHED_FIXED_DELAY:
        rc = asprintf(&s, "%s %" PRId64 "ms%s%s", j->schedule_kind, j->interval_ms,
                      j->has_start ? " start " : "",
                      j->has_start ? job_fmt_time(tz, j->start_ms, t, sizeof t) : "");
        break;
    case AX_SCHED_ONCE:
        rc = asprintf(&s, "once %s", job_fmt_time(tz, j->start_ms, t, sizeof t));
        break;
    default:
        rc = asprintf(&s, "%s", j->schedule_kind);
        break;
    }
    return rc < 0 ? NULL : s;
}

int job_print_next(const char *prefix, const ax_job_t *j, const ax_tz_t *tz, int has_from,
                   int64_t from, int64_t n) {
    fire_t *f = malloc(sizeof *f * (size_t)n);
    if (!f) {
        fprintf(stderr, "axctl: out of memory\n");
        return 1;
    }
    int waiting;
    int k = next_fires(j, has_from, from, (int)n, f, &waiting);
    for (int i = 0; i < k; i++) {
        char t[64];
        printf("%s%s%s\n", prefix, job_fmt_time(tz, f[i].t, t, sizeof t),
               job_dst_mark(f[i].flags));
    }
    free(f);
    if (k < 0)
        return 1;
    if (kind_of(j) == AX_SCHED_FIXED_DELAY) {
        if (waiting)
            printf("%s# waiting for instance %" PRId64 " (%s) to finish\n", prefix,
                   j->last_instance_id, j->last_instance_state ? j->last_instance_state : "gone");
        printf("%s# then every run starts %" PRId64 " ms after the previous one finished\n",
               prefix, j->interval_ms);
    }
    return 0;
}

void job_print_payload(const char *key, const char *hex) {
    /* json_each_text gives bytea as "\x" and hex digits. */
    size_t n = strlen(hex) > 2 ? (strlen(hex) - 2) / 2 : 0;
    int printable = 1;
    char *bytes = malloc(n + 1);
    if (!bytes) {
        printf("%s: (%zu bytes) %s\n", key, n, hex);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 + 2 * i, "%2x", &v);
        bytes[i] = (char)v;
        if (v < 0x20 && v != '\t')
            printable = 0;
    }
    bytes[n] = '\0';
    if (n == 0)
        printf("%s: (empty)\n", key);
    else if (printable)
        printf("%s: (%zu bytes) %s\n", key, n, bytes);
    else
        printf("%s: (%zu bytes) %s\n", key, n, hex);
    free(bytes);
}
