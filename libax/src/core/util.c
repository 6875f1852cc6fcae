/*
 * util.c — error-string helper shared by every module.
 */
#include <stdarg.h>
#include <stdio.h>

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

void ax_random_hex(char *out, size_t nbytes) {
    static const char hex[] = "0123456789abcdef";
    unsigned char buf[64];
    size_t k = 0;
    while (k < nbytes) {
        size_t n = nbytes - k < sizeof buf ? nbytes - k : sizeof buf;
        if (getrandom(buf, n, 0) != (ssize_t)n) {
            /* getrandom on Linux >= 3.17 does not fail for <= 256 bytes. */
            uint64_t x = (uint64_t)ax_mono_ms() * 2654435761u + k;
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
