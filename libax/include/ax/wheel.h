/*
 * ax/wheel.h — hierarchical timing wheel for millions of armed timers
 * (the trigger's schedule of due instances). Pure data structure: no I/O,
 * no clock reads, no allocation; time is always a parameter, in ms. The
 * caller owns the clock and arms ONE OS timer for ax_wheel_next_deadline().
 *
 * Layout: 6 levels x 64 slots. Level L slot s holds entries whose deadline
 * agrees with the wheel time in every bit above 6*(L+1) and whose bits
 * 6L..6L+5 are s, so the wheel reaches 2^36 ms (~2.2 years) ahead; anything
 * further waits in an unsorted overflow list that is redistributed when
 * the wheel time crosses a 2^36 ms boundary. Level 0 has a second 64-slot
 * half for the next 64 ms window, which run() fills from level 1 a little
 * at a time (stage_budget) so the cascade does not land all at once on
 * the timers due at the window start. Entries are intrusive (embed
 * ax_wheel_entry_t in your struct, recover it with AX_WHEEL_CONTAINER) and
 * sit on doubly-linked slot lists, so link and unlink are O(1). A 64-bit
 * occupancy mask per level lets run() and next_deadline() skip empty slots,
 * so a forward jump of hours costs O(non-empty slots), not O(ms).
 *
 * Ordering guarantee of ax_wheel_run(w, now): it fires every entry linked
 * before the call whose deadline is <= max(now, previous now), in
 * non-decreasing deadline order; entries with equal deadlines fire in the
 * order of their most recent ax_wheel_link(). Entries linked or re-linked
 * from inside a callback never fire in the same run, even when due (they
 * fire on the next run, and next_deadline() then returns <= now), so a
 * callback re-arming itself for "now" cannot loop. An entry unlinked by an
 * earlier callback of the same run does not fire.
 *
 * Time going backwards: run() treats now < previous now as no time
 * passing. For a wall-clock jump call ax_wheel_rebuild(), which re-places
 * every entry relative to the new time (backwards or forwards).
 *
 * Not thread-safe; callbacks must not call ax_wheel_run/rebuild on the
 * same wheel. Size: ax_wheel_entry_t is 32 bytes on x86-64.
 */
#ifndef AX_WHEEL_H
#define AX_WHEEL_H

#include <stddef.h>
#include <stdint.h>

#define AX_WHEEL_BITS 6
#define AX_WHEEL_SLOTS (1u << AX_WHEEL_BITS)  /* slots per level */
#define AX_WHEEL_LEVELS 6                     /* 6*6 = 36 bits of reach */

typedef struct ax_wheel ax_wheel_t;
typedef struct ax_wheel_entry ax_wheel_entry_t;

/* Called once when the entry fires; the entry is already unlinked, so it
 * may be re-linked (or freed) from here. now_ms is the run's time. */
typedef void (*ax_wheel_cb)(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now_ms);

/* List links; also the sentinel of every slot list. next == NULL means
 * "not linked". */
typedef struct ax_wheel_node {
    struct ax_wheel_node *next, *prev;
} ax_wheel_node_t;

struct ax_wheel_entry {
    ax_wheel_node_t node;   /* must stay first: node* <-> entry* casts */
    uint64_t at;            /* deadline, ms (same clock as now_ms) */
    ax_wheel_cb cb;
};

struct ax_wheel {
    uint64_t now;                                  /* wheel time */
    uint64_t occupied0[2];                         /* may-be-non-empty bits */
    uint64_t occupied[AX_WHEEL_LEVELS - 1];        /* ... of levels 1.. */
    ax_wheel_node_t l0[2 * AX_WHEEL_SLOTS];        /* level 0: 2 windows */
    ax_wheel_node_t slots[AX_WHEEL_LEVELS - 1][AX_WHEEL_SLOTS];  /* 1.. */
    ax_wheel_node_t overflow;                      /* >= 2^36 ms ahead */
    ax_wheel_node_t *firing;                       /* run()'s pending list */
    int due_unsorted;     /* an entry was linked in the past: sort due slot */
    /* Entries per elapsed ms (max 64 ms) that run() moves from the next
     * 64 ms window's level-1 slot into level 0 ahead of time, so that the
     * window start does not pay for the whole cascade at once. Default
     * 1024; 0 disables (then the cascade happens at the window start). */
    size_t stage_budget;
};

#define AX_WHEEL_CONTAINER(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Start an empty wheel whose time is now_ms. */
void ax_wheel_init(ax_wheel_t *w, uint64_t now_ms);

/* Prepare an entry (unlinked) with its callback. */
void ax_wheel_entry_init(ax_wheel_entry_t *e, ax_wheel_cb cb);

/* Arm e for at_ms; re-arms if already linked (to this wheel). A deadline
 * <= the wheel time fires on the next run. O(1). */
void ax_wheel_link(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t at_ms);

/* Disarm e; a no-op if it is not linked. O(1). Safe from any callback. */
void ax_wheel_unlink(ax_wheel_entry_t *e);

static inline int ax_wheel_is_linked(const ax_wheel_entry_t *e) {
    return e->node.next != NULL;
}

/* Deadline of e (meaningful once linked). */
static inline uint64_t ax_wheel_entry_at(const ax_wheel_entry_t *e) { return e->at; }

/* When to call ax_wheel_run next: UINT64_MAX when the wheel is empty;
 * otherwise a SAFE EARLIER BOUND d <= the earliest deadline, never below
 * the wheel time:
 *  - if some entry is already due (linked for <= the wheel time), d is the
 *    wheel time, i.e. <= any now the caller can pass: run immediately;
 *  - if the earliest entry is within the current 64 ms level-0 window
 *    (same deadline >> 6 as the wheel time), d is exactly its deadline;
 *    likewise in the next window once its level-1 slot is fully staged;
 *  - otherwise d is the start of the slot (or overflow block) holding it,
 *    and d > wheel time. Running at d may fire nothing, but it cascades
 *    that slot one level down or more, so after at most AX_WHEEL_LEVELS
 *    such early wake-ups (+1 per 2^36 ms overflow block) d is exact.
 * O(levels x 64) worst case, usually a few instructions. */
uint64_t ax_wheel_next_deadline(const ax_wheel_t *w);

/* Fire (unlink, then call cb of) every entry due at now_ms, in the order
 * described at the top. now_ms < wheel time counts as no time passing.
 * Returns the number of callbacks called. Cost: O(fired + non-empty slots
 * crossed + cascaded entries), independent of how far now jumps. */
size_t ax_wheel_run(ax_wheel_t *w, uint64_t now_ms);

/* Number of linked entries. O(n): walks every list; for tests/metrics. */
size_t ax_wheel_count(const ax_wheel_t *w);

/* Set the wheel time to now_ms (earlier or later) and re-place every entry
 * relative to it, firing nothing: entries whose deadline is <= now_ms fire
 * on the next run. Use after a wall-clock jump; O(n). Forward jumps need no
 * rebuild (run handles them), but a backward jump does: without it, run()
 * keeps the old time and fires nothing until the clock catches up, while
 * entries linked meanwhile for times below the old wheel time fire at once.
 * Must not be called from a callback. */
void ax_wheel_rebuild(ax_wheel_t *w, uint64_t now_ms);

#endif
