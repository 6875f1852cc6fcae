/*
 * test_conf.c — unit tests of the configuration table and parser
 * (libax/src/core/conf.c): defaults, ax_conf_set (unknown keys, integers
 * and their ranges, log.level, kafka./pg. pass-through), the file format,
 * the AXCONF_<KEY> environment mapping (from our own envp arrays, never
 * setenv), redaction of secrets, the Markdown reference (and that
 * docs/CONFIGURATION.md is current), --help filtering, topic names, and
 * the command line (ax_conf_args: options consumed, the action asked for,
 * errors returned with their reason instead of printed).
 */
/* gcc 12 at -O2 takes the buffers that open_memstream() fills through
 * &buf for pointers to the local `buf` itself (-Wdangling-pointer false
 * positive); the buffers are heap memory owned by the caller. */
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/conf.h"

#define ERRLEN 1024

/* ---- helpers ---------------------------------------------------------- */

static const char *field_str(const ax_conf_t *c, const ax_conf_def_t *d) {
    return *(char *const *)((const char *)c + d->offset);
}

static int64_t field_int(const ax_conf_t *c, const ax_conf_def_t *d) {
    return *(const int64_t *)((const char *)c + d->offset);
}

static const char *kv_get(const ax_kv_t *kv, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(kv[i].key, key) == 0)
            return kv[i].value;
    return NULL;
}

#define assert_contains(hay, needle)                                                     \
    do {                                                                                 \
        const char *h_ = (hay), *n_ = (needle);                                          \
        if (!strstr(h_, n_))                                                             \
            fail_msg("'%s' does not contain '%s'", h_, n_);                              \
    } while (0)

#define assert_not_contains(hay, needle)                                                 \
    do {                                                                                 \
        const char *h_ = (hay), *n_ = (needle);                                          \
        if (strstr(h_, n_))                                                              \
            fail_msg("'%s' contains '%s'", h_, n_);                                      \
    } while (0)

/* Write `content` to a new temporary file; its name goes to `path`. */
static void tmp_write(char *path, size_t len, const char *content) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/ax_test_conf_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(content);
    assert_int_equal(write(fd, content, n), (ssize_t)n);
    close(fd);
}

/* Call ax_conf_print into a malloc'd string. */
static char *print_conf(const ax_conf_t *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ax_conf_print(c, f);
    fclose(f);
    return buf;
}

static char *reference_text(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ax_conf_reference(f);
    fclose(f);
    return buf;
}

static char *help_text(const char *used_by) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ax_conf_help(f, used_by);
    fclose(f);
    return buf;
}

/* "a.b.c" -> "AXCONF_A_B_C=value" */
static void env_name(char *out, size_t len, const char *key, const char *value) {
    size_t o = (size_t)snprintf(out, len, "AXCONF_");
    for (const char *k = key; *k && o + 1 < len; k++)
        out[o++] = *k == '.' ? '_' : (char)(*k >= 'a' && *k <= 'z' ? *k - 'a' + 'A' : *k);
    out[o] = '\0';
    snprintf(out + o, len - o, "=%s", value);
}

/* ---- the table and the defaults --------------------------------------- */

static void test_table_is_consistent(void **state) {
    (void)state;
    assert_true(ax_conf_table_len > 0);
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        assert_non_null(d->name);
        assert_non_null(d->used_by);
        assert_non_null(d->doc);
        assert_true(strlen(d->doc) > 0);
        assert_true(strncmp(d->name, "kafka.", 6) != 0);
        assert_true(strncmp(d->name, "pg.", 3) != 0);
        for (size_t j = i + 1; j < ax_conf_table_len; j++)
            if (strcmp(d->name, ax_conf_table[j].name) == 0)
                fail_msg("duplicate key %s", d->name);
        assert_true(d->offset + (d->type == AX_CONF_INT ? sizeof(int64_t) : sizeof(char *)) <=
                    sizeof(ax_conf_t));
        if (d->type == AX_CONF_INT) {
            assert_non_null(d->def);
            assert_true(d->min <= d->max);
            char *end;
            long long v = strtoll(d->def, &end, 10);
            assert_int_equal(*end, '\0');
            if (v < d->min || v > d->max)
                fail_msg("default of %s (%lld) outside [%lld, %lld]", d->name, v,
                         (long long)d->min, (long long)d->max);
        }
    }
}

static void test_init_defaults(void **state) {
    (void)state;
    ax_conf_t c;
    memset(&c, 0xA5, sizeof c); /* init must not depend on prior contents */
    ax_conf_init(&c);
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        if (d->type == AX_CONF_STR) {
            if (d->def)
                assert_string_equal(field_str(&c, d), d->def);
            else
                assert_null(field_str(&c, d));
        } else {
            assert_int_equal(field_int(&c, d), strtoll(d->def, NULL, 10));
        }
    }
    assert_string_equal(c.log_level, "info");
    assert_string_equal(c.topic_prefix, "ax.");
    assert_null(c.worker_id);
    assert_int_equal(c.message_max_bytes, 1048576);
    assert_int_equal(c.executor_slots, 8);
    assert_int_equal(c.backoff_initial_ms, 200);
    assert_int_equal(c.backoff_max_ms, 10000);
    assert_int_equal(c.executor_default_timeout_ms, 3600000);
    assert_null(c.kafka);
    assert_int_equal(c.n_kafka, 0);
    assert_null(c.pg);
    assert_int_equal(c.n_pg, 0);
    ax_conf_free(&c);
}

static void test_free_zeroes_and_is_idempotent(void **state) {
    (void)state;
    ax_conf_t c, zero;
    memset(&zero, 0, sizeof zero);
    ax_conf_init(&c);
    assert_int_equal(ax_conf_set(&c, "kafka.a", "1", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&c, "pg.b", "2", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&c, "worker.id", "w", "t", NULL, 0), 0);
    ax_conf_free(&c);
    assert_memory_equal(&c, &zero, sizeof c);
    ax_conf_free(&c);
    ax_conf_free(NULL);
}

/* ---- ax_conf_set ------------------------------------------------------ */

static void test_set_string_and_int(void **state) {
    (void)state;
    ax_conf_t c;
    char err[ERRLEN] = "";
    ax_conf_init(&c);
    assert_int_equal(ax_conf_set(&c, "topic.prefix", "prod.", "--set", err, sizeof err), 0);
    assert_string_equal(c.topic_prefix, "prod.");
    assert_int_equal(ax_conf_set(&c, "topic.prefix", "", "--set", err, sizeof err), 0);
    assert_string_equal(c.topic_prefix, "");
    assert_int_equal(ax_conf_set(&c, "worker.id", "host:1", "--set", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "worker.id", "host:2", "--set", err, sizeof err), 0);
    assert_string_equal(c.worker_id, "host:2");
    assert_int_equal(ax_conf_set(&c, "executor.slots", "16", "--set", err, sizeof err), 0);
    assert_int_equal(c.executor_slots, 16);
    assert_int_equal(ax_conf_set(&c, "executor.slots", "+17", "--set", err, sizeof err), 0);
    assert_int_equal(c.executor_slots, 17);
    assert_int_equal(ax_conf_set(&c, "submit.default.timeout.ms", "9223372036854775807",
                                 "--set", err, sizeof err),
                     0);
    assert_int_equal(c.executor_default_timeout_ms, INT64_MAX);
    /* NULL errbuf is allowed on both paths. */
    assert_int_equal(ax_conf_set(&c, "executor.slots", "3", "x", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&c, "executor.slots", "0", "x", NULL, 0), AX_ERR_INVALID);
    assert_int_equal(ax_conf_set(&c, "no.such", "0", "x", NULL, 0), AX_ERR_INVALID);
    assert_int_equal(c.executor_slots, 3);
    ax_conf_free(&c);
}

static void test_set_unknown_key(void **state) {
    (void)state;
    static const char *const bad[] = {
        "no.such.key", "", "log", "log.level.x", "LOG.LEVEL", " log.level", "kafka.", "pg.",
        "kafka",       "pg", "executor.slot",
    };
    ax_conf_t c;
    ax_conf_init(&c);
    for (size_t i = 0; i < AX_ARRAY_SIZE(bad); i++) {
        char err[ERRLEN] = "";
        assert_int_equal(ax_conf_set(&c, bad[i], "1", "myorigin:7", err, sizeof err),
                         AX_ERR_INVALID);
        char quoted[300];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        assert_contains(err, quoted);
        assert_contains(err, "myorigin:7");
        assert_contains(err, "unknown");
    }
    assert_int_equal(c.n_kafka, 0);
    assert_int_equal(c.n_pg, 0);
    ax_conf_free(&c);
}

static void test_set_int_not_an_integer(void **state) {
    (void)state;
    static const char *const bad[] = {
        "", "abc", "12x", "1.5", "0x10", "1e3", "--1", "5 ", "99999999999999999999",
        "-99999999999999999999", "9223372036854775808",
    };
    ax_conf_t c;
    ax_conf_init(&c);
    for (size_t i = 0; i < AX_ARRAY_SIZE(bad); i++) {
        char err[ERRLEN] = "";
        assert_int_equal(ax_conf_set(&c, "submit.default.timeout.ms", bad[i], "src", err,
                                     sizeof err),
                         AX_ERR_INVALID);
        assert_contains(err, "src");
        assert_contains(err, "submit.default.timeout.ms");
        assert_contains(err, "not an integer");
        assert_int_equal(c.executor_default_timeout_ms, 3600000);
    }
    ax_conf_free(&c);
}

static void test_set_int_range_every_key(void **state) {
    (void)state;
    ax_conf_t c;
    ax_conf_init(&c);
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        if (d->type != AX_CONF_INT)
            continue;
        char v[64], err[ERRLEN];
        snprintf(v, sizeof v, "%lld", (long long)d->min);
        assert_int_equal(ax_conf_set(&c, d->name, v, "t", err, sizeof err), 0);
        assert_int_equal(field_int(&c, d), d->min);
        snprintf(v, sizeof v, "%lld", (long long)d->max);
        assert_int_equal(ax_conf_set(&c, d->name, v, "t", err, sizeof err), 0);
        assert_int_equal(field_int(&c, d), d->max);
        if (d->min > INT64_MIN) {
            snprintf(v, sizeof v, "%lld", (long long)d->min - 1);
            err[0] = '\0';
            assert_int_equal(ax_conf_set(&c, d->name, v, "origin-lo", err, sizeof err),
                             AX_ERR_INVALID);
            assert_contains(err, d->name);
            assert_contains(err, "origin-lo");
            assert_contains(err, "out of range");
            assert_int_equal(field_int(&c, d), d->max); /* unchanged */
        }
        if (d->max < INT64_MAX) {
            snprintf(v, sizeof v, "%lld", (long long)d->max + 1);
            err[0] = '\0';
            assert_int_equal(ax_conf_set(&c, d->name, v, "origin-hi", err, sizeof err),
                             AX_ERR_INVALID);
            assert_contains(err, d->name);
            assert_contains(err, "origin-hi");
            assert_contains(err, "out of range");
            char bounds[128];
            snprintf(bounds, sizeof bounds, "[%lld, %lld]", (long long)d->min,
                     (long long)d->max);
            assert_contains(err, bounds);
            assert_int_equal(field_int(&c, d), d->max);
        }
    }
    ax_conf_free(&c);
}

static void test_set_log_level(void **state) {
    (void)state;
    static const char *const good[] = {"debug", "info", "warn", "error", "DEBUG", "Warn"};
    static const char *const bad[] = {"", "verbose", "warning", "err", "info ", "trace"};
    ax_conf_t c;
    ax_conf_init(&c);
    for (size_t i = 0; i < AX_ARRAY_SIZE(good); i++) {
        char err[ERRLEN];
        assert_int_equal(ax_conf_set(&c, "log.level", good[i], "t", err, sizeof err), 0);
        assert_string_equal(c.log_level, good[i]);
    }
    assert_int_equal(ax_conf_set(&c, "log.level", "warn", "t", NULL, 0), 0);
    for (size_t i = 0; i < AX_ARRAY_SIZE(bad); i++) {
        char err[ERRLEN] = "";
        assert_int_equal(ax_conf_set(&c, "log.level", bad[i], "cfg:3", err, sizeof err),
                         AX_ERR_INVALID);
        assert_contains(err, "log.level");
        assert_contains(err, "cfg:3");
        assert_string_equal(c.log_level, "warn");
    }
    ax_conf_free(&c);
}

/* log.format: text or json; metrics.listen: empty (off) or a loopback HOST:PORT. */
static void test_set_log_format_metrics_listen(void **state) {
    (void)state;
    static const struct {
        const char *key, *value;
        int ok;
    } cases[] = {
        {"log.format", "text", 1},           {"log.format", "json", 1},
        {"log.format", "JSON", 0},           {"log.format", "", 0},
        {"log.format", "xml", 0},            {"metrics.listen", "", 1},
        {"metrics.listen", "127.0.0.1:9464", 1}, {"metrics.listen", "127.8.9.10:0", 1},
        {"metrics.listen", "localhost:65535", 1}, {"metrics.listen", "[::1]:9464", 1},
        {"metrics.listen", "0.0.0.0:9464", 0}, {"metrics.listen", "10.0.0.1:9464", 0},
        {"metrics.listen", "127.0.0.1", 0},  {"metrics.listen", "127.0.0.1:", 0},
        {"metrics.listen", "127.0.0.1:65536", 0}, {"metrics.listen", "127.0.0.1:-1", 0},
        {"metrics.listen", "127.0.0.1:80x", 0}, {"metrics.listen", ":9464", 0},
        {"metrics.listen", "example.com:9464", 0}, {"metrics.listen", "127.0.0.256:1", 0},
    };
    ax_conf_t c;
    ax_conf_init(&c);
    assert_string_equal(c.log_format, "text");
    assert_string_equal(c.metrics_listen, "");
    for (size_t i = 0; i < AX_ARRAY_SIZE(cases); i++) {
        char err[ERRLEN] = "";
        int rc = ax_conf_set(&c, cases[i].key, cases[i].value, "cfg:7", err, sizeof err);
        if (cases[i].ok) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, AX_ERR_INVALID);
            assert_contains(err, cases[i].key);
            assert_contains(err, "cfg:7");
        }
    }
    ax_conf_free(&c);
}

static void test_set_passthrough(void **state) {
    (void)state;
    ax_conf_t c;
    char err[ERRLEN];
    ax_conf_init(&c);
    assert_int_equal(ax_conf_set(&c, "kafka.bootstrap.servers", "k1:9092", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "kafka.socket.timeout.ms", "5000", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "pg.host", "db1", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "pg.connect_timeout", "3", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "pg.options", "-c a=b", "t", err, sizeof err), 0);
    assert_int_equal(c.n_kafka, 2);
    assert_int_equal(c.n_pg, 3);
    /* stored without the prefix, in insertion order */
    assert_string_equal(c.kafka[0].key, "bootstrap.servers");
    assert_string_equal(c.kafka[0].value, "k1:9092");
    assert_string_equal(c.kafka[1].key, "socket.timeout.ms");
    assert_string_equal(c.pg[0].key, "host");
    assert_string_equal(c.pg[1].key, "connect_timeout");
    assert_string_equal(c.pg[2].value, "-c a=b");

    /* a later set replaces, without adding an entry */
    assert_int_equal(ax_conf_set(&c, "kafka.bootstrap.servers", "k2:9092,k3:9092", "t", err,
                                 sizeof err),
                     0);
    assert_int_equal(ax_conf_set(&c, "pg.host", "db2", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "pg.host", "", "t", err, sizeof err), 0);
    assert_int_equal(c.n_kafka, 2);
    assert_int_equal(c.n_pg, 3);
    assert_string_equal(kv_get(c.kafka, c.n_kafka, "bootstrap.servers"), "k2:9092,k3:9092");
    assert_string_equal(kv_get(c.pg, c.n_pg, "host"), "");
    /* the prefix is only the literal "kafka." / "pg." */
    assert_null(kv_get(c.kafka, c.n_kafka, "kafka.bootstrap.servers"));
    /* pass-through keys do not touch the table fields */
    assert_string_equal(c.log_level, "info");

    /* many distinct keys (realloc growth) */
    for (int i = 0; i < 200; i++) {
        char k[32], v[32];
        snprintf(k, sizeof k, "kafka.p%d", i);
        snprintf(v, sizeof v, "v%d", i);
        assert_int_equal(ax_conf_set(&c, k, v, "t", err, sizeof err), 0);
    }
    assert_int_equal(c.n_kafka, 202);
    assert_string_equal(kv_get(c.kafka, c.n_kafka, "p199"), "v199");
    ax_conf_free(&c);
}

/* ---- ax_conf_load_file ------------------------------------------------ */

static void test_file_ok(void **state) {
    (void)state;
    char path[512], err[ERRLEN] = "";
    tmp_write(path, sizeof path,
              "# a comment line\n"
              "\n"
              "   \t  \n"
              "log.level = debug\n"
              "  executor.slots=12   # trailing comment\n"
              "\ttopic.prefix\t=\tt.  \n"
              "worker.id = a b c\n"
              "kafka.bootstrap.servers = k:9092\n"
              "pg.connect_timeout = 4\n"
              "pg.options = -c x=y\n"
              "backoff.max.ms = 5000\r\n"
              "    # indented comment = ignored\n"
              "executor.slots = 13\n" /* later lines win */
              "callback.batch = 7"); /* no final newline */
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), 0);
    assert_string_equal(c.log_level, "debug");
    assert_int_equal(c.executor_slots, 13);
    assert_string_equal(c.topic_prefix, "t.");
    assert_string_equal(c.worker_id, "a b c");
    assert_int_equal(c.backoff_max_ms, 5000);
    assert_int_equal(c.callback_batch, 7);
    assert_string_equal(kv_get(c.kafka, c.n_kafka, "bootstrap.servers"), "k:9092");
    assert_string_equal(kv_get(c.pg, c.n_pg, "connect_timeout"), "4");
    assert_string_equal(kv_get(c.pg, c.n_pg, "options"), "-c x=y");
    assert_int_equal(c.n_kafka, 1);
    assert_int_equal(c.n_pg, 2);
    /* untouched keys keep their defaults */
    assert_int_equal(c.trigger_batch, 1000);
    ax_conf_free(&c);
    unlink(path);
}

static void test_file_empty(void **state) {
    (void)state;
    char path[512], err[ERRLEN] = "";
    tmp_write(path, sizeof path, "");
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), 0);
    assert_string_equal(c.log_level, "info");
    ax_conf_free(&c);
    unlink(path);
}

static void test_file_missing_equals(void **state) {
    (void)state;
    char path[512], err[ERRLEN] = "", want[600];
    tmp_write(path, sizeof path,
              "# header\n"
              "executor.slots = 5\n"
              "\n"
              "this line has no equals sign\n"
              "executor.slots = 6\n");
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), AX_ERR_INVALID);
    snprintf(want, sizeof want, "%s:4", path);
    assert_contains(err, want);
    assert_contains(err, "key = value");
    assert_int_equal(c.executor_slots, 5); /* lines before the error were applied, not after */
    ax_conf_free(&c);
    unlink(path);
}

static void test_file_unknown_key_and_bad_value(void **state) {
    (void)state;
    char path[512], err[ERRLEN] = "", want[600];
    ax_conf_t c;

    tmp_write(path, sizeof path, "log.level = warn\nexecutor.slotz = 3\n");
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), AX_ERR_INVALID);
    snprintf(want, sizeof want, "%s:2", path);
    assert_contains(err, want);
    assert_contains(err, "'executor.slotz'");
    ax_conf_free(&c);
    unlink(path);

    tmp_write(path, sizeof path, "\n\nexecutor.slots = 0\n");
    ax_conf_init(&c);
    err[0] = '\0';
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), AX_ERR_INVALID);
    snprintf(want, sizeof want, "%s:3", path);
    assert_contains(err, want);
    assert_contains(err, "executor.slots");
    assert_contains(err, "out of range");
    assert_int_equal(c.executor_slots, 8);
    ax_conf_free(&c);
    unlink(path);

    tmp_write(path, sizeof path, "executor.slots = twelve\n");
    ax_conf_init(&c);
    err[0] = '\0';
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), AX_ERR_INVALID);
    snprintf(want, sizeof want, "%s:1", path);
    assert_contains(err, want);
    assert_contains(err, "not an integer");
    ax_conf_free(&c);
    unlink(path);

    tmp_write(path, sizeof path, " = value\n");
    ax_conf_init(&c);
    err[0] = '\0';
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), AX_ERR_INVALID);
    snprintf(want, sizeof want, "%s:1", path);
    assert_contains(err, want);
    ax_conf_free(&c);
    unlink(path);
}

static void test_file_missing(void **state) {
    (void)state;
    char err[ERRLEN] = "";
    const char *path = "/nonexistent-ax-dir/ax-test.conf";
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_file(&c, path, 0, err, sizeof err), 0);
    assert_string_equal(c.log_level, "info");
    assert_int_equal(c.executor_slots, 8);
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), AX_ERR_IO);
    assert_contains(err, path);
    ax_conf_free(&c);
}

/*
 * Regression (fixed): fopen() of a directory succeeds on Linux,
 * the first fgets() fails with EISDIR, and the read error is never checked
 * (no ferror()), so `--config /some/dir` loads nothing and returns 0 even
 * with must_exist=1. Read errors are reported now.
 */
static void test_file_is_directory(void **state) {
    (void)state;
    char err[ERRLEN] = "";
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_file(&c, "/", 1, err, sizeof err), AX_ERR_IO);
    assert_contains(err, "/");
    ax_conf_free(&c);
}

/* A `#` starts a comment even in the middle of a value. */
static void test_file_hash_truncates_value(void **state) {
    (void)state;
    char path[512], err[ERRLEN] = "";
    tmp_write(path, sizeof path, "worker.id = w#1\n");
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), 0);
    assert_string_equal(c.worker_id, "w");
    ax_conf_free(&c);
    unlink(path);
}

/* Values near the line buffer size are kept whole. */
static void test_file_long_value(void **state) {
    (void)state;
    char path[512], err[ERRLEN] = "";
    size_t vlen = 4000;
    char *content = malloc(vlen + 64);
    assert_non_null(content);
    int n = snprintf(content, 64, "worker.id = ");
    memset(content + n, 'w', vlen);
    strcpy(content + n + vlen, "\nexecutor.slots = 9\n");
    tmp_write(path, sizeof path, content);
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), 0);
    assert_int_equal(strlen(c.worker_id), vlen);
    assert_int_equal(c.executor_slots, 9);
    ax_conf_free(&c);
    free(content);
    unlink(path);
}

/*
 * Regression (fixed): ax_conf_load_file reads with
 * fgets(line[4096]), so a line of 4096+ bytes is split in two; the tail is
 * parsed as a new line and lineno counts it. A valid one-line file whose
 * comment makes the line long is rejected with "path:2: expected 'key =
 * value'". The parser now reads whole lines (getline), naming
 * line 1) over-long lines.
 */
static void test_file_overlong_line(void **state) {
    (void)state;
    char path[512], err[ERRLEN] = "";
    size_t clen = 5000;
    char *content = malloc(clen + 64);
    assert_non_null(content);
    int n = snprintf(content, 64, "log.level = warn # ");
    memset(content + n, 'x', clen);
    strcpy(content + n + clen, "\n");
    tmp_write(path, sizeof path, content);
    ax_conf_t c;
    ax_conf_init(&c);
    int rc = ax_conf_load_file(&c, path, 1, err, sizeof err);
    if (rc == 0) {
        assert_string_equal(c.log_level, "warn");
    } else {
        char bad[600];
        snprintf(bad, sizeof bad, "%s:2", path);
        assert_not_contains(err, bad); /* the file has only one line */
    }
    ax_conf_free(&c);
    free(content);
    unlink(path);
}

/* ---- ax_conf_load_env ------------------------------------------------- */

static void test_env_mapping(void **state) {
    (void)state;
    char *env[] = {
        "PATH=/usr/bin:/bin",
        "HOME=/root",
        "AX_CONFIG=/nonexistent",     /* not AXCONF_ */
        "AXCONFX_LOG_LEVEL=error",    /* not AXCONF_ */
        "XAXCONF_LOG_LEVEL=error",    /* not a prefix match */
        "axconf_log_level=error",     /* case matters for the prefix */
        "AXCONF_LOG_LEVEL=debug",
        "AXCONF_EXECUTOR_SLOTS=3",
        "AXCONF_TOPIC_PREFIX=env.",
        "AXCONF_WORKER_ID=w=1",       /* '=' in the value */
        "AXCONF_SUBMIT_DEFAULT_TIMEOUT_MS=1234",
        "AXCONF_KAFKA_SOCKET_TIMEOUT_MS=5000",
        "AXCONF_KAFKA_BOOTSTRAP_SERVERS=k:9092",
        "AXCONF_PG_CONNECT_TIMEOUT=7",
        "AXCONF_PG_HOST=db",
        "AXCONF_PG_SSLMODE=require",
        "AXCONF_NO_EQUALS_SIGN",      /* no '=' at all: ignored */
        NULL,
    };
    char err[ERRLEN] = "";
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_env(&c, env, err, sizeof err), 0);
    assert_string_equal(c.log_level, "debug");
    assert_int_equal(c.executor_slots, 3);
    assert_string_equal(c.topic_prefix, "env.");
    assert_string_equal(c.worker_id, "w=1");
    assert_int_equal(c.executor_default_timeout_ms, 1234);
    assert_int_equal(c.n_kafka, 2);
    assert_string_equal(kv_get(c.kafka, c.n_kafka, "socket.timeout.ms"), "5000");
    assert_string_equal(kv_get(c.kafka, c.n_kafka, "bootstrap.servers"), "k:9092");
    assert_int_equal(c.n_pg, 3);
    assert_string_equal(kv_get(c.pg, c.n_pg, "connect_timeout"), "7");
    assert_string_equal(kv_get(c.pg, c.n_pg, "host"), "db");
    assert_string_equal(kv_get(c.pg, c.n_pg, "sslmode"), "require");
    ax_conf_free(&c);
}

/* A valid value of a string key that is checked (else NULL: any text). */
static const char *checked_value(const char *key) {
    if (strcmp(key, "log.level") == 0)
        return "error";
    if (strcmp(key, "log.format") == 0)
        return "json";
    if (strcmp(key, "metrics.listen") == 0)
        return "127.0.0.1:9464";
    return NULL;
}

/* Every table key is reachable through its AXCONF_ name. */
static void test_env_every_table_key(void **state) {
    (void)state;
    char **env = calloc(ax_conf_table_len + 1, sizeof *env);
    assert_non_null(env);
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        char val[64];
        if (d->type == AX_CONF_INT)
            snprintf(val, sizeof val, "%lld", (long long)d->max);
        else if (checked_value(d->name))
            snprintf(val, sizeof val, "%s", checked_value(d->name));
        else
            snprintf(val, sizeof val, "v-%zu", i);
        env[i] = malloc(300);
        assert_non_null(env[i]);
        env_name(env[i], 300, d->name, val);
    }
    char err[ERRLEN] = "";
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_env(&c, env, err, sizeof err), 0);
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        if (d->type == AX_CONF_INT) {
            assert_int_equal(field_int(&c, d), d->max);
        } else if (checked_value(d->name)) {
            assert_string_equal(field_str(&c, d), checked_value(d->name));
        } else {
            char want[64];
            snprintf(want, sizeof want, "v-%zu", i);
            assert_string_equal(field_str(&c, d), want);
        }
        free(env[i]);
    }
    assert_int_equal(c.n_kafka, 0);
    assert_int_equal(c.n_pg, 0);
    free(env);
    ax_conf_free(&c);
}

static void test_env_order_later_wins(void **state) {
    (void)state;
    char *env[] = {"AXCONF_EXECUTOR_SLOTS=3", "AXCONF_EXECUTOR_SLOTS=4",
                   "AXCONF_PG_HOST=a",        "AXCONF_PG_HOST=b", NULL};
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_env(&c, env, NULL, 0), 0);
    assert_int_equal(c.executor_slots, 4);
    assert_int_equal(c.n_pg, 1);
    assert_string_equal(c.pg[0].value, "b");
    ax_conf_free(&c);
}

static void test_env_unknown_and_bad(void **state) {
    (void)state;
    static const char *const unknown[] = {
        "AXCONF_NO_SUCH_KEY=1", "AXCONF_log_level=debug", "AXCONF_LOG.LEVEL=debug",
        "AXCONF_KAFKA_=x",      "AXCONF_PG_=x",           "AXCONF_KAFKA=x",
        "AXCONF_PG=x",          "AXCONF_LOG_LEVEL_=x",
    };
    for (size_t i = 0; i < AX_ARRAY_SIZE(unknown); i++) {
        char *env[] = {"AXCONF_EXECUTOR_SLOTS=3", (char *)unknown[i], NULL};
        char err[ERRLEN] = "", name[128];
        ax_conf_t c;
        ax_conf_init(&c);
        assert_int_equal(ax_conf_load_env(&c, env, err, sizeof err), AX_ERR_INVALID);
        snprintf(name, sizeof name, "%.*s", (int)(strchr(unknown[i], '=') - unknown[i]),
                 unknown[i]);
        assert_contains(err, name);
        assert_contains(err, "unknown");
        ax_conf_free(&c);
    }

    /* An empty name is an error too. */
    {
        char *env[] = {"AXCONF_=1", NULL};
        char err[ERRLEN] = "";
        ax_conf_t c;
        ax_conf_init(&c);
        assert_int_equal(ax_conf_load_env(&c, env, err, sizeof err), AX_ERR_INVALID);
        assert_contains(err, "AXCONF_");
        ax_conf_free(&c);
    }

    /* A bad value names the variable and the key. */
    {
        char *env[] = {"AXCONF_EXECUTOR_SLOTS=0", NULL};
        char err[ERRLEN] = "";
        ax_conf_t c;
        ax_conf_init(&c);
        assert_int_equal(ax_conf_load_env(&c, env, err, sizeof err), AX_ERR_INVALID);
        assert_contains(err, "environment AXCONF_EXECUTOR_SLOTS");
        assert_contains(err, "executor.slots");
        assert_contains(err, "out of range");
        assert_int_equal(c.executor_slots, 8);
        ax_conf_free(&c);
    }
    {
        char *env[] = {"AXCONF_LOG_LEVEL=loud", NULL};
        char err[ERRLEN] = "";
        ax_conf_t c;
        ax_conf_init(&c);
        assert_int_equal(ax_conf_load_env(&c, env, err, sizeof err), AX_ERR_INVALID);
        assert_contains(err, "AXCONF_LOG_LEVEL");
        assert_contains(err, "log.level");
        ax_conf_free(&c);
    }
}

static void test_env_long_names(void **state) {
    (void)state;
    /* Names around and beyond the internal key buffer: no overflow, clean error. */
    static const size_t lens[] = {200, 247, 248, 255, 256, 1000, 5000};
    for (size_t i = 0; i < AX_ARRAY_SIZE(lens); i++) {
        size_t n = lens[i];
        char *var = malloc(7 + n + 3);
        assert_non_null(var);
        memcpy(var, "AXCONF_PG_", 10);
        memset(var + 10, 'X', n - 3);
        strcpy(var + 7 + n, "=1");
        char *env[] = {var, NULL};
        char err[ERRLEN] = "";
        ax_conf_t c;
        ax_conf_init(&c);
        int rc = ax_conf_load_env(&c, env, err, sizeof err);
        if (n < 248) {
            assert_int_equal(rc, 0);
            assert_int_equal(c.n_pg, 1);
            assert_int_equal(strlen(c.pg[0].key), n - 3);
        } else {
            assert_int_equal(rc, AX_ERR_INVALID);
            assert_contains(err, "AXCONF_PG_XXX");
            assert_int_equal(c.n_pg, 0);
        }
        ax_conf_free(&c);
        free(var);
    }
}

static void test_env_empty(void **state) {
    (void)state;
    char *none[] = {NULL};
    ax_conf_t c;
    ax_conf_init(&c);
    assert_int_equal(ax_conf_load_env(&c, none, NULL, 0), 0);
    assert_int_equal(ax_conf_load_env(&c, NULL, NULL, 0), 0);
    assert_string_equal(c.log_level, "info");
    ax_conf_free(&c);
}

/* ---- secrets and printing --------------------------------------------- */

static void test_is_secret(void **state) {
    (void)state;
    static const char *const secret[] = {
        "password",        "pg.password",           "sslpassword",
        "passfile",        "sasl.password",         "kafka.sasl.password",
        "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
        "ssl.key.location", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config",
        "client.secret",
    };
    static const char *const open_[] = {
        "host",      "pg.host",        "user",           "dbname",         "sslmode",
        "bootstrap.servers", "sasl.username", "sasl.mechanism", "security.protocol",
        "log.level", "worker.id",      "topic.prefix",   "connect_timeout",
    };
    for (size_t i = 0; i < AX_ARRAY_SIZE(secret); i++)
        if (!ax_conf_is_secret(secret[i]))
            fail_msg("%s should be secret", secret[i]);
    for (size_t i = 0; i < AX_ARRAY_SIZE(open_); i++)
        if (ax_conf_is_secret(open_[i]))
            fail_msg("%s should not be secret", open_[i]);
    /* the only table key holding a secret is the alert webhook's */
    for (size_t i = 0; i < ax_conf_table_len; i++)
        assert_int_equal(ax_conf_is_secret(ax_conf_table[i].name),
                         strcmp(ax_conf_table[i].name, "alert.webhook.secret") == 0);
    ax_conf_t c;
    char err[ERRLEN] = "";
    ax_conf_init(&c);
    assert_int_equal(
        ax_conf_set(&c, "alert.webhook.secret", "Hook-S3cret-value", "t", err, sizeof err), 0);
    char *out = print_conf(&c);
    assert_not_contains(out, "Hook-S3cret-value");
    assert_contains(out, "alert.webhook.secret = <redacted>\n");
    free(out);
    ax_conf_free(&c);
}

static void test_print_redacts_secrets(void **state) {
    (void)state;
    static const char pg_pw[] = "PgS3cret-value-XYZ";
    static const char k_pw[] = "KafkaS3cret-value-QRS";
    static const char k_key_pw[] = "KeyPw-value-LMN";
    static const char oauth[] = "OauthSecret-value-ABC";
    char err[ERRLEN] = "", path[512];
    ax_conf_t c;
    ax_conf_init(&c);
    /* secrets from all three sources */
    char file[256];
    snprintf(file, sizeof file, "pg.password = %s\npg.host = db.example\n", pg_pw);
    tmp_write(path, sizeof path, file);
    assert_int_equal(ax_conf_load_file(&c, path, 1, err, sizeof err), 0);
    unlink(path);
    char envvar[128];
    snprintf(envvar, sizeof envvar, "AXCONF_KAFKA_SASL_PASSWORD=%s", k_pw);
    char *env[] = {envvar, "AXCONF_KAFKA_SASL_USERNAME=alice", NULL};
    assert_int_equal(ax_conf_load_env(&c, env, err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "kafka.ssl.key.password", k_key_pw, "--set", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "kafka.sasl.oauthbearer.client.secret", oauth, "--set", err,
                                 sizeof err),
                     0);
    assert_int_equal(ax_conf_set(&c, "worker.id", "w1", "--set", err, sizeof err), 0);

    char *out = print_conf(&c);
    assert_not_contains(out, pg_pw);
    assert_not_contains(out, k_pw);
    assert_not_contains(out, k_key_pw);
    assert_not_contains(out, oauth);
    assert_not_contains(out, "S3cret");
    assert_contains(out, "pg.password = <redacted>\n");
    assert_contains(out, "kafka.sasl.password = <redacted>\n");
    assert_contains(out, "kafka.ssl.key.password = <redacted>\n");
    assert_contains(out, "kafka.sasl.oauthbearer.client.secret = <redacted>\n");
    assert_contains(out, "pg.host = db.example\n");
    assert_contains(out, "kafka.sasl.username = alice\n");
    assert_contains(out, "worker.id = w1\n");
    assert_contains(out, "log.level = info\n");
    assert_contains(out, "executor.slots = 8\n");
    free(out);

    /* the same through a real FILE (tmpfile) */
    FILE *f = tmpfile();
    assert_non_null(f);
    ax_conf_print(&c, f);
    long size = ftell(f);
    assert_true(size > 0);
    rewind(f);
    char *buf = calloc(1, (size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    assert_not_contains(buf, pg_pw);
    assert_not_contains(buf, k_pw);
    assert_contains(buf, "<redacted>");
    free(buf);

    /* the stored values themselves are intact */
    assert_string_equal(kv_get(c.pg, c.n_pg, "password"), pg_pw);
    assert_string_equal(kv_get(c.kafka, c.n_kafka, "sasl.password"), k_pw);
    ax_conf_free(&c);
}

static void test_print_every_key(void **state) {
    (void)state;
    ax_conf_t c;
    ax_conf_init(&c);
    char *out = print_conf(&c);
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        char line[256];
        snprintf(line, sizeof line, "%s = %s\n", d->name, d->def ? d->def : "");
        assert_contains(out, line);
    }
    /* exactly one line per key when nothing is passed through */
    size_t lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, ax_conf_table_len);
    free(out);
    ax_conf_free(&c);
}

/* What ax_conf_print writes can be read back and prints the same. */
static void test_print_round_trip(void **state) {
    (void)state;
    char err[ERRLEN] = "", path[512];
    ax_conf_t a, b;
    ax_conf_init(&a);
    assert_int_equal(ax_conf_set(&a, "executor.slots", "99", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&a, "log.level", "warn", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&a, "worker.id", "h:1", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&a, "kafka.acks", "all", "t", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&a, "pg.port", "5433", "t", err, sizeof err), 0);
    char *out1 = print_conf(&a);
    tmp_write(path, sizeof path, out1);
    ax_conf_init(&b);
    assert_int_equal(ax_conf_load_file(&b, path, 1, err, sizeof err), 0);
    unlink(path);
    char *out2 = print_conf(&b);
    assert_string_equal(out1, out2);
    free(out1);
    free(out2);
    ax_conf_free(&a);
    ax_conf_free(&b);
}

/* ---- reference, help, topics ------------------------------------------ */

static void test_reference_lists_every_key(void **state) {
    (void)state;
    char *ref = reference_text();
    assert_true(strncmp(ref, "# Configuration reference\n", 26) == 0);
    assert_contains(ref, "| key | type | default | used by | meaning |");
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        char cell[256];
        snprintf(cell, sizeof cell, "\n| `%s` |", d->name);
        assert_contains(ref, cell);
        assert_contains(ref, d->doc);
        if (d->def) {
            snprintf(cell, sizeof cell, "`%s`", d->def);
            assert_contains(ref, cell);
        }
        if (d->type == AX_CONF_INT && d->max != INT64_MAX) {
            snprintf(cell, sizeof cell, "integer %lld–%lld", (long long)d->min,
                     (long long)d->max);
            assert_contains(ref, cell);
        }
    }
    assert_contains(ref, "AXCONF_KAFKA_SOCKET_TIMEOUT_MS");
    assert_contains(ref, "AXCONF_PG_CONNECT_TIMEOUT");
    /* table rows: one per key */
    size_t rows = 0;
    const char *sep = strstr(ref, "|---|");
    assert_non_null(sep);
    /* Offsets rather than a moving pointer: gcc 12 -O2 misreads the latter
     * as dangling (-Wdangling-pointer) through open_memstream's buffer. */
    size_t off = (size_t)(sep - ref), total = strlen(ref);
    while (off < total) {
        const char *hit = strstr(ref + off, "\n| `");
        if (!hit)
            break;
        rows++;
        off = (size_t)(hit - ref) + 1;
    }
    assert_int_equal(rows, ax_conf_table_len);
    free(ref);
}

/* docs/CONFIGURATION.md is the output of ax_conf_reference(). */
static void test_reference_matches_docs(void **state) {
    (void)state;
    static const char self[] = "tests/unit/test_conf.c";
    const char *file = __FILE__;
    size_t fl = strlen(file), sl = strlen(self);
    if (fl < sl || strcmp(file + fl - sl, self) != 0) {
        fail_msg("cannot locate docs/CONFIGURATION.md from %s", file);
    }
    char path[1024];
    snprintf(path, sizeof path, "%.*sdocs/CONFIGURATION.md", (int)(fl - sl), file);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    char *doc = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            doc = realloc(doc, cap);
            assert_non_null(doc);
        }
        size_t r = fread(doc + n, 1, 4096, f);
        n += r;
        if (r == 0)
            break;
    }
    doc[n] = '\0';
    fclose(f);
    char *ref = reference_text();
    if (strcmp(doc, ref) != 0) {
        size_t i = 0, line = 1;
        while (doc[i] && doc[i] == ref[i])
            line += doc[i++] == '\n';
        fail_msg("%s is stale from line %zu: regenerate with 'axctl config reference'", path,
                 line);
    }
    free(doc);
    free(ref);
}

static void test_help_filters_by_program(void **state) {
    (void)state;
    char *all = help_text(NULL);
    char *ex = help_text("executor");
    char *tr = help_text("trigger");
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        char needle[128];
        snprintf(needle, sizeof needle, "  %s ", d->name);
        assert_contains(all, needle);
        /* used_by: "all" or a comma-separated list of programs */
        int for_ex = strcmp(d->used_by, "all") == 0 || strstr(d->used_by, "executor") != NULL;
        int for_tr = strcmp(d->used_by, "all") == 0 || strstr(d->used_by, "trigger") != NULL;
        if (for_ex)
            assert_contains(ex, needle);
        else
            assert_not_contains(ex, needle);
        if (for_tr)
            assert_contains(tr, needle);
        else
            assert_not_contains(tr, needle);
    }
    assert_contains(ex, "kafka.<property>");
    assert_contains(ex, "pg.<keyword>");
    /* a key of two programs: shown for both, not for a third */
    assert_contains(tr, "  alert.webhook.url ");
    assert_not_contains(ex, "  alert.webhook.url ");
    assert_contains(ex, "--print-config");
    free(all);
    free(ex);
    free(tr);
}

static void test_topic(void **state) {
    (void)state;
    ax_conf_t c;
    char buf[64], err[ERRLEN];
    ax_conf_init(&c);
    assert_ptr_equal(ax_conf_topic(&c, "submit", buf, sizeof buf), buf);
    assert_string_equal(buf, "ax.submit");
    assert_string_equal(ax_conf_topic(&c, "dlq", buf, sizeof buf), "ax.dlq");
    assert_string_equal(ax_conf_topic(&c, "", buf, sizeof buf), "ax.");
    assert_int_equal(ax_conf_set(&c, "topic.prefix", "prod-eu.", "t", err, sizeof err), 0);
    assert_string_equal(ax_conf_topic(&c, "callback", buf, sizeof buf), "prod-eu.callback");
    assert_int_equal(ax_conf_set(&c, "topic.prefix", "", "t", err, sizeof err), 0);
    assert_string_equal(ax_conf_topic(&c, "results", buf, sizeof buf), "results");
    /* a short buffer truncates but stays terminated */
    char small[6];
    memset(small, 'Z', sizeof small);
    assert_int_equal(ax_conf_set(&c, "topic.prefix", "abcdef.", "t", err, sizeof err), 0);
    assert_string_equal(ax_conf_topic(&c, "submit", small, sizeof small), "abcde");
    ax_conf_free(&c);
}

/* ---- ax_conf_diff / ax_conf_swap_key (SIGHUP) ------------------------------------------ */

typedef struct {
    char lines[16][400];
    int n;
} diff_log_t;

static void diff_rec(const char *key, const char *old, const char *now, void *arg) {
    diff_log_t *d = arg;
    if (d->n < 16)
        snprintf(d->lines[d->n++], sizeof d->lines[0], "%s:%s>%s", key, old, now);
}

static void test_diff_reports_changes_and_hides_secrets(void **state) {
    (void)state;
    ax_conf_t a, b;
    ax_conf_init(&a);
    ax_conf_init(&b);
    diff_log_t d = {0};
    assert_int_equal(ax_conf_diff(&a, &b, diff_rec, &d), 0);
    assert_int_equal(ax_conf_set(&b, "log.level", "debug", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&b, "trigger.batch", "7", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&b, "alert.webhook.secret", "s3cret", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&b, "pg.password", "pw1", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&a, "kafka.linger.ms", "5", "t", NULL, 0), 0); /* only in a */
    assert_int_equal(ax_conf_set(&b, "kafka.acks", "all", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_diff(&a, &b, diff_rec, &d), 5);
    assert_string_equal(d.lines[0], "log.level:info>debug");
    assert_string_equal(d.lines[1], "trigger.batch:1000>7");
    assert_string_equal(d.lines[2], "alert.webhook.secret:><redacted>");
    assert_string_equal(d.lines[3], "kafka.acks:>all");
    assert_string_equal(d.lines[4], "pg.password:><redacted>");
    for (int i = 0; i < d.n; i++) {
        assert_null(strstr(d.lines[i], "s3cret"));
        assert_null(strstr(d.lines[i], "pw1"));
    }
    ax_conf_free(&a);
    ax_conf_free(&b);
}

/* URLs are shown as scheme://host:port: tokens in user info, path or query
 * never appear (SIGHUP diff, --print-config). */
static void test_urls_shown_without_path(void **state) {
    (void)state;
    char buf[300];
    assert_string_equal(ax_conf_shown("alert.webhook.url", "https://hooks.example:8443/T0K3N?key=abc",
                                      buf, sizeof buf),
                        "https://hooks.example:8443");
    assert_string_equal(ax_conf_shown("alert.webhook.url", "http://user:pw@h/x", buf, sizeof buf),
                        "http://h");
    assert_string_equal(ax_conf_shown("alert.webhook.url", "hooks/T0K3N", buf, sizeof buf),
                        "<not shown>");
    assert_string_equal(ax_conf_shown("kafka.sasl.password", "pw", buf, sizeof buf), "<redacted>");
    assert_string_equal(ax_conf_shown("kafka.acks", "all", buf, sizeof buf), "all");
    assert_string_equal(ax_conf_shown("alert.webhook.url", "", buf, sizeof buf), "");
    ax_conf_t a, b;
    ax_conf_init(&a);
    ax_conf_init(&b);
    assert_int_equal(ax_conf_set(&a, "alert.webhook.url", "http://h:1/old-T0K3N", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&b, "alert.webhook.url", "http://h:2/new?t=T0K3N", "t", NULL, 0), 0);
    diff_log_t d = {0};
    assert_int_equal(ax_conf_diff(&a, &b, diff_rec, &d), 1);
    assert_string_equal(d.lines[0], "alert.webhook.url:http://h:1>http://h:2");
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    ax_conf_print(&b, f);
    fclose(f);
    assert_non_null(strstr(out, "alert.webhook.url = http://h:2\n"));
    assert_null(strstr(out, "T0K3N"));
    free(out);
    ax_conf_free(&a);
    ax_conf_free(&b);
}

static void test_swap_key(void **state) {
    (void)state;
    ax_conf_t a, b;
    ax_conf_init(&a);
    ax_conf_init(&b);
    assert_int_equal(ax_conf_set(&b, "log.level", "warn", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_set(&b, "trigger.lag.high", "42", "t", NULL, 0), 0);
    assert_int_equal(ax_conf_swap_key(&a, &b, "log.level"), 0);
    assert_int_equal(ax_conf_swap_key(&a, &b, "trigger.lag.high"), 0);
    assert_string_equal(a.log_level, "warn");
    assert_string_equal(b.log_level, "info");
    assert_int_equal(a.trigger_lag_high, 42);
    assert_int_equal(b.trigger_lag_high, 10000);
    assert_int_equal(ax_conf_swap_key(&a, &b, "no.such.key"), AX_ERR_INVALID);
    ax_conf_free(&a); /* both still own valid strings */
    ax_conf_free(&b);
}

/* ---- ax_conf_args: the command line, errors returned ---------------------- */

/* Run ax_conf_args on the NULL-terminated words; returns its value. */
static int args_run(ax_conf_t *c, const char *const *words, int *ret_argc, char **argv,
                    ax_conf_action_t *ret_action, char *err) {
    int n = 0;
    for (; words[n]; n++)
        argv[n] = (char *)words[n];
    argv[n] = NULL;
    *ret_argc = n;
    *ret_action = (ax_conf_action_t)-1;
    err[0] = '\0';
    return ax_conf_args(c, ret_argc, argv, ret_action, err, ERRLEN);
}

static void test_args(void **state) {
    char path[256], err[ERRLEN], *argv[16];
    int argc;
    ax_conf_action_t act;
    ax_conf_t c;
    tmp_write(path, sizeof path, "executor.slots = 7\n");

    /* options consumed, the rest kept in order (after "--" too) */
    const char *run[] = {"prog", "--config", path, "job", "--set", "executor.slots=9", "list",
                         "--set=trigger.batch=5", "--", "--set", "x", NULL};
    assert_int_equal(args_run(&c, run, &argc, argv, &act, err), 0);
    assert_int_equal(act, AX_CONF_RUN);
    assert_int_equal(c.executor_slots, 9);
    assert_int_equal(c.trigger_batch, 5);
    assert_int_equal(argc, 6);
    const char *rest[] = {"prog", "job", "list", "--", "--set", "x"};
    for (int i = 0; i < argc; i++)
        assert_string_equal(argv[i], rest[i]);
    assert_null(argv[argc]);
    ax_conf_free(&c);

    const char *print[] = {"prog", "--config=x", "--config", path, "--print-config", "a", NULL};
    assert_int_equal(args_run(&c, print, &argc, argv, &act, err), 0);
    assert_int_equal(act, AX_CONF_PRINT);
    assert_int_equal(c.executor_slots, 7); /* the last --config counts */
    assert_int_equal(argc, 2);
    ax_conf_free(&c);
    const char *help[] = {"prog", "--config", path, "-h", "--set", "no.such=1", NULL};
    assert_int_equal(args_run(&c, help, &argc, argv, &act, err), 0);
    assert_int_equal(act, AX_CONF_HELP);
    ax_conf_free(&c);
    const char *version[] = {"prog", "--config", path, "--version", NULL};
    assert_int_equal(args_run(&c, version, &argc, argv, &act, err), 0);
    assert_int_equal(act, AX_CONF_VERSION);
    ax_conf_free(&c);

    /* errors: returned with the reason (the program prints and exits 2) */
    const struct {
        const char *words[6];
        int rc;
        const char *msg;
    } bad[] = {
        {{"prog", "--config", path, "--set", "no.such=1", NULL}, AX_ERR_INVALID,
         "--set: unknown configuration key 'no.such' (see --help)"},
        {{"prog", "--config", path, "--set", "executor.slots", NULL}, AX_ERR_INVALID,
         "--set needs KEY=VALUE"},
        {{"prog", "--config", path, "--set", NULL}, AX_ERR_INVALID, "--set needs KEY=VALUE"},
        {{"prog", "--config", NULL}, AX_ERR_INVALID, "--config needs a file name"},
        {{"prog", "--config", "/nonexistent/ax.conf", NULL}, AX_ERR_IO,
         "cannot read configuration file /nonexistent/ax.conf: No such file or directory"},
    };
    for (size_t i = 0; i < AX_ARRAY_SIZE(bad); i++) {
        assert_int_equal(args_run(&c, bad[i].words, &argc, argv, &act, err), bad[i].rc);
        assert_string_equal(err, bad[i].msg);
        assert_int_equal(act, (ax_conf_action_t)-1); /* untouched on error */
        ax_conf_free(&c);
    }
    unlink(path);
    tmp_write(path, sizeof path, "executor.slots = 0\n");
    const char *file[] = {"prog", "--config", path, NULL};
    assert_int_equal(args_run(&c, file, &argc, argv, &act, err), AX_ERR_INVALID);
    char want[600];
    snprintf(want, sizeof want, "%s:1: executor.slots", path);
    assert_contains(err, want);
    ax_conf_free(&c);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_consistent),
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_init_defaults),
        cmocka_unit_test(test_free_zeroes_and_is_idempotent),
        cmocka_unit_test(test_set_string_and_int),
        cmocka_unit_test(test_set_unknown_key),
        cmocka_unit_test(test_set_int_not_an_integer),
        cmocka_unit_test(test_set_int_range_every_key),
        cmocka_unit_test(test_set_log_level),
        cmocka_unit_test(test_set_log_format_metrics_listen),
        cmocka_unit_test(test_set_passthrough),
        cmocka_unit_test(test_file_ok),
        cmocka_unit_test(test_file_empty),
        cmocka_unit_test(test_file_missing_equals),
        cmocka_unit_test(test_file_unknown_key_and_bad_value),
        cmocka_unit_test(test_file_missing),
        cmocka_unit_test(test_file_is_directory),
        cmocka_unit_test(test_file_hash_truncates_value),
        cmocka_unit_test(test_file_long_value),
        cmocka_unit_test(test_file_overlong_line),
        cmocka_unit_test(test_env_mapping),
        cmocka_unit_test(test_env_every_table_key),
        cmocka_unit_test(test_env_order_later_wins),
        cmocka_unit_test(test_env_unknown_and_bad),
        cmocka_unit_test(test_env_long_names),
        cmocka_unit_test(test_env_empty),
        cmocka_unit_test(test_is_secret),
        cmocka_unit_test(test_print_redacts_secrets),
        cmocka_unit_test(test_print_every_key),
        cmocka_unit_test(test_print_round_trip),
        cmocka_unit_test(test_reference_lists_every_key),
        cmocka_unit_test(test_reference_matches_docs),
        cmocka_unit_test(test_help_filters_by_program),
        cmocka_unit_test(test_topic),
        cmocka_unit_test(test_diff_reports_changes_and_hides_secrets),
        cmocka_unit_test(test_urls_shown_without_path),
        cmocka_unit_test(test_swap_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
