/*
 * lane.c — priority lanes (ax/lane.h): topic names, hysteresis, the
 * trigger's release plan, effective priority, the executor's preference.
 */
#include "ax/lane.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ax_lane_of_topic(const char *base, const char *name) {
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0)
        return -1;
    const char *rest = name + n;
    if (*rest != '\0' && *rest != '.')
        return -1;
    size_t rl = strlen(rest);
    if (rl >= 3 && rest[rl - 3] == '.' && rest[rl - 2] == 'p' && rest[rl - 1] >= '0' &&
        rest[rl - 1] < '0' + AX_PRIORITIES)
        return rest[rl - 1] - '0';
    return AX_PRIORITY_DEFAULT;
}

char *ax_lane_topic(const char *base, int prio, char *buf, size_t len) {
    if (prio < 0 || prio >= AX_PRIORITIES)
        prio = AX_PRIORITY_DEFAULT;
    if (prio == AX_PRIORITY_DEFAULT)
        snprintf(buf, len, "%s", base);
    else
        snprintf(buf, len, "%s.p%d", base, prio);
    return buf;
}

int ax_lane_sample(ax_lane_t *l, int64_t lag, int64_t high, int64_t low, int64_t now_ms) {
    if (lag < 0)
        lag = 0;
    l->lag = lag;
    int over = l->over;
    if (!over && lag >= high)
        over = 1;
    else if (over && lag <= low)
        over = 0;
    if (over == l->over)
        return 0;
    l->over = over;
    l->changed_ms = now_ms;
    l->flips++;
    return 1;
}

void ax_lane_plan(const ax_lane_t lanes[AX_PRIORITIES], int64_t aging_ms,
                  int64_t min_age_ms[AX_PRIORITIES], int target[AX_PRIORITIES]) {
    min_age_ms[0] = 0;
    target[0] = 0;
    for (int p = 1; p < AX_PRIORITIES; p++) {
        target[p] = p;
        if (!lanes[p].over) {
            min_age_ms[p] = 0;
            continue;
        }
        /* aging rises at most to P1: P0 stays for work submitted as P0 */
        int q = p;
        while (q >= 1 && lanes[q].over)
            q--;
        if (q < 1 || aging_ms <= 0) {
            min_age_ms[p] = INT64_MAX; /* held until a lane at P1 or below flows */
            continue;
        }
        min_age_ms[p] = (int64_t)(p - q) * aging_ms;
        target[p] = q;
    }
}

int64_t ax_lane_effective(int prio, int64_t waited_ms, int64_t aging_ms) {
    int64_t e = (int64_t)prio * 1000;
    if (aging_ms > 0 && waited_ms > 0)
        e -= waited_ms / aging_ms * 1000 + waited_ms % aging_ms * 1000 / aging_ms;
    return e;
}

static int cand_cmp(const void *a, const void *b, void *arg) {
    const ax_lane_cand_t *x = a, *y = b;
    int64_t aging = *(const int64_t *)arg;
    int64_t ex = ax_lane_effective(x->prio, x->waited_ms, aging);
    int64_t ey = ax_lane_effective(y->prio, y->waited_ms, aging);
    if (ex != ey)
        return ex < ey ? -1 : 1;
    if (x->waited_ms != y->waited_ms)
        return x->waited_ms > y->waited_ms ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

size_t ax_lane_pick(ax_lane_cand_t *c, size_t n, int64_t aging_ms,
                    const int64_t room[AX_PRIORITIES], size_t limit) {
    if (n == 0)
        return 0;
    qsort_r(c, n, sizeof *c, cand_cmp, &aging_ms);
    int64_t used[AX_PRIORITIES] = {0};
    size_t kept = 0;
    for (size_t i = 0; i < n && kept < limit; i++) {
        int lane = c[i].lane >= 0 && c[i].lane < AX_PRIORITIES ? c[i].lane : AX_PRIORITY_DEFAULT;
        if (room && used[lane] >= room[lane])
            continue;
        used[lane]++;
        c[kept++] = c[i];
    }
    return kept;
}

unsigned ax_lane_serve(const int64_t backlog[AX_PRIORITIES],
                       const int64_t last_served_ms[AX_PRIORITIES], int64_t now_ms,
                       int64_t starve_ms) {
    int top = -1;
    for (int p = 0; p < AX_PRIORITIES; p++)
        if (backlog[p] > 0) {
            top = p;
            break;
        }
    unsigned all = (1u << AX_PRIORITIES) - 1;
    if (top < 0)
        return all;
    unsigned mask = (1u << (top + 1)) - 1; /* lanes 0..top */
    for (int p = top + 1; p < AX_PRIORITIES; p++)
        if (now_ms - last_served_ms[p] >= starve_ms)
            mask |= 1u << p;
    return mask;
}
