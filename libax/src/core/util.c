/*
 * util.c — error-string helper shared by every module.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/common.h"

int ax_seterr(char *errbuf, size_t errlen, int code, const char *fmt, ...) {
    if (errbuf && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

#include <sys/random.h>
#include <unistd.h>

void ax_random_hex(char *out, size_t nbytes) {
    static const char hex[] = "0123456789abcdef";
    unsigned char buf[64];
    size_t k = 0;
    while (k < nbytes) {
        size_t n = nbytes - k < sizeof buf ? nbytes - k : sizeof buf;
        if (getrandom(buf, n, 0) != (ssize_t)n) {
            /* getrandom on Linux >= 3.17 does not fail for <= 256 bytes
             * (but in a sandbox without it, ENOSYS): the time, the pid and
             * a count of calls, so that two calls in one ms differ. */
            static _Atomic uint64_t calls;
            uint64_t x = (uint64_t)ax_mono_ms() * 2654435761u + k;
            x ^= ((uint64_t)getpid() << 40) ^ (calls++ * 0x9E3779B97F4A7C15ull);
            if (!x)
                x = 1; /* xorshift stays at 0 */
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                buf[i] = (unsigned char)x;
            }
        }
        for (size_t i = 0; i < n; i++, k++) {
            out[2 * k] = hex[buf[i] >> 4];
            out[2 * k + 1] = hex[buf[i] & 15];
        }
    }
    out[2 * nbytes] = '\0';
}

void ax_trace_id_new(char out[AX_TRACE_ID_LEN + 1]) {
    static const char hex[] = "0123456789abcdef";
    int64_t ms = ax_now_ms();
    uint64_t t = ms > 0 ? (uint64_t)ms : 0;
    for (int i = 11; i >= 0; i--, t >>= 4)
        out[i] = hex[t & 15]; /* 48 bits: until the year 10889 */
    ax_random_hex(out + 12, (AX_TRACE_ID_LEN - 12) / 2);
}

size_t ax_utf8_sanitize(char *s, size_t len) {
    size_t bad = 0, i = 0;
    unsigned char *p = (unsigned char *)s;
    while (i < len) {
        unsigned char c = p[i];
        size_t need;
        uint32_t min;
        if (c == 0) {
            p[i++] = '?';
            bad++;
            continue;
        }
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            need = 1;
            min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            need = 2;
            min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            need = 3;
            min = 0x10000;
        } else {
            p[i++] = '?';
            bad++;
            continue;
        }
        uint32_t cp = c & (0x3F >> need);
        size_t j = 1;
        for (; j <= need && i + j < len && (p[i + j] & 0xC0) == 0x80; j++)
            cp = (cp << 6) | (p[i + j] & 0x3F);
        if (j <= need || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            p[i++] = '?';
            bad++;
            continue;
        }
        i += need + 1;
    }
    return bad;
}

int ax_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *e = p + n;
    while (p < e) {
        unsigned c = *p++;
        if (c < 0x80)
            continue;
        int more;
        unsigned min, cp;
        if ((c & 0xE0) == 0xC0)
            more = 1, min = 0x80, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0)
            more = 2, min = 0x800, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0)
            more = 3, min = 0x10000, cp = c & 0x07;
        else
            return 0;
        if (e - p < more)
            return 0;
        for (int k = 0; k < more; k++) {
            if ((p[k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (p[k] & 0x3F);
        }
        p += more;
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    }
    return 1;
}

/* What a PostgreSQL timestamptz holds and a schedule can use: years 1-9999. */
#define TIME_MIN_MS INT64_C(-62135596800000)
#define TIME_MAX_MS INT64_C(253402300799999)

int ax_time_parse(const char *s, int64_t *ret_ms) {
    int64_t ms;
    if (*s && strspn(s, "0123456789") == strlen(s)) {
        errno = 0;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (errno || *end)
            return AX_ERR_INVALID;
        ms = v;
    } else {
        struct tm tm = {0};
        const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        int frac_ms = 0;
        if (p && *p == '.') {
            char *end;
            double frac = strtod(p, &end);
            frac_ms = (int)(frac * 1000 + 0.5);
            p = end;
        }
        long off = 0;
        if (p && (*p == '+' || *p == '-')) {
            int hh, mm;
            if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
                p = NULL;
            else {
                off = (hh * 60 + mm) * 60 * (*p == '-' ? -1 : 1);
                p += 6;
            }
        } else if (p && *p == 'Z') {
            p++;
        } else {
            p = NULL;
        }
        if (!p || *p)
            return AX_ERR_INVALID;
        ms = ((int64_t)timegm(&tm) - off) * 1000 + frac_ms;
    }
    if (ms < TIME_MIN_MS || ms > TIME_MAX_MS)
        return AX_ERR_TOOBIG;
    *ret_ms = ms;
    return 0;
}
