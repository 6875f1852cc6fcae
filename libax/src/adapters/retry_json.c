/*
 * retry_json.c — a job's retry rule chain from its JSON text (see
 * ax/retry_json.h); the rules themselves and the decision are core
 * (core/retry.c).
 */
#include "ax/retry_json.h"

#include <ctype.h>
#include <string.h>

#include <jansson.h>

#include "ax/common.h"

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static int blank(const char *s) {
    while (isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

/* One rule from rules[i]; the message names rules[i] and the field. */
static int parse_rule(const json_t *o, size_t i, ax_retry_rule_t *r, char *errbuf,
                      size_t errlen) {
    if (!json_is_object(o))
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "rules[%zu]: expected an object, got %s",
                         i, type_name(o));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (strcmp(key, "class") && strcmp(key, "action") && strcmp(key, "wait") &&
            strcmp(key, "delay_ms"))
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "rules[%zu]: unknown field \"%.40s\" (class, action, wait, delay_ms)",
                             i, key);
    }
    memset(r, 0, sizeof *r);

    /* class */
    v = json_object_get(o, "class");
    if (!v)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "rules[%zu].class: missing (use \"*\" for any class)", i);
    if (!json_is_string(v))
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "rules[%zu].class: expected a string, got %s", i, type_name(v));
    const char *cls = json_string_value(v);
    size_t len = json_string_length(v);
    char why[128];
    if (ax_retry_class_check(cls, len, why, sizeof why) < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "rules[%zu].class: %s", i, why);
    memcpy(r->error_class, cls, len + 1);

    /* action */
    v = json_object_get(o, "action");
    if (!v)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "rules[%zu].action: missing (retry, fail or alert)", i);
    if (!json_is_string(v))
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "rules[%zu].action: expected a string, got %s", i, type_name(v));
    int a = ax_retry_action_parse(json_string_value(v));
    if (a < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "rules[%zu].action: unknown action \"%.40s\" (retry, fail or alert)", i,
                         json_string_value(v));
    r->action = (ax_retry_action_t)a;

    /* wait */
    v = json_object_get(o, "wait");
    r->kind = AX_RETRY_BACKOFF;
    if (v) {
        if (r->action != AX_RETRY_RETRY)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "rules[%zu].wait: only with action \"retry\"", i);
        if (!json_is_string(v))
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "rules[%zu].wait: expected a string, got %s", i, type_name(v));
        int k = ax_retry_wait_parse(json_string_value(v));
        if (k < 0)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "rules[%zu].wait: unknown wait \"%.40s\" (backoff, fixed or soon)",
                             i, json_string_value(v));
        r->kind = k;
    }

    /* delay_ms */
    v = json_object_get(o, "delay_ms");
    if (r->kind == AX_RETRY_FIXED && !v)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "rules[%zu].delay_ms: required with wait \"fixed\"", i);
    if (v) {
        if (r->kind != AX_RETRY_FIXED)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "rules[%zu].delay_ms: only with wait \"fixed\"", i);
        if (!json_is_integer(v))
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "rules[%zu].delay_ms: expected an integer, got %s", i, type_name(v));
        json_int_t ms = json_integer_value(v);
        if (ms < 0 || ms > AX_RETRY_MAX_DELAY_MS)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "rules[%zu].delay_ms: %lld out of range 0..%d", i, (long long)ms,
                             AX_RETRY_MAX_DELAY_MS);
        r->delay_ms = (int64_t)ms;
    }
    return AX_OK;
}

int ax_retry_rules_parse(ax_retry_policy_t *p, const char *json, char *errbuf, size_t errlen) {
    if (!json || blank(json)) {
        ax_retry_rules_default(p);
        return AX_OK;
    }
    json_error_t je;
    json_t *a = json_loads(json, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!a)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "rules: invalid JSON at line %d column %d: %s", je.line, je.column,
                         je.text);
    int rc = AX_OK;
    if (json_is_null(a)) {
        ax_retry_rules_default(p);
        goto out;
    }
    if (!json_is_array(a)) {
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID, "rules: expected an array of rules, got %s",
                       type_name(a));
        goto out;
    }
    size_t n = json_array_size(a);
    if (n > AX_RETRY_MAX_RULES) {
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID, "rules: %zu rules, at most %d", n,
                       AX_RETRY_MAX_RULES);
        goto out;
    }
    ax_retry_rule_t rules[AX_RETRY_MAX_RULES];
    for (size_t i = 0; i < n; i++)
        if ((rc = parse_rule(json_array_get(a, i), i, &rules[i], errbuf, errlen)) < 0)
            goto out;
    if (n)
        memcpy(p->rules, rules, n * sizeof rules[0]);
    p->nrules = n;
out:
    json_decref(a);
    return rc;
}
