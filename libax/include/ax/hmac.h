/*
 * ax/hmac.h — SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), pure C.
 *
 * Used to sign alert webhooks (services/callback/alert.c, docs/ALERTS.md).
 * No OpenSSL: ax does not depend on it. Streaming (init/update/final) and
 * one-shot forms; a context may be reused after init again. Key material
 * copied into a context is wiped by final().
 */
#ifndef AX_HMAC_H
#define AX_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define AX_SHA256_LEN 32       /* digest bytes */
#define AX_SHA256_BLOCK 64     /* block bytes */
#define AX_SHA256_HEX_LEN 65   /* lower-case hex digest plus NUL */

typedef struct ax_sha256 {
    uint32_t h[8];
    uint64_t len;                        /* bytes hashed so far */
    unsigned char buf[AX_SHA256_BLOCK];  /* partial block */
    size_t nbuf;
} ax_sha256_t;

void ax_sha256_init(ax_sha256_t *c);
void ax_sha256_update(ax_sha256_t *c, const void *data, size_t len);
void ax_sha256_final(ax_sha256_t *c, unsigned char out[AX_SHA256_LEN]);
void ax_sha256(const void *data, size_t len, unsigned char out[AX_SHA256_LEN]);

typedef struct ax_hmac_sha256 {
    ax_sha256_t inner, outer;
} ax_hmac_sha256_t;

/* Any key length (keys longer than a block are hashed first). */
void ax_hmac_sha256_init(ax_hmac_sha256_t *c, const void *key, size_t keylen);
void ax_hmac_sha256_update(ax_hmac_sha256_t *c, const void *data, size_t len);
void ax_hmac_sha256_final(ax_hmac_sha256_t *c, unsigned char out[AX_SHA256_LEN]);
void ax_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                    unsigned char out[AX_SHA256_LEN]);

/* Lower-case hex of n bytes into out (2*n+1 chars, NUL-terminated). */
void ax_hex_encode(const unsigned char *in, size_t n, char *out);

/* 1 if the n bytes of a and b are equal, in time independent of where they
 * differ (for comparing signatures). */
int ax_memeq_ct(const void *a, const void *b, size_t n);

#endif
