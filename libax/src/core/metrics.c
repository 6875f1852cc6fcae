/*
 * metrics.c — the metric registry and the Prometheus text exposition
 * (0.0.4) renderer (see ax/metrics.h). Cells are uint64_t updated with
 * relaxed __atomic builtins; a gauge or a histogram's sum holds the bits
 * of a double, changed by compare-and-swap. Histogram buckets are kept
 * per bucket and made cumulative when rendered; _count is their total, so
 * a scrape is always consistent with its own buckets.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/metrics.h"

const double ax_metrics_latency_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,  0.5,    1,     2.5,  5,     10,   60};
const size_t ax_metrics_latency_buckets_n = AX_ARRAY_SIZE(ax_metrics_latency_buckets);

struct ax_metric {
    ax_metric_type_t type;
    char *name, *help, *label;
    char **values; /* nv label values (nv = 1 and values = NULL without a label) */
    size_t nv;
    double *bounds;
    size_t nb;
    size_t stride;  /* cells per series: 1, or nb + 1 buckets + 1 sum */
    uint64_t *cells;
    /* The exposition's fixed text, made at registration: the HELP and TYPE
     * lines, then every sample line's name and labels (and the space),
     * nlines of them (per series: 1, or nb + 1 buckets, _sum, _count);
     * line j's is text[off[j] .. off[j + 1]), the header text[0 .. off[0]). */
    char *text;
    size_t *off, nlines;
};

typedef struct {
    ax_metrics_collect_fn fn;
    void *arg;
    void (*free_arg)(void *arg);
} collector_t;

struct ax_metrics {
    pthread_mutex_t mu;
    ax_metric_t **fam;
    size_t nfam;
    collector_t *col;
    size_t ncol;
};

struct ax_mwriter {
    ax_mbuf_t *out;
};

/* ---- text buffer -------------------------------------------------------------------------- */

void ax_mbuf_free(ax_mbuf_t *b) {
    if (!b)
        return;
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int mbuf_reserve(ax_mbuf_t *b, size_t more) {
    if (b->oom)
        return -1;
    if (b->len + more + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void mbuf_put(ax_mbuf_t *b, const char *s, size_t n) {
    if (mbuf_reserve(b, n) < 0)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void mbuf_puts(ax_mbuf_t *b, const char *s) { mbuf_put(b, s, strlen(s)); }

/* Escape for a label value (\\, \", \n) or, with quote = 0, a HELP text (\\, \n):
 * the runs without any of those in one copy each. */
static void mbuf_escaped(ax_mbuf_t *b, const char *s, int quote) {
    const char *special = quote ? "\\\n\"" : "\\\n";
    while (*s) {
        size_t n = strcspn(s, special);
        mbuf_put(b, s, n);
        s += n;
        if (!*s)
            break;
        mbuf_put(b, *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : "\\\"", 2);
        s++;
    }
}

#define NUMBER_MAX 32 /* the longest text of fmt_number, with room */

/* A sample value as Prometheus reads it: integers exactly (without printf:
 * most samples are counts), others %.15g. Writes no NUL; returns the length. */
static size_t fmt_number(char *s, double v) {
    if (isnan(v))
        return (size_t)snprintf(s, NUMBER_MAX, "NaN");
    if (isinf(v))
        return (size_t)snprintf(s, NUMBER_MAX, "%s", v > 0 ? "+Inf" : "-Inf");
    if (v != floor(v) || fabs(v) >= 9007199254740992.0)
        return (size_t)snprintf(s, NUMBER_MAX, "%.15g", v);
    char d[24];
    size_t n = 0, k = 0;
    uint64_t u = (uint64_t)fabs(v);
    do
        d[n++] = (char)('0' + u % 10);
    while ((u /= 10));
    if (v < 0)
        s[k++] = '-';
    while (n)
        s[k++] = d[--n];
    return k;
}

static void mbuf_number(ax_mbuf_t *b, double v) {
    char s[NUMBER_MAX];
    mbuf_put(b, s, fmt_number(s, v));
}

/* ---- registration ------------------------------------------------------------------------- */

ax_metrics_t *ax_metrics_new(void) {
    ax_metrics_t *m = calloc(1, sizeof *m);
    if (m)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void metric_free(ax_metric_t *f) {
    if (!f)
        return;
    for (size_t i = 0; f->values && i < f->nv; i++)
        free(f->values[i]);
    free(f->values);
    free(f->name);
    free(f->help);
    free(f->label);
    free(f->bounds);
    free(f->cells);
    free(f->text);
    free(f->off);
    free(f);
}

void ax_metrics_destroy(ax_metrics_t *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->nfam; i++)
        metric_free(m->fam[i]);
    free(m->fam);
    for (size_t i = 0; i < m->ncol; i++)
        if (m->col[i].free_arg)
            m->col[i].free_arg(m->col[i].arg);
    free(m->col);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int valid_name(const char *s, int label) {
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return 0;
    for (const char *p = s; *p; p++) {
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                 (*p >= '0' && *p <= '9') || (*p == ':' && !label);
        if (!ok)
            return 0;
    }
    return !(label && strncmp(s, "__", 2) == 0) && !(label && strcmp(s, "le") == 0);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int valid_bounds(const double *bounds, size_t nb) {
    if (nb > AX_METRIC_BUCKETS_MAX || (nb && !bounds))
        return 0;
    for (size_t i = 0; i < nb; i++)
        if (!isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
            return 0;
    return 1;
}

static int copy_values(ax_metric_t *f, const char *label, const char *const *values) {
    f->nv = 1;
    if (!label)
        return values ? -1 : 0;
    if (!valid_name(label, 1) || !values || !values[0])
        return -1;
    size_t n = 0;
    while (values[n])
        n++;
    if (n > AX_METRIC_VALUES_MAX || !(f->label = strdup(label)) ||
        !(f->values = calloc(n, sizeof *f->values)))
        return -1;
    f->nv = n;
    for (size_t i = 0; i < n; i++)
        if (!(f->values[i] = strdup(values[i])))
            return -1;
    return 0;
}

static const char *type_name(ax_metric_type_t t) {
    return t == AX_METRIC_COUNTER ? "counter" : t == AX_METRIC_GAUGE ? "gauge" : "histogram";
}

static void text_header(ax_mbuf_t *b, const char *name, ax_metric_type_t type, const char *help) {
    mbuf_puts(b, "# HELP ");
    mbuf_puts(b, name);
    mbuf_puts(b, " ");
    mbuf_escaped(b, help ? help : "", 0);
    mbuf_puts(b, "\n# TYPE ");
    mbuf_puts(b, name);
    mbuf_puts(b, " ");
    mbuf_puts(b, type_name(type));
    mbuf_puts(b, "\n");
}

/* One sample line's text before its value: NAME[SUFFIX][{LABEL="VALUE"[,le="LE"]}] and a space. */
static void text_prefix(ax_mbuf_t *b, const ax_metric_t *f, const char *suffix, size_t i,
                        const char *le) {
    mbuf_puts(b, f->name);
    mbuf_puts(b, suffix);
    if (f->label || le)
        mbuf_puts(b, "{");
    if (f->label) {
        mbuf_puts(b, f->label);
        mbuf_puts(b, "=\"");
        mbuf_escaped(b, f->values[i], 1);
        mbuf_puts(b, le ? "\"," : "\"");
    }
    if (le) {
        mbuf_puts(b, "le=\"");
        mbuf_puts(b, le);
        mbuf_puts(b, "\"");
    }
    mbuf_puts(b, f->label || le ? "} " : " ");
}

/* f->text and f->off (see struct ax_metric). */
static int metric_text(ax_metric_t *f) {
    ax_mbuf_t b = {0};
    size_t per = f->type == AX_METRIC_HISTOGRAM ? f->nb + 3 : 1, j = 0;
    f->nlines = f->nv * per;
    if (!(f->off = calloc(f->nlines + 1, sizeof *f->off)))
        return -1;
    text_header(&b, f->name, f->type, f->help);
    f->off[j++] = b.len;
    for (size_t i = 0; i < f->nv; i++) {
        if (f->type != AX_METRIC_HISTOGRAM) {
            text_prefix(&b, f, "", i, NULL);
            f->off[j++] = b.len;
            continue;
        }
        char le[64];
        for (size_t k = 0; k <= f->nb; k++) {
            if (k < f->nb)
                snprintf(le, sizeof le, "%.15g", f->bounds[k]);
            text_prefix(&b, f, "_bucket", i, k < f->nb ? le : "+Inf");
            f->off[j++] = b.len;
        }
        text_prefix(&b, f, "_sum", i, NULL);
        f->off[j++] = b.len;
        text_prefix(&b, f, "_count", i, NULL);
        f->off[j++] = b.len;
    }
    if (b.oom) {
        ax_mbuf_free(&b);
        return -1;
    }
    f->text = b.p;
    return 0;
}

static ax_metric_t *metric_new(ax_metric_type_t type, const char *name, const char *help,
                               const char *label, const char *const *values,
                               const double *bounds, size_t nb) {
    if (!valid_name(name, 0) || (type == AX_METRIC_COUNTER && !ends_with(name, "_total")) ||
        (type == AX_METRIC_HISTOGRAM && !valid_bounds(bounds, nb)))
        return NULL;
    ax_metric_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    f->stride = type == AX_METRIC_HISTOGRAM ? nb + 2 : 1;
    f->nb = type == AX_METRIC_HISTOGRAM ? nb : 0;
    if (!f->name || !f->help || copy_values(f, label, values) < 0)
        goto fail;
    if (f->nb && !(f->bounds = malloc(nb * sizeof *bounds)))
        goto fail;
    if (f->nb)
        memcpy(f->bounds, bounds, nb * sizeof *bounds);
    if (!(f->cells = calloc(f->nv * f->stride, sizeof *f->cells)) || metric_text(f) < 0)
        goto fail;
    return f;
fail:
    metric_free(f);
    return NULL;
}

static ax_metric_t *reg_add(ax_metrics_t *m, ax_metric_t *f) {
    if (!m || !f) {
        metric_free(f);
        return NULL;
    }
    pthread_mutex_lock(&m->mu);
    ax_metric_t **nf = NULL;
    for (size_t i = 0; i < m->nfam; i++)
        if (strcmp(m->fam[i]->name, f->name) == 0)
            goto dup;
    nf = realloc(m->fam, (m->nfam + 1) * sizeof *nf);
    if (!nf)
        goto dup;
    m->fam = nf;
    m->fam[m->nfam++] = f;
    pthread_mutex_unlock(&m->mu);
    return f;
dup:
    pthread_mutex_unlock(&m->mu);
    metric_free(f);
    return NULL;
}

ax_metric_t *ax_metrics_counter(ax_metrics_t *m, const char *name, const char *help,
                                const char *label, const char *const *values) {
    if (!m)
        return NULL;
    return reg_add(m, metric_new(AX_METRIC_COUNTER, name, help, label, values, NULL, 0));
}

ax_metric_t *ax_metrics_gauge(ax_metrics_t *m, const char *name, const char *help,
                              const char *label, const char *const *values) {
    if (!m)
        return NULL;
    return reg_add(m, metric_new(AX_METRIC_GAUGE, name, help, label, values, NULL, 0));
}

ax_metric_t *ax_metrics_histogram(ax_metrics_t *m, const char *name, const char *help,
                                  const char *label, const char *const *values,
                                  const double *bounds, size_t nb) {
    if (!m)
        return NULL;
    return reg_add(m, metric_new(AX_METRIC_HISTOGRAM, name, help, label, values, bounds, nb));
}

int ax_metrics_collector(ax_metrics_t *m, ax_metrics_collect_fn fn, void *arg,
                         void (*free_arg)(void *arg)) {
    collector_t *c = NULL;
    if (m && fn) {
        pthread_mutex_lock(&m->mu);
        c = realloc(m->col, (m->ncol + 1) * sizeof *c);
        if (c) {
            m->col = c;
            m->col[m->ncol++] = (collector_t){fn, arg, free_arg};
        }
        pthread_mutex_unlock(&m->mu);
    }
    if (!c && free_arg)
        free_arg(arg);
    return c ? 0 : m && fn ? AX_ERR_NOMEM : AX_ERR_INVALID;
}

int ax_metric_index(const ax_metric_t *f, const char *value) {
    if (!f || !f->values || !value)
        return -1;
    for (size_t i = 0; i < f->nv; i++)
        if (strcmp(f->values[i], value) == 0)
            return (int)i;
    return -1;
}

/* ---- updates (hot path) ------------------------------------------------------------------- */

static double bits_double(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static uint64_t double_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static void cell_fadd(uint64_t *c, double d) {
    uint64_t old = __atomic_load_n(c, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(c, &old, double_bits(bits_double(old) + d), 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void ax_metric_add(ax_metric_t *f, size_t i, uint64_t n) {
    if (f && i < f->nv && f->type == AX_METRIC_COUNTER)
        __atomic_fetch_add(&f->cells[i], n, __ATOMIC_RELAXED);
}

void ax_metric_set(ax_metric_t *f, size_t i, double v) {
    if (f && i < f->nv && f->type == AX_METRIC_GAUGE)
        __atomic_store_n(&f->cells[i], double_bits(v), __ATOMIC_RELAXED);
}

void ax_metric_gadd(ax_metric_t *f, size_t i, double d) {
    if (f && i < f->nv && f->type == AX_METRIC_GAUGE)
        cell_fadd(&f->cells[i], d);
}

void ax_metric_observe(ax_metric_t *f, size_t i, double v) {
    if (!f || i >= f->nv || f->type != AX_METRIC_HISTOGRAM || isnan(v))
        return;
    uint64_t *s = &f->cells[i * f->stride];
    size_t b = 0;
    while (b < f->nb && v > f->bounds[b])
        b++;
    __atomic_fetch_add(&s[b], 1, __ATOMIC_RELAXED);
    cell_fadd(&s[f->nb + 1], v);
}

double ax_metric_value(const ax_metric_t *f, size_t i) {
    if (!f || i >= f->nv)
        return 0;
    const uint64_t *s = &f->cells[i * f->stride];
    if (f->type == AX_METRIC_COUNTER)
        return (double)__atomic_load_n(s, __ATOMIC_RELAXED);
    if (f->type == AX_METRIC_GAUGE)
        return bits_double(__atomic_load_n(s, __ATOMIC_RELAXED));
    uint64_t n = 0;
    for (size_t b = 0; b <= f->nb; b++)
        n += __atomic_load_n(&s[b], __ATOMIC_RELAXED);
    return (double)n;
}

/* ---- rendering ---------------------------------------------------------------------------- */

void ax_mw_family(ax_mwriter_t *w, const char *name, ax_metric_type_t type, const char *help) {
    text_header(w->out, name, type, help);
}

void ax_mw_sample(ax_mwriter_t *w, const char *name, const char *const *labels, double v) {
    mbuf_puts(w->out, name);
    for (size_t i = 0; labels && labels[i] && labels[i + 1]; i += 2) {
        mbuf_puts(w->out, i ? "," : "{");
        mbuf_puts(w->out, labels[i]);
        mbuf_puts(w->out, "=\"");
        mbuf_escaped(w->out, labels[i + 1], 1);
        mbuf_puts(w->out, "\"");
    }
    if (labels && labels[0] && labels[1])
        mbuf_puts(w->out, "}");
    mbuf_puts(w->out, " ");
    mbuf_number(w->out, v);
    mbuf_puts(w->out, "\n");
}

/* Line j: its fixed text, the value, a newline (room reserved by the caller). */
static char *put_line(char *p, const ax_metric_t *f, size_t j, double v) {
    size_t n = f->off[j + 1] - f->off[j];
    memcpy(p, f->text + f->off[j], n);
    p += n;
    p += fmt_number(p, v);
    *p++ = '\n';
    return p;
}

/* A family from its fixed text: one reservation, then copies and numbers. */
static void render_family(ax_mbuf_t *b, const ax_metric_t *f) {
    if (mbuf_reserve(b, f->off[f->nlines] + f->nlines * (NUMBER_MAX + 1)) < 0)
        return;
    char *p = b->p + b->len;
    memcpy(p, f->text, f->off[0]);
    p += f->off[0];
    size_t j = 0;
    for (size_t i = 0; i < f->nv; i++) {
        const uint64_t *s = &f->cells[i * f->stride];
        if (f->type != AX_METRIC_HISTOGRAM) {
            p = put_line(p, f, j++, ax_metric_value(f, i));
            continue;
        }
        uint64_t cum = 0;
        for (size_t k = 0; k <= f->nb; k++) {
            cum += __atomic_load_n(&s[k], __ATOMIC_RELAXED);
            p = put_line(p, f, j++, (double)cum);
        }
        p = put_line(p, f, j++, bits_double(__atomic_load_n(&s[f->nb + 1], __ATOMIC_RELAXED)));
        p = put_line(p, f, j++, (double)cum);
    }
    b->len = (size_t)(p - b->p);
    b->p[b->len] = '\0';
}

int ax_metrics_render(ax_metrics_t *m, ax_mbuf_t *out) {
    ax_mwriter_t w = {out};
    if (!m)
        return 0;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->nfam; i++)
        render_family(out, m->fam[i]);
    for (size_t i = 0; i < m->ncol; i++)
        m->col[i].fn(&w, m->col[i].arg);
    pthread_mutex_unlock(&m->mu);
    return out->oom ? AX_ERR_NOMEM : 0;
}

/* ---- metrics.listen ----------------------------------------------------------------------- */

static int loopback_host(const char *h) {
    if (strcmp(h, "localhost") == 0 || strcmp(h, "::1") == 0)
        return 1;
    unsigned a, b, c, d;
    char tail;
    return sscanf(h, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 &&
           c < 256 && d < 256;
}

int ax_metrics_listen_parse(const char *s, char *ret_host, size_t hostlen, int *ret_port,
                            char *errbuf, size_t errlen) {
    if (!s || !*s) {
        if (hostlen)
            ret_host[0] = '\0';
        *ret_port = -1;
        return 0;
    }
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "'%s' is not HOST:PORT", s);
    char host[256];
    size_t n = (size_t)(colon - s);
    if (s[0] == '[' && n >= 2 && s[n - 1] == ']') {
        s++;
        n -= 2;
    }
    if (n >= sizeof host || n >= hostlen)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "host too long");
    memcpy(host, s, n);
    host[n] = '\0';
    if (!loopback_host(host))
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "'%s' is not a loopback address (127.0.0.0/8, [::1], localhost)", host);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 0 || port > 65535)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "'%s' is not a port (0-65535)",
                         colon + 1);
    memcpy(ret_host, host, n + 1);
    *ret_port = (int)port;
    return 0;
}
