/*
 * test_metrics.c — the metric registry and its text exposition
 * (core/metrics.c): output checked byte for byte (HELP/TYPE lines, label
 * and HELP escaping, integer and fractional values, histogram cumulative
 * buckets with _sum and _count), collectors after the families, the
 * registration rules (names, _total, bounded label values, bounds,
 * duplicates) and NULL metrics as no-ops; concurrent updates lose nothing.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/metrics.h"

static char *render(ax_metrics_t *m) {
    ax_mbuf_t b = {0};
    assert_int_equal(ax_metrics_render(m, &b), 0);
    return b.p ? b.p : strdup("");
}

static void counter_gauge(void **state) {
    (void)state;
    ax_metrics_t *m = ax_metrics_new();
    static const char *const dec[] = {"fired", "skipped", NULL};
    ax_metric_t *c = ax_metrics_counter(m, "ax_fires_total", "Fires by decision.", "decision", dec);
    ax_metric_t *g = ax_metrics_gauge(m, "ax_leader_epoch", "Epoch.", NULL, NULL);
    assert_non_null(c);
    assert_non_null(g);
    ax_metric_inc(c, 0);
    ax_metric_add(c, 1, 41);
    ax_metric_add(c, 2, 1000); /* out of range: ignored */
    ax_metric_set(g, 0, 7);
    ax_metric_gadd(g, 0, -0.5);
    char *t = render(m);
    assert_string_equal(t, "# HELP ax_fires_total Fires by decision.\n"
                           "# TYPE ax_fires_total counter\n"
                           "ax_fires_total{decision=\"fired\"} 1\n"
                           "ax_fires_total{decision=\"skipped\"} 41\n"
                           "# HELP ax_leader_epoch Epoch.\n"
                           "# TYPE ax_leader_epoch gauge\n"
                           "ax_leader_epoch 6.5\n");
    free(t);
    assert_int_equal(ax_metric_index(c, "skipped"), 1);
    assert_int_equal(ax_metric_index(c, "nope"), -1);
    assert_true(ax_metric_value(c, 1) == 41);
    ax_metrics_destroy(m);
}

/* Sample values as the renderer formats them without printf: zero, negative
 * integers, the largest exact integer, beyond it, fractions, NaN and +-Inf
 * (the same text as "%.0f" / "%.15g" gave). */
static void numbers(void **state) {
    (void)state;
    ax_metrics_t *m = ax_metrics_new();
    static const char *const v[] = {"a", "b", "c", "d", "e", "f", "g", "h", NULL};
    ax_metric_t *g = ax_metrics_gauge(m, "n", "N.", "v", v);
    const double x[] = {0, -3, 9007199254740991.0, 9007199254740992.0, -0.25, NAN, INFINITY,
                        -1234567890123.0};
    for (size_t i = 0; i < 8; i++)
        ax_metric_set(g, i, x[i]);
    char *t = render(m);
    assert_string_equal(t, "# HELP n N.\n# TYPE n gauge\n"
                           "n{v=\"a\"} 0\n"
                           "n{v=\"b\"} -3\n"
                           "n{v=\"c\"} 9007199254740991\n"
                           "n{v=\"d\"} 9.00719925474099e+15\n"
                           "n{v=\"e\"} -0.25\n"
                           "n{v=\"f\"} NaN\n"
                           "n{v=\"g\"} +Inf\n"
                           "n{v=\"h\"} -1234567890123\n");
    free(t);
    ax_metrics_destroy(m);
}

static void escaping(void **state) {
    (void)state;
    ax_metrics_t *m = ax_metrics_new();
    static const char *const v[] = {"a\"b", "c\\d", "e\nf", NULL};
    ax_metric_t *g = ax_metrics_gauge(m, "x", "line\\one\nline \"two\"", "l", v);
    ax_metric_set(g, 1, 0.25);
    ax_metric_set(g, 2, NAN);
    char *t = render(m);
    assert_string_equal(t, "# HELP x line\\\\one\\nline \"two\"\n"
                           "# TYPE x gauge\n"
                           "x{l=\"a\\\"b\"} 0\n"
                           "x{l=\"c\\\\d\"} 0.25\n"
                           "x{l=\"e\\nf\"} NaN\n");
    free(t);
    ax_metrics_destroy(m);
}

static void histogram(void **state) {
    (void)state;
    ax_metrics_t *m = ax_metrics_new();
    static const double b[] = {0.1, 1, 2.5};
    static const char *const k[] = {"command", "http", NULL};
    ax_metric_t *h = ax_metrics_histogram(m, "ax_handler_seconds", "Duration.", "kind", k, b, 3);
    assert_non_null(h);
    ax_metric_observe(h, 0, 0.05);
    ax_metric_observe(h, 0, 0.1); /* on a bound: in that bucket (le) */
    ax_metric_observe(h, 0, 2);
    ax_metric_observe(h, 0, 100);
    ax_metric_observe(h, 1, NAN); /* ignored */
    char *t = render(m);
    assert_string_equal(t, "# HELP ax_handler_seconds Duration.\n"
                           "# TYPE ax_handler_seconds histogram\n"
                           "ax_handler_seconds_bucket{kind=\"command\",le=\"0.1\"} 2\n"
                           "ax_handler_seconds_bucket{kind=\"command\",le=\"1\"} 2\n"
                           "ax_handler_seconds_bucket{kind=\"command\",le=\"2.5\"} 3\n"
                           "ax_handler_seconds_bucket{kind=\"command\",le=\"+Inf\"} 4\n"
                           "ax_handler_seconds_sum{kind=\"command\"} 102.15\n"
                           "ax_handler_seconds_count{kind=\"command\"} 4\n"
                           "ax_handler_seconds_bucket{kind=\"http\",le=\"0.1\"} 0\n"
                           "ax_handler_seconds_bucket{kind=\"http\",le=\"1\"} 0\n"
                           "ax_handler_seconds_bucket{kind=\"http\",le=\"2.5\"} 0\n"
                           "ax_handler_seconds_bucket{kind=\"http\",le=\"+Inf\"} 0\n"
                           "ax_handler_seconds_sum{kind=\"http\"} 0\n"
                           "ax_handler_seconds_count{kind=\"http\"} 0\n");
    free(t);
    assert_true(ax_metric_value(h, 0) == 4);
    ax_metrics_destroy(m);
}

static void collect(ax_mwriter_t *w, void *arg) {
    ax_mw_family(w, "ax_store_statement_calls_total", AX_METRIC_COUNTER, "Calls.");
    const char *const lab[] = {"statement", (const char *)arg, NULL};
    ax_mw_sample(w, "ax_store_statement_calls_total", lab, 12345678901.0);
}

static void collector(void **state) {
    (void)state;
    ax_metrics_t *m = ax_metrics_new();
    assert_int_equal(ax_metrics_collector(m, collect, "run.\"claim\"", NULL), 0);
    ax_metric_t *h = ax_metrics_histogram(m, "h_seconds", "", NULL, NULL, (double[]){1}, 1);
    ax_metric_observe(h, 0, 3);
    char *t = render(m);
    assert_string_equal(t, "# HELP h_seconds \n"
                           "# TYPE h_seconds histogram\n"
                           "h_seconds_bucket{le=\"1\"} 0\n"
                           "h_seconds_bucket{le=\"+Inf\"} 1\n"
                           "h_seconds_sum 3\n"
                           "h_seconds_count 1\n"
                           "# HELP ax_store_statement_calls_total Calls.\n"
                           "# TYPE ax_store_statement_calls_total counter\n"
                           "ax_store_statement_calls_total{statement=\"run.\\\"claim\\\"\"} "
                           "12345678901\n");
    free(t);
    ax_metrics_destroy(m);
}

static void rules(void **state) {
    (void)state;
    ax_metrics_t *m = ax_metrics_new();
    static const char *const v[] = {"a", NULL};
    static const char *const none[] = {NULL};
    assert_null(ax_metrics_counter(m, "no_suffix", "", NULL, NULL));
    assert_null(ax_metrics_gauge(m, "9bad", "", NULL, NULL));
    assert_null(ax_metrics_gauge(m, "bad-name", "", NULL, NULL));
    assert_null(ax_metrics_gauge(m, "g", "", "le", v));
    assert_null(ax_metrics_gauge(m, "g", "", "__x", v));
    assert_null(ax_metrics_gauge(m, "g", "", "l", none));
    assert_null(ax_metrics_gauge(m, "g", "", "l", NULL));
    assert_null(ax_metrics_histogram(m, "h", "", NULL, NULL, (double[]){2, 1}, 2));
    assert_null(ax_metrics_histogram(m, "h", "", NULL, NULL, (double[]){INFINITY}, 1));
    assert_non_null(ax_metrics_gauge(m, "ns:g", "", "l", v));
    assert_null(ax_metrics_gauge(m, "ns:g", "", NULL, NULL)); /* duplicate */
    /* off: no registry, NULL metrics, updates are no-ops */
    ax_metric_t *off = ax_metrics_counter(NULL, "a_total", "", NULL, NULL);
    assert_null(off);
    ax_metric_inc(off, 0);
    ax_metric_set(NULL, 0, 1);
    ax_metric_gadd(NULL, 0, 1);
    ax_metric_observe(NULL, 0, 1);
    assert_true(ax_metric_value(NULL, 0) == 0);
    assert_int_equal(ax_metric_index(NULL, "a"), -1);
    ax_mbuf_t b = {0};
    assert_int_equal(ax_metrics_render(NULL, &b), 0);
    assert_int_equal(b.len, 0);
    ax_metrics_destroy(m);
    ax_metrics_destroy(NULL);
}

typedef struct {
    ax_metric_t *c, *g, *h;
} hammer_t;

static void *hammer(void *arg) {
    hammer_t *x = arg;
    for (int i = 0; i < 100000; i++) {
        ax_metric_inc(x->c, 0);
        ax_metric_gadd(x->g, 0, 1);
        ax_metric_observe(x->h, 0, 0.5);
    }
    return NULL;
}

static void concurrent(void **state) {
    (void)state;
    ax_metrics_t *m = ax_metrics_new();
    hammer_t x = {ax_metrics_counter(m, "c_total", "", NULL, NULL),
                  ax_metrics_gauge(m, "g", "", NULL, NULL),
                  ax_metrics_histogram(m, "h", "", NULL, NULL, (double[]){1}, 1)};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, hammer, &x);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_true(ax_metric_value(x.c, 0) == 400000);
    assert_true(ax_metric_value(x.g, 0) == 400000);
    assert_true(ax_metric_value(x.h, 0) == 400000);
    char *t = render(m);
    assert_non_null(strstr(t, "h_sum 200000\n"));
    free(t);
    ax_metrics_destroy(m);
}

static void listen_parse(void **state) {
    (void)state;
    char host[64], err[256];
    int port = 7;
    assert_int_equal(ax_metrics_listen_parse("", host, sizeof host, &port, err, sizeof err), 0);
    assert_int_equal(port, -1);
    assert_string_equal(host, "");
    assert_int_equal(ax_metrics_listen_parse("127.0.0.1:9464", host, sizeof host, &port, err,
                                             sizeof err),
                     0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 9464);
    assert_int_equal(ax_metrics_listen_parse("[::1]:0", host, sizeof host, &port, err, sizeof err),
                     0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 0);
    port = 5;
    assert_int_equal(ax_metrics_listen_parse("192.168.1.1:80", host, sizeof host, &port, err,
                                             sizeof err),
                     -1);
    assert_non_null(strstr(err, "loopback"));
    assert_int_equal(port, 5); /* untouched on failure */
    assert_int_equal(ax_metrics_listen_parse("127.0.0.1:http", host, sizeof host, &port, err,
                                             sizeof err),
                     -1);
    assert_non_null(strstr(err, "port"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counter_gauge), cmocka_unit_test(numbers), cmocka_unit_test(escaping),
        cmocka_unit_test(histogram),     cmocka_unit_test(collector),
        cmocka_unit_test(rules),         cmocka_unit_test(concurrent),
        cmocka_unit_test(listen_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
