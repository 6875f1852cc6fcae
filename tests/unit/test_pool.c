/*
 * test_pool.c — worker pool policy (core/pool.c), time as a parameter:
 * lane order (most urgent lane first), arrival order within a lane, the
 * starvation bound (a waiting lower lane is promoted once its head waited
 * starve_ms and the lane started nothing for starve_ms, the longest
 * waiting of several starving lanes first, and never more often than
 * once per starve_ms), push_front keeping the order, remove of an item
 * not queued, and the load / full / drained computations per lane.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/pool.h"

typedef struct item {
    ax_pool_item_t qi;
    int id;
} item_t;

static int pop_id(ax_pool_t *p, int64_t now, int64_t starve) {
    ax_pool_item_t *it = ax_pool_pop(p, now, starve);
    return it ? ((item_t *)(void *)((char *)it - offsetof(item_t, qi)))->id : -1;
}

static void push(ax_pool_t *p, item_t *it, int id, int lane, int64_t now) {
    it->id = id;
    it->qi.lane = lane;
    ax_pool_push(p, &it->qi, now);
}

static void lane_order(void **state) {
    (void)state;
    ax_pool_t p = {.slots = 4, .queue = 10};
    item_t it[6];
    int64_t t = 1000000;
    push(&p, &it[0], 0, 4, t);
    push(&p, &it[1], 1, 2, t);
    push(&p, &it[2], 2, 0, t);
    push(&p, &it[3], 3, 2, t);
    push(&p, &it[4], 4, 0, t);
    push(&p, &it[5], 5, 3, t);
    /* no starvation (starve far away): P0 in arrival order, then P2, P3, P4 */
    int want[] = {2, 4, 1, 3, 5, 0};
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(pop_id(&p, t + 1, 60000), want[i]);
    assert_int_equal(pop_id(&p, t + 1, 60000), -1);
    for (int l = 0; l < AX_PRIORITIES; l++)
        assert_null(p.q[l].head);
}

static void starvation(void **state) {
    (void)state;
    ax_pool_t p = {.slots = 1, .queue = 100};
    item_t low[3], high[50], mid;
    int64_t t = 1000000, starve = 1000;
    push(&p, &low[0], 100, 4, t);
    push(&p, &low[1], 101, 4, t);
    push(&p, &mid, 200, 3, t + 100); /* arrives later than low's head */
    for (int i = 0; i < 50; i++)
        push(&p, &high[i], i, 0, t);
    /* before starve_ms: only P0 */
    assert_int_equal(pop_id(&p, t + 10, starve), 0);
    assert_int_equal(pop_id(&p, t + 999, starve), 1);
    /* low's head waited 1000 ms, the lane never started: promoted (longest
     * waiting of the starving lanes: P4's head, queued before P3's) */
    assert_int_equal(pop_id(&p, t + 1000, starve), 100);
    /* P3 starves too at t+1100 (queued t+100); P4 just started: P3 next */
    assert_int_equal(pop_id(&p, t + 1100, starve), 200);
    /* P4 started at t+1000: not again before t+2000 */
    assert_int_equal(pop_id(&p, t + 1500, starve), 2);
    assert_int_equal(pop_id(&p, t + 1999, starve), 3);
    assert_int_equal(pop_id(&p, t + 2000, starve), 101);
    /* then only P0 is left */
    assert_int_equal(pop_id(&p, t + 5000, starve), 4);
}

static void starvation_bound(void **state) {
    (void)state;
    /* A steady stream of P0 work, one start every 10 ms: a P4 item waits
     * at most about starve_ms + one start. */
    ax_pool_t p = {.slots = 1, .queue = 1000};
    item_t hi[400], lo;
    int64_t t = 1000000, starve = 500;
    push(&p, &lo, 999, 4, t);
    int next = 0, got_lo_at = -1;
    for (int k = 0; k < 200 && got_lo_at < 0; k++) {
        int64_t now = t + 10 * k;
        push(&p, &hi[next], next, 0, now);
        next++;
        if (pop_id(&p, now, starve) == 999)
            got_lo_at = (int)(now - t);
    }
    assert_true(got_lo_at >= 500);
    assert_true(got_lo_at <= 510);
}

static void front_and_remove(void **state) {
    (void)state;
    ax_pool_t p = {.slots = 1, .queue = 10};
    item_t a, b, c;
    int64_t t = 5000;
    push(&p, &a, 1, 2, t);
    push(&p, &b, 2, 2, t);
    push(&p, &c, 3, 2, t);
    ax_pool_item_t *x = ax_pool_pop(&p, t, 1000), *y = ax_pool_pop(&p, t, 1000);
    assert_ptr_equal(x, &a.qi);
    assert_ptr_equal(y, &b.qi);
    /* a wave that could not start goes back in order */
    ax_pool_push_front(&p, y);
    ax_pool_push_front(&p, x);
    assert_int_equal(a.qi.queued_ms, t);
    /* a popped item is not queued: remove does nothing */
    assert_int_equal(pop_id(&p, t, 1000), 1);
    assert_int_equal(ax_pool_remove(&p, &a.qi), 0);
    assert_int_equal(ax_pool_remove(&p, &c.qi), 1); /* tail */
    assert_ptr_equal(p.q[2].tail, &b.qi);
    assert_int_equal(ax_pool_remove(&p, &c.qi), 0);
    assert_int_equal(pop_id(&p, t, 1000), 2);
    assert_int_equal(pop_id(&p, t, 1000), -1);
    assert_null(p.q[2].tail);
}

static void load_full(void **state) {
    (void)state;
    ax_pool_t p = {.slots = 2, .queue = 4};
    p.running = 2;
    for (int i = 0; i < 3; i++)
        ax_pool_wait_add(&p, 3);
    assert_int_equal(p.waiting, 3);
    /* a P3 run sees running + P0..P3 waiting = 5; P4 too; P0-P2 see 2 */
    assert_int_equal(ax_pool_load(&p, 3), 5);
    assert_int_equal(ax_pool_load(&p, 4), 5);
    assert_int_equal(ax_pool_load(&p, 0), 2);
    assert_false(ax_pool_full(&p, 3));
    ax_pool_wait_add(&p, 4);
    assert_false(ax_pool_full(&p, 3)); /* less urgent work does not keep P3 out */
    assert_true(ax_pool_full(&p, 4));  /* 6 >= 2 + 4 */
    ax_pool_wait_add(&p, 1);
    assert_true(ax_pool_full(&p, 3));
    assert_false(ax_pool_full(&p, 0));
    /* drained: load <= slots + queue / 2 = 4 */
    assert_false(ax_pool_drained(&p, 3)); /* 6 */
    ax_pool_wait_sub(&p, 3);
    ax_pool_wait_sub(&p, 3);
    assert_true(ax_pool_drained(&p, 3)); /* 4 */
    assert_false(ax_pool_drained(&p, 4)); /* 5 */
    assert_int_equal(p.lane_waiting[3], 1);
    assert_int_equal(p.waiting, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lane_order),       cmocka_unit_test(starvation),
        cmocka_unit_test(starvation_bound), cmocka_unit_test(front_and_remove),
        cmocka_unit_test(load_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
