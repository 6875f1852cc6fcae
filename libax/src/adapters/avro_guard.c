/*
 * avro_guard.c — bounded validator for Avro binary from untrusted sources.
 *
 * avro-c 1.11.1 trusts the lengths and counts it reads: a string length of
 * 2^31 in a 7-byte message makes it malloc 2 GiB (and leak it when the read
 * then fails), a negative length is passed to malloc as a huge size_t, enum
 * indexes and booleans are stored unchecked, and array counts are followed
 * blindly. So every decoder that uses avro-c first walks the bytes here,
 * against the same parsed schema avro-c will use, and only a buffer that is
 * exactly one well-formed datum is handed to avro-c. (codec.c's direct
 * readers of the hot records apply these rules themselves and walk only
 * the bytes they refuse, for the reason.) The walk must consume exactly the
 * bytes avro-c would (same varint rules: at most 10 bytes), only ever be
 * stricter.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "adapters/avro_guard.h"

/* Elements of types that take no bytes (null, empty records) cannot be
 * bounded by the buffer size, so they share one budget per datum; otherwise
 * a few bytes of nested arrays of nulls could ask avro-c for billions of
 * appends. */
#define ZERO_SIZE_ITEM_BUDGET AX_CODEC_MAX_ITEMS

/* One step of the path to the value being checked, for error messages. */
typedef struct frame {
    const char *name;   /* record field name, or NULL for an array/map element */
    int64_t index;
} frame_t;

#define MAX_FRAMES (2 * AX__AVRO_GUARD_MAX_DEPTH + 4)

typedef struct walk {
    const uint8_t *p;
    size_t len;
    size_t pos;
    size_t base;            /* added to offsets in messages */
    size_t zero_items;      /* zero-byte elements seen so far */
    char *errbuf;
    size_t errlen;
    const char *root;       /* record name, first element of the path */
    frame_t frames[MAX_FRAMES];
    int nframes;
} walk_t;

static int walk_value(walk_t *w, avro_schema_t schema, int depth);

static void format_path(const walk_t *w, char *out, size_t outlen) {
    size_t n = (size_t)snprintf(out, outlen, "%s", w->root);
    for (int i = 0; i < w->nframes && n < outlen; i++) {
        const frame_t *f = &w->frames[i];
        if (f->name)
            n += (size_t)snprintf(out + n, outlen - n, ".%s", f->name);
        else
            n += (size_t)snprintf(out + n, outlen - n, "[%" PRId64 "]", f->index);
    }
}

__attribute__((format(printf, 2, 3)))
static int fail(walk_t *w, const char *fmt, ...) {
    char msg[256], path[160];
    va_list ap;

    if (!w->errbuf || !w->errlen)
        return AX_ERR_INVALID;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    format_path(w, path, sizeof path);
    return ax_seterr(w->errbuf, w->errlen, AX_ERR_INVALID, "%s (in %s)", msg, path);
}

static size_t remaining(const walk_t *w) {
    return w->len - w->pos;
}

static size_t off(const walk_t *w, size_t pos) {
    return w->base + pos;
}

static int push(walk_t *w, const char *name, int64_t index) {
    if (w->nframes >= MAX_FRAMES)
        return fail(w, "nesting too deep at offset %zu", off(w, w->pos));
    w->frames[w->nframes].name = name;
    w->frames[w->nframes].index = index;
    w->nframes++;
    return 0;
}

static void pop(walk_t *w) {
    w->nframes--;
}

/* Zig-zag varint exactly as avro-c reads it: up to 10 bytes. A 10th byte
 * above 1 would carry bits past 64 that avro-c silently drops (through an
 * undefined shift), so it is rejected rather than reinterpreted. */
static int read_varint(walk_t *w, const char *what, int64_t *ret) {
    size_t start = w->pos;
    uint64_t v = 0;

    for (int i = 0;; i++) {
        uint8_t b;
        if (w->pos >= w->len)
            return fail(w, "truncated %s at offset %zu", what, off(w, start));
        b = w->p[w->pos++];
        if (i == 9 && b > 1)
            return fail(w, "%s at offset %zu is longer than 64 bits", what, off(w, start));
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80))
            break;
    }
    *ret = (int64_t)((v >> 1) ^ (0 - (v & 1)));
    return 0;
}

/* Reads a string/bytes/block-size length and checks it against what is
 * left after the length itself. */
static int read_length(walk_t *w, const char *what, int64_t *ret) {
    size_t start = w->pos;
    int64_t n = 0;
    int rc = read_varint(w, what, &n);

    if (rc)
        return rc;
    if (n < 0)
        return fail(w, "negative %s %" PRId64 " at offset %zu", what, n, off(w, start));
    if ((uint64_t)n > remaining(w))
        return fail(w, "%s %" PRId64 " at offset %zu exceeds remaining %zu bytes",
                    what, n, off(w, start), remaining(w));
    *ret = n;
    return 0;
}

/* Length of the well-formed UTF-8 sequence at s (at most avail bytes), or
 * 0 if there is none: NUL, stray continuation, overlong, surrogate, beyond
 * U+10FFFF, or cut short. */
static size_t utf8_seq_len(const uint8_t *s, size_t avail) {
    uint8_t c = s[0];
    size_t need;
    uint32_t cp, min;

    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        cp = c & 0x1f;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        cp = c & 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (avail <= need)
        return 0;
    for (size_t k = 1; k <= need; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need + 1;
}

int ax__utf8_check(const char *str, size_t len, size_t *ret_bad) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;

    while (i < len) {
        size_t n = utf8_seq_len(s + i, len - i);
        if (n == 0) {
            if (ret_bad)
                *ret_bad = i;
            return 0;
        }
        i += n;
    }
    return 1;
}

static int walk_string(walk_t *w) {
    size_t start = w->pos, bad = 0;
    int64_t n = 0;
    int rc = read_length(w, "string length", &n);

    if (rc)
        return rc;
    /* Strings become C strings (NUL-terminated) on our side and must be
     * readable by every other Avro implementation, which insist on UTF-8. */
    if (!ax__utf8_check((const char *)w->p + w->pos, (size_t)n, &bad)) {
        if (w->p[w->pos + bad] == 0)
            return fail(w, "string at offset %zu contains a NUL byte at offset %zu",
                        off(w, start), off(w, w->pos + bad));
        return fail(w, "string at offset %zu is not valid UTF-8 (sequence 0x%02x... at offset %zu)",
                    off(w, start), w->p[w->pos + bad], off(w, w->pos + bad));
    }
    w->pos += (size_t)n;
    return 0;
}

/* A lower bound of the encoded size of a value of `schema`, used to bound
 * element counts by the bytes left. 0 for types that may take no bytes. */
static size_t min_size(avro_schema_t schema, int depth) {
    if (depth > AX__AVRO_GUARD_MAX_DEPTH)
        return 0;   /* recursive schema: 0 is always a valid lower bound */
    switch (avro_typeof(schema)) {
    case AVRO_NULL:
        return 0;
    case AVRO_FLOAT:
        return 4;
    case AVRO_DOUBLE:
        return 8;
    case AVRO_FIXED: {
        int64_t n = avro_schema_fixed_size(schema);
        return n > 0 && n < INT32_MAX ? (size_t)n : 0;
    }
    case AVRO_RECORD: {
        size_t total = 0, nf = avro_schema_record_size(schema);
        for (size_t i = 0; i < nf && total < INT32_MAX; i++)
            total += min_size(avro_schema_record_field_get_by_index(schema, (int)i), depth + 1);
        return total;
    }
    case AVRO_LINK:
        return min_size(avro_schema_link_target(schema), depth + 1);
    default:
        /* boolean, int, long, enum, string, bytes, array, map, union: at
         * least one byte (a varint, a length or a block count) */
        return 1;
    }
}

static int walk_blocks(walk_t *w, avro_schema_t items, int is_map, int depth) {
    const char *kind = is_map ? "map" : "array";
    size_t start = w->pos;
    size_t min = min_size(items, depth) + (is_map ? 1 : 0);   /* a key takes >= 1 byte */
    uint64_t total = 0;

    for (;;) {
        size_t at = w->pos, block_start = 0;
        int64_t count = 0, block_size = -1;
        int rc = read_varint(w, is_map ? "map block count" : "array block count", &count);

        if (rc)
            return rc;
        if (count == 0)
            break;
        if (count < 0) {
            /* A negative count is followed by the block's size in bytes,
             * which lets readers skip the block. */
            if (count == INT64_MIN)
                return fail(w, "%s block count at offset %zu is out of range", kind, off(w, at));
            count = -count;
            rc = read_length(w, is_map ? "map block size" : "array block size", &block_size);
            if (rc)
                return rc;
            block_start = w->pos;
        }
        if ((uint64_t)count > AX_CODEC_MAX_ITEMS - total)
            return fail(w, "%s at offset %zu has more than %d items (block count %" PRId64
                        " at offset %zu)", kind, off(w, start), AX_CODEC_MAX_ITEMS, count, off(w, at));
        if (min > 0 && (uint64_t)count > remaining(w) / min)
            return fail(w, "%s block count %" PRId64 " at offset %zu exceeds remaining %zu bytes",
                        kind, count, off(w, at), remaining(w));
        if (min == 0) {
            if ((uint64_t)count > ZERO_SIZE_ITEM_BUDGET - w->zero_items)
                return fail(w, "more than %d empty items in the datum (block count %" PRId64
                            " at offset %zu)", ZERO_SIZE_ITEM_BUDGET, count, off(w, at));
            w->zero_items += (size_t)count;
        }
        for (int64_t i = 0; i < count; i++) {
            if ((rc = push(w, NULL, (int64_t)total + i)))
                return rc;
            if (is_map && (rc = walk_string(w)))
                return rc;
            if ((rc = walk_value(w, items, depth + 1)))
                return rc;
            pop(w);
        }
        total += (uint64_t)count;
        if (block_size >= 0 && w->pos - block_start != (uint64_t)block_size)
            return fail(w, "%s block size %" PRId64 " at offset %zu does not match the block's %zu bytes",
                        kind, block_size, off(w, at), w->pos - block_start);
    }
    return 0;
}

static int walk_value(walk_t *w, avro_schema_t schema, int depth) {
    size_t at = w->pos;
    int64_t v = 0;
    int rc;

    if (depth > AX__AVRO_GUARD_MAX_DEPTH)
        return fail(w, "value at offset %zu nested deeper than %d", off(w, at),
                    AX__AVRO_GUARD_MAX_DEPTH);

    switch (avro_typeof(schema)) {
    case AVRO_NULL:
        return 0;

    case AVRO_BOOLEAN:
        if (remaining(w) < 1)
            return fail(w, "truncated boolean at offset %zu", off(w, at));
        if (w->p[w->pos] > 1)
            return fail(w, "boolean byte 0x%02x at offset %zu is not 0 or 1",
                        w->p[w->pos], off(w, at));
        w->pos++;
        return 0;

    case AVRO_INT32:
        if ((rc = read_varint(w, "int", &v)))
            return rc;
        if (v < INT32_MIN || v > INT32_MAX)
            return fail(w, "int %" PRId64 " at offset %zu is out of the 32-bit range", v, off(w, at));
        return 0;

    case AVRO_INT64:
        return read_varint(w, "long", &v);

    case AVRO_FLOAT:
    case AVRO_DOUBLE: {
        size_t n = avro_typeof(schema) == AVRO_FLOAT ? 4 : 8;
        if (remaining(w) < n)
            return fail(w, "truncated %s at offset %zu", n == 4 ? "float" : "double", off(w, at));
        w->pos += n;
        return 0;
    }

    case AVRO_STRING:
        return walk_string(w);

    case AVRO_BYTES:
        if ((rc = read_length(w, "bytes length", &v)))
            return rc;
        w->pos += (size_t)v;
        return 0;

    case AVRO_FIXED: {
        int64_t n = avro_schema_fixed_size(schema);
        if (n < 0 || (uint64_t)n > remaining(w))
            return fail(w, "fixed of %" PRId64 " bytes at offset %zu exceeds remaining %zu bytes",
                        n, off(w, at), remaining(w));
        w->pos += (size_t)n;
        return 0;
    }

    case AVRO_ENUM: {
        int n = avro_schema_enum_number_of_symbols(schema);
        if ((rc = read_varint(w, "enum index", &v)))
            return rc;
        if (v < 0 || v >= n)
            return fail(w, "enum index %" PRId64 " at offset %zu is out of range 0..%d (%s)",
                        v, off(w, at), n - 1, avro_schema_name(schema));
        return 0;
    }

    case AVRO_UNION: {
        size_t n = avro_schema_union_size(schema);
        if ((rc = read_varint(w, "union index", &v)))
            return rc;
        if (v < 0 || (uint64_t)v >= n)
            return fail(w, "union index %" PRId64 " at offset %zu is out of range 0..%zu",
                        v, off(w, at), n - 1);
        return walk_value(w, avro_schema_union_branch(schema, (int)v), depth + 1);
    }

    case AVRO_RECORD: {
        size_t n = avro_schema_record_size(schema);
        for (size_t i = 0; i < n; i++) {
            if ((rc = push(w, avro_schema_record_field_name(schema, (int)i), 0)))
                return rc;
            rc = walk_value(w, avro_schema_record_field_get_by_index(schema, (int)i), depth + 1);
            if (rc)
                return rc;
            pop(w);
        }
        return 0;
    }

    case AVRO_ARRAY:
        return walk_blocks(w, avro_schema_array_items(schema), 0, depth);

    case AVRO_MAP:
        return walk_blocks(w, avro_schema_map_values(schema), 1, depth);

    case AVRO_LINK:
        return walk_value(w, avro_schema_link_target(schema), depth + 1);

    default:
        return fail(w, "unsupported schema type %d at offset %zu", (int)avro_typeof(schema), off(w, at));
    }
}

int ax__avro_guard_walk(avro_schema_t schema, const void *avro, size_t len,
                        size_t base, char *errbuf, size_t errlen) {
    walk_t w = {
        .p = avro, .len = len, .base = base, .errbuf = errbuf, .errlen = errlen,
        .root = is_avro_named_type(schema) ? avro_schema_name(schema) : avro_schema_type_name(schema),
    };
    int rc;

    if (!avro && len)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "NULL buffer of %zu bytes", len);
    if ((rc = walk_value(&w, schema, 0)))
        return rc;
    if (w.pos != w.len)
        return fail(&w, "%zu trailing bytes at offset %zu after the record", w.len - w.pos,
                    off(&w, w.pos));
    return 0;
}

int ax_codec_validate(int32_t schema_id, const void *avro, size_t len,
                      char *errbuf, size_t errlen) {
    avro_schema_t schema = ax__codec_schema(schema_id, errbuf, errlen);

    if (!schema)
        return AX_ERR_INVALID;
    return ax__avro_guard_walk(schema, avro, len, 0, errbuf, errlen);
}
