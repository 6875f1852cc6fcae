/*
 * test_apiauth.c — ax-api's token table and rate buckets (libax
 * core/apiauth.c): api.tokens parsing and its refusals (name, scope, hash,
 * duplicates; the hash never echoed), lookup by SHA-256 of the presented
 * token (an expected digest computed once with sha256sum and pasted here),
 * tokens made by ax_api_token_make found again, and the token bucket
 * (burst, refill at the rate, Retry-After in whole seconds, buckets per
 * token).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ax/apiauth.h"
#include "ax/common.h"

/* sha256("axt_" + 64 x '1'), from sha256sum */
#define TOK1 "axt_1111111111111111111111111111111111111111111111111111111111111111"
#define HASH1 "9905efde5709917678ca09f7ddbaf5920a7d44e10026704b6551062926766b99"

static void test_parse_and_find(void **state) {
    (void)state;
    ax_api_tokens_t t;
    char err[256];
    assert_int_equal(ax_api_tokens_parse(" ops:admin:" HASH1 " , viewer:read:"
                                         "0000000000000000000000000000000000000000000000000000000000000000",
                                         &t, err, sizeof err),
                     0);
    assert_int_equal(t.n, 2);
    assert_string_equal(t.v[0].name, "ops");
    assert_int_equal(t.v[0].scope, AX_SCOPE_ADMIN);
    assert_int_equal(t.v[1].scope, AX_SCOPE_READ);
    ax_api_token_t *f = ax_api_tokens_find(&t, TOK1, strlen(TOK1));
    assert_non_null(f);
    assert_string_equal(f->name, "ops");
    assert_null(ax_api_tokens_find(&t, TOK1, strlen(TOK1) - 1));
    assert_null(ax_api_tokens_find(&t, "", 0));
    ax_api_tokens_free(&t);
    assert_int_equal(ax_api_tokens_parse(NULL, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 0);
    assert_null(ax_api_tokens_find(&t, TOK1, strlen(TOK1)));
    assert_int_equal(ax_api_tokens_parse("", &t, err, sizeof err), 0);
    assert_int_equal(t.n, 0);
}

static void refused(const char *spec, const char *why) {
    ax_api_tokens_t t;
    char err[256] = "";
    assert_int_equal(ax_api_tokens_parse(spec, &t, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, why));
    assert_non_null(strstr(err, "api.tokens"));
    assert_null(strstr(err, "abcdef0123")); /* the hash is never echoed */
}

static void test_refusals(void **state) {
    (void)state;
    refused("ops:admin", "NAME:SCOPE:SHA256HEX");
    refused("ops:root:" HASH1, "scope must be read or admin");
    refused("o p:admin:" HASH1, "name must be");
    refused(":admin:" HASH1, "name must be");
    refused("ops:admin:abcdef0123", "64 hex digits");
    refused("ops:admin:zzcdef0123456789abcdef0123456789abcdef0123456789abcdef01234567",
            "hex digits");
    refused("ops:admin:" HASH1 ",ops:read:" HASH1, "given twice");
}

static void test_make(void **state) {
    (void)state;
    unsigned char rnd[32];
    for (int i = 0; i < 32; i++)
        rnd[i] = (unsigned char)(i * 7 + 1);
    char tok[AX_TOKEN_LEN + 1], hash[AX_SHA256_HEX_LEN], spec[128];
    ax_api_token_make(rnd, tok, hash);
    assert_int_equal(strlen(tok), AX_TOKEN_LEN);
    assert_memory_equal(tok, "axt_01080f16", 12);
    snprintf(spec, sizeof spec, "me:read:%s", hash);
    ax_api_tokens_t t;
    char err[256];
    assert_int_equal(ax_api_tokens_parse(spec, &t, err, sizeof err), 0);
    assert_non_null(ax_api_tokens_find(&t, tok, strlen(tok)));
    tok[10] ^= 1;
    assert_null(ax_api_tokens_find(&t, tok, strlen(tok)));
    ax_api_tokens_free(&t);
}

static void test_rate(void **state) {
    (void)state;
    ax_api_token_t a = {0}, b = {0};
    int64_t retry = 0, now = 1000;
    /* a burst of 3 at once, then refused */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ax_api_rate_take(&a, now, 2, 3, &retry), 1);
    assert_int_equal(ax_api_rate_take(&a, now, 2, 3, &retry), 0);
    assert_int_equal(retry, 1);
    /* another token has its own bucket */
    assert_int_equal(ax_api_rate_take(&b, now, 2, 3, &retry), 1);
    /* 2/s: one more after 500 ms, not before */
    assert_int_equal(ax_api_rate_take(&a, now + 400, 2, 3, &retry), 0);
    assert_int_equal(ax_api_rate_take(&a, now + 500, 2, 3, &retry), 1);
    /* refill caps at the burst */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ax_api_rate_take(&a, now + 100000, 2, 3, &retry), 1);
    assert_int_equal(ax_api_rate_take(&a, now + 100000, 2, 3, &retry), 0);
    /* a slow rate gives a longer Retry-After */
    ax_api_token_t c = {0};
    assert_int_equal(ax_api_rate_take(&c, now, 1, 1, &retry), 1);
    assert_int_equal(ax_api_rate_take(&c, now, 1, 1, &retry), 0);
    assert_int_equal(retry, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_find),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_make),
        cmocka_unit_test(test_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
