/*
 * test_claim.c — the claim verdict (core/pool.c ax_claim_decide) with the
 * store calls injected: a store error of the one-by-one claim
 * (AX_ERR_INVALID: bad data; AX_ERR_IO: server away) leaves the run to be
 * retried and is never a "not claimable" verdict (which the executor
 * counts as a duplicate and drops); an error of the batch claim retries
 * every run; after AX_ERR_IO nothing more is tried, after another error
 * the other runs still are; the runs the batch won stay claimed whatever
 * happens after; a run whose claim failed once is claimed by the retry and
 * runs exactly once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/pool.h"

/* A scripted store: the batch wins the ids in `batch_wins` (or fails with
 * batch_rc); the one-by-one claim answers per id from `one[]`. */
typedef struct script {
    int batch_rc;
    int64_t batch_wins[8];
    struct {
        int64_t id;
        int rc;          /* returned */
        ax_claim_t verdict; /* set when rc == 0 */
        int times;       /* answer rc this many calls, then succeed with verdict */
    } one[8];
    int batch_calls, one_calls;
} script_t;

static int fake_batch(void *ctx, ax_claim_item_t *items, size_t n, char *err, size_t errlen) {
    script_t *s = ctx;
    s->batch_calls++;
    if (s->batch_rc < 0)
        return ax_seterr(err, errlen, s->batch_rc, "batch: injected error %d", s->batch_rc);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < 8 && s->batch_wins[k]; k++)
            if (items[i].instance_id == s->batch_wins[k]) {
                items[i].verdict = AX_CLAIM_CLAIMED;
                items[i].lease_ms = 5000;
                items[i].shard_total = 3;
                items[i].shard_index = 1;
            }
    return 0;
}

static int fake_one(void *ctx, ax_claim_item_t *it, char *err, size_t errlen) {
    script_t *s = ctx;
    s->one_calls++;
    for (size_t k = 0; k < 8 && s->one[k].id; k++) {
        if (s->one[k].id != it->instance_id)
            continue;
        if (s->one[k].rc < 0 && s->one[k].times-- > 0)
            return ax_seterr(err, errlen, s->one[k].rc, "instance %lld: injected error %d",
                             (long long)it->instance_id, s->one[k].rc);
        it->verdict = s->one[k].verdict;
        if (it->verdict == AX_CLAIM_CLAIMED)
            it->lease_ms = 7000;
        return 0;
    }
    it->verdict = AX_CLAIM_NOT_CLAIMABLE;
    return 0;
}

static const ax_claim_ops_t ops = {fake_batch, fake_one};

static void items_of(ax_claim_item_t *it, size_t n) {
    for (size_t i = 0; i < n; i++)
        it[i] = (ax_claim_item_t){.instance_id = (int64_t)i + 1, .attempt = 1,
                                  .verdict = AX_CLAIM_NOT_CLAIMABLE /* overwritten */};
}

/* What the executor counts as duplicates. */
static int duplicates(const ax_claim_item_t *it, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++)
        d += it[i].verdict == AX_CLAIM_NOT_CLAIMABLE;
    return d;
}

static void verdicts(void **state) {
    (void)state;
    script_t s = {.batch_wins = {1, 3},
                  .one = {{2, 0, AX_CLAIM_CLAIMED, 0}, {4, 0, AX_CLAIM_NO_SLOT, 0}}};
    ax_claim_item_t it[5];
    items_of(it, 5);
    char err[256] = "";
    assert_int_equal(ax_claim_decide(&ops, &s, it, 5, err, sizeof err), 0);
    assert_int_equal(it[0].verdict, AX_CLAIM_CLAIMED);
    assert_int_equal(it[0].lease_ms, 5000);
    assert_int_equal(it[0].shard_total, 3);
    assert_int_equal(it[1].verdict, AX_CLAIM_CLAIMED);
    assert_int_equal(it[1].lease_ms, 7000);
    assert_int_equal(it[1].shard_total, 1);
    assert_int_equal(it[2].verdict, AX_CLAIM_CLAIMED);
    assert_int_equal(it[3].verdict, AX_CLAIM_NO_SLOT);
    assert_int_equal(it[4].verdict, AX_CLAIM_NOT_CLAIMABLE); /* a real duplicate */
    assert_int_equal(s.one_calls, 3);
    assert_int_equal(duplicates(it, 5), 1);
}

/* The bug of issue #12: AX_ERR_INVALID (-1) of the one-by-one claim was
 * read as "not claimable": counted as a duplicate, the dispatch dropped. */
static void invalid_is_retried(void **state) {
    (void)state;
    script_t s = {.batch_wins = {1},
                  .one = {{2, AX_ERR_INVALID, AX_CLAIM_CLAIMED, 1},
                          {3, 0, AX_CLAIM_CLAIMED, 0}}};
    ax_claim_item_t it[4];
    items_of(it, 4);
    char err[256] = "";
    int rc = ax_claim_decide(&ops, &s, it, 4, err, sizeof err);
    assert_int_equal(rc, AX_ERR_INVALID);
    assert_non_null(strstr(err, "instance 2: injected error"));
    assert_int_equal(it[0].verdict, AX_CLAIM_CLAIMED); /* the batch's win stays */
    assert_int_equal(it[1].verdict, AX_CLAIM_RETRY);
    assert_int_equal(it[2].verdict, AX_CLAIM_CLAIMED); /* tried after a data error */
    assert_int_equal(it[3].verdict, AX_CLAIM_NOT_CLAIMABLE);
    assert_int_equal(duplicates(it, 4), 1); /* only id 4, never id 2 */
    /* the retry (what the executor does after its backoff) claims it */
    ax_claim_item_t again[1] = {{.instance_id = 2, .attempt = 1}};
    assert_int_equal(ax_claim_decide(&ops, &s, again, 1, err, sizeof err), 0);
    assert_int_equal(again[0].verdict, AX_CLAIM_CLAIMED);
    assert_int_equal(again[0].lease_ms, 7000);
}

static void io_stops_the_rest(void **state) {
    (void)state;
    script_t s = {.one = {{1, 0, AX_CLAIM_NO_SLOT, 0},
                          {2, AX_ERR_IO, AX_CLAIM_CLAIMED, 1},
                          {3, 0, AX_CLAIM_CLAIMED, 0}}};
    ax_claim_item_t it[4];
    items_of(it, 4);
    char err[256] = "";
    assert_int_equal(ax_claim_decide(&ops, &s, it, 4, err, sizeof err), AX_ERR_IO);
    assert_int_equal(it[0].verdict, AX_CLAIM_NO_SLOT);
    assert_int_equal(it[1].verdict, AX_CLAIM_RETRY);
    assert_int_equal(it[2].verdict, AX_CLAIM_RETRY);
    assert_int_equal(it[3].verdict, AX_CLAIM_RETRY);
    assert_int_equal(s.one_calls, 2); /* nothing tried after the server went away */
    assert_int_equal(duplicates(it, 4), 0);
}

static void batch_error_retries_all(void **state) {
    (void)state;
    int codes[] = {AX_ERR_INVALID, AX_ERR_IO, AX_ERR_CONFLICT, AX_ERR_NOMEM};
    for (size_t c = 0; c < AX_ARRAY_SIZE(codes); c++) {
        script_t s = {.batch_rc = codes[c], .batch_wins = {1}};
        ax_claim_item_t it[3];
        items_of(it, 3);
        char err[256] = "";
        assert_int_equal(ax_claim_decide(&ops, &s, it, 3, err, sizeof err), codes[c]);
        for (size_t i = 0; i < 3; i++)
            assert_int_equal(it[i].verdict, AX_CLAIM_RETRY);
        assert_int_equal(s.one_calls, 0);
        assert_int_equal(duplicates(it, 3), 0);
    }
}

/* Every error code of the one-by-one claim: retried, never a duplicate. */
static void every_error_is_retried(void **state) {
    (void)state;
    int codes[] = {AX_ERR_INVALID, AX_ERR_NOMEM, AX_ERR_IO, AX_ERR_NOTFOUND, AX_ERR_CONFLICT,
                   AX_ERR_TOOBIG};
    for (size_t c = 0; c < AX_ARRAY_SIZE(codes); c++) {
        script_t s = {.one = {{1, codes[c], AX_CLAIM_CLAIMED, 1}}};
        ax_claim_item_t it[1];
        items_of(it, 1);
        char err[256] = "";
        assert_int_equal(ax_claim_decide(&ops, &s, it, 1, err, sizeof err), codes[c]);
        assert_int_equal(it[0].verdict, AX_CLAIM_RETRY);
        assert_int_equal(duplicates(it, 1), 0);
    }
}

static int one_without_verdict(void *ctx, ax_claim_item_t *it, char *err, size_t errlen) {
    (void)ctx;
    (void)it;
    (void)err;
    (void)errlen;
    return 0;
}

static void no_verdict_is_retried(void **state) {
    (void)state;
    script_t s = {0};
    const ax_claim_ops_t lazy = {fake_batch, one_without_verdict};
    ax_claim_item_t it[1];
    items_of(it, 1);
    char err[256] = "";
    assert_true(ax_claim_decide(&lazy, &s, it, 1, err, sizeof err) < 0);
    assert_int_equal(it[0].verdict, AX_CLAIM_RETRY);
    assert_int_equal(ax_claim_decide(&ops, &s, it, 0, err, sizeof err), 0); /* empty batch */
    assert_int_equal(s.batch_calls, 1);
    assert_string_equal(ax_claim_name(AX_CLAIM_RETRY), "retry");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(verdicts),
        cmocka_unit_test(invalid_is_retried),
        cmocka_unit_test(io_stops_the_rest),
        cmocka_unit_test(batch_error_retries_all),
        cmocka_unit_test(every_error_is_retried),
        cmocka_unit_test(no_verdict_is_retried),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
