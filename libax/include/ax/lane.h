/*
 * lane.h — priority lanes: P0 (most urgent) … P4 (reports), default P2.
 *
 * Each priority has its own dispatch topic per executor group, so executors
 * can favour the higher lanes and the leader trigger can measure the lag of
 * each lane (docs/PRIORITIES.md). This header holds the pure decisions,
 * with time as a parameter so they are unit-tested without a clock:
 *
 *   - ax_lane_topic: the topic of a lane;
 *   - ax_lane_sample: the trigger's hysteresis per lane (over at the high
 *     mark, back at the low mark);
 *   - ax_lane_plan: which due instances the trigger may dispatch while
 *     some lanes are over (deferral and aging);
 *   - ax_lane_effective: the release order of deferred instances;
 *   - ax_lane_pick: which of the due scan's candidates go out now;
 *   - ax_lane_serve: which lanes an executor fetches from now.
 */
#ifndef AX_LANE_H
#define AX_LANE_H

#include <stddef.h>
#include <stdint.h>

#define AX_PRIORITIES 5
#define AX_PRIORITY_DEFAULT 2

/* The dispatch topic of priority `prio` (0..4) for a group's base dispatch
 * topic: P2, the default, is the base topic itself (a deployment that never
 * sets a priority uses one topic per group); the others append ".p<N>"
 * (ax.dispatch.p0, ax.dispatch.orders.p3). Returns buf. */
char *ax_lane_topic(const char *base, int prio, char *buf, size_t len);
/* The inverse: the lane of topic `name` if it is `base` (lane
 * AX_PRIORITY_DEFAULT) or any group's lane topic under it ("<base>.p3",
 * "<base>.<group>.p3"; "<base>.<group>" is the default lane); -1 when the
 * name is not under `base`. */
int ax_lane_of_topic(const char *base, const char *name);

/* The trigger's view of one lane. */
typedef struct ax_lane {
    int over;            /* lag reached the high mark and has not yet fallen to the low mark */
    int64_t lag;         /* the last sample, messages */
    int64_t changed_ms;  /* when `over` last changed */
    int64_t flips;       /* how often `over` changed */
} ax_lane_t;

/* Feed one lag sample taken at now_ms. `over` is set when lag >= high and
 * cleared when lag <= low (low < high), so a lag oscillating between the two
 * marks changes nothing. Returns 1 when `over` changed. */
int ax_lane_sample(ax_lane_t *l, int64_t lag, int64_t high, int64_t low, int64_t now_ms);

/* The release plan for the trigger's due scan. For each priority p:
 *   min_age_ms[p]: how long an instance of p must have been due before it
 *                  is dispatched (0: at once; INT64_MAX: held);
 *   target[p]:     the lane it is dispatched on.
 * P0 never waits. A lane that is not over dispatches its own instances at
 * once. While lane p is over, its instances are deferred; one that has
 * waited k x aging_ms counts as priority p - k (aging), and is released on
 * lane q = the nearest lane above it that is not over, once it has waited
 * (p - q) x aging_ms. Aging stops at P1: P0 carries only work submitted as
 * P0, so aged work can never crowd out the most urgent lane; when every
 * lane from P1 to p is over, the instance is held until one of them is
 * back under its low mark (executors serve P1 right after P0). So a
 * deferred P-n instance waits at most (n - 1) x aging_ms while P1 flows.
 * aging_ms <= 0 disables aging (deferral lasts until the lane itself is
 * back under its low mark). */
void ax_lane_plan(const ax_lane_t lanes[AX_PRIORITIES], int64_t aging_ms,
                  int64_t min_age_ms[AX_PRIORITIES], int target[AX_PRIORITIES]);

/* Effective priority in thousandths: prio*1000 - waited_ms*1000/aging_ms
 * (lower runs first; aging_ms <= 0: prio*1000). Deferred instances are
 * released in this order. */
int64_t ax_lane_effective(int prio, int64_t waited_ms, int64_t aging_ms);

/* A candidate of the trigger's due scan: an instance of priority prio due
 * for waited_ms, to go out on lane `lane` (the release plan's target). */
typedef struct ax_lane_cand {
    int64_t id;
    int64_t waited_ms;
    int prio;
    int lane;
} ax_lane_cand_t;

/* Sort c[0..n) into release order (ax_lane_effective; equal effective
 * priority: the one that waited longer, then the lower id) and keep at most
 * room[lane] per lane (room may be NULL: no limit) and `limit` in all: the
 * kept candidates end up in c[0..kept), in release order (what follows is
 * unspecified). Returns kept. */
size_t ax_lane_pick(ax_lane_cand_t *c, size_t n, int64_t aging_ms,
                    const int64_t room[AX_PRIORITIES], size_t limit);

/* An executor's lane preference. backlog[p]: messages of lane p known to be
 * waiting (in the broker past this consumer's position, or fetched and not
 * yet handled). last_served_ms[p]: when lane p was last fetched from (the
 * caller stamps it for every lane in the returned mask). Returns the bit
 * mask of lanes to fetch from now: every lane down to the most urgent lane
 * with a backlog; a lower lane is paused while it waits, but never for
 * longer than starve_ms (then it is served again for a round), so lower
 * lanes slow down under pressure and never stop. With no backlog anywhere
 * every lane is served. */
unsigned ax_lane_serve(const int64_t backlog[AX_PRIORITIES],
                       const int64_t last_served_ms[AX_PRIORITIES], int64_t now_ms,
                       int64_t starve_ms);

#endif
