/*
 * test_wheel.c — unit tests of the hierarchical timing wheel
 * (libax/src/core/wheel.c): exact firing at the deadline across every
 * level and the overflow, irregular and huge steps of `now`, cancellation
 * (before firing and from callbacks), re-linking from callbacks, past
 * deadlines, `now` going backwards, rebuild, and a 100,000-operation
 * fixed-seed comparison with a naive model that checks every fire time,
 * the order within a run and next_deadline's contract.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/wheel.h"

#define EPOCH ((uint64_t)1700000000000)  /* a realistic wall-clock ms */
#define YEAR_MS ((uint64_t)365 * 24 * 3600 * 1000)

static uint64_t rng_state;

static uint64_t rnd(void) {
    uint64_t x = rng_state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return rng_state = x;
}

static uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

/* ---- a test timer and a fire log shared by the simple tests ---------- */

typedef struct tmr {
    ax_wheel_entry_t e;
    int id;
    int fired;
    uint64_t fired_now;
} tmr_t;

#define LOG_MAX 64
static int fire_log[LOG_MAX];
static size_t fire_n;

static void log_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {
    tmr_t *t = AX_WHEEL_CONTAINER(e, tmr_t, e);
    assert_false(ax_wheel_is_linked(e));
    assert_true(e->at <= now);
    assert_int_equal(now, w->now);
    t->fired++;
    t->fired_now = now;
    if (fire_n < LOG_MAX)
        fire_log[fire_n++] = t->id;
}

static void tmr_init(tmr_t *t, int id, ax_wheel_cb cb) {
    memset(t, 0, sizeof *t);
    t->id = id;
    ax_wheel_entry_init(&t->e, cb ? cb : log_cb);
}

static void test_entry_size(void **state) {
    (void)state;
    if (sizeof(void *) == 8)
        assert_int_equal(sizeof(ax_wheel_entry_t), 32);
    ax_wheel_t w;
    ax_wheel_init(&w, 0);
    assert_int_equal(ax_wheel_next_deadline(&w), UINT64_MAX);
    assert_int_equal(ax_wheel_count(&w), 0);
    assert_int_equal(ax_wheel_run(&w, 1000), 0);
}

/* ---- exact deadline, stepping by 1 ms around it, on every level ------ */

static const uint64_t distances[] = {
    0, 1, 2, 62, 63, 64, 65, 127, 128, 4095, 4096, 4097, 262143, 262144, 262145,
    1000000, 16777215, 16777216, 16777217, ((uint64_t)1 << 30) + 7,
    ((uint64_t)1 << 36) - 1, (uint64_t)1 << 36, ((uint64_t)1 << 36) + 1,
    3 * YEAR_MS, 3 * YEAR_MS + 12345,
};
static const uint64_t starts[] = {
    0, 12345, ((uint64_t)1 << 36) - 10, ((uint64_t)1 << 24) - 1, EPOCH, EPOCH + 63,
};

static void test_exact_deadline_stepping(void **state) {
    (void)state;
    for (size_t si = 0; si < AX_ARRAY_SIZE(starts); si++) {
        for (size_t di = 0; di < AX_ARRAY_SIZE(distances); di++) {
            uint64_t start = starts[si], at = start + distances[di];
            ax_wheel_t w;
            tmr_t t;
            ax_wheel_init(&w, start);
            tmr_init(&t, 1, NULL);
            ax_wheel_link(&w, &t.e, at);
            assert_true(ax_wheel_is_linked(&t.e));
            assert_int_equal(ax_wheel_count(&w), 1);
            /* A couple of jumps short of the deadline, then 1 ms steps. */
            if (at - start > 10) {
                assert_int_equal(ax_wheel_run(&w, start + (at - start) / 2), 0);
                assert_int_equal(ax_wheel_run(&w, at - 10), 0);
            }
            for (uint64_t now = at >= start + 3 ? at - 3 : start; now < at; now++)
                assert_int_equal(ax_wheel_run(&w, now), 0);
            assert_int_equal(t.fired, 0);
            uint64_t nd = ax_wheel_next_deadline(&w);
            assert_true(nd <= at);
            assert_int_equal(nd, at);  /* 3 ms away: level 0 or due, exact */
            assert_int_equal(ax_wheel_run(&w, at), 1);
            assert_int_equal(t.fired, 1);
            assert_int_equal(t.fired_now, at);
            assert_false(ax_wheel_is_linked(&t.e));
            assert_int_equal(ax_wheel_run(&w, at + 1), 0);
            assert_int_equal(ax_wheel_count(&w), 0);
            assert_int_equal(ax_wheel_next_deadline(&w), UINT64_MAX);
        }
    }
}

/* Driving the wheel only by next_deadline never fires early, fires exactly
 * at the deadline, and wakes early at most once per level (+ overflow). */
static void test_next_deadline_converges(void **state) {
    (void)state;
    for (size_t si = 0; si < AX_ARRAY_SIZE(starts); si++) {
        for (size_t di = 0; di < AX_ARRAY_SIZE(distances); di++) {
            uint64_t start = starts[si], at = start + distances[di];
            ax_wheel_t w;
            tmr_t t;
            ax_wheel_init(&w, start);
            tmr_init(&t, 1, NULL);
            ax_wheel_link(&w, &t.e, at);
            int early = 0;
            for (;;) {
                uint64_t nd = ax_wheel_next_deadline(&w);
                assert_true(nd <= at);
                size_t n = ax_wheel_run(&w, nd);
                if (n) {
                    assert_int_equal(nd, at);
                    break;
                }
                early++;
                assert_true(early <= AX_WHEEL_LEVELS + 2);
            }
            assert_int_equal(t.fired, 1);
        }
    }
}

/* ---- many timers over all levels and the overflow, irregular steps --- */

#define MANY 20000

typedef struct many {
    ax_wheel_entry_t e;
    uint32_t id;
} many_t;

static uint8_t many_fired[MANY];
static uint64_t many_prev_now, many_last_at;
static size_t many_count;

static void many_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {
    (void)w;
    many_t *m = AX_WHEEL_CONTAINER(e, many_t, e);
    assert_int_equal(many_fired[m->id], 0);
    many_fired[m->id] = 1;
    assert_true(e->at <= now);
    assert_true(e->at > many_prev_now);  /* not fired in an earlier run */
    assert_true(e->at >= many_last_at);  /* non-decreasing in this run */
    many_last_at = e->at;
    many_count++;
}

static void test_many_timers_irregular_steps(void **state) {
    (void)state;
    rng_state = 0x9e3779b97f4a7c15ull;
    many_t *ms = calloc(MANY, sizeof *ms);
    assert_non_null(ms);
    memset(many_fired, 0, sizeof many_fired);
    ax_wheel_t w;
    uint64_t now = EPOCH;
    ax_wheel_init(&w, now);
    uint64_t max_at = 0;
    for (uint32_t i = 0; i < MANY; i++) {
        ms[i].id = i;
        ax_wheel_entry_init(&ms[i].e, many_cb);
        uint64_t d;
        if (i < 16)
            d = 3 * YEAR_MS + i;  /* well into the overflow */
        else
            d = 1 + rnd_below((uint64_t)1 << rnd_below(38));  /* log-uniform */
        ax_wheel_link(&w, &ms[i].e, now + d);
        if (now + d > max_at)
            max_at = now + d;
    }
    assert_int_equal(ax_wheel_count(&w), MANY);
    many_count = 0;
    size_t runs = 0;
    while (many_count < MANY) {
        uint64_t nd = ax_wheel_next_deadline(&w);
        assert_true(nd != UINT64_MAX);
        uint64_t next;
        switch (rnd_below(6)) {
        case 0: next = nd; break;
        case 1: next = nd > now ? nd - 1 : now; break;
        case 2: next = now - rnd_below(1000); break;  /* backwards */
        case 3: next = now + 1 + rnd_below(3); break;
        default: next = now + 1 + rnd_below((uint64_t)1 << rnd_below(36)); break;
        }
        many_prev_now = now;
        many_last_at = 0;
        w.stage_budget = rnd_below(3) == 0 ? 0 : 1 + rnd_below(64);
        ax_wheel_run(&w, next);
        if (next > now)
            now = next;
        runs++;
        assert_true(runs < 1000000);
    }
    assert_true(now >= max_at);
    for (uint32_t i = 0; i < MANY; i++)
        assert_int_equal(many_fired[i], 1);
    assert_int_equal(ax_wheel_count(&w), 0);
    assert_int_equal(ax_wheel_next_deadline(&w), UINT64_MAX);
    free(ms);
}

/* One run across an hour of 100,000 timers: one call, all fire, in order
 * (a per-ms loop inside run would still pass, but the runtime shows it). */
#define BIG 100000
static uint8_t big_fired[BIG];
static uint64_t big_last_at;
static size_t big_count;

static void big_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {
    (void)w;
    many_t *m = AX_WHEEL_CONTAINER(e, many_t, e);
    assert_int_equal(big_fired[m->id], 0);
    big_fired[m->id] = 1;
    assert_true(e->at <= now);
    assert_true(e->at >= big_last_at);
    big_last_at = e->at;
    big_count++;
}

static void test_big_jump(void **state) {
    (void)state;
    rng_state = 42;
    many_t *ms = calloc(BIG, sizeof *ms);
    assert_non_null(ms);
    memset(big_fired, 0, sizeof big_fired);
    ax_wheel_t w;
    ax_wheel_init(&w, EPOCH);
    for (uint32_t i = 0; i < BIG; i++) {
        ms[i].id = i;
        ax_wheel_entry_init(&ms[i].e, big_cb);
        ax_wheel_link(&w, &ms[i].e, EPOCH + 1 + rnd_below(3600 * 1000));
    }
    assert_int_equal(ax_wheel_count(&w), BIG);
    big_last_at = 0;
    big_count = 0;
    assert_int_equal(ax_wheel_run(&w, EPOCH + 2 * 3600 * 1000), BIG);
    assert_int_equal(big_count, BIG);
    assert_int_equal(ax_wheel_count(&w), 0);
    assert_int_equal(ax_wheel_next_deadline(&w), UINT64_MAX);
    free(ms);
}

/* ---- cancellation ---------------------------------------------------- */

static void test_cancel_before_fire(void **state) {
    (void)state;
    ax_wheel_t w;
    tmr_t a, b, c, never;
    ax_wheel_init(&w, 100);
    tmr_init(&a, 1, NULL);
    tmr_init(&b, 2, NULL);
    tmr_init(&c, 3, NULL);
    tmr_init(&never, 4, NULL);
    ax_wheel_unlink(&never.e);  /* never linked: no-op */
    assert_false(ax_wheel_is_linked(&never.e));
    ax_wheel_link(&w, &a.e, 150);
    ax_wheel_link(&w, &b.e, 150);
    ax_wheel_link(&w, &c.e, 100000);
    ax_wheel_unlink(&b.e);
    ax_wheel_unlink(&b.e);  /* twice: no-op */
    ax_wheel_unlink(&c.e);
    assert_int_equal(ax_wheel_count(&w), 1);
    /* 150 is in the next 64 ms window, staged at link time: exact. */
    assert_int_equal(ax_wheel_next_deadline(&w), 150);
    /* Two windows ahead it is a bound: the start of 200's window, 192. */
    ax_wheel_link(&w, &c.e, 200);
    assert_int_equal(ax_wheel_next_deadline(&w), 150);
    ax_wheel_unlink(&a.e);
    assert_int_equal(ax_wheel_next_deadline(&w), 192);
    assert_int_equal(ax_wheel_run(&w, 192), 0);
    assert_int_equal(ax_wheel_next_deadline(&w), 200);
    ax_wheel_unlink(&c.e);
    ax_wheel_link(&w, &a.e, 193);
    fire_n = 0;
    assert_int_equal(ax_wheel_run(&w, 200000), 1);
    assert_int_equal(fire_n, 1);
    assert_int_equal(fire_log[0], 1);
    assert_int_equal(b.fired + c.fired, 0);
    /* Re-linking after a cancel works; linking a linked entry moves it. */
    ax_wheel_link(&w, &b.e, 200010);
    ax_wheel_link(&w, &b.e, 200005);
    assert_int_equal(ax_wheel_count(&w), 1);
    assert_int_equal(ax_wheel_run(&w, 200005), 1);
    assert_int_equal(b.fired, 1);
    assert_int_equal(b.fired_now, 200005);
}

static tmr_t *victims[4];

static void cancel_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {
    log_cb(w, e, now);
    ax_wheel_unlink(e);  /* itself: already unlinked, must be harmless */
    for (size_t i = 0; i < AX_ARRAY_SIZE(victims); i++)
        if (victims[i])
            ax_wheel_unlink(&victims[i]->e);
}

static void test_cancel_in_callback(void **state) {
    (void)state;
    ax_wheel_t w;
    tmr_t a, b, c, d, e;
    ax_wheel_init(&w, 0);
    tmr_init(&a, 1, cancel_cb);
    tmr_init(&b, 2, NULL);  /* same tick as a, after it */
    tmr_init(&c, 3, NULL);  /* later tick, same run */
    tmr_init(&d, 4, NULL);  /* same tick, not cancelled */
    tmr_init(&e, 5, NULL);  /* far future */
    ax_wheel_link(&w, &a.e, 10);
    ax_wheel_link(&w, &b.e, 10);
    ax_wheel_link(&w, &d.e, 10);
    ax_wheel_link(&w, &c.e, 5000);
    ax_wheel_link(&w, &e.e, 10000000);
    memset(victims, 0, sizeof victims);
    victims[0] = &b;
    victims[1] = &c;
    victims[2] = &e;
    fire_n = 0;
    assert_int_equal(ax_wheel_run(&w, 6000), 2);
    assert_int_equal(fire_n, 2);
    assert_int_equal(fire_log[0], 1);
    assert_int_equal(fire_log[1], 4);
    assert_int_equal(ax_wheel_count(&w), 0);
    assert_int_equal(ax_wheel_run(&w, 20000000), 0);
    assert_int_equal(b.fired + c.fired + e.fired, 0);
    memset(victims, 0, sizeof victims);
}

/* ---- re-linking from a callback -------------------------------------- */

static uint64_t relink_delta;
static int relink_left;

static void relink_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {
    log_cb(w, e, now);
    if (relink_left-- > 0)
        ax_wheel_link(w, e, e->at + relink_delta);
}

static void test_relink_from_callback(void **state) {
    (void)state;
    ax_wheel_t w;
    tmr_t p;
    /* Periodic 10 ms timer driven 1 ms at a time: fires on every 10th. */
    ax_wheel_init(&w, 0);
    tmr_init(&p, 1, relink_cb);
    relink_delta = 10;
    relink_left = 1000;
    ax_wheel_link(&w, &p.e, 10);
    for (uint64_t now = 1; now <= 1000; now++) {
        size_t n = ax_wheel_run(&w, now);
        assert_int_equal(n, now % 10 == 0 ? 1 : 0);
    }
    assert_int_equal(p.fired, 100);
    /* A jump of 1000 ms fires it once per run, not 100 times in a row:
     * the re-link (already due) waits for the next run. */
    assert_int_equal(ax_wheel_run(&w, 2000), 1);
    assert_int_equal(ax_wheel_next_deadline(&w), 2000);  /* due: run again */
    assert_int_equal(ax_wheel_run(&w, 2000), 1);
    assert_int_equal(ax_wheel_run(&w, 2000), 1);
    /* Re-link for exactly now, forever: one fire per run, no loop. */
    relink_delta = 0;
    relink_left = 1000000;
    ax_wheel_link(&w, &p.e, 2000);
    for (int i = 0; i < 5; i++)
        assert_int_equal(ax_wheel_run(&w, 2000), 1);
    ax_wheel_unlink(&p.e);
    assert_int_equal(ax_wheel_run(&w, 3000), 0);
}

/* ---- pre-cascade (staging) keeps deadline order and link order ------- */

#define STG 600
static int stg_log[STG];
static size_t stg_n;

static void stg_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {
    tmr_t *t = AX_WHEEL_CONTAINER(e, tmr_t, e);
    assert_true(stg_n < STG);
    stg_log[stg_n++] = t->id;
    t->fired++;
}

static void test_staging_order(void **state) {
    (void)state;
    static tmr_t t[STG];
    ax_wheel_t w;
    ax_wheel_init(&w, 0);
    w.stage_budget = 3;
    int id = 0;
    /* Window 2 (128..191) while T is in window 0: level 1. */
    for (; id < 200; id++) {
        tmr_init(&t[id], id, stg_cb);
        ax_wheel_link(&w, &t[id].e, 128 + (uint64_t)(id % 5) * 7);
    }
    assert_int_equal(ax_wheel_run(&w, 64), 0);  /* window 2 is next now */
    for (uint64_t now = 65; id < STG; now++) {
        assert_int_equal(ax_wheel_run(&w, now), 0);  /* stages 3 */
        for (int k = 0; k < 8 && id < STG; k++, id++) {
            tmr_init(&t[id], id, stg_cb);
            ax_wheel_link(&w, &t[id].e, 128 + (uint64_t)(id % 5) * 7);
        }
        if (now % 7 == 0)  /* cancel a few, staged or not */
            ax_wheel_unlink(&t[(now * 37) % (uint64_t)id].e);
        assert_true(now < 128);
    }
    size_t linked = 0;
    for (int i = 0; i < STG; i++)
        linked += (size_t)ax_wheel_is_linked(&t[i].e);
    assert_int_equal(ax_wheel_count(&w), linked);
    assert_int_equal(ax_wheel_next_deadline(&w), 128);
    stg_n = 0;
    size_t fired = 0;
    for (uint64_t now = 127; now <= 160; now++)
        fired += ax_wheel_run(&w, now);
    assert_int_equal(fired, linked);
    assert_int_equal(stg_n, linked);
    for (size_t k = 1; k < stg_n; k++) {
        int a = stg_log[k - 1], b = stg_log[k];
        assert_true(a % 5 < b % 5 || (a % 5 == b % 5 && a < b));
    }
    for (int i = 0; i < STG; i++)
        assert_true(t[i].fired <= 1);
}

/* ---- past deadlines and time going backwards ------------------------- */

static void test_past_deadlines(void **state) {
    (void)state;
    ax_wheel_t w;
    tmr_t t[6];
    static const uint64_t at[6] = {999, 5, 1000, 0, 500, 999};
    ax_wheel_init(&w, 1000);
    for (int i = 0; i < 6; i++) {
        tmr_init(&t[i], i, NULL);
        ax_wheel_link(&w, &t[i].e, at[i]);
    }
    assert_int_equal(ax_wheel_next_deadline(&w), 1000);
    fire_n = 0;
    /* now earlier than the wheel time: no time passes, but due entries
     * (linked in the past) still fire, sorted, ties in link order. */
    assert_int_equal(ax_wheel_run(&w, 900), 6);
    static const int order[6] = {3, 1, 4, 0, 5, 2};
    for (int i = 0; i < 6; i++)
        assert_int_equal(fire_log[i], order[i]);
    assert_int_equal(t[3].fired_now, 1000);  /* the run's time is the wheel's */
}

static void test_now_backwards(void **state) {
    (void)state;
    ax_wheel_t w;
    tmr_t a, b;
    ax_wheel_init(&w, 10000);
    tmr_init(&a, 1, NULL);
    tmr_init(&b, 2, NULL);
    ax_wheel_link(&w, &a.e, 10050);
    assert_int_equal(ax_wheel_run(&w, 10040), 0);
    assert_int_equal(ax_wheel_run(&w, 5000), 0);  /* backwards: nothing */
    assert_int_equal(ax_wheel_run(&w, 0), 0);
    assert_int_equal(ax_wheel_next_deadline(&w), 10050);  /* staged: exact */
    assert_int_equal(ax_wheel_run(&w, 10048), 0);
    assert_int_equal(ax_wheel_run(&w, 3), 0);
    assert_int_equal(ax_wheel_next_deadline(&w), 10050);
    ax_wheel_link(&w, &b.e, 10049);  /* after the backwards runs */
    assert_int_equal(ax_wheel_run(&w, 10044), 0);
    ax_wheel_link(&w, &b.e, 10045);  /* in the past: due on the next run */
    assert_int_equal(ax_wheel_next_deadline(&w), 10048);
    fire_n = 0;
    assert_int_equal(ax_wheel_run(&w, 10000), 1);  /* backwards, b due */
    assert_int_equal(fire_log[0], 2);
    assert_int_equal(b.fired_now, 10048);
    assert_int_equal(ax_wheel_run(&w, 10049), 0);
    assert_int_equal(ax_wheel_run(&w, 10050), 1);
    assert_int_equal(fire_log[1], 1);
}

static void test_rebuild(void **state) {
    (void)state;
    ax_wheel_t w;
    tmr_t t[4];
    static const uint64_t at[4] = {9000, 4000, 1000000, 9000};
    ax_wheel_init(&w, 10000);
    for (int i = 0; i < 4; i++) {
        tmr_init(&t[i], i, NULL);
        ax_wheel_link(&w, &t[i].e, at[i]);
    }
    /* Wall clock jumped back to 5000: 4000 is due, 9000 is in 4 s. */
    ax_wheel_rebuild(&w, 5000);
    assert_int_equal(ax_wheel_count(&w), 4);
    assert_int_equal(ax_wheel_next_deadline(&w), 5000);
    fire_n = 0;
    assert_int_equal(ax_wheel_run(&w, 5000), 1);
    assert_int_equal(fire_log[0], 1);
    assert_int_equal(ax_wheel_run(&w, 8999), 0);
    assert_int_equal(ax_wheel_run(&w, 9000), 2);
    assert_int_equal(fire_log[1], 0);  /* tie kept in link order */
    assert_int_equal(fire_log[2], 3);
    /* Forward rebuild: nothing fires inside it, the due one next run. */
    ax_wheel_rebuild(&w, 2000000);
    assert_int_equal(t[2].fired, 0);
    assert_int_equal(ax_wheel_next_deadline(&w), 2000000);
    assert_int_equal(ax_wheel_run(&w, 2000000), 1);
    assert_int_equal(t[2].fired, 1);
}

/* ---- randomized comparison with a naive model ------------------------ */

#define POOL 512
#define OPS 100000

typedef struct mtmr {
    ax_wheel_entry_t e;
    int id;
} mtmr_t;

static struct {
    mtmr_t t[POOL];
    int linked[POOL];
    uint64_t at[POOL];
    uint64_t seq[POOL];
    int pending[POOL];   /* expected to fire later in the current run */
    uint64_t next_seq;
    uint64_t cur;        /* the wheel time per the model */
    int expected[POOL];
    size_t nexp, exp_pos, fired;
    uint64_t run_now;
    ax_wheel_t w;
} M;

static int cmp_expected(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (M.at[x] != M.at[y])
        return M.at[x] < M.at[y] ? -1 : 1;
    return M.seq[x] < M.seq[y] ? -1 : M.seq[x] > M.seq[y];
}

static uint64_t model_delta_at(uint64_t base) {
    switch (rnd_below(16)) {
    case 0: return base - rnd_below(100);  /* past */
    case 1: return base + rnd_below(64);
    case 2: case 3: return base + rnd_below(4096);
    case 4: return base + rnd_below(300000);
    case 5: return base + rnd_below((uint64_t)1 << 30);
    case 6: return base + ((uint64_t)1 << 36) + rnd_below((uint64_t)1 << 37);
    case 7: case 8: case 9: case 10:  /* 1-3 windows ahead, few distinct
                                         times: staging and ties */
        return ((base >> 6) + 1 + rnd_below(3)) * 64 + rnd_below(4) * 16;
    default: return base + rnd_below(20);  /* crowd a few ticks: ties */
    }
}

static void model_link(int id, uint64_t at) {
    M.pending[id] = 0;
    M.linked[id] = 1;
    M.at[id] = at;
    M.seq[id] = M.next_seq++;
    ax_wheel_link(&M.w, &M.t[id].e, at);
}

static void model_unlink(int id) {
    M.pending[id] = 0;
    M.linked[id] = 0;
    ax_wheel_unlink(&M.t[id].e);
}

static void model_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {
    mtmr_t *t = AX_WHEEL_CONTAINER(e, mtmr_t, e);
    assert_ptr_equal(w, &M.w);
    assert_int_equal(now, M.run_now);
    while (M.exp_pos < M.nexp && !M.pending[M.expected[M.exp_pos]])
        M.exp_pos++;  /* cancelled or re-linked by an earlier callback */
    assert_true(M.exp_pos < M.nexp);
    assert_int_equal(t->id, M.expected[M.exp_pos]);
    assert_int_equal(e->at, M.at[t->id]);
    M.pending[t->id] = 0;
    M.linked[t->id] = 0;
    M.exp_pos++;
    M.fired++;
    if (M.fired % 16 == 1) {  /* count() sees entries still waiting to fire */
        size_t n = 0;
        for (int i = 0; i < POOL; i++)
            n += (size_t)M.linked[i];
        assert_int_equal(ax_wheel_count(w), n);
    }
    /* Random mutations from inside the callback. */
    uint64_t r = rnd_below(10);
    if (r < 2)
        model_link(t->id, now - 5 + rnd_below(100));
    else if (r == 2)
        model_unlink((int)rnd_below(POOL));
    else if (r == 3)
        model_link((int)rnd_below(POOL), now - 5 + rnd_below(200));
}

static void model_check_deadline(void) {
    uint64_t min = UINT64_MAX;
    for (int i = 0; i < POOL; i++)
        if (M.linked[i] && M.at[i] < min)
            min = M.at[i];
    uint64_t nd = ax_wheel_next_deadline(&M.w);
    if (min == UINT64_MAX) {
        assert_int_equal(nd, UINT64_MAX);
    } else if (min <= M.cur) {
        assert_int_equal(nd, M.cur);
    } else {
        assert_true(nd > M.cur);
        assert_true(nd <= min);
        if ((min ^ M.cur) < 64)  /* same level-0 window: exact */
            assert_int_equal(nd, min);
    }
}

static void model_run(uint64_t now) {
    uint64_t eff = now > M.cur ? now : M.cur;
    M.nexp = 0;
    for (int i = 0; i < POOL; i++) {
        if (M.linked[i] && M.at[i] <= eff) {
            M.expected[M.nexp++] = i;
            M.pending[i] = 1;
        }
    }
    qsort(M.expected, M.nexp, sizeof M.expected[0], cmp_expected);
    M.exp_pos = 0;
    M.fired = 0;
    M.cur = eff;
    M.run_now = eff;
    /* Vary the pre-cascade so partial staging (ties split between staged
     * and level-1 lists) is exercised, and the no-staging path too. */
    static const size_t budgets[] = {0, 1, 2, 5, 1024};
    M.w.stage_budget = budgets[rnd_below(AX_ARRAY_SIZE(budgets))];
    size_t n = ax_wheel_run(&M.w, now);
    assert_int_equal(n, M.fired);
    for (size_t k = 0; k < M.nexp; k++)
        assert_false(M.pending[M.expected[k]]);
}

static void test_random_vs_model(void **state) {
    (void)state;
    rng_state = 0x2545f4914f6cdd1dull;
    memset(&M, 0, sizeof M);
    M.cur = EPOCH;
    ax_wheel_init(&M.w, M.cur);
    for (int i = 0; i < POOL; i++) {
        M.t[i].id = i;
        ax_wheel_entry_init(&M.t[i].e, model_cb);
    }
    size_t total_fired = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rnd_below(100);
        if (r < 40) {
            model_link((int)rnd_below(POOL), model_delta_at(M.cur));
        } else if (r < 55) {
            model_unlink((int)rnd_below(POOL));
        } else {
            uint64_t now;
            uint64_t k = rnd_below(10);
            if (k < 5)
                now = M.cur + rnd_below(8);
            else if (k == 5)
                now = M.cur - rnd_below(50);  /* backwards */
            else if (k == 6)
                now = ax_wheel_next_deadline(&M.w);
            else if (k == 7)
                now = M.cur + rnd_below(100000);
            else if (k == 8)
                now = M.cur + rnd_below((uint64_t)1 << 34);
            else
                now = M.cur + rnd_below(5000);
            if (now == UINT64_MAX)
                now = M.cur + 1;
            model_run(now);
            total_fired += M.fired;
        }
        model_check_deadline();
        if (op % 1000 == 0) {
            size_t n = 0;
            for (int i = 0; i < POOL; i++)
                n += (size_t)M.linked[i];
            assert_int_equal(ax_wheel_count(&M.w), n);
        }
    }
    /* Enough happened to mean something. */
    assert_true(total_fired > 10000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entry_size),
        cmocka_unit_test(test_exact_deadline_stepping),
        cmocka_unit_test(test_next_deadline_converges),
        cmocka_unit_test(test_many_timers_irregular_steps),
        cmocka_unit_test(test_big_jump),
        cmocka_unit_test(test_cancel_before_fire),
        cmocka_unit_test(test_cancel_in_callback),
        cmocka_unit_test(test_relink_from_callback),
        cmocka_unit_test(test_staging_order),
        cmocka_unit_test(test_past_deadlines),
        cmocka_unit_test(test_now_backwards),
        cmocka_unit_test(test_rebuild),
        cmocka_unit_test(test_random_vs_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
