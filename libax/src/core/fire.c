/*
 * fire.c — the fire decision (misfire, overlap) and the policy names:
 * values in, decisions out, no clock and no I/O (ax/fire.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/common.h"
#include "ax/fire.h"

/* ---- policy names ------------------------------------------------------------ */

const char *const ax_misfire_names[] = {"fire_once", "skip", "catch_up", NULL};
const char *const ax_overlap_names[] = {"allow", "skip", "queue", "cancel", NULL};
const char *const ax_dst_gap_names[] = {"shift", "skip", NULL};
const char *const ax_dst_overlap_names[] = {"once", "twice", NULL};
const char *const ax_fire_decision_names[] = {
    "fired", "queued", "skipped_misfire", "skipped_overlap", "skipped_circuit", "deferred", NULL,
};

static int lookup(const char *const *names, const char *s) {
    for (int i = 0; s && names[i]; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

static const char *name_of(const char *const *names, size_t count, int v) {
    return v >= 0 && (size_t)v < count - 1 ? names[v] : "?";
}

#define NAME_OF(tab, v) name_of((tab), sizeof(tab) / sizeof(tab)[0], (int)(v))

int ax_misfire_parse(const char *s) { return lookup(ax_misfire_names, s); }
int ax_overlap_parse(const char *s) { return lookup(ax_overlap_names, s); }
int ax_fire_decision_parse(const char *s) { return lookup(ax_fire_decision_names, s); }

int ax_dst_gap_parse(const char *s) {
    int i = lookup(ax_dst_gap_names, s);
    return i < 0 ? -1 : i == 1 ? AX_DST_GAP_SKIP : AX_DST_GAP_SHIFT;
}

int ax_dst_overlap_parse(const char *s) {
    int i = lookup(ax_dst_overlap_names, s);
    return i < 0 ? -1 : i == 1 ? AX_DST_OVERLAP_TWICE : AX_DST_OVERLAP_ONCE;
}

const char *ax_misfire_name(ax_misfire_t m) { return NAME_OF(ax_misfire_names, m); }
const char *ax_overlap_name(ax_overlap_t o) { return NAME_OF(ax_overlap_names, o); }
const char *ax_fire_decision_name(ax_fire_decision_t d) {
    return NAME_OF(ax_fire_decision_names, d);
}

const char *ax_dst_gap_name(ax_dst_policy_t dst) {
    return ax_dst_gap_names[dst & AX_DST_GAP_SKIP ? 1 : 0];
}

const char *ax_dst_overlap_name(ax_dst_policy_t dst) {
    return ax_dst_overlap_names[dst & AX_DST_OVERLAP_TWICE ? 1 : 0];
}

/* ---- the window of due times ------------------------------------------------------ */

void ax_fire_window_init(ax_fire_window_t *w, size_t keep) {
    memset(w, 0, sizeof *w);
    w->keep = keep ? keep : 1;
    w->v = &w->one;
    w->cap = 1;
}

void ax_fire_window_clear(ax_fire_window_t *w) {
    if (w->v != &w->one)
        free(w->v);
    ax_fire_window_init(w, w->keep);
}

void ax_fire_window_linear(ax_fire_window_t *w) {
    if (w->head == 0)
        return;
    ax_fire_due_t *tmp = malloc(w->n * sizeof *tmp);
    if (tmp) {
        for (size_t i = 0; i < w->n; i++)
            tmp[i] = w->v[(w->head + i) % w->cap];
        memcpy(w->v, tmp, w->n * sizeof *tmp);
        free(tmp);
    } else { /* rotate left by head, one step at a time */
        for (size_t k = 0; k < w->head; k++) {
            ax_fire_due_t x = w->v[0];
            memmove(w->v, w->v + 1, (w->cap - 1) * sizeof *w->v);
            w->v[w->cap - 1] = x;
        }
    }
    w->head = 0;
}

static int window_grow(ax_fire_window_t *w) {
    size_t nc = w->cap * 8 < w->keep ? w->cap * 8 : w->keep;
    ax_fire_due_t *v = malloc(nc * sizeof *v);
    if (!v)
        return AX_ERR_NOMEM;
    for (size_t i = 0; i < w->n; i++)
        v[i] = w->v[(w->head + i) % w->cap];
    if (w->v != &w->one)
        free(w->v);
    w->v = v;
    w->cap = nc;
    w->head = 0;
    return 0;
}

int ax_fire_window_push(ax_fire_window_t *w, int64_t nominal_ms, int flags) {
    if (w->n == w->cap && w->cap < w->keep && window_grow(w) < 0)
        return AX_ERR_NOMEM;
    ax_fire_due_t d = {.nominal_ms = nominal_ms, .flags = flags};
    if (w->n == w->cap) { /* full: the oldest becomes "older" */
        if (!w->older)
            w->older_first = w->v[w->head].nominal_ms;
        w->older_last = w->v[w->head].nominal_ms;
        w->older++;
        w->v[w->head] = d;
        w->head = (w->head + 1) % w->cap;
    } else {
        w->v[(w->head + w->n) % w->cap] = d;
        w->n++;
    }
    return 0;
}

/* ---- misfire ------------------------------------------------------------------- */

void ax_fire_misfire(const ax_fire_policy_t *p, ax_fire_due_t *due, size_t n, int64_t now) {
    int any_on_time = 0;
    for (size_t i = 0; i < n; i++)
        if (now - due[i].nominal_ms <= p->threshold_ms)
            any_on_time = 1;
    size_t late_fired = 0;
    for (size_t k = n; k-- > 0;) { /* newest first to count catch-ups */
        ax_fire_verdict_t v = {AX_FIRE_SKIPPED_MISFIRE, AX_FIRE_WHY_SKIP, now - due[k].nominal_ms};
        if (v.late_ms <= p->threshold_ms) {
            v.decision = AX_FIRE_FIRED;
            v.why = AX_FIRE_WHY_ON_TIME;
        } else if (p->misfire == AX_MISFIRE_FIRE_ONCE) {
            v.why = AX_FIRE_WHY_ONCE_LATER;
            if (!any_on_time && late_fired == 0) {
                v.decision = AX_FIRE_FIRED;
                v.why = AX_FIRE_WHY_ONCE_LATEST;
                late_fired++;
            }
        } else if (p->misfire == AX_MISFIRE_CATCH_UP) {
            v.why = AX_FIRE_WHY_CATCH_UP_MAX;
            if (late_fired < (size_t)p->catchup_max) {
                v.decision = AX_FIRE_FIRED;
                v.why = AX_FIRE_WHY_CATCH_UP;
                late_fired++;
            }
        }
        due[k].verdict = v;
    }
}

static const char *dst_note(int flags) {
    return flags & AX_CRON_SHIFTED    ? "; DST: shifted"
           : flags & AX_CRON_REPEATED ? "; DST: repeated hour"
                                      : "";
}

static size_t put(char *buf, size_t len, int n) {
    if (n < 0)
        n = 0;
    if (len && (size_t)n >= len)
        n = (int)len - 1;
    return (size_t)n;
}

size_t ax_fire_detail(const ax_fire_policy_t *p, const ax_fire_due_t *d, char *buf, size_t len) {
    const ax_fire_verdict_t *v = &d->verdict;
    int flags = d->flags;
    long long late = (long long)v->late_ms, thr = (long long)p->threshold_ms;
    const char *dst = dst_note(flags);
    if (len)
        buf[0] = 0;
    switch (v->why) {
    case AX_FIRE_WHY_ON_TIME:
        if (v->late_ms <= 1000 && !flags)
            return 0;
        return put(buf, len, snprintf(buf, len, "late by %lld ms%s", late, dst));
    case AX_FIRE_WHY_SKIP:
        return put(buf, len,
                   snprintf(buf, len, "misfire: late by %lld ms > threshold %lld ms; policy skip%s",
                            late, thr, dst));
    case AX_FIRE_WHY_ONCE_LATEST:
        return put(buf, len,
                   snprintf(buf, len,
                            "misfire: late by %lld ms > threshold %lld ms; policy fire_once "
                            "runs the latest missed time%s",
                            late, thr, dst));
    case AX_FIRE_WHY_ONCE_LATER:
        return put(buf, len,
                   snprintf(buf, len,
                            "misfire: late by %lld ms; policy fire_once ran a later time only%s",
                            late, dst));
    case AX_FIRE_WHY_CATCH_UP:
        return put(buf, len,
                   snprintf(buf, len, "misfire: late by %lld ms; policy catch_up%s", late, dst));
    case AX_FIRE_WHY_CATCH_UP_MAX:
        return put(buf, len,
                   snprintf(buf, len,
                            "misfire: late by %lld ms; policy catch_up runs at most %d missed "
                            "times%s",
                            late, (int)p->catchup_max, dst));
    }
    return 0;
}

static void iso_utc(int64_t ms, char *buf, size_t len) {
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

size_t ax_fire_older_detail(const ax_fire_window_t *w, int jumped, char *buf, size_t len) {
    size_t have = len ? strnlen(buf, len) : 0;
    if (!w->older || have + 1 >= len)
        return have;
    char a[40], b[40];
    iso_utc(w->older_first, a, sizeof a);
    iso_utc(w->older_last, b, sizeof b);
    int n = snprintf(buf + have, len - have,
                     "%salso %s%lld earlier fire times from %s through %s skipped "
                     "(misfire), not recorded one by one",
                     have ? "; " : "", jumped ? "more than " : "", (long long)w->older, a, b);
    return have + put(buf + have, len - have, n);
}

/* ---- overlap ------------------------------------------------------------------- */

ax_fire_overlap_t ax_fire_overlap(ax_overlap_t o, const ax_fire_busy_t *b) {
    ax_fire_overlap_t d = {AX_OVERLAP_RUNS, AX_FIRE_FIRED, 0, 0};
    if (o == AX_OVERLAP_ALLOW || (!b->unfinished && !b->earlier))
        return d;
    if (o == AX_OVERLAP_SKIP || (o == AX_OVERLAP_QUEUE && (b->earlier || b->queued))) {
        d.action = AX_OVERLAP_SKIPS;
        d.decision = AX_FIRE_SKIPPED_OVERLAP;
    } else if (o == AX_OVERLAP_QUEUE) {
        d.action = AX_OVERLAP_QUEUES;
        d.decision = AX_FIRE_QUEUED;
        d.wait_for = b->last_id;
    } else { /* cancel */
        d.action = AX_OVERLAP_CANCELS;
        d.cancel_unfinished = b->unfinished;
    }
    return d;
}

size_t ax_fire_overlap_detail(ax_overlap_t o, const ax_fire_overlap_t *d, const char *what,
                              const char *prev, char *buf, size_t len) {
    int has = prev && *prev;
    const char *sep = has ? "; " : "", *rest = has ? prev : "";
    if (!what)
        what = "an earlier fire of this batch";
    int n = 0;
    if (len)
        buf[0] = 0;
    switch (d->action) {
    case AX_OVERLAP_RUNS:
        return 0;
    case AX_OVERLAP_SKIPS:
        n = snprintf(buf, len, "overlap=%s: still unfinished: %s%s%s",
                     o == AX_OVERLAP_SKIP ? "skip" : "queue (one already queued)", what, sep, rest);
        break;
    case AX_OVERLAP_QUEUES:
        n = snprintf(buf, len, "overlap=queue: runs after instance %lld finished%s%s",
                     (long long)d->wait_for, sep, rest);
        break;
    case AX_OVERLAP_CANCELS:
        n = snprintf(buf, len, "overlap=cancel: cancelling %s%s%s", what, sep, rest);
        break;
    }
    return n < 0 ? 0 : (size_t)n;
}
