/*
 * test_lane.c — priority lanes (core/lane.c), time as a parameter: lane
 * topic names; hysteresis without flapping (a lag oscillating between the
 * marks changes nothing, crossing them changes once); the release plan
 * (P0 never deferred, deferral per lane, aging promotes to the nearest lane
 * that is not over but never onto P0, the wait bound (p - 1) x aging); the
 * effective-priority order
 * of deferred instances (a model sort against ax_lane_effective); the due
 * scan's pick (ax_lane_pick: release order, room per lane, the batch
 * limit, checked against the formula the due statement used before and
 * against a brute-force model); the executor's preference (higher lanes first, lower lanes paused at most
 * starve_ms, everything served without backlog).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/lane.h"

static void topics(void **state) {
    (void)state;
    char b[128];
    assert_string_equal(ax_lane_topic("ax.dispatch", 2, b, sizeof b), "ax.dispatch");
    assert_string_equal(ax_lane_topic("ax.dispatch", 0, b, sizeof b), "ax.dispatch.p0");
    assert_string_equal(ax_lane_topic("ax.dispatch.orders", 4, b, sizeof b),
                        "ax.dispatch.orders.p4");
    /* out of range falls back to the default lane */
    assert_string_equal(ax_lane_topic("x", 9, b, sizeof b), "x");
    assert_string_equal(ax_lane_topic("x", -1, b, sizeof b), "x");
    /* and back: every lane's topic reads as its lane */
    for (int p = 0; p < AX_PRIORITIES; p++) {
        assert_int_equal(ax_lane_of_topic("ax.dispatch", ax_lane_topic("ax.dispatch", p, b, sizeof b)), p);
        assert_int_equal(
            ax_lane_of_topic("ax.dispatch", ax_lane_topic("ax.dispatch.orders", p, b, sizeof b)), p);
    }
    assert_int_equal(ax_lane_of_topic("ax.dispatch", "ax.dispatch.orders"), AX_PRIORITY_DEFAULT);
    assert_int_equal(ax_lane_of_topic("ax.dispatch", "ax.dispatch.p9"), AX_PRIORITY_DEFAULT);
    assert_int_equal(ax_lane_of_topic("ax.dispatch", "ax.dispatchx"), -1);
    assert_int_equal(ax_lane_of_topic("ax.dispatch", "ax.results"), -1);
}

static void hysteresis(void **state) {
    (void)state;
    ax_lane_t l = {0};
    int64_t t = 1000;
    /* below high: never over */
    for (int i = 0; i < 10; i++)
        assert_int_equal(ax_lane_sample(&l, 999, 1000, 100, t += 500), 0);
    assert_int_equal(l.over, 0);
    /* crossing high: over once */
    assert_int_equal(ax_lane_sample(&l, 1000, 1000, 100, t += 500), 1);
    assert_int_equal(l.over, 1);
    assert_int_equal(l.changed_ms, t);
    /* oscillating between the marks: no flapping */
    for (int i = 0; i < 100; i++)
        assert_int_equal(ax_lane_sample(&l, i % 2 ? 101 : 5000, 1000, 100, t += 500), 0);
    assert_int_equal(l.over, 1);
    assert_int_equal(l.flips, 1);
    /* down to low: released */
    assert_int_equal(ax_lane_sample(&l, 100, 1000, 100, t += 500), 1);
    assert_int_equal(l.over, 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(ax_lane_sample(&l, 101 + i * 8, 1000, 100, t += 500), 0);
    assert_int_equal(l.flips, 2);
    assert_int_equal(l.lag, 101 + 99 * 8);
    /* negative samples count as zero */
    ax_lane_sample(&l, -5, 1000, 100, t);
    assert_int_equal(l.lag, 0);
}

static void plan(void **state) {
    (void)state;
    ax_lane_t lanes[AX_PRIORITIES] = {0};
    int64_t age[AX_PRIORITIES];
    int target[AX_PRIORITIES];
    ax_lane_plan(lanes, 60000, age, target);
    for (int p = 0; p < AX_PRIORITIES; p++) {
        assert_int_equal(age[p], 0);
        assert_int_equal(target[p], p);
    }
    /* P3 over: P3 waits one aging period and is released on P2 */
    lanes[3].over = 1;
    ax_lane_plan(lanes, 60000, age, target);
    assert_int_equal(age[3], 60000);
    assert_int_equal(target[3], 2);
    assert_int_equal(age[4], 0); /* P4 itself is not over */
    /* P4, P3, P2 over: P4 waits 3 periods (to P1), P3 two, P2 one */
    lanes[2].over = lanes[4].over = 1;
    ax_lane_plan(lanes, 60000, age, target);
    assert_int_equal(age[4], 180000);
    assert_int_equal(target[4], 1);
    assert_int_equal(age[3], 120000);
    assert_int_equal(age[2], 60000);
    assert_int_equal(age[1], 0);
    /* P1..P4 over: aging never reaches P0, everything but P0 is held */
    lanes[1].over = 1;
    ax_lane_plan(lanes, 60000, age, target);
    assert_int_equal(age[0], 0);
    assert_int_equal(target[0], 0);
    for (int p = 1; p < AX_PRIORITIES; p++) {
        assert_true(age[p] == INT64_MAX);
        assert_int_equal(target[p], p);
    }
    /* P0 over (it never defers): nothing changes for P0 */
    for (int p = 0; p < AX_PRIORITIES; p++)
        lanes[p].over = 1;
    ax_lane_plan(lanes, 60000, age, target);
    assert_int_equal(age[0], 0);
    /* only P4 over: released on P3 after one period */
    memset(lanes, 0, sizeof lanes);
    lanes[4].over = 1;
    ax_lane_plan(lanes, 60000, age, target);
    assert_int_equal(age[4], 60000);
    assert_int_equal(target[4], 3);
    lanes[1].over = lanes[2].over = lanes[3].over = 1;
    /* no aging: deferred until the lane itself is back */
    ax_lane_plan(lanes, 0, age, target);
    assert_int_equal(age[0], 0);
    assert_true(age[3] == INT64_MAX);
    assert_int_equal(target[3], 3);
}

/* Deferred instances: (prio, due_ms); released in effective order. */
typedef struct {
    int prio;
    int64_t due;
} inst_t;
static int64_t g_now, g_aging;
static int cmp_eff(const void *a, const void *b) {
    const inst_t *x = a, *y = b;
    int64_t ex = ax_lane_effective(x->prio, g_now - x->due, g_aging);
    int64_t ey = ax_lane_effective(y->prio, g_now - y->due, g_aging);
    return ex < ey ? -1 : ex > ey;
}

static void aging_order(void **state) {
    (void)state;
    assert_int_equal(ax_lane_effective(3, 0, 60000), 3000);
    assert_int_equal(ax_lane_effective(3, 30000, 60000), 2500);
    assert_int_equal(ax_lane_effective(3, 180000, 60000), 0);
    assert_int_equal(ax_lane_effective(4, 300000, 60000), -1000);
    assert_int_equal(ax_lane_effective(4, 300000, 0), 4000);
    /* a P4 that waited 2.5 periods goes before a fresh P2 and after a fresh P1 */
    g_now = 1000000;
    g_aging = 60000;
    inst_t v[] = {{2, g_now}, {4, g_now - 150000}, {1, g_now}, {0, g_now}, {3, g_now - 1}};
    qsort(v, 5, sizeof v[0], cmp_eff);
    assert_int_equal(v[0].prio, 0);
    assert_int_equal(v[1].prio, 1);
    assert_int_equal(v[2].prio, 4);
    assert_int_equal(v[3].prio, 2);
    assert_int_equal(v[4].prio, 3);
    /* monotone: waiting longer never lowers the priority */
    for (int p = 0; p < AX_PRIORITIES; p++)
        for (int64_t w = 0; w < 600000; w += 777)
            assert_true(ax_lane_effective(p, w + 777, 60000) <= ax_lane_effective(p, w, 60000));
}

/* The due scan's pick: release order by effective priority, older first
 * on a tie, then the room of each lane and the batch limit. */
static void pick_basic(void **state) {
    (void)state;
    int64_t room[AX_PRIORITIES] = {100, 100, 100, 100, 100};
    /* a P4 that waited 2.5 aging periods goes before a fresh P2, after P1 */
    ax_lane_cand_t c[] = {
        {.id = 1, .waited_ms = 0, .prio = 2, .lane = 2},
        {.id = 2, .waited_ms = 150000, .prio = 4, .lane = 4},
        {.id = 3, .waited_ms = 0, .prio = 1, .lane = 1},
        {.id = 4, .waited_ms = 10, .prio = 0, .lane = 0},
        {.id = 5, .waited_ms = 20, .prio = 2, .lane = 2},
    };
    assert_int_equal(ax_lane_pick(c, 5, 60000, room, 10), 5);
    int64_t want[] = {4, 3, 2, 5, 1}; /* equal priority: the older (5) first */
    for (int i = 0; i < 5; i++)
        assert_int_equal(c[i].id, want[i]);
    /* room: lane 2 takes one; the batch limit: three in all */
    ax_lane_cand_t d[] = {
        {.id = 1, .waited_ms = 5, .prio = 2, .lane = 2},
        {.id = 2, .waited_ms = 9, .prio = 2, .lane = 2},
        {.id = 3, .waited_ms = 1, .prio = 3, .lane = 3},
        {.id = 4, .waited_ms = 1, .prio = 4, .lane = 4},
        {.id = 5, .waited_ms = 1, .prio = 4, .lane = 4},
    };
    room[2] = 1;
    assert_int_equal(ax_lane_pick(d, 5, 60000, room, 3), 3);
    assert_int_equal(d[0].id, 2);
    assert_int_equal(d[1].id, 3);
    assert_int_equal(d[2].id, 4);
    /* a lane without room takes nothing; no room array: no limit per lane */
    room[2] = 0;
    ax_lane_cand_t e[] = {{.id = 7, .waited_ms = 1, .prio = 2, .lane = 2}};
    assert_int_equal(ax_lane_pick(e, 1, 60000, room, 3), 0);
    assert_int_equal(ax_lane_pick(e, 1, 60000, NULL, 3), 1);
    /* deferred work is counted on the lane it goes out on, not its priority */
    room[1] = 1;
    ax_lane_cand_t f[] = {
        {.id = 1, .waited_ms = 200000, .prio = 3, .lane = 1},
        {.id = 2, .waited_ms = 0, .prio = 1, .lane = 1},
    };
    assert_int_equal(ax_lane_pick(f, 2, 60000, room, 10), 1);
    assert_int_equal(f[0].id, 1);
    /* without aging: priority decides, the older first within one */
    ax_lane_cand_t g[] = {
        {.id = 1, .waited_ms = 900000, .prio = 3, .lane = 3},
        {.id = 2, .waited_ms = 5, .prio = 2, .lane = 2},
        {.id = 3, .waited_ms = 50, .prio = 2, .lane = 2},
    };
    room[2] = 100;
    assert_int_equal(ax_lane_pick(g, 3, 0, room, 10), 3);
    assert_int_equal(g[0].id, 3);
    assert_int_equal(g[1].id, 2);
    assert_int_equal(g[2].id, 1);
    assert_int_equal(ax_lane_pick(NULL, 0, 60000, room, 10), 0);
}

/* The formula the due statement ordered by before the pick moved to C:
 * priority * aging - waited (ms), lower first. */
static double sql_eff(const ax_lane_cand_t *c, int64_t aging) {
    return (double)c->prio * (double)aging - (double)c->waited_ms;
}

/* Random batches: the pick is in the old statement's order, keeps the room
 * of every lane and the limit, and is greedy (nothing left out that a
 * lane with room would have taken before something picked after it). */
static void pick_model(void **state) {
    (void)state;
    srand(12);
    const int64_t aging = 60000;
    for (int round = 0; round < 2000; round++) {
        ax_lane_cand_t c[40], orig[40];
        size_t n = (size_t)(rand() % 40);
        for (size_t i = 0; i < n; i++) {
            int prio = rand() % AX_PRIORITIES;
            /* whole thousandths of aging: the pick's resolution */
            c[i] = (ax_lane_cand_t){.id = (int64_t)i + 1,
                                    .waited_ms = (int64_t)(rand() % 5000) * (aging / 1000),
                                    .prio = prio, .lane = rand() % 2 ? prio : (prio + 1) / 2};
        }
        memcpy(orig, c, n * sizeof *c);
        int64_t room[AX_PRIORITIES];
        for (int l = 0; l < AX_PRIORITIES; l++)
            room[l] = rand() % 8;
        size_t limit = (size_t)(rand() % 20);
        size_t k = ax_lane_pick(c, n, aging, room, limit);
        assert_true(k <= limit && k <= n);
        int64_t used[AX_PRIORITIES] = {0};
        int picked[41] = {0};
        for (size_t i = 0; i < k; i++) {
            used[c[i].lane]++;
            picked[c[i].id] = 1;
            if (i)
                assert_true(sql_eff(&c[i - 1], aging) <= sql_eff(&c[i], aging));
        }
        for (int l = 0; l < AX_PRIORITIES; l++)
            assert_true(used[l] <= room[l]);
        /* greedy: one left out either had no room on its lane, or came
         * after the limit was reached, or after every one picked there */
        for (size_t i = 0; i < n; i++) {
            if (picked[orig[i].id])
                continue;
            int lane_full = used[orig[i].lane] >= room[orig[i].lane];
            int after_all = k == limit && (k == 0 || sql_eff(&orig[i], aging) >=
                                                         sql_eff(&c[k - 1], aging));
            assert_true(lane_full || after_all);
        }
    }
}

static void serve(void **state) {
    (void)state;
    int64_t backlog[AX_PRIORITIES] = {0}, last[AX_PRIORITIES] = {0};
    int64_t now = 10000;
    for (int p = 0; p < AX_PRIORITIES; p++)
        last[p] = now;
    /* nothing waiting: serve all */
    assert_int_equal(ax_lane_serve(backlog, last, now, 1000), 0x1f);
    /* P3 backlog only: P0..P3 served, P4 paused */
    backlog[3] = 500;
    assert_int_equal(ax_lane_serve(backlog, last, now + 10, 1000), 0x0f);
    /* P0 backlog: only P0 */
    backlog[0] = 1;
    assert_int_equal(ax_lane_serve(backlog, last, now + 10, 1000), 0x01);
    /* simulate rounds of 100 ms: every paused lane is served within starve_ms */
    int64_t longest[AX_PRIORITIES] = {0}, paused_since[AX_PRIORITIES];
    for (int p = 0; p < AX_PRIORITIES; p++)
        paused_since[p] = -1;
    for (int64_t t = now; t < now + 20000; t += 100) {
        unsigned m = ax_lane_serve(backlog, last, t, 1000);
        assert_true(m & 1u); /* P0 always served while it has a backlog */
        for (int p = 0; p < AX_PRIORITIES; p++) {
            if (m & (1u << p)) {
                if (paused_since[p] >= 0 && t - paused_since[p] > longest[p])
                    longest[p] = t - paused_since[p];
                paused_since[p] = -1;
                last[p] = t;
            } else if (paused_since[p] < 0) {
                paused_since[p] = t;
            }
        }
    }
    for (int p = 1; p < AX_PRIORITIES; p++) {
        assert_true(longest[p] > 0);
        assert_true(longest[p] <= 1000);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(topics), cmocka_unit_test(hysteresis), cmocka_unit_test(plan),
        cmocka_unit_test(aging_order), cmocka_unit_test(pick_basic),
        cmocka_unit_test(pick_model), cmocka_unit_test(serve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
