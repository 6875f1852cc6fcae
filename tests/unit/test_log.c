/*
 * test_log.c — log lines (core/log.c) as written to stderr: text and JSON
 * (log.format), checked byte for byte after the timestamp: the fields,
 * JSON string escaping (quotes, backslashes, newlines, control bytes),
 * the instance fields of ax_log_inst (job and trace left out when not
 * given), the level filter, and a message too long for a line still ends
 * as one complete JSON object.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ax/log.h"

/* What the calls between capture_begin and capture_end wrote to stderr. */
typedef struct {
    int saved, rd;
} capture_t;

static void capture_begin(capture_t *c) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    c->saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    c->rd = p[0];
}

static char *capture_end(capture_t *c) {
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(c->rd, buf + n, cap - n - 1)) > 0)
        n += (size_t)r;
    close(c->rd);
    buf[n] = '\0';
    return buf;
}

/* The line without its timestamp (text: up to the first space; JSON: the time field). */
static const char *after_time(const char *line, int json) {
    const char *p = json ? strstr(line, "\",\"level\"") : strchr(line, ' ');
    assert_non_null(p);
    return json ? p + 2 : p + 1;
}

static void text_lines(void **state) {
    (void)state;
    ax_log_init("ax-test", AX_LOG_INFO);
    ax_log_set_json(0);
    capture_t c;
    capture_begin(&c);
    ax_info("hello %d", 42);
    ax_debug("not shown");
    ax_log_inst(AX_LOG_WARN, 7, "nightly", "t-1", "instance %d: late", 7);
    ax_log_inst(AX_LOG_INFO, 8, NULL, "", "inline");
    char *out = capture_end(&c);
    char *second = strchr(out, '\n') + 1;
    char *third = strchr(second, '\n') + 1;
    assert_memory_equal(after_time(out, 0), "INFO ax-test: hello 42\n", 23);
    assert_memory_equal(after_time(second, 0),
                        "WARN ax-test: instance 7: late instance=7 job=nightly trace=t-1\n", 64);
    assert_string_equal(after_time(third, 0), "INFO ax-test: inline instance=8\n");
    free(out);
}

static void json_lines(void **state) {
    (void)state;
    ax_log_init("ax-\"q\"", AX_LOG_INFO);
    ax_log_set_json(1);
    capture_t c;
    capture_begin(&c);
    ax_info("a \"quoted\" back\\slash\nnew\tline \x01 end");
    ax_log_inst(AX_LOG_ERROR, 123456789012, "job \"x\"", "tr-9", "boom");
    ax_log_inst(AX_LOG_INFO, 5, NULL, NULL, "no job");
    char *out = capture_end(&c);
    ax_log_set_json(0);
    assert_memory_equal(out, "{\"time\":\"", 9);
    char *second = strchr(out, '\n') + 1;
    char *third = strchr(second, '\n') + 1;
    const char *want1 = "\"level\":\"INFO\",\"service\":\"ax-\\\"q\\\"\",\"message\":\"a "
                        "\\\"quoted\\\" back\\\\slash\\nnew\\tline \\u0001 end\"}\n";
    assert_memory_equal(after_time(out, 1), want1, strlen(want1));
    const char *want2 = "\"level\":\"ERROR\",\"service\":\"ax-\\\"q\\\"\",\"message\":\"boom\","
                        "\"instance\":123456789012,\"job\":\"job \\\"x\\\"\",\"trace\":\"tr-9\"}\n";
    assert_memory_equal(after_time(second, 1), want2, strlen(want2));
    const char *want3 = "\"level\":\"INFO\",\"service\":\"ax-\\\"q\\\"\",\"message\":\"no job\","
                        "\"instance\":5}\n";
    assert_string_equal(after_time(third, 1), want3);
    free(out);
}

static void json_long_message(void **state) {
    (void)state;
    ax_log_init("ax", AX_LOG_INFO);
    ax_log_set_json(1);
    char *big = malloc(10000);
    memset(big, '"', 9999); /* each escaped to two bytes */
    big[9999] = '\0';
    capture_t c;
    capture_begin(&c);
    ax_log_inst(AX_LOG_INFO, 1, "j", "t", "%s", big);
    char *out = capture_end(&c);
    ax_log_set_json(0);
    size_t n = strlen(out);
    assert_true(n > 3000);
    assert_string_equal(out + n - strlen(",\"instance\":1,\"job\":\"j\",\"trace\":\"t\"}\n"),
                        ",\"instance\":1,\"job\":\"j\",\"trace\":\"t\"}\n");
    assert_int_equal(strchr(out, '\n') - out, (long)n - 1); /* one line */
    free(big);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_lines),
        cmocka_unit_test(json_lines),
        cmocka_unit_test(json_long_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
