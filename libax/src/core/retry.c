/* retry.c — see ax/retry.h and docs/RETRIES.md. */
#include "ax/retry.h"

#include <math.h>
#include <string.h>

#include "ax/common.h"

#define R(cls, act, kind, delay) {cls, act, kind, delay}

/* The default chain; its last rule matches any class, so a match always
 * exists once this chain is consulted. */
static const ax_retry_rule_t default_chain[] = {
    R("fatal", AX_RETRY_FAIL_ALERT, AX_RETRY_BACKOFF, 0),
    R("backlog_full", AX_RETRY_FAIL_ALERT, AX_RETRY_BACKOFF, 0),
    R("system", AX_RETRY_FAIL_ALERT, AX_RETRY_BACKOFF, 0),
    R("spawn", AX_RETRY_FAIL, AX_RETRY_BACKOFF, 0),
    R("cancelled", AX_RETRY_FAIL, AX_RETRY_BACKOFF, 0),
    R("timeout", AX_RETRY_RETRY, AX_RETRY_SOON, 0),
    R("network", AX_RETRY_RETRY, AX_RETRY_SOON, 0),
    R("worker_lost", AX_RETRY_RETRY, AX_RETRY_SOON, 0),
    R("lease_lost", AX_RETRY_RETRY, AX_RETRY_SOON, 0),
    R("conflict", AX_RETRY_RETRY, AX_RETRY_FIXED, 10000),
    R("", AX_RETRY_RETRY, AX_RETRY_BACKOFF, 0),
};
#undef R

static const char *const action_names[] = {"retry", "fail", "alert"};
static const char *const wait_names[] = {"backoff", "fixed", "soon"};

const char *ax_retry_action_name(ax_retry_action_t a) {
    return (unsigned)a < AX_ARRAY_SIZE(action_names) ? action_names[a] : "?";
}

const char *ax_retry_wait_name(int kind) {
    return (unsigned)kind < AX_ARRAY_SIZE(wait_names) ? wait_names[kind] : "?";
}

static int name_index(const char *const *names, size_t n, const char *s) {
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i;
    return -1;
}

int ax_retry_action_parse(const char *name) {
    return name_index(action_names, AX_ARRAY_SIZE(action_names), name);
}

int ax_retry_wait_parse(const char *name) {
    return name_index(wait_names, AX_ARRAY_SIZE(wait_names), name);
}

int ax_retry_class_check(const char *cls, size_t len, char *errbuf, size_t errlen) {
    if (len >= AX_RETRY_CLASS_LEN)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "%zu bytes, at most %d", len,
                         AX_RETRY_CLASS_LEN - 1);
    for (size_t k = 0; k < len; k++) {
        unsigned char c = (unsigned char)cls[k];
        if (c <= 0x20 || c >= 0x7f)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "byte %zu is not printable ASCII",
                             k);
        if (c == '*' && k + 1 != len)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "'*' only at the end (a prefix)");
    }
    return AX_OK;
}

void ax_retry_rules_default(ax_retry_policy_t *p) {
    memcpy(p->rules, default_chain, sizeof default_chain);
    p->nrules = AX_ARRAY_SIZE(default_chain);
}

void ax_retry_policy_default(ax_retry_policy_t *p) {
    memset(p, 0, sizeof *p);
    p->max_retries = 3;
    p->initial_ms = 2000;
    p->multiplier = 2.0;
    p->max_ms = 30000;
    p->jitter_ms = 2000;
    ax_retry_rules_default(p);
}

int ax_retry_policy_check(const ax_retry_policy_t *p, char *errbuf, size_t errlen) {
    if (p->max_retries < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "max_retries: %d is negative",
                         p->max_retries);
    if (p->initial_ms < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "initial_ms: %lld is negative",
                         (long long)p->initial_ms);
    if (!(p->multiplier >= 1.0)) /* NaN too; +inf is allowed: straight to the cap */
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "multiplier: %g is not a number >= 1",
                         p->multiplier);
    if (p->max_ms < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "max_ms: %lld is negative",
                         (long long)p->max_ms);
    if (p->jitter_ms < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "jitter_ms: %lld is negative",
                         (long long)p->jitter_ms);
    if (p->nrules > AX_RETRY_MAX_RULES)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "rules: %zu rules, at most %d",
                         p->nrules, AX_RETRY_MAX_RULES);
    return AX_OK;
}

/* ---- matching ---------------------------------------------------------- */

static int class_matches(const char *pat, const char *cls) {
    size_t n = strnlen(pat, AX_RETRY_CLASS_LEN);
    if (n == 0)
        return 1;
    if (pat[n - 1] == '*')
        return strncmp(pat, cls, n - 1) == 0;
    /* equal in n bytes means cls has at least n bytes, so cls[n] exists */
    return strncmp(pat, cls, n) == 0 && cls[n] == '\0';
}

const ax_retry_rule_t *ax_retry_match(const ax_retry_policy_t *p, const char *error_class) {
    const char *cls = error_class ? error_class : "";
    size_t n = p->nrules < AX_RETRY_MAX_RULES ? p->nrules : AX_RETRY_MAX_RULES;
    for (size_t i = 0; i < n; i++)
        if (class_matches(p->rules[i].error_class, cls))
            return &p->rules[i];
    for (size_t i = 0; i < AX_ARRAY_SIZE(default_chain); i++)
        if (class_matches(default_chain[i].error_class, cls))
            return &default_chain[i];
    return &default_chain[AX_ARRAY_SIZE(default_chain) - 1]; /* not reached */
}

/* ---- delays ------------------------------------------------------------- */

static int64_t nonneg(int64_t v) { return v < 0 ? 0 : v; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t sat_add(int64_t a, int64_t b) { /* a, b >= 0 */
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* floor(rnd * (n + 1)) for n >= 0, an integer in [0, n]. */
static int64_t jitter(int64_t n, double rnd) {
    n = nonneg(n);
    if (!(rnd > 0.0) || n == 0) /* NaN too */
        return 0;
    if (rnd >= 1.0)
        return n;
    double x = floor(rnd * ((double)n + 1.0));
    if (x >= (double)n)
        return n;
    int64_t j = (int64_t)x;
    return j < n ? j : n;
}

/* min(initial * multiplier^(k-1), max) for k >= 1, without overflow. An
 * integral multiplier (the usual 2) is exact; otherwise the product is
 * computed in double (+inf reaches the cap at k = 2) and kept within
 * [initial, max]. */
static int64_t backoff_base(const ax_retry_policy_t *p, int k) {
    int64_t initial = nonneg(p->initial_ms), cap = nonneg(p->max_ms);
    double m = p->multiplier >= 1.0 ? p->multiplier : 1.0; /* NaN counts as 1, +inf is fine */
    if (initial >= cap)
        return cap;
    if (initial == 0 || m == 1.0 || k <= 1)
        return initial;
    if (m == floor(m) && m < 0x1p62) {
        int64_t mi = (int64_t)m, v = initial;
        for (int i = 1; i < k && v < cap; i++) /* at most 63 rounds: mi >= 2 */
            v = v > cap / mi ? cap : v * mi;
        return v < cap ? v : cap;
    }
    double d = (double)initial * pow(m, (double)(k - 1)); /* may be +inf: then the cap */
    if (!(d < (double)cap))
        return cap;
    int64_t v = (int64_t)d; /* d < 2^63 here, so the conversion is defined */
    return v < initial ? initial : v < cap ? v : cap;
}

ax_retry_decision_t ax_retry_decide(const ax_retry_policy_t *p, const char *error_class,
                                    int handler_retryable, int attempt, double rnd) {
    ax_retry_decision_t d = {0, 0, 0, AX_RETRY_REASON_RETRY};
    /* the trigger's backlog cap: never retried (a retry would rejoin the
     * backlog it was cut from), whatever the job's own rules say */
    if (error_class && strcmp(error_class, "backlog_full") == 0) {
        d.alert = 1;
        d.reason = AX_RETRY_REASON_FATAL;
        return d;
    }
    const ax_retry_rule_t *r = ax_retry_match(p, error_class);
    if (attempt < 1)
        attempt = 1;
    switch (r->action) {
    case AX_RETRY_RETRY:
        break;
    case AX_RETRY_FAIL_ALERT:
        d.alert = 1;
        d.reason = AX_RETRY_REASON_FATAL;
        return d;
    case AX_RETRY_FAIL:
    default:
        d.reason = AX_RETRY_REASON_CLASS_FAIL;
        return d;
    }
    if (!handler_retryable) {
        d.reason = AX_RETRY_REASON_NOT_RETRYABLE;
        return d;
    }
    if (attempt > (p->max_retries > 0 ? p->max_retries : 0)) {
        d.reason = AX_RETRY_REASON_EXHAUSTED;
        return d;
    }
    d.retry = 1;
    switch (r->kind) {
    case AX_RETRY_FIXED:
        d.delay_ms = nonneg(r->delay_ms);
        break;
    case AX_RETRY_SOON: {
        int64_t base = min64(min64(nonneg(p->initial_ms), nonneg(p->max_ms)), AX_RETRY_SOON_MS);
        d.delay_ms = base + jitter(min64(p->jitter_ms, AX_RETRY_SOON_JITTER_MS), rnd);
        break;
    }
    case AX_RETRY_BACKOFF:
    default:
        d.delay_ms = sat_add(backoff_base(p, attempt), jitter(p->jitter_ms, rnd));
        break;
    }
    return d;
}
