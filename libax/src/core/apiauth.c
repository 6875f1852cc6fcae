/*
 * apiauth.c — ax-api's token table and rate buckets (ax/apiauth.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/apiauth.h"
#include "ax/common.h"

const char *ax_scope_name(ax_scope_t s) {
    return s == AX_SCOPE_ADMIN ? "admin" : "read";
}

static int hexval(int c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int name_ok(const char *s, size_t n) {
    if (n == 0 || n > AX_TOKEN_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* One NAME:SCOPE:HEX entry of n bytes at e (k: its position, for errors). */
static int entry_parse(const char *e, size_t n, size_t k, ax_api_token_t *t, char *errbuf,
                       size_t errlen) {
    const char *c1 = memchr(e, ':', n);
    const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - e)) : NULL;
    if (!c2)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "api.tokens: entry %zu is not NAME:SCOPE:SHA256HEX", k);
    size_t nl = (size_t)(c1 - e), sl = (size_t)(c2 - c1 - 1), hl = n - (size_t)(c2 + 1 - e);
    if (!name_ok(e, nl))
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "api.tokens: entry %zu: the name must be 1..%d of A-Z a-z 0-9 . _ -", k,
                         AX_TOKEN_NAME_MAX);
    memcpy(t->name, e, nl);
    t->name[nl] = '\0';
    if (sl == 4 && memcmp(c1 + 1, "read", 4) == 0)
        t->scope = AX_SCOPE_READ;
    else if (sl == 5 && memcmp(c1 + 1, "admin", 5) == 0)
        t->scope = AX_SCOPE_ADMIN;
    else
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "api.tokens: entry %zu (%s): the scope must be read or admin", k,
                         t->name);
    if (hl != 2 * AX_SHA256_LEN)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "api.tokens: entry %zu (%s): the hash must be 64 hex digits (SHA-256)",
                         k, t->name);
    for (size_t i = 0; i < AX_SHA256_LEN; i++) {
        int hi = hexval((unsigned char)c2[1 + 2 * i]), lo = hexval((unsigned char)c2[2 + 2 * i]);
        if (hi < 0 || lo < 0)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "api.tokens: entry %zu (%s): the hash must be 64 hex digits", k,
                             t->name);
        t->hash[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

int ax_api_tokens_parse(const char *spec, ax_api_tokens_t *ret, char *errbuf, size_t errlen) {
    ax_api_tokens_t t = {0};
    size_t cap = 1;
    for (const char *p = spec; p && *p; p++)
        cap += *p == ',';
    if (spec && *spec && !(t.v = calloc(cap, sizeof *t.v)))
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "api.tokens: out of memory");
    const char *p = spec;
    while (p && *p) {
        while (*p == ' ')
            p++;
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (n && p[n - 1] == ' ')
            n--;
        if (n) {
            int rc = entry_parse(p, n, t.n + 1, &t.v[t.n], errbuf, errlen);
            for (size_t i = 0; rc == 0 && i < t.n; i++)
                if (strcmp(t.v[i].name, t.v[t.n].name) == 0)
                    rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                                   "api.tokens: the name '%s' is given twice", t.v[i].name);
            if (rc < 0) {
                ax_api_tokens_free(&t);
                return rc;
            }
            t.n++;
        }
        p = end ? end + 1 : NULL;
    }
    *ret = t;
    return 0;
}

void ax_api_tokens_free(ax_api_tokens_t *t) {
    if (!t)
        return;
    free(t->v);
    t->v = NULL;
    t->n = 0;
}

ax_api_token_t *ax_api_tokens_find(ax_api_tokens_t *t, const char *token, size_t len) {
    unsigned char h[AX_SHA256_LEN];
    ax_sha256(token, len, h);
    ax_api_token_t *found = NULL;
    for (size_t i = 0; i < t->n; i++) {
        int eq = ax_memeq_ct(h, t->v[i].hash, sizeof h);
        if (eq && !found)
            found = &t->v[i];
    }
    return found;
}

int ax_api_rate_take(ax_api_token_t *tok, int64_t now_ms, int64_t rate_per_s, int64_t burst,
                     int64_t *ret_retry_s) {
    if (tok->bucket_ms == 0) {
        tok->bucket = (double)burst;
    } else if (now_ms > tok->bucket_ms) {
        tok->bucket += (double)(now_ms - tok->bucket_ms) * (double)rate_per_s / 1000.0;
        if (tok->bucket > (double)burst)
            tok->bucket = (double)burst;
    }
    tok->bucket_ms = now_ms > 0 ? now_ms : 1;
    if (tok->bucket >= 1.0) {
        tok->bucket -= 1.0;
        return 1;
    }
    double wait_s = (1.0 - tok->bucket) / (double)rate_per_s;
    int64_t s = (int64_t)ceil(wait_s);
    *ret_retry_s = s < 1 ? 1 : s;
    return 0;
}

void ax_api_token_make(const unsigned char random[32], char out[AX_TOKEN_LEN + 1],
                       char hash_hex[AX_SHA256_HEX_LEN]) {
    memcpy(out, AX_TOKEN_PREFIX, 4);
    ax_hex_encode(random, 32, out + 4);
    unsigned char h[AX_SHA256_LEN];
    ax_sha256(out, AX_TOKEN_LEN, h);
    ax_hex_encode(h, sizeof h, hash_hex);
}
