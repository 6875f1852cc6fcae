/*
 * cron.c — cron expression parser, next-fire-time search, and a small
 * reader of TZif zone data (RFC 8536) with the POSIX TZ footer rule. The
 * bytes come from the program's loader (ax_tz_set_loader; the file reader
 * is adapters/tzfile.c): core opens no file.
 *
 * Everything is computed on integers: "local seconds" are the wall-clock
 * time of the zone counted as if it were UTC, so calendar arithmetic is
 * one civil<->days conversion. ax_cron_next enumerates matching local
 * times in order (skipping by month, day, hour, minute, second) and maps
 * each to UTC instants, which is where the DST policy applies. Because a
 * DST transition can reorder local and UTC time (the repeated hour, a
 * shifted gap time), the search keeps the smallest instant found and stops
 * only once no later local time can map to an earlier instant.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/cron.h"

#define DAY_S 86400
/* Offsets in use anywhere are within +-26 h; a window this wide around an
 * instant contains every transition that can matter for it. */
#define TZ_WINDOW_S (2 * DAY_S)

/* ======================================================================
 * Calendar (proleptic Gregorian, Howard Hinnant's algorithms)
 * ==================================================================== */

static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = floordiv(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    int64_t era = floordiv(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int days_in_month(int64_t y, int m) {
    static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : dim[m - 1];
}

/* 0 = Sunday. 1970-01-01 was a Thursday. */
static int weekday(int64_t days) { return (int)(((days % 7) + 11) % 7); }

/* ======================================================================
 * Time zones
 * ==================================================================== */

typedef struct {
    char kind; /* 'J' (1-365, no Feb 29), 'D' (0-365), 'M' (month.week.day) */
    int a, b, c;
    int32_t time; /* seconds after local midnight; may be negative or > 24 h */
} tz_date_t;

struct ax_tz {
    char name[256];
    int64_t *trans; /* transition instants, ascending */
    uint8_t *idx;   /* type index per transition */
    int32_t *off;   /* UTC offset per type */
    size_t ntrans, ntypes;
    /* POSIX footer: governs instants after the last transition */
    int has_rule, rule_dst;
    int32_t std_off, dst_off;
    tz_date_t start, end;
    int32_t min_off, max_off; /* over everything the zone can yield */
    /* Zones are immutable once loaded, so one copy per name is shared by
     * every expression (100,000 cron jobs in one zone hold one zone). */
    unsigned refs;          /* guarded by tz_cache_lock */
    struct ax_tz *cache_next;
};

static pthread_mutex_t tz_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static ax_tz_t *tz_cache;

static void tz_free(ax_tz_t *tz) {
    free(tz->trans);
    free(tz->idx);
    free(tz->off);
    free(tz);
}

static int32_t rule_local_time(const tz_date_t *r, int64_t y, int64_t *ret_days) {
    int64_t jan1 = days_from_civil(y, 1, 1);
    int64_t day;
    if (r->kind == 'J')
        day = jan1 + r->a - 1 + (is_leap(y) && r->a >= 60);
    else if (r->kind == 'D')
        day = jan1 + r->a;
    else {
        int64_t first = days_from_civil(y, r->a, 1);
        int dom = 1 + (r->c - weekday(first) + 7) % 7 + 7 * (r->b - 1);
        while (dom > days_in_month(y, r->a))
            dom -= 7;
        day = first + dom - 1;
    }
    *ret_days = day;
    return r->time;
}

/* Start (DST on) and end (DST off) instants of year y under the rule. */
static void rule_year(const ax_tz_t *tz, int64_t y, int64_t *ret_start, int64_t *ret_end) {
    int64_t d;
    int32_t t = rule_local_time(&tz->start, y, &d);
    *ret_start = d * DAY_S + t - tz->std_off;
    t = rule_local_time(&tz->end, y, &d);
    *ret_end = d * DAY_S + t - tz->dst_off;
}

static int64_t year_of(int64_t s) {
    int64_t y;
    int m, d;
    civil_from_days(floordiv(s, DAY_S), &y, &m, &d);
    return y;
}

static int32_t rule_offset(const ax_tz_t *tz, int64_t u) {
    if (!tz->rule_dst)
        return tz->std_off;
    int64_t s, e;
    rule_year(tz, year_of(u + tz->std_off), &s, &e);
    int in_dst = s < e ? (u >= s && u < e) : !(u >= e && u < s);
    return in_dst ? tz->dst_off : tz->std_off;
}

int32_t ax_tz_offset(const ax_tz_t *tz, int64_t u) {
    if (tz->has_rule && (tz->ntrans == 0 || u >= tz->trans[tz->ntrans - 1]))
        return rule_offset(tz, u);
    if (tz->ntrans == 0 || u < tz->trans[0])
        return tz->ntypes ? tz->off[0] : 0;
    size_t lo = 0, hi = tz->ntrans; /* largest i with trans[i] <= u */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (tz->trans[mid] <= u)
            lo = mid;
        else
            hi = mid;
    }
    return tz->off[tz->idx[lo]];
}

/* The first transition strictly after u: 1 and its instant and offsets, or
 * 0 if the zone never changes again. */
static int tz_next_transition(const ax_tz_t *tz, int64_t u, int64_t *ret_t, int32_t *ret_before,
                              int32_t *ret_after) {
    if (tz->ntrans && u < tz->trans[tz->ntrans - 1]) {
        size_t lo = 0, hi = tz->ntrans - 1; /* first i with trans[i] > u */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (tz->trans[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        *ret_t = tz->trans[lo];
        *ret_before = lo ? tz->off[tz->idx[lo - 1]] : tz->off[0];
        *ret_after = tz->off[tz->idx[lo]];
        return 1;
    }
    if (!tz->has_rule || !tz->rule_dst)
        return 0;
    int64_t best = INT64_MAX;
    int best_is_start = 0;
    for (int64_t y = year_of(u) - 1; y <= year_of(u) + 1; y++) {
        int64_t s, e;
        rule_year(tz, y, &s, &e);
        if (s > u && s < best) {
            best = s;
            best_is_start = 1;
        }
        if (e > u && e < best) {
            best = e;
            best_is_start = 0;
        }
    }
    *ret_t = best;
    *ret_before = best_is_start ? tz->std_off : tz->dst_off;
    *ret_after = best_is_start ? tz->dst_off : tz->std_off;
    return 1;
}

/* Smallest and largest offset in force during [from, to]. */
static void tz_off_range(const ax_tz_t *tz, int64_t from, int64_t to, int32_t *ret_min,
                         int32_t *ret_max) {
    int32_t mn = ax_tz_offset(tz, from), mx = mn, before, after;
    int64_t t = from;
    for (int n = 0; tz_next_transition(tz, t, &t, &before, &after) && t <= to; n++) {
        if (n > 256) { /* a long range: the zone-wide bounds are good enough */
            mn = tz->min_off;
            mx = tz->max_off;
            break;
        }
        mn = after < mn ? after : mn;
        mx = after > mx ? after : mx;
    }
    *ret_min = mn;
    *ret_max = mx;
}

enum { MAP_NORMAL, MAP_GAP, MAP_OVERLAP };

/* Map local seconds L to UTC: NORMAL (ret[0]), GAP (ret[0] = L read with
 * the offset before the gap, i.e. shifted later by the gap's length) or
 * OVERLAP (ret[0] first occurrence, ret[1] second). */
static int tz_local_to_utc(const ax_tz_t *tz, int64_t L, int64_t ret[2]) {
    int64_t t = L - TZ_WINDOW_S;
    int32_t cur = ax_tz_offset(tz, t), b, a;
    while (tz_next_transition(tz, t, &t, &b, &a)) {
        if (L < t + (a < b ? a : b))
            break;
        if (a > b && L < t + a) {
            ret[0] = L - b;
            return MAP_GAP;
        }
        if (a < b && L < t + b) {
            ret[0] = L - b;
            ret[1] = L - a;
            return MAP_OVERLAP;
        }
        cur = a;
    }
    ret[0] = L - cur;
    return MAP_NORMAL;
}

int ax_tz_format(const ax_tz_t *tz, int64_t ms, char *buf, size_t len) {
    int64_t s = floordiv(ms, 1000);
    int frac = (int)(ms - s * 1000);
    int32_t off = ax_tz_offset(tz, s);
    int64_t L = s + off, days = floordiv(L, DAY_S), y;
    int sod = (int)(L - days * DAY_S), m, d;
    civil_from_days(days, &y, &m, &d);
    char fr[8] = "", of[16];
    if (frac)
        snprintf(fr, sizeof fr, ".%03d", frac);
    int32_t ao = off < 0 ? -off : off;
    if (ao % 60)
        snprintf(of, sizeof of, "%c%02d:%02d:%02d", off < 0 ? '-' : '+', (int)(ao / 3600),
                 (int)(ao / 60 % 60), (int)(ao % 60));
    else
        snprintf(of, sizeof of, "%c%02d:%02d", off < 0 ? '-' : '+', (int)(ao / 3600),
                 (int)(ao / 60 % 60));
    int n = snprintf(buf, len, "%04lld-%02d-%02dT%02d:%02d:%02d%s%s", (long long)y, m, d,
                     sod / 3600, sod / 60 % 60, sod % 60, fr, of);
    return n < 0 || (size_t)n >= len ? AX_ERR_TOOBIG : n;
}

const char *ax_tz_name(const ax_tz_t *tz) { return tz->name; }

void ax_tz_destroy(ax_tz_t *tz) {
    if (!tz)
        return;
    pthread_mutex_lock(&tz_cache_lock);
    int last = --tz->refs == 0;
    if (last)
        for (ax_tz_t **pp = &tz_cache; *pp; pp = &(*pp)->cache_next)
            if (*pp == tz) {
                *pp = tz->cache_next;
                break;
            }
    pthread_mutex_unlock(&tz_cache_lock);
    if (last)
        tz_free(tz);
}

/* ---- POSIX TZ string (the TZif footer), e.g. CET-1CEST,M3.5.0,M10.5.0/3 */

static int posix_name(const char **p) {
    const char *s = *p;
    if (*s == '<') {
        const char *e = strchr(s, '>');
        if (!e)
            return -1;
        *p = e + 1;
        return 0;
    }
    while (isalpha((unsigned char)**p))
        (*p)++;
    return *p - s >= 3 ? 0 : -1;
}

/* [+-]hh[:mm[:ss]] into seconds (sign as written). */
static int posix_hms(const char **p, int32_t *ret) {
    const char *s = *p;
    int sign = 1;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    if (!isdigit((unsigned char)*s))
        return -1;
    int32_t v[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        if (i && *s != ':')
            break;
        if (i)
            s++;
        if (!isdigit((unsigned char)*s))
            return -1;
        while (isdigit((unsigned char)*s) && v[i] < 1000)
            v[i] = v[i] * 10 + (*s++ - '0');
    }
    *ret = sign * (v[0] * 3600 + v[1] * 60 + v[2]);
    *p = s;
    return 0;
}

static int posix_num(const char **p, int *ret) {
    if (!isdigit((unsigned char)**p))
        return -1;
    int v = 0;
    while (isdigit((unsigned char)**p) && v < 10000)
        v = v * 10 + (*(*p)++ - '0');
    *ret = v;
    return 0;
}

static int posix_date(const char **p, tz_date_t *r) {
    r->time = 7200;
    r->b = r->c = 0;
    if (**p == 'M') {
        (*p)++;
        r->kind = 'M';
        if (posix_num(p, &r->a) || *(*p)++ != '.' || posix_num(p, &r->b) ||
            *(*p)++ != '.' || posix_num(p, &r->c))
            return -1;
        if (r->a < 1 || r->a > 12 || r->b < 1 || r->b > 5 || r->c > 6)
            return -1;
    } else if (**p == 'J') {
        (*p)++;
        r->kind = 'J';
        if (posix_num(p, &r->a) || r->a < 1 || r->a > 365)
            return -1;
    } else {
        r->kind = 'D';
        if (posix_num(p, &r->a) || r->a > 365)
            return -1;
    }
    if (**p == '/') {
        (*p)++;
        return posix_hms(p, &r->time);
    }
    return 0;
}

static int posix_parse(ax_tz_t *tz, const char *s) {
    int32_t o;
    if (posix_name(&s) || posix_hms(&s, &o))
        return -1;
    tz->std_off = -o;
    tz->has_rule = 1;
    if (!*s)
        return 0;
    if (posix_name(&s))
        return -1;
    tz->dst_off = tz->std_off + 3600;
    if (*s && *s != ',') {
        if (posix_hms(&s, &o))
            return -1;
        tz->dst_off = -o;
    }
    /* A DST name without rules means the US default, which zic never emits. */
    if (*s++ != ',' || posix_date(&s, &tz->start) || *s++ != ',' || posix_date(&s, &tz->end) ||
        *s)
        return -1;
    tz->rule_dst = 1;
    return 0;
}

/* ---- TZif -------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p) {
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* Parse one data block (v1 with 4-byte times, or v2+ with 8-byte times);
 * returns its size, or -1 if truncated or inconsistent. */
static long tzif_block(ax_tz_t *tz, const unsigned char *p, size_t n, int tsize) {
    if (n < 44 || memcmp(p, "TZif", 4) != 0)
        return -1;
    uint32_t isut = be32(p + 20), isstd = be32(p + 24), leap = be32(p + 28), timecnt = be32(p + 32),
             typecnt = be32(p + 36), charcnt = be32(p + 40);
    if (typecnt == 0 || typecnt > 256 || timecnt > 100000 || leap > 100000 || charcnt > 100000 ||
        isut > 256 || isstd > 256)
        return -1;
    size_t need = 44 + (size_t)timecnt * (tsize + 1) + (size_t)typecnt * 6 + charcnt +
                  (size_t)leap * (tsize + 4) + isstd + isut;
    if (need > n)
        return -1;
    const unsigned char *t = p + 44, *ix = t + (size_t)timecnt * tsize, *ty = ix + timecnt;
    tz->trans = calloc(timecnt + 1, sizeof *tz->trans);
    tz->idx = calloc(timecnt + 1, 1);
    tz->off = calloc(typecnt, sizeof *tz->off);
    if (!tz->trans || !tz->idx || !tz->off)
        return -2;
    for (uint32_t i = 0; i < timecnt; i++) {
        tz->trans[i] = tsize == 8 ? be64(t + 8 * i) : (int32_t)be32(t + 4 * i);
        tz->idx[i] = ix[i];
        if (ix[i] >= typecnt || (i && tz->trans[i] <= tz->trans[i - 1]))
            return -1;
    }
    for (uint32_t i = 0; i < typecnt; i++) {
        tz->off[i] = (int32_t)be32(ty + 6 * i);
        if (tz->off[i] < -26 * 3600 || tz->off[i] > 26 * 3600)
            return -1;
    }
    tz->ntrans = timecnt;
    tz->ntypes = typecnt;
    return (long)need;
}

/* Parse the TZif bytes buf[0..n) of zone `name` (from `origin`) into tz;
 * the footer line is cut out of buf in place. */
static int tz_parse(ax_tz_t *tz, const char *name, unsigned char *buf, size_t n,
                    const char *origin, char *errbuf, size_t errlen) {
    long used = tzif_block(tz, buf, n, 4);
    if (used == -2)
        return AX_ERR_NOMEM;
    if (used < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "time zone '%s': %s is not a TZif file",
                         name, origin);
    if (buf[4] < '2')
        return AX_OK;
    /* v2+: the 64-bit block replaces the v1 one, then "\nTZ-string\n" */
    free(tz->trans);
    free(tz->idx);
    free(tz->off);
    tz->trans = NULL;
    tz->idx = NULL;
    tz->off = NULL;
    long used2 = tzif_block(tz, buf + used, n - (size_t)used, 8);
    if (used2 == -2)
        return AX_ERR_NOMEM;
    size_t fo = (size_t)used + (size_t)(used2 < 0 ? 0 : used2);
    char *nl = used2 >= 0 && fo < n && buf[fo] == '\n' ? memchr(buf + fo + 1, '\n', n - fo - 1)
                                                       : NULL;
    if (used2 < 0 || !nl)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "time zone '%s': %s has a damaged version-2 section", name, origin);
    *nl = '\0';
    if (nl > (char *)buf + fo + 1 && posix_parse(tz, (char *)buf + fo + 1) < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "time zone '%s': unsupported TZ rule '%s'", name, (char *)buf + fo + 1);
    return AX_OK;
}

/* The program's source of TZif data (ax_tz_set_loader); guarded by tz_cache_lock. */
static ax_tz_loader_fn tz_loader;

void ax_tz_set_loader(ax_tz_loader_fn fn) {
    pthread_mutex_lock(&tz_cache_lock);
    tz_loader = fn;
    pthread_mutex_unlock(&tz_cache_lock);
}

static int tz_load(ax_tz_t *tz, const char *name, char *errbuf, size_t errlen) {
    pthread_mutex_lock(&tz_cache_lock);
    ax_tz_loader_fn load = tz_loader;
    pthread_mutex_unlock(&tz_cache_lock);
    if (!load)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND,
                         "time zone '%s': no zone data (this program installed no TZif loader; "
                         "only UTC is built in)",
                         name);
    ax_tz_data_t d = {0};
    int rc = load(name, &d, errbuf, errlen);
    if (rc == AX_OK && (!d.bytes || d.len > AX_TZ_MAX_BYTES))
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID, "time zone '%s': %s is not a TZif file",
                       name, d.origin);
    if (rc == AX_OK)
        rc = tz_parse(tz, name, d.bytes, d.len, d.origin, errbuf, errlen);
    free(d.bytes);
    return rc;
}

static int is_utc_name(const char *name) {
    return !name || !*name || strcmp(name, "UTC") == 0 || strcmp(name, "Etc/UTC") == 0;
}

int ax_tz_new(const char *name, ax_tz_t **ret_tz, char *errbuf, size_t errlen) {
    if (!is_utc_name(name)) {
        if (name[0] == '/' || strstr(name, "..") || strlen(name) >= sizeof((ax_tz_t *)0)->name ||
            strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/_+-.") !=
                strlen(name))
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "invalid time zone name '%s'",
                             name);
    }
    const char *key = is_utc_name(name) ? "UTC" : name;
    pthread_mutex_lock(&tz_cache_lock);
    for (ax_tz_t *c = tz_cache; c; c = c->cache_next)
        if (strcmp(c->name, key) == 0) {
            c->refs++;
            pthread_mutex_unlock(&tz_cache_lock);
            *ret_tz = c;
            return AX_OK;
        }
    pthread_mutex_unlock(&tz_cache_lock);
    ax_tz_t *tz = calloc(1, sizeof *tz);
    if (!tz)
        return AX_ERR_NOMEM;
    tz->refs = 1;
    snprintf(tz->name, sizeof tz->name, "%s", is_utc_name(name) ? "UTC" : name);
    if (is_utc_name(name)) {
        tz->has_rule = 1; /* built in, so UTC works without tzdata */
    } else {
        int rc = tz_load(tz, name, errbuf, errlen);
        if (rc < 0) {
            tz_free(tz);
            return rc;
        }
    }
    tz->min_off = tz->max_off = tz->ntypes ? tz->off[0] : tz->std_off;
    for (size_t i = 0; i < tz->ntypes; i++) {
        tz->min_off = tz->off[i] < tz->min_off ? tz->off[i] : tz->min_off;
        tz->max_off = tz->off[i] > tz->max_off ? tz->off[i] : tz->max_off;
    }
    if (tz->has_rule) {
        int32_t o[2] = {tz->std_off, tz->rule_dst ? tz->dst_off : tz->std_off};
        for (int i = 0; i < 2; i++) {
            tz->min_off = o[i] < tz->min_off ? o[i] : tz->min_off;
            tz->max_off = o[i] > tz->max_off ? o[i] : tz->max_off;
        }
    }
    /* Two threads may load the same zone at once: keep the first copy. */
    pthread_mutex_lock(&tz_cache_lock);
    for (ax_tz_t *c = tz_cache; c; c = c->cache_next)
        if (strcmp(c->name, tz->name) == 0) {
            c->refs++;
            pthread_mutex_unlock(&tz_cache_lock);
            tz_free(tz);
            *ret_tz = c;
            return AX_OK;
        }
    tz->cache_next = tz_cache;
    tz_cache = tz;
    pthread_mutex_unlock(&tz_cache_lock);
    *ret_tz = tz;
    return AX_OK;
}

/* ======================================================================
 * Expressions
 * ==================================================================== */

struct ax_cron {
    uint64_t secs, mins; /* bit per value */
    uint32_t hours;
    uint32_t doms;     /* bit d: day d */
    uint32_t dom_last; /* bit n: day (last - n) */
    uint32_t dom_w;    /* bit d: weekday nearest day d */
    int dom_lw;        /* last weekday of the month */
    uint16_t months;   /* bit m */
    uint8_t dows;      /* bit w, 0 = Sunday */
    uint8_t dow_last;  /* bit w: last weekday w of the month */
    uint8_t dow_nth[7]; /* bit k: k-th weekday w of the month */
    int dom_any, dow_any; /* field was "*" or "?" */
    ax_dst_policy_t dst;
    ax_tz_t *tz;
};

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW };

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const day_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

static const struct field_def {
    const char *name;
    int lo, hi;
    const char *const *names; /* names[i] is value lo+i */
    int nnames;
} fields[] = {
    {"second", 0, 59, NULL, 0},         {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},           {"day of month", 1, 31, NULL, 0},
    {"month", 1, 12, month_names, 12},  {"day of week", 0, 7, day_names, 7},
};

typedef struct {
    const char *expr; /* whole expression, for positions */
    char *errbuf;
    size_t errlen;
} pctx_t;

static int perr(const pctx_t *px, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int perr(const pctx_t *px, const char *at, const char *fmt, ...) {
    if (px->errbuf && px->errlen) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(px->errbuf, px->errlen, "position %d: %s", (int)(at - px->expr) + 1, msg);
    }
    return AX_ERR_INVALID;
}

static int at_elem_end(const char *p, const char *end) { return p == end || *p == ','; }

/* A number or (where the field has them) a name; range-checked. */
static int parse_value(const pctx_t *px, int f, const char **pp, const char *end, int *ret) {
    const struct field_def *fd = &fields[f];
    const char *p = *pp;
    if (p < end && isdigit((unsigned char)*p)) {
        long v = 0;
        while (p < end && isdigit((unsigned char)*p)) {
            if (v < 100000)
                v = v * 10 + (*p - '0');
            p++;
        }
        if (v < fd->lo || v > fd->hi)
            return perr(px, *pp, "value %ld out of range %d-%d for %s", v, fd->lo, fd->hi,
                        fd->name);
        *ret = (int)v;
        *pp = p;
        return 0;
    }
    if (p < end && isalpha((unsigned char)*p) && fd->names) {
        int n = 0;
        while (p + n < end && n < 3 && isalpha((unsigned char)p[n]))
            n++;
        for (int i = 0; n == 3 && i < fd->nnames; i++)
            if (strncasecmp(p, fd->names[i], 3) == 0) {
                *ret = fd->lo + i;
                *pp = p + 3;
                return 0;
            }
        while (p + n < end && isalpha((unsigned char)p[n]))
            n++;
        return perr(px, p, "unknown name '%.*s' for %s", n, p, fd->name);
    }
    if (p == end || *p == ',')
        return perr(px, p, "missing value for %s", fd->name);
    return perr(px, p, "unexpected character '%c' in %s", *p, fd->name);
}

static void set_bits(ax_cron_t *c, int f, int lo, int hi, int step) {
    for (int v = lo; v <= hi; v += step) {
        switch (f) {
        case F_SEC: c->secs |= 1ull << v; break;
        case F_MIN: c->mins |= 1ull << v; break;
        case F_HOUR: c->hours |= 1u << v; break;
        case F_DOM: c->doms |= 1u << v; break;
        case F_MON: c->months |= (uint16_t)(1u << v); break;
        default: c->dows |= (uint8_t)(1u << (v % 7)); break;
        }
    }
}

static int parse_elem(const pctx_t *px, ax_cron_t *c, int f, const char *p, const char *end) {
    const struct field_def *fd = &fields[f];
    int lo, hi, step = 1, is_range = 0;
    if (p < end && *p == '?') {
        if (f != F_DOM && f != F_DOW)
            return perr(px, p, "'?' is only allowed in day of month and day of week");
        return perr(px, p, "'?' must be the whole field");
    }
    if (p < end && *p == '*') {
        lo = fd->lo;
        hi = f == F_DOW ? 6 : fd->hi;
        is_range = 1;
        p++;
    } else if (p < end && f == F_DOM && toupper((unsigned char)*p) == 'L') {
        p++;
        if (p < end && toupper((unsigned char)*p) == 'W') {
            c->dom_lw = 1;
            p++;
        } else if (p < end && *p == '-') {
            const char *q = ++p;
            int n = 0;
            while (p < end && isdigit((unsigned char)*p) && n < 1000)
                n = n * 10 + (*p++ - '0');
            if (p == q)
                return perr(px, q, "'L-' needs a number of days");
            if (n > 30)
                return perr(px, q, "value %d out of range 0-30 for L-N", n);
            c->dom_last |= 1u << n;
        } else {
            c->dom_last |= 1u;
        }
        if (!at_elem_end(p, end))
            return perr(px, p, "unexpected character '%c' after L", *p);
        return 0;
    } else if (p < end && f == F_DOW && toupper((unsigned char)*p) == 'L' &&
               (p + 1 == end || p[1] == ',')) {
        return perr(px, p, "'L' in day of week needs a day before it, e.g. 5L or FRIL");
    } else {
        if (parse_value(px, f, &p, end, &lo) < 0)
            return AX_ERR_INVALID;
        hi = lo;
        if (p < end && f == F_DOM && toupper((unsigned char)*p) == 'W') {
            c->dom_w |= 1u << lo;
            p++;
            if (!at_elem_end(p, end))
                return perr(px, p, "unexpected character '%c' after W", *p);
            return 0;
        }
        if (p < end && f == F_DOW && *p == '#') {
            const char *q = ++p;
            int n = 0;
            while (p < end && isdigit((unsigned char)*p) && n < 1000)
                n = n * 10 + (*p++ - '0');
            if (p == q)
                return perr(px, q, "'#' needs a week number 1-5");
            if (n < 1 || n > 5)
                return perr(px, q, "value %d out of range 1-5 for #", n);
            if (!at_elem_end(p, end))
                return perr(px, p, "unexpected character '%c' after #%d", *p, n);
            c->dow_nth[lo % 7] |= (uint8_t)(1u << n);
            return 0;
        }
        if (p < end && f == F_DOW && toupper((unsigned char)*p) == 'L') {
            c->dow_last |= (uint8_t)(1u << (lo % 7));
            p++;
            if (!at_elem_end(p, end))
                return perr(px, p, "unexpected character '%c' after L", *p);
            return 0;
        }
        if (p < end && *p == '-') {
            const char *q = ++p;
            if (parse_value(px, f, &p, end, &hi) < 0)
                return AX_ERR_INVALID;
            if (hi < lo)
                return perr(px, q, "range %d-%d of %s goes backwards", lo, hi, fd->name);
            is_range = 1;
        }
    }
    if (p < end && *p == '/') {
        const char *q = ++p;
        long n = 0;
        while (p < end && isdigit((unsigned char)*p)) {
            if (n < 100000)
                n = n * 10 + (*p - '0');
            p++;
        }
        if (p == q)
            return perr(px, q, "'/' needs a step");
        int maxstep = (f == F_DOW ? 6 : fd->hi) - fd->lo + 1;
        if (n < 1 || n > maxstep)
            return perr(px, q, "step %ld out of range 1-%d for %s", n, maxstep, fd->name);
        step = (int)n;
        if (!is_range) /* N/S means N through the maximum */
            hi = f == F_DOW ? 6 : fd->hi;
    }
    if (!at_elem_end(p, end))
        return perr(px, p, "unexpected character '%c' in %s", *p, fd->name);
    set_bits(c, f, lo, hi, step);
    return 0;
}

static int parse_field(const pctx_t *px, ax_cron_t *c, int f, const char *p, const char *end) {
    if (end - p == 1 && (*p == '?' || *p == '*') && (f == F_DOM || f == F_DOW)) {
        if (f == F_DOM)
            c->dom_any = 1;
        else
            c->dow_any = 1;
        if (*p == '?')
            return 0; /* "?" sets no bits; dom_any/dow_any make it match */
    }
    while (1) {
        const char *e = memchr(p, ',', (size_t)(end - p));
        if (!e)
            e = end;
        if (e == p)
            return perr(px, p, "empty list element in %s", fields[f].name);
        if (parse_elem(px, c, f, p, e) < 0)
            return AX_ERR_INVALID;
        if (e == end)
            return 0;
        p = e + 1;
        if (p == end)
            return perr(px, p, "empty list element in %s", fields[f].name);
    }
}

static const struct {
    const char *name, *expr;
} macros[] = {
    {"@yearly", "0 0 0 1 1 *"}, {"@annually", "0 0 0 1 1 *"}, {"@monthly", "0 0 0 1 * *"},
    {"@weekly", "0 0 0 * * 0"}, {"@daily", "0 0 0 * * *"},    {"@midnight", "0 0 0 * * *"},
    {"@hourly", "0 0 * * * *"},
};

static int parse_expr(const pctx_t *px, ax_cron_t *c, const char *s) {
    const char *fs[7], *fe[7];
    int n = 0;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        if (n == 6) {
            const char *seventh = p;
            int extra = 0;
            while (*p) {
                p += strcspn(p, " \t");
                p += strspn(p, " \t");
                extra++;
            }
            return perr(px, seventh, "expected 5 or 6 fields, got %d", 6 + extra);
        }
        fs[n] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        fe[n++] = p;
    }
    if (n == 0)
        return perr(px, s, "empty expression");
    if (n < 5)
        return perr(px, p, "expected 5 or 6 fields, got %d", n);
    int first = n == 6 ? F_SEC : F_MIN;
    if (n == 5)
        c->secs = 1;
    for (int i = 0; i < n; i++)
        if (parse_field(px, c, first + i, fs[i], fe[i]) < 0)
            return AX_ERR_INVALID;
    return 0;
}

int ax_cron_new(const char *expr, const char *tz, ax_dst_policy_t dst, ax_cron_t **ret_cron,
                char *errbuf, size_t errlen) {
    if (!expr)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "no expression");
    if (dst & ~(unsigned)(AX_DST_GAP_SKIP | AX_DST_OVERLAP_TWICE))
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "unknown DST policy bits 0x%x", dst);
    ax_cron_t *c = calloc(1, sizeof *c);
    if (!c)
        return AX_ERR_NOMEM;
    pctx_t px = {expr, errbuf, errlen};
    int rc;
    const char *s = expr + strspn(expr, " \t");
    if (*s == '@') {
        size_t len = strcspn(s, " \t");
        rc = AX_ERR_INVALID;
        for (size_t i = 0; i < AX_ARRAY_SIZE(macros); i++)
            if (strlen(macros[i].name) == len && strncasecmp(s, macros[i].name, len) == 0) {
                pctx_t mx = {macros[i].expr, NULL, 0};
                rc = parse_expr(&mx, c, macros[i].expr);
            }
        if (rc < 0)
            perr(&px, s, "unknown macro '%.*s'", (int)len, s);
        else if (s[len + strspn(s + len, " \t")])
            rc = perr(&px, s + len + strspn(s + len, " \t"), "unexpected text after %.*s",
                      (int)len, s);
    } else {
        rc = parse_expr(&px, c, expr);
    }
    if (rc == 0)
        rc = ax_tz_new(tz, &c->tz, errbuf, errlen);
    if (rc < 0) {
        ax_cron_destroy(c);
        return rc;
    }
    c->dst = dst;
    *ret_cron = c;
    return AX_OK;
}

void ax_cron_destroy(ax_cron_t *c) {
    if (!c)
        return;
    ax_tz_destroy(c->tz);
    free(c);
}

const ax_tz_t *ax_cron_tz(const ax_cron_t *c) { return c->tz; }

/* ---- matching ---------------------------------------------------------- */

static int nearest_weekday(int64_t y, int m, int d, int dim) {
    int w = weekday(days_from_civil(y, m, d));
    if (w == 6) /* Saturday: Friday before, unless that leaves the month */
        return d == 1 ? d + 2 : d - 1;
    if (w == 0) /* Sunday: Monday after, unless that leaves the month */
        return d == dim ? d - 2 : d + 1;
    return d;
}

static int day_matches(const ax_cron_t *c, int64_t y, int m, int d) {
    int dim = days_in_month(y, m);
    int w = weekday(days_from_civil(y, m, d));
    int dom = (c->doms >> d & 1) || (dim - d <= 30 && (c->dom_last >> (dim - d) & 1));
    if (!dom && c->dom_w)
        for (int k = 1; k <= dim; k++)
            if ((c->dom_w >> k & 1) && nearest_weekday(y, m, k, dim) == d) {
                dom = 1;
                break;
            }
    if (!dom && c->dom_lw) {
        int lw = dim, lww = weekday(days_from_civil(y, m, dim));
        lw -= lww == 6 ? 1 : lww == 0 ? 2 : 0;
        dom = lw == d;
    }
    int dow = (c->dows >> w & 1) || (c->dow_nth[w] >> ((d - 1) / 7 + 1) & 1) ||
              ((c->dow_last >> w & 1) && d + 7 > dim);
    if (c->dom_any && c->dow_any)
        return 1;
    if (c->dom_any)
        return dow;
    if (c->dow_any)
        return dom;
    return dom || dow;
}

/* The first set bit >= from in mask (bits up to 63), or -1. */
static int next_bit(uint64_t mask, int from) {
    if (from > 63)
        return -1;
    mask >>= from;
    if (!mask)
        return -1;
    return from + __builtin_ctzll(mask);
}

/* The first matching local time >= L, at most `horizon` years later:
 * 0 with ret, or AX_ERR_NOTFOUND. */
static int next_local(const ax_cron_t *c, int64_t L, int64_t *ret) {
    int64_t days = floordiv(L, DAY_S), y;
    int sod = (int)(L - days * DAY_S), m, d;
    civil_from_days(days, &y, &m, &d);
    int h = sod / 3600, mi = sod / 60 % 60, s = sod % 60;
    int64_t ylimit = y + AX_CRON_HORIZON_YEARS;
    for (;;) {
        int next_day = 0;
        if (y > ylimit)
            return AX_ERR_NOTFOUND;
        if (!(c->months >> m & 1)) {
            if (++m > 12) {
                m = 1;
                y++;
            }
            d = 1;
            h = mi = s = 0;
            continue;
        }
        if (!day_matches(c, y, m, d)) {
            next_day = 1;
        } else {
            int nh = next_bit(c->hours, h);
            if (nh < 0) {
                next_day = 1;
            } else {
                if (nh != h) {
                    h = nh;
                    mi = s = 0;
                }
                int nm = next_bit(c->mins, mi);
                if (nm < 0) {
                    h++;
                    mi = s = 0;
                    next_day = h > 23;
                    if (!next_day)
                        continue;
                } else {
                    if (nm != mi) {
                        mi = nm;
                        s = 0;
                    }
                    int ns = next_bit(c->secs, s);
                    if (ns >= 0) {
                        *ret = days_from_civil(y, m, d) * DAY_S + h * 3600 + mi * 60 + ns;
                        return 0;
                    }
                    s = 0;
                    if (++mi > 59) {
                        mi = 0;
                        next_day = ++h > 23;
                    }
                    if (!next_day)
                        continue;
                }
            }
        }
        if (next_day) {
            h = mi = s = 0;
            if (++d > days_in_month(y, m)) {
                d = 1;
                if (++m > 12) {
                    m = 1;
                    y++;
                }
            }
        }
    }
}

int ax_cron_next(const ax_cron_t *c, int64_t after_ms, int64_t *ret_next_ms, int *ret_flags) {
    /* Years 1..9999 keep every intermediate value far from overflow. */
    if (after_ms < -62135596800000LL || after_ms > 253402300799000LL)
        return AX_ERR_INVALID;
    int64_t a = floordiv(after_ms, 1000); /* fire instants are > a */
    int32_t mn, mx;
    tz_off_range(c->tz, a - TZ_WINDOW_S, a + TZ_WINDOW_S, &mn, &mx);
    int64_t L = a + mn + 1, best = 0, Lc;
    /* Bounds the loop when every candidate is dropped (gaps with SKIP). */
    int64_t Lmax = L + (int64_t)(AX_CRON_HORIZON_YEARS + 1) * 366 * DAY_S;
    int found = 0, best_flags = 0;
    int32_t best_max = 0;
    while (next_local(c, L, &Lc) == 0) {
        if ((found && Lc > best + best_max) || Lc > Lmax)
            break;
        int64_t u[2];
        int fl[2] = {0, AX_CRON_REPEATED}, nu = 1;
        switch (tz_local_to_utc(c->tz, Lc, u)) {
        case MAP_GAP:
            nu = (c->dst & AX_DST_GAP_SKIP) ? 0 : 1;
            fl[0] = AX_CRON_SHIFTED;
            break;
        case MAP_OVERLAP:
            nu = (c->dst & AX_DST_OVERLAP_TWICE) ? 2 : 1;
            break;
        default:
            break;
        }
        for (int i = 0; i < nu; i++) {
            if (u[i] <= a)
                continue;
            if (!found || u[i] < best || (u[i] == best && fl[i] < best_flags)) {
                /* On a tie, a regular time beats a shifted one. */
                int improved = !found || u[i] < best;
                best = u[i];
                best_flags = fl[i];
                found = 1;
                if (improved) {
                    int32_t lo;
                    tz_off_range(c->tz, a - TZ_WINDOW_S, best, &lo, &best_max);
                }
            }
        }
        L = Lc + 1;
    }
    if (!found || best > 253402300799LL) /* nothing after 9999-12-31 */
        return AX_ERR_NOTFOUND;
    *ret_next_ms = best * 1000;
    if (ret_flags)
        *ret_flags = best_flags;
    return AX_OK;
}
