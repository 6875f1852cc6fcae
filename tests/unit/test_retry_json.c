/*
 * test_retry_json.c — a job's retry rule chain read from JSON
 * (adapters/retry_json.c): valid and invalid chains, the error naming index
 * and field, the policy untouched on error; and, with chains written as
 * JSON, prefix matching and first-match-wins of the decision (core/retry.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/retry.h"
#include "ax/retry_json.h"

static ax_retry_policy_t defaults(void) {
    ax_retry_policy_t p;
    ax_retry_policy_default(&p);
    return p;
}

/* ---- parsing ------------------------------------------------------------ */

static void test_parse_valid(void **state) {
    char err[256] = "";
    ax_retry_policy_t p = defaults();
    p.max_retries = 7; /* the numbers are never touched by parsing */
    p.initial_ms = 123;
    const char *json = "[ {\"class\": \"http\", \"action\": \"fail\"},"
                       "  {\"class\": \"exit\", \"action\": \"retry\", \"wait\": \"fixed\","
                       "   \"delay_ms\": 60000},"
                       "  {\"class\": \"db_*\", \"action\": \"retry\", \"wait\": \"soon\"},"
                       "  {\"class\": \"oom\", \"action\": \"alert\"},"
                       "  {\"class\": \"signal\", \"action\": \"retry\", \"wait\": \"backoff\"},"
                       "  {\"class\": \"plugin\", \"action\": \"retry\"} ]";
    assert_int_equal(ax_retry_rules_parse(&p, json, err, sizeof err), AX_OK);
    assert_int_equal(p.max_retries, 7);
    assert_int_equal(p.initial_ms, 123);
    assert_int_equal(p.nrules, 6);
    static const ax_retry_rule_t want[] = {
        {"http", AX_RETRY_FAIL, AX_RETRY_BACKOFF, 0},
        {"exit", AX_RETRY_RETRY, AX_RETRY_FIXED, 60000},
        {"db_*", AX_RETRY_RETRY, AX_RETRY_SOON, 0},
        {"oom", AX_RETRY_FAIL_ALERT, AX_RETRY_BACKOFF, 0},
        {"signal", AX_RETRY_RETRY, AX_RETRY_BACKOFF, 0},
        {"plugin", AX_RETRY_RETRY, AX_RETRY_BACKOFF, 0},
    };
    for (size_t i = 0; i < AX_ARRAY_SIZE(want); i++) {
        assert_string_equal(p.rules[i].error_class, want[i].error_class);
        assert_int_equal(p.rules[i].action, want[i].action);
        assert_int_equal(p.rules[i].kind, want[i].kind);
        assert_int_equal(p.rules[i].delay_ms, want[i].delay_ms);
    }
    /* the decisions follow the job's rules ... */
    ax_retry_decision_t d = ax_retry_decide(&p, "http", 1, 1, 0.0);
    assert_int_equal(d.retry, 0);
    assert_string_equal(d.reason, "error class not retried");
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 1, 0.9).delay_ms, 60000);
    assert_int_equal(ax_retry_decide(&p, "db_deadlock", 1, 1, 0.0).delay_ms, 123);
    assert_int_equal(ax_retry_decide(&p, "oom", 1, 1, 0.0).alert, 1);
    assert_int_equal(ax_retry_decide(&p, "signal", 1, 2, 0.0).delay_ms, 246);
    /* ... and the default chain for classes they do not name */
    assert_int_equal(ax_retry_decide(&p, "fatal", 1, 1, 0.0).alert, 1);
    assert_int_equal(ax_retry_decide(&p, "conflict", 1, 1, 0.0).delay_ms, 10000);
    assert_int_equal(ax_retry_decide(&p, "timeout", 1, 1, 0.0).delay_ms, 123);
    assert_int_equal(ax_retry_decide(&p, "spawn", 1, 1, 0.0).retry, 0);

    /* NULL, "", blanks and JSON null restore the default chain */
    static const char *const empties[] = {NULL, "", "  \n\t", "null", " null "};
    ax_retry_policy_t dflt = defaults();
    for (size_t i = 0; i < AX_ARRAY_SIZE(empties); i++) {
        assert_int_equal(ax_retry_rules_parse(&p, json, err, sizeof err), AX_OK);
        assert_int_equal(ax_retry_rules_parse(&p, empties[i], err, sizeof err), AX_OK);
        assert_int_equal(p.nrules, dflt.nrules);
        assert_memory_equal(p.rules, dflt.rules, dflt.nrules * sizeof dflt.rules[0]);
        assert_int_equal(p.max_retries, 7);
    }
    /* an empty array: no job rules, i.e. the default chain's decisions */
    assert_int_equal(ax_retry_rules_parse(&p, "[]", err, sizeof err), AX_OK);
    assert_int_equal(p.nrules, 0);
    assert_int_equal(ax_retry_decide(&p, "conflict", 1, 1, 0.0).delay_ms, 10000);
    assert_int_equal(ax_retry_decide(&p, "system", 1, 1, 0.0).alert, 1);

    /* edge values: delay 0 and the largest; a 31-byte class; "" and "*" */
    assert_int_equal(ax_retry_rules_parse(&p,
                                          "[{\"class\":\"a\",\"action\":\"retry\",\"wait\":"
                                          "\"fixed\",\"delay_ms\":0},"
                                          "{\"class\":\"b\",\"action\":\"retry\",\"wait\":"
                                          "\"fixed\",\"delay_ms\":86400000},"
                                          "{\"class\":\"0123456789012345678901234567890\","
                                          "\"action\":\"fail\"},"
                                          "{\"class\":\"\",\"action\":\"fail\"}]",
                                          err, sizeof err),
                     AX_OK);
    assert_int_equal(p.nrules, 4);
    assert_int_equal(p.rules[1].delay_ms, 86400000);
    assert_string_equal(p.rules[2].error_class, "0123456789012345678901234567890");
    assert_int_equal(ax_retry_decide(&p, "a", 1, 1, 0.7).delay_ms, 0);
    assert_int_equal(ax_retry_decide(&p, "fatal", 1, 1, 0.0).alert, 0); /* "" caught it */
    /* but not backlog_full: the trigger's cap is never retried, whatever the rules */
    assert_int_equal(ax_retry_decide(&p, "backlog_full", 1, 1, 0.0).retry, 0);
    assert_int_equal(ax_retry_decide(&p, "backlog_full", 1, 1, 0.0).alert, 1);

    /* 16 rules is the most */
    char big[4096];
    size_t o = (size_t)snprintf(big, sizeof big, "[");
    for (int i = 0; i < AX_RETRY_MAX_RULES; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s{\"class\":\"c%d\",\"action\":\"fail\"}",
                              i ? "," : "", i);
    snprintf(big + o, sizeof big - o, "]");
    assert_int_equal(ax_retry_rules_parse(&p, big, err, sizeof err), AX_OK);
    assert_int_equal(p.nrules, AX_RETRY_MAX_RULES);
    assert_string_equal(p.rules[15].error_class, "c15");
}

static void test_parse_errors(void **state) {
    static const struct {
        const char *json, *want1, *want2; /* substrings of the message */
    } cases[] = {
        /* not an array */
        {"{\"class\":\"x\",\"action\":\"fail\"}", "rules:", "an object"},
        {"5", "rules:", "an integer"},
        {"\"retry\"", "rules:", "a string"},
        {"true", "rules:", "a boolean"},
        {"[", "rules:", "invalid JSON"},
        {"[{\"class\":\"x\",\"action\":\"fail\"},]", "invalid JSON", "line 1"},
        {"[] []", "invalid JSON", "column"},
        /* elements */
        {"[5]", "rules[0]:", "expected an object, got an integer"},
        {"[{\"class\":\"x\",\"action\":\"fail\"}, []]", "rules[1]:", "got an array"},
        {"[{\"class\":\"x\",\"action\":\"fail\",\"retries\":3}]", "rules[0]:", "\"retries\""},
        {"[{\"class\":\"x\",\"action\":\"fail\",\"action\":\"retry\"}]", "invalid JSON",
         "duplicate"},
        /* class */
        {"[{\"action\":\"fail\"}]", "rules[0].class", "missing"},
        {"[{\"class\":5,\"action\":\"fail\"}]", "rules[0].class", "got an integer"},
        {"[{\"class\":null,\"action\":\"fail\"}]", "rules[0].class", "got null"},
        {"[{\"class\":\"01234567890123456789012345678901\",\"action\":\"fail\"}]",
         "rules[0].class", "32 bytes"},
        {"[{\"class\":\"a*b\",\"action\":\"fail\"}]", "rules[0].class", "'*'"},
        {"[{\"class\":\"**\",\"action\":\"fail\"}]", "rules[0].class", "'*'"},
        {"[{\"class\":\"a b\",\"action\":\"fail\"}]", "rules[0].class", "byte 1"},
        {"[{\"class\":\"caf\\u00e9\",\"action\":\"fail\"}]", "rules[0].class", "byte 3"},
        {"[{\"class\":\"a\\u0000b\",\"action\":\"fail\"}]", "invalid JSON", "line"},
        /* action */
        {"[{\"class\":\"x\"}]", "rules[0].action", "missing"},
        {"[{\"class\":\"x\",\"action\":\"later\"}]", "rules[0].action", "\"later\""},
        {"[{\"class\":\"x\",\"action\":\"Retry\"}]", "rules[0].action", "unknown action"},
        {"[{\"class\":\"x\",\"action\":1}]", "rules[0].action", "got an integer"},
        {"[{\"class\":\"x\",\"action\":[\"retry\"]}]", "rules[0].action", "got an array"},
        /* wait */
        {"[{\"class\":\"x\",\"action\":\"retry\"},"
         "{\"class\":\"y\",\"action\":\"retry\",\"wait\":\"never\"}]",
         "rules[1].wait", "\"never\""},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":true}]", "rules[0].wait", "a boolean"},
        {"[{\"class\":\"x\",\"action\":\"fail\",\"wait\":\"soon\"}]", "rules[0].wait",
         "only with action"},
        {"[{\"class\":\"x\",\"action\":\"alert\",\"wait\":\"backoff\"}]", "rules[0].wait",
         "only with action"},
        /* delay_ms */
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":\"fixed\"}]", "rules[0].delay_ms",
         "required"},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"delay_ms\":5}]", "rules[0].delay_ms",
         "only with wait"},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":\"soon\",\"delay_ms\":5}]",
         "rules[0].delay_ms", "only with wait"},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":\"fixed\",\"delay_ms\":\"10s\"}]",
         "rules[0].delay_ms", "got a string"},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":\"fixed\",\"delay_ms\":1.5}]",
         "rules[0].delay_ms", "got a real number"},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":\"fixed\",\"delay_ms\":1e4}]",
         "rules[0].delay_ms", "got a real number"},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":\"fixed\",\"delay_ms\":-1}]",
         "rules[0].delay_ms", "out of range"},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":\"fixed\",\"delay_ms\":86400001}]",
         "rules[0].delay_ms", "out of range"},
        {"[{\"class\":\"x\",\"action\":\"retry\",\"wait\":\"fixed\","
         "\"delay_ms\":99999999999999999999}]",
         "invalid JSON", "too big"},
    };
    ax_retry_policy_t p = defaults();
    assert_int_equal(ax_retry_rules_parse(&p, "[{\"class\":\"keep\",\"action\":\"fail\"}]", NULL,
                                          0),
                     AX_OK);
    ax_retry_policy_t snap;
    memcpy(&snap, &p, sizeof p);
    for (size_t i = 0; i < AX_ARRAY_SIZE(cases); i++) {
        char err[256] = "";
        int rc = ax_retry_rules_parse(&p, cases[i].json, err, sizeof err);
        if (rc != AX_ERR_INVALID || !strstr(err, cases[i].want1) ||
            !strstr(err, cases[i].want2))
            fail_msg("case %zu (%s): rc %d, \"%s\"", i, cases[i].json, rc, err);
        assert_memory_equal(&p, &snap, sizeof p); /* untouched on error */
        /* a NULL errbuf is fine */
        assert_int_equal(ax_retry_rules_parse(&p, cases[i].json, NULL, 0), AX_ERR_INVALID);
    }

    /* too many rules */
    char big[4096], err[256];
    size_t o = (size_t)snprintf(big, sizeof big, "[");
    for (int i = 0; i <= AX_RETRY_MAX_RULES; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s{\"class\":\"c%d\",\"action\":\"fail\"}",
                              i ? "," : "", i);
    snprintf(big + o, sizeof big - o, "]");
    assert_int_equal(ax_retry_rules_parse(&p, big, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "17 rules, at most 16"));
    assert_memory_equal(&p, &snap, sizeof p);

    /* the error in a later element is reported, the earlier ones were fine */
    assert_int_equal(ax_retry_rules_parse(&p,
                                          "[{\"class\":\"a\",\"action\":\"fail\"},"
                                          "{\"class\":\"b\",\"action\":\"fail\"},"
                                          "{\"class\":\"c\",\"action\":\"explode\"}]",
                                          err, sizeof err),
                     AX_ERR_INVALID);
    assert_non_null(strstr(err, "rules[2].action"));
    assert_memory_equal(&p, &snap, sizeof p);
}

/* ---- matching ------------------------------------------------------------ */

static void test_prefix_match(void **state) {
    char err[256];
    ax_retry_policy_t p = defaults();
    assert_int_equal(ax_retry_rules_parse(&p,
                                          "[{\"class\":\"net*\",\"action\":\"fail\"},"
                                          "{\"class\":\"http\",\"action\":\"alert\"}]",
                                          err, sizeof err),
                     AX_OK);
    static const struct {
        const char *cls;
        const char *reason;
    } cases[] = {
        {"network", "error class not retried"}, {"net", "error class not retried"},
        {"net.dns", "error class not retried"},  {"ne", "retry"},
        {"Network", "retry"},                    {"xnetwork", "retry"},
        {"http", "fatal error class"},           {"https", "retry"},
        {"htt", "retry"},                        {"", "retry"},
    };
    for (size_t i = 0; i < AX_ARRAY_SIZE(cases); i++)
        assert_string_equal(ax_retry_decide(&p, cases[i].cls, 1, 1, 0.0).reason,
                            cases[i].reason);

    /* "*" alone and "" match anything, NULL included */
    static const char *const any[] = {"*", ""};
    for (size_t a = 0; a < AX_ARRAY_SIZE(any); a++) {
        char json[128];
        snprintf(json, sizeof json, "[{\"class\":\"%s\",\"action\":\"fail\"}]", any[a]);
        assert_int_equal(ax_retry_rules_parse(&p, json, err, sizeof err), AX_OK);
        static const char *const cls[] = {"fatal", "exit", "timeout", "", "x*"};
        for (size_t i = 0; i < AX_ARRAY_SIZE(cls); i++)
            assert_string_equal(ax_retry_decide(&p, cls[i], 1, 1, 0.0).reason,
                                "error class not retried");
        assert_int_equal(ax_retry_decide(&p, NULL, 1, 1, 0.0).retry, 0);
    }

    /* ax_retry_match returns the rule itself */
    assert_int_equal(ax_retry_rules_parse(&p, "[{\"class\":\"net*\",\"action\":\"fail\"}]", err,
                                          sizeof err),
                     AX_OK);
    assert_ptr_equal(ax_retry_match(&p, "network"), &p.rules[0]);
    const ax_retry_rule_t *r = ax_retry_match(&p, "conflict");
    assert_non_null(r);
    assert_string_equal(r->error_class, "conflict");
    assert_int_equal(r->kind, AX_RETRY_FIXED);
    r = ax_retry_match(&p, "whatever");
    assert_string_equal(r->error_class, "");
    assert_int_equal(r->action, AX_RETRY_RETRY);

    /* a hand-built class filling the whole buffer (no NUL) is read safely */
    p.nrules = 1;
    memset(p.rules[0].error_class, 'z', sizeof p.rules[0].error_class);
    char longcls[64];
    memset(longcls, 'z', 32);
    longcls[32] = '\0';
    assert_ptr_equal(ax_retry_match(&p, longcls), &p.rules[0]);
    longcls[31] = '\0';
    assert_ptr_not_equal(ax_retry_match(&p, longcls), &p.rules[0]);
}

static void test_first_match_wins(void **state) {
    char err[256];
    ax_retry_policy_t p = defaults();
    /* the prefix first: it decides for http_5xx */
    assert_int_equal(ax_retry_rules_parse(&p,
                                          "[{\"class\":\"http*\",\"action\":\"fail\"},"
                                          "{\"class\":\"http_5xx\",\"action\":\"retry\","
                                          "\"wait\":\"soon\"}]",
                                          err, sizeof err),
                     AX_OK);
    assert_int_equal(ax_retry_decide(&p, "http_5xx", 1, 1, 0.0).retry, 0);
    /* the other way round: the exact rule first */
    assert_int_equal(ax_retry_rules_parse(&p,
                                          "[{\"class\":\"http_5xx\",\"action\":\"retry\","
                                          "\"wait\":\"soon\"},"
                                          "{\"class\":\"http*\",\"action\":\"fail\"}]",
                                          err, sizeof err),
                     AX_OK);
    ax_retry_decision_t d = ax_retry_decide(&p, "http_5xx", 1, 1, 0.0);
    assert_int_equal(d.retry, 1);
    assert_int_equal(d.delay_ms, 1000);
    assert_int_equal(ax_retry_decide(&p, "http_4xx", 1, 1, 0.0).retry, 0);

    /* a job's rule comes before the default chain: it can retry "fatal",
     * stop retrying timeouts, or alert on exits */
    assert_int_equal(ax_retry_rules_parse(&p,
                                          "[{\"class\":\"fatal\",\"action\":\"retry\"},"
                                          "{\"class\":\"timeout\",\"action\":\"fail\"},"
                                          "{\"class\":\"exit\",\"action\":\"alert\"}]",
                                          err, sizeof err),
                     AX_OK);
    d = ax_retry_decide(&p, "fatal", 1, 2, 0.0);
    assert_int_equal(d.retry, 1);
    assert_int_equal(d.alert, 0);
    assert_int_equal(d.delay_ms, 4000);
    assert_int_equal(ax_retry_decide(&p, "timeout", 1, 1, 0.0).retry, 0);
    d = ax_retry_decide(&p, "exit", 1, 1, 0.0);
    assert_int_equal(d.alert, 1);
    assert_string_equal(d.reason, "fatal error class");
    /* the default chain itself, in order: "fatal" is before the catch-all */
    ax_retry_policy_t dflt = defaults();
    for (size_t i = 0; i + 1 < dflt.nrules; i++)
        assert_ptr_equal(ax_retry_match(&dflt, dflt.rules[i].error_class), &dflt.rules[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_prefix_match),
        cmocka_unit_test(test_first_match_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
