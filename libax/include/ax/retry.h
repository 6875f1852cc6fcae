/*
 * ax/retry.h — whether and when a failed attempt is retried.
 *
 * Pure computation (core): the caller supplies the error class, the handler's
 * retryable flag, the attempt number and a uniform random value, and gets a
 * decision (retry or not, alert or not, the delay in ms). No clock, no I/O;
 * the same inputs give the same decision. See docs/RETRIES.md.
 *
 * A policy is the job's numbers (columns retry_max, retry_initial_ms,
 * retry_multiplier, retry_max_ms, retry_jitter_ms) plus a rule chain that
 * maps an error class to an action. The first rule whose class matches
 * decides; after the job's own rules the built-in default chain (below)
 * always applies, so a job only lists the classes it treats differently.
 *
 * Default chain (first match wins):
 *   fatal, system                              fail and alert
 *   spawn, cancelled                           fail
 *   timeout, network, worker_lost, lease_lost  retry soon
 *   conflict                                   retry after a fixed 10000 ms
 *   anything else ("exit", "signal", "http", "plugin", ...)  retry with backoff
 *
 * Delays (k = the attempt that just failed, 1 = the first run):
 *   backoff  min(initial * multiplier^(k-1), max) + J(jitter)
 *   soon     min(initial, max, 1000) + J(min(jitter, 250))
 *   fixed    delay_ms exactly (no jitter, not capped by max)
 * where J(n) = floor(rnd * (n + 1)), i.e. additive uniform jitter, an
 * integer in [0, n]. Every step saturates instead of overflowing.
 */
#ifndef AX_RETRY_H
#define AX_RETRY_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    AX_RETRY_RETRY = 0,  /* retry after the rule's wait */
    AX_RETRY_FAIL,       /* no retry */
    AX_RETRY_FAIL_ALERT, /* no retry, and raise an alert */
} ax_retry_action_t;

/* ax_retry_rule_t.kind: how long to wait before the retry. */
enum {
    AX_RETRY_BACKOFF = 0, /* exponential per the policy, plus jitter */
    AX_RETRY_FIXED,       /* the rule's delay_ms exactly */
    AX_RETRY_SOON,        /* min(initial, max, 1000) ms, no growth, small jitter */
};

#define AX_RETRY_MAX_RULES 16
#define AX_RETRY_CLASS_LEN 32          /* error_class buffer, NUL included */
#define AX_RETRY_SOON_MS 1000          /* upper bound of a "soon" base delay */
#define AX_RETRY_SOON_JITTER_MS 250    /* upper bound of a "soon" jitter */
#define AX_RETRY_MAX_DELAY_MS 86400000 /* largest delay_ms a rule may give (1 day) */

typedef struct ax_retry_rule {
    char error_class[AX_RETRY_CLASS_LEN]; /* "" or "*" = any class; "abc" exactly "abc";
                                             "abc*" any class starting with "abc" */
    ax_retry_action_t action;
    int kind;         /* AX_RETRY_BACKOFF, AX_RETRY_FIXED or AX_RETRY_SOON (action RETRY) */
    int64_t delay_ms; /* AX_RETRY_FIXED */
} ax_retry_rule_t;

typedef struct ax_retry_policy {
    int max_retries;    /* retries after the first attempt; default 3 */
    int64_t initial_ms; /* first backoff delay; default 2000 */
    double multiplier;  /* backoff growth per attempt; default 2.0 */
    int64_t max_ms;     /* backoff cap (before jitter); default 30000 */
    int64_t jitter_ms;  /* additive uniform jitter in [0, jitter_ms]; default 2000 */
    ax_retry_rule_t rules[AX_RETRY_MAX_RULES]; /* the job's chain, first match wins */
    size_t nrules;
} ax_retry_policy_t;

/* The defaults above and the default rule chain in rules[]. */
void ax_retry_policy_default(ax_retry_policy_t *p);

/* Check the numbers (as the job table's CHECKs do): max_retries >= 0,
 * initial_ms, max_ms, jitter_ms >= 0, multiplier >= 1 (not NaN; +inf
 * means straight to max_ms), nrules <= AX_RETRY_MAX_RULES. The error names
 * the field. ax_retry_decide() copes with any values regardless (negatives
 * count as 0, a NaN or < 1 multiplier as 1). */
int ax_retry_policy_check(const ax_retry_policy_t *p, char *errbuf, size_t errlen);

/* Set p's rule chain to the default chain; the numbers are not changed. */
void ax_retry_rules_default(ax_retry_policy_t *p);

/* Check a rule's error class (`len` bytes of cls): shorter than
 * AX_RETRY_CLASS_LEN, printable ASCII without spaces, '*' only at the end.
 * AX_ERR_INVALID with the reason otherwise. */
int ax_retry_class_check(const char *cls, size_t len, char *errbuf, size_t errlen);

/* The action / wait kind named `name` ("retry", "fail", "alert" /
 * "backoff", "fixed", "soon"), or -1. */
int ax_retry_action_parse(const char *name);
int ax_retry_wait_parse(const char *name);

typedef struct ax_retry_decision {
    int retry;          /* 1: run attempt + 1 after delay_ms */
    int alert;          /* 1: raise an alert (fatal error class) */
    int64_t delay_ms;   /* when retry; else 0 */
    const char *reason; /* static text, one of AX_RETRY_REASON_* */
} ax_retry_decision_t;

#define AX_RETRY_REASON_RETRY "retry"
#define AX_RETRY_REASON_EXHAUSTED "retries exhausted"
#define AX_RETRY_REASON_NOT_RETRYABLE "not retryable"      /* the handler said so */
#define AX_RETRY_REASON_FATAL "fatal error class"          /* rule action "alert" */
#define AX_RETRY_REASON_CLASS_FAIL "error class not retried" /* rule action "fail" */

/* Decide after attempt `attempt` (1 = the first run; values < 1 count as 1)
 * failed with `error_class` (NULL counts as ""). `handler_retryable` == 0:
 * the handler declared the error non-retryable, which turns a matching
 * "retry" rule into no retry (a "fail"/"alert" rule still decides, alert
 * included). A retry is refused once attempt > max_retries. `rnd` is a
 * uniform random value in [0, 1) from the caller (clamped into it). */
ax_retry_decision_t ax_retry_decide(const ax_retry_policy_t *p, const char *error_class,
                                    int handler_retryable, int attempt, double rnd);

/* The rule that decides `error_class` under p: the first match in p's chain,
 * else in the default chain (never NULL). */
const ax_retry_rule_t *ax_retry_match(const ax_retry_policy_t *p, const char *error_class);

/* "retry", "fail", "alert" / "backoff", "fixed", "soon" (the JSON names);
 * "?" if out of range. */
const char *ax_retry_action_name(ax_retry_action_t a);
const char *ax_retry_wait_name(int kind);

/* The JSON form of a job's rule chain is read by the adapters
 * (ax/retry_json.h, jansson); included here for the programs that include
 * only this header. Core code does not see that header. */
#if __has_include("ax/retry_json.h")
#include "ax/retry_json.h"
#endif

#endif
