/*
 * ax/apiauth.h — ax-api's bearer tokens (docs/SECURITY.md): the token
 * table parsed from api.tokens (NAME:SCOPE:SHA256HEX,...; only hashes are
 * configured), the constant-time lookup of a presented token, and a token
 * bucket per token for the rate limit. Pure: no I/O, no clock of its own
 * (callers pass monotonic milliseconds).
 */
#ifndef AX_APIAUTH_H
#define AX_APIAUTH_H

#include <stddef.h>
#include <stdint.h>

#include "ax/hmac.h"

typedef enum { AX_SCOPE_READ = 1, AX_SCOPE_ADMIN = 2 } ax_scope_t;

#define AX_TOKEN_NAME_MAX 64
/* What `axctl api token create` makes: "axt_" and 64 hex digits. */
#define AX_TOKEN_PREFIX "axt_"
#define AX_TOKEN_LEN (4 + 64)

typedef struct ax_api_token {
    char name[AX_TOKEN_NAME_MAX + 1];
    ax_scope_t scope;
    unsigned char hash[AX_SHA256_LEN];
    /* rate limit: a bucket of `tokens` refilled at rate/s up to burst */
    double bucket;
    int64_t bucket_ms; /* when bucket was last refilled; 0: never (full) */
} ax_api_token_t;

typedef struct ax_api_tokens {
    ax_api_token_t *v;
    size_t n;
} ax_api_tokens_t;

/* Parse spec (NULL or "": no token). 0, or AX_ERR_INVALID with the entry
 * at fault in errbuf (the hash is never echoed), AX_ERR_NOMEM. */
int ax_api_tokens_parse(const char *spec, ax_api_tokens_t *ret, char *errbuf, size_t errlen);
void ax_api_tokens_free(ax_api_tokens_t *t);

/* The entry whose hash is SHA-256(token), or NULL. Every entry is compared
 * in full, in constant time, whatever matches. */
ax_api_token_t *ax_api_tokens_find(ax_api_tokens_t *t, const char *token, size_t len);

/* Take one request from tok's bucket at monotonic time now_ms: 1 allowed,
 * 0 refused (*ret_retry_s: seconds until one is available, >= 1). */
int ax_api_rate_take(ax_api_token_t *tok, int64_t now_ms, int64_t rate_per_s, int64_t burst,
                     int64_t *ret_retry_s);

/* A new token (AX_TOKEN_LEN chars and NUL) from 32 random bytes, and the
 * hex of its hash (AX_SHA256_HEX_LEN). */
void ax_api_token_make(const unsigned char random[32], char out[AX_TOKEN_LEN + 1],
                       char hash_hex[AX_SHA256_HEX_LEN]);

const char *ax_scope_name(ax_scope_t s);

#endif
