/*
 * hmac.c — SHA-256 (FIPS 180-4 section 6.2) and HMAC-SHA256 (RFC 2104).
 * Checked against the NIST vectors and RFC 4231 in tests/unit/test_hmac.c.
 */
#include <string.h>

#include "ax/hmac.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void wipe(void *p, size_t n) {
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

static void compress(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
               (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = ROTR(w[t - 15], 7) ^ ROTR(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = ROTR(w[t - 2], 17) ^ ROTR(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 = hh + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g)) +
                      K[t] + w[t];
        uint32_t t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
    wipe(w, sizeof w);
}

void ax_sha256_init(ax_sha256_t *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->nbuf = 0;
}

void ax_sha256_update(ax_sha256_t *c, const void *data, size_t len) {
    const unsigned char *p = data;
    c->len += len;
    if (c->nbuf) {
        size_t take = AX_SHA256_BLOCK - c->nbuf;
        if (take > len)
            take = len;
        memcpy(c->buf + c->nbuf, p, take);
        c->nbuf += take;
        p += take;
        len -= take;
        if (c->nbuf < AX_SHA256_BLOCK)
            return;
        compress(c->h, c->buf);
        c->nbuf = 0;
    }
    for (; len >= AX_SHA256_BLOCK; p += AX_SHA256_BLOCK, len -= AX_SHA256_BLOCK)
        compress(c->h, p);
    if (len) {
        memcpy(c->buf, p, len);
        c->nbuf = len;
    }
}

void ax_sha256_final(ax_sha256_t *c, unsigned char out[AX_SHA256_LEN]) {
    uint64_t bits = c->len * 8;
    c->buf[c->nbuf++] = 0x80;
    if (c->nbuf > AX_SHA256_BLOCK - 8) {
        memset(c->buf + c->nbuf, 0, AX_SHA256_BLOCK - c->nbuf);
        compress(c->h, c->buf);
        c->nbuf = 0;
    }
    memset(c->buf + c->nbuf, 0, AX_SHA256_BLOCK - 8 - c->nbuf);
    for (int i = 0; i < 8; i++)
        c->buf[AX_SHA256_BLOCK - 1 - i] = (unsigned char)(bits >> (8 * i));
    compress(c->h, c->buf);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(c->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)c->h[i];
    }
    wipe(c, sizeof *c);
}

void ax_sha256(const void *data, size_t len, unsigned char out[AX_SHA256_LEN]) {
    ax_sha256_t c;
    ax_sha256_init(&c);
    ax_sha256_update(&c, data, len);
    ax_sha256_final(&c, out);
}

void ax_hmac_sha256_init(ax_hmac_sha256_t *c, const void *key, size_t keylen) {
    unsigned char k[AX_SHA256_BLOCK] = {0}, pad[AX_SHA256_BLOCK];
    if (keylen > AX_SHA256_BLOCK)
        ax_sha256(key, keylen, k);
    else if (keylen)
        memcpy(k, key, keylen);
    for (int i = 0; i < AX_SHA256_BLOCK; i++)
        pad[i] = k[i] ^ 0x36;
    ax_sha256_init(&c->inner);
    ax_sha256_update(&c->inner, pad, sizeof pad);
    for (int i = 0; i < AX_SHA256_BLOCK; i++)
        pad[i] = k[i] ^ 0x5c;
    ax_sha256_init(&c->outer);
    ax_sha256_update(&c->outer, pad, sizeof pad);
    wipe(k, sizeof k);
    wipe(pad, sizeof pad);
}

void ax_hmac_sha256_update(ax_hmac_sha256_t *c, const void *data, size_t len) {
    ax_sha256_update(&c->inner, data, len);
}

void ax_hmac_sha256_final(ax_hmac_sha256_t *c, unsigned char out[AX_SHA256_LEN]) {
    unsigned char ih[AX_SHA256_LEN];
    ax_sha256_final(&c->inner, ih);
    ax_sha256_update(&c->outer, ih, sizeof ih);
    ax_sha256_final(&c->outer, out);
    wipe(ih, sizeof ih);
}

void ax_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                    unsigned char out[AX_SHA256_LEN]) {
    ax_hmac_sha256_t c;
    ax_hmac_sha256_init(&c, key, keylen);
    ax_hmac_sha256_update(&c, data, len);
    ax_hmac_sha256_final(&c, out);
}

void ax_hex_encode(const unsigned char *in, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

int ax_memeq_ct(const void *a, const void *b, size_t n) {
    const volatile unsigned char *x = a, *y = b;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++)
        d |= x[i] ^ y[i];
    return d == 0;
}
