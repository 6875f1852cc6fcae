/*
 * sched_int.h — what the schedule files of ax-trigger share (not the rest
 * of the trigger). Calls go one way:
 *   sched_wheel.c  the wheel timer, NOTIFY reloads, fixed-delay waits,
 *                  leadership changes            -> sched.c, sched_jobs.c
 *   sched.c        flushing decisions: circuit, overlap, lane deferral,
 *                  the ledger, dispatch          -> sched_jobs.c, sched_fire.c
 *   sched_jobs.c   the job table, loading jobs   -> sched_fire.c
 *   sched_fire.c   arming and the fire decision of one expiry (ax/fire.h)
 */
#ifndef AX_TRIGGER_SCHED_INT_H
#define AX_TRIGGER_SCHED_INT_H

#include <stdint.h>

#include "ax/fire.h"
#include "trigger.h"

struct sjob {
    ax_wheel_entry_t e;    /* first: wheel callbacks get this */
    sjob_t *hnext;
    int64_t id;
    int64_t version;
    ax_schedule_t sched;
    ax_fire_policy_t policy;
    int64_t next_ms;       /* armed nominal time */
    int64_t wait_instance; /* fixed_delay: waiting for this instance to finish */
    uint8_t next_flags;
    uint8_t pending_fd;    /* fixed_delay: a fire of this job is in t->fires */
    uint8_t flow;          /* job.flow_id: a fire starts a flow run, no instance */
    uint8_t priority;      /* 0..4: its lane */
    int32_t tolerance_ms;  /* mixed precision: how late a fire may be coalesced */
};

/* The wheel with its trigger: wheel callbacks carry no argument. */
typedef struct sched_wheel {
    ax_wheel_t w; /* first: t->wheel points here */
    trigger_t *t;
} sched_wheel_t;

/* sched_fire.c */
void sched_arm(trigger_t *t, sjob_t *j, int64_t next, int flags);
void sched_on_fire(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now_ms);

/* sched_jobs.c */
sjob_t *sched_job_find(trigger_t *t, int64_t id);
void sched_job_remove(trigger_t *t, int64_t id);
void sched_jobs_clear(trigger_t *t);
/* Load all scheduled jobs (ids == NULL) or the n listed ones; returns the
 * rows read, or <0 (logged). */
int sched_load_jobs(trigger_t *t, const int64_t *ids, size_t n);

/* sched.c */
void sched_flush(trigger_t *t);

#endif
