/*
 * ax/fire.h — the fire decision: what happens to a job's nominal fire times
 * once they are due (docs/SCHEDULES.md: misfire and overlap).
 *
 * Pure: the job's policy, the due times, `now` and what is still running
 * come in as values; decisions come out. No clock is read, nothing is
 * stored; ax-trigger records the decisions in the fire ledger and carries
 * them out. The policy names are the job table's (misfire_policy,
 * overlap_policy, dst_gap, dst_overlap) and the ledger's ax_fire_decision
 * enum: one table each, here, for the trigger and axctl.
 */
#ifndef AX_FIRE_H
#define AX_FIRE_H

#include <stddef.h>
#include <stdint.h>

#include "ax/cron.h"

/* ---- policy names ------------------------------------------------------------ */

typedef enum { AX_MISFIRE_FIRE_ONCE, AX_MISFIRE_SKIP, AX_MISFIRE_CATCH_UP } ax_misfire_t;
typedef enum {
    AX_OVERLAP_ALLOW,
    AX_OVERLAP_SKIP,
    AX_OVERLAP_QUEUE,
    AX_OVERLAP_CANCEL,
} ax_overlap_t;

/* The ledger's decision (the PostgreSQL enum ax_fire_decision). */
typedef enum {
    AX_FIRE_FIRED,
    AX_FIRE_QUEUED,
    AX_FIRE_SKIPPED_MISFIRE,
    AX_FIRE_SKIPPED_OVERLAP,
    AX_FIRE_SKIPPED_CIRCUIT,
    AX_FIRE_DEFERRED,
} ax_fire_decision_t;

/* NULL-terminated name tables, indexed by the enum value ("fire_once",
 * "skip", "catch_up"; "allow", "skip", "queue", "cancel"; dst_gap "shift",
 * "skip" = AX_DST_GAP_SHIFT, AX_DST_GAP_SKIP; dst_overlap "once", "twice";
 * the decisions). For option checks that list what is allowed. */
extern const char *const ax_misfire_names[];
extern const char *const ax_overlap_names[];
extern const char *const ax_dst_gap_names[];
extern const char *const ax_dst_overlap_names[];
extern const char *const ax_fire_decision_names[];

/* Parse a name: its enum value, or -1 if it is not one. */
int ax_misfire_parse(const char *s);
int ax_overlap_parse(const char *s);
int ax_fire_decision_parse(const char *s);
/* dst_gap / dst_overlap: the ax_dst_policy_t bit (AX_DST_GAP_SKIP,
 * AX_DST_OVERLAP_TWICE) or 0 for the default name, -1 if not a name. */
int ax_dst_gap_parse(const char *s);
int ax_dst_overlap_parse(const char *s);
/* The name of a value ("?" if out of range). */
const char *ax_misfire_name(ax_misfire_t m);
const char *ax_overlap_name(ax_overlap_t o);
const char *ax_fire_decision_name(ax_fire_decision_t d);
const char *ax_dst_gap_name(ax_dst_policy_t dst);     /* of the gap bit */
const char *ax_dst_overlap_name(ax_dst_policy_t dst); /* of the overlap bit */

/* ---- the due times of one wheel expiry ------------------------------------------ */

/* Why a due time got its decision (ax_fire_verdict_t.why). */
typedef enum {
    AX_FIRE_WHY_ON_TIME,       /* fired: within the threshold */
    AX_FIRE_WHY_SKIP,          /* skipped: policy skip */
    AX_FIRE_WHY_ONCE_LATEST,   /* fired: fire_once runs the latest missed time */
    AX_FIRE_WHY_ONCE_LATER,    /* skipped: fire_once ran a later time (or one is on time) */
    AX_FIRE_WHY_CATCH_UP,      /* fired: catch_up */
    AX_FIRE_WHY_CATCH_UP_MAX,  /* skipped: catch_up ran catchup_max newer ones */
} ax_fire_why_t;


typedef struct ax_fire_verdict {
    ax_fire_decision_t decision; /* AX_FIRE_FIRED or AX_FIRE_SKIPPED_MISFIRE */
    int why;                     /* ax_fire_why_t */
    int64_t late_ms;             /* now - nominal */
} ax_fire_verdict_t;

typedef struct ax_fire_due {
    int64_t nominal_ms;
    int flags;                 /* AX_CRON_SHIFTED / AX_CRON_REPEATED */
    ax_fire_verdict_t verdict; /* set by ax_fire_misfire */
} ax_fire_due_t;

/* The newest `keep` due times of a walk, oldest first; older ones are only
 * counted (a 1-second cron after a day's outage is not kept one by one). */
typedef struct ax_fire_window {
    size_t keep;
    ax_fire_due_t *v;                  /* ring of cap; &one until it grows */
    size_t cap, n, head;
    ax_fire_due_t one;
    int64_t older;                     /* dropped from the ring */
    int64_t older_first, older_last;   /* their nominal times */
} ax_fire_window_t;

void ax_fire_window_init(ax_fire_window_t *w, size_t keep); /* keep >= 1 */
/* Add the next due time (times come in ascending order). AX_ERR_NOMEM if the
 * ring could not grow: nothing was added. */
int ax_fire_window_push(ax_fire_window_t *w, int64_t nominal_ms, int flags);
/* Make the ring contiguous: w->v[0..n) oldest first. */
void ax_fire_window_linear(ax_fire_window_t *w);
void ax_fire_window_clear(ax_fire_window_t *w);

/* ---- misfire ------------------------------------------------------------------- */

typedef struct ax_fire_policy {
    ax_misfire_t misfire;
    ax_overlap_t overlap;
    int64_t threshold_ms; /* later than this is a misfire */
    int32_t catchup_max;  /* catch_up: at most this many missed times run */
} ax_fire_policy_t;

/* Decide the n due times due[0..n) (oldest first, all <= now) by the misfire
 * policy, into due[i].verdict. A time at most threshold_ms late fires. Of
 * the later ones, skip skips all; fire_once fires only the newest, and none
 * if any time is on time; catch_up fires the newest catchup_max. */
void ax_fire_misfire(const ax_fire_policy_t *p, ax_fire_due_t *due, size_t n, int64_t now);

/* The ledger's detail text of a decided due time (with its DST note) into
 * buf; returns its length, 0 when there is nothing to say (on time, at most
 * a second late, no DST note). */
size_t ax_fire_detail(const ax_fire_policy_t *p, const ax_fire_due_t *d, char *buf, size_t len);
/* Append to buf (holding the oldest kept time's detail, maybe "") the note
 * on the w->older times not recorded one by one; `jumped`: the walk
 * skipped ahead, so there were more. Returns the new length. */
size_t ax_fire_older_detail(const ax_fire_window_t *w, int jumped, char *buf, size_t len);

/* ---- overlap ------------------------------------------------------------------- */

/* What runs of the job when one of its times fires. */
typedef struct ax_fire_busy {
    int unfinished;  /* an instance not FINISHED (a flow job: a running flow run) */
    int64_t last_id; /* the newest of those */
    int queued;      /* one of those already waits (overlap=queue) */
    int earlier;     /* an earlier fire of the same batch fired or queued */
} ax_fire_busy_t;

typedef enum {
    AX_OVERLAP_RUNS,     /* nothing overlaps, or allow: the fire stands */
    AX_OVERLAP_SKIPS,    /* skip (queue with one queued): skipped_overlap */
    AX_OVERLAP_QUEUES,   /* queue: queued behind last_id */
    AX_OVERLAP_CANCELS,  /* cancel: fires; the unfinished ones are cancelled */
} ax_fire_overlap_action_t;

typedef struct ax_fire_overlap {
    ax_fire_overlap_action_t action;
    ax_fire_decision_t decision; /* FIRED, SKIPPED_OVERLAP or QUEUED */
    int64_t wait_for;            /* QUEUES: the instance it waits for */
    int cancel_unfinished;       /* CANCELS with unfinished instances to cancel */
} ax_fire_overlap_t;

/* Decide a fired time of a job with overlap policy o. */
ax_fire_overlap_t ax_fire_overlap(ax_overlap_t o, const ax_fire_busy_t *b);

/* The detail of an overlap decision other than RUNS, `what` naming what is
 * unfinished (NULL: an earlier fire of this batch), followed by "; prev"
 * when prev is non-empty. Returns the length of the whole text, as
 * snprintf does (>= len: truncated). */
size_t ax_fire_overlap_detail(ax_overlap_t o, const ax_fire_overlap_t *d, const char *what,
                              const char *prev, char *buf, size_t len);

#endif
