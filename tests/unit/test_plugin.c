/*
 * test_plugin.c — the executor's plugin and http handlers
 * (services/executor/h_plugin.c, h_http.c, compiled into this test by
 * plugins/CMakeLists.txt) driven through their handler_ops_t with a stub
 * run_done(), and the example plugins built in <build>/plugins.
 *
 * Plugin handler: noop and sleep succeed; args reach init(); a timeout is
 * reported at the deadline (not when the plugin returns); cancel stops a
 * cooperative plugin; unloadable / symbol-less / wrong-version .so files and
 * failing init() are FAILED with the right retryable flag; many runs on few
 * workers each report exactly once; cheap runs queued behind a slow one in
 * one wave are not held back by it; an idempotency claim without a database
 * fails retryable.
 *
 * Http handler, against an evhttp server on the same loop: 2xx succeeds and
 * the server sees the JSON body and the Idempotency-Key / X-Ax-Trace-Id
 * headers; 500 is retryable, 404 is not; a silent server times out; a
 * closed port is a retryable network failure; the output is capped; cancel
 * aborts; https:// and bad commands fail in start(); a host name
 * (localhost) is resolved.
 *
 * Every test checks run_done() is called exactly once, on this thread,
 * never from inside start(), and fini() leaves nothing behind (ASan builds
 * check leaks).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <jansson.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/plugin.h"
#include "executor.h"

#ifndef AX_PLUGIN_DIR
#error "AX_PLUGIN_DIR must name the directory of the built plugins"
#endif
#define PLUGIN(name) AX_PLUGIN_DIR "/ax-" name ".so"
#define SAFETY_MS 10000

/* ---- the stub executor ---------------------------------------------------------- */

typedef struct done {
    int calls;
    handler_result_t res;
    char error_class[64];
    char *output;
    int64_t at_ms;
} done_t;

typedef struct trun {
    run_t r;
    done_t done;
} trun_t;

static int in_start;
static pthread_t main_thread;
static int pending;
static struct event_base *cur_base;

void run_done(run_t *r, const handler_result_t *res) {
    trun_t *t = (trun_t *)r;
    assert_false(in_start);
    assert_true(pthread_equal(pthread_self(), main_thread));
    assert_null(r->hstate); /* the handler let go of the run first */
    t->done.calls++;
    t->done.res = *res;
    snprintf(t->done.error_class, sizeof t->done.error_class, "%s",
             res->error_class ? res->error_class : "");
    t->done.res.error_class = NULL;
    free(t->done.output);
    t->done.output = NULL;
    if (res->output) {
        t->done.output = malloc(res->output_len + 1);
        assert_non_null(t->done.output);
        memcpy(t->done.output, res->output, res->output_len);
        t->done.output[res->output_len] = '\0';
    }
    t->done.at_ms = ax_mono_ms();
    if (--pending == 0)
        event_base_loopbreak(cur_base);
}

static void ex_init(executor_t *ex) {
    memset(ex, 0, sizeof *ex);
    ax_conf_init(&ex->svc.conf);
    ex->svc.conf.executor_slots = 4;
    ex->svc.conf.executor_kill_grace_ms = 300;
    ex->svc.conf.executor_shutdown_grace_ms = 2000;
    ex->svc.base = event_base_new();
    assert_non_null(ex->svc.base);
    cur_base = ex->svc.base;
    main_thread = pthread_self();
    pending = 0;
}

static void ex_free(executor_t *ex) {
    event_base_free(ex->svc.base);
    ax_conf_free(&ex->svc.conf);
}

/* A run of `kind` with the given command (NULL-terminated); strings are
 * owned by the run and freed by trun_free(). */
static trun_t *trun_new(int64_t id, int64_t timeout_ms, const char *const *cmd) {
    trun_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    size_t n = 0;
    while (cmd[n])
        n++;
    t->r.d.instance_id = id;
    t->r.d.attempt = 1;
    t->r.d.timeout_ms = timeout_ms;
    t->r.d.command = calloc(n + 1, sizeof *t->r.d.command);
    assert_non_null(t->r.d.command);
    for (size_t i = 0; i < n; i++)
        t->r.d.command[i] = strdup(cmd[i]);
    t->r.d.command_len = n;
    t->r.d.trace_id = strdup("0123456789abcdef");
    t->r.d.job = strdup("test-job");
    return t;
}

static void trun_set_payload(trun_t *t, const void *p, size_t n) {
    free(t->r.d.payload);
    t->r.d.payload = malloc(n ? n : 1);
    memcpy(t->r.d.payload, p, n);
    t->r.d.payload_len = n;
}

static void trun_free(trun_t *t) {
    for (size_t i = 0; i < t->r.d.command_len; i++)
        free(t->r.d.command[i]);
    free(t->r.d.command);
    free(t->r.d.trace_id);
    free(t->r.d.job);
    free(t->r.d.idempotency_key);
    free(t->r.d.payload);
    free(t->done.output);
    free(t);
}

/* Start through ops, as a start wave of one (start, then flush); 0 when
 * started (then one more run_done is pending). */
static int start(const handler_ops_t *ops, executor_t *ex, trun_t *t, handler_result_t *res) {
    memset(res, 0, sizeof *res);
    in_start = 1;
    int rc = ops->start(ex, &t->r, res);
    if (ops->flush)
        ops->flush(ex);
    in_start = 0;
    if (rc == 0) {
        pending++;
        assert_int_equal(t->done.calls, 0);
    }
    return rc;
}

static void on_safety(evutil_socket_t fd, short what, void *arg) {
    event_base_loopbreak(arg);
}

static void run_loop(executor_t *ex, int64_t limit_ms) {
    struct event *safety = evtimer_new(ex->svc.base, on_safety, ex->svc.base);
    struct timeval tv = {limit_ms / 1000, (limit_ms % 1000) * 1000};
    evtimer_add(safety, &tv);
    if (pending > 0)
        event_base_dispatch(ex->svc.base);
    event_free(safety);
}

/* Start one run, wait for its report. */
static void run_one(const handler_ops_t *ops, executor_t *ex, trun_t *t) {
    handler_result_t res;
    assert_int_equal(start(ops, ex, t, &res), 0);
    run_loop(ex, SAFETY_MS);
    assert_int_equal(t->done.calls, 1);
    assert_int_equal(pending, 0);
}

/* ---- plugin handler ------------------------------------------------------------ */

static void test_plugin_noop(void **state) {
    executor_t ex;
    ex_init(&ex);
    assert_int_equal(handler_plugin.init(&ex), 0);
    const char *cmd[] = {PLUGIN("noop"), NULL};
    trun_t *t = trun_new(1, 5000, cmd);
    run_one(&handler_plugin, &ex, t);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_SUCCESS);
    assert_string_equal(t->done.error_class, "");
    assert_null(t->done.output);
    /* the cached .so is used again */
    trun_t *t2 = trun_new(2, 5000, cmd);
    run_one(&handler_plugin, &ex, t2);
    assert_int_equal(t2->done.res.outcome, AX_OUTCOME_SUCCESS);
    handler_plugin.fini(&ex);
    assert_null(ex.plugin);
    trun_free(t);
    trun_free(t2);
    ex_free(&ex);
}

static void test_plugin_sleep_args(void **state) {
    executor_t ex;
    ex_init(&ex);
    assert_int_equal(handler_plugin.init(&ex), 0);
    const char *cmd[] = {PLUGIN("sleep"), "120", NULL};
    trun_t *t = trun_new(1, 5000, cmd);
    int64_t t0 = ax_mono_ms();
    run_one(&handler_plugin, &ex, t);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_SUCCESS);
    assert_true(t->done.at_ms - t0 >= 120);
    assert_string_equal(t->done.output, "slept 120 ms\n");
    /* no args: the default of 10 ms */
    const char *cmd2[] = {PLUGIN("sleep"), NULL};
    trun_t *t2 = trun_new(2, 5000, cmd2);
    run_one(&handler_plugin, &ex, t2);
    assert_string_equal(t2->done.output, "slept 10 ms\n");
    handler_plugin.fini(&ex);
    trun_free(t);
    trun_free(t2);
    ex_free(&ex);
}

static void test_plugin_timeout(void **state) {
    executor_t ex;
    ex_init(&ex);
    assert_int_equal(handler_plugin.init(&ex), 0);
    const char *cmd[] = {PLUGIN("sleep"), "30000", NULL};
    trun_t *t = trun_new(1, 150, cmd);
    int64_t t0 = ax_mono_ms();
    run_one(&handler_plugin, &ex, t);
    int64_t took = t->done.at_ms - t0;
    assert_true(took >= 150 && took < 2000);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_TIMEOUT);
    assert_string_equal(t->done.error_class, "timeout");
    assert_int_equal(t->done.res.retryable, 1);
    assert_non_null(strstr(t->done.res.error, "timed out after 150 ms"));
    /* The plugin saw should_stop() and returned: its late result is
     * dropped (no second run_done) and fini() joins at once. */
    event_base_loop(ex.svc.base, EVLOOP_NONBLOCK);
    t0 = ax_mono_ms();
    handler_plugin.fini(&ex);
    assert_true(ax_mono_ms() - t0 < 1000);
    assert_int_equal(t->done.calls, 1);
    trun_free(t);
    ex_free(&ex);
}

static void on_cancel_timer(evutil_socket_t fd, short what, void *arg) {
    void **a = arg;
    const handler_ops_t *ops = a[0];
    trun_t *t = a[2];
    t->r.stop_why = "cancelled";
    ops->cancel(a[1], &t->r, "cancelled");
}

/* Start t with ops, cancel it after `after_ms`, wait for the report. */
static void run_cancelled(const handler_ops_t *ops, executor_t *ex, trun_t *t, int64_t after_ms) {
    handler_result_t res;
    void *a[3] = {(void *)ops, ex, t};
    struct event *ev = evtimer_new(ex->svc.base, on_cancel_timer, a);
    struct timeval tv = {0, after_ms * 1000};
    evtimer_add(ev, &tv);
    assert_int_equal(start(ops, ex, t, &res), 0);
    run_loop(ex, SAFETY_MS);
    event_free(ev);
    assert_int_equal(t->done.calls, 1);
}

static void test_plugin_cancel(void **state) {
    executor_t ex;
    ex_init(&ex);
    const char *cmd[] = {PLUGIN("sleep"), "30000", NULL};
    trun_t *t = trun_new(1, 30000, cmd);
    int64_t t0 = ax_mono_ms();
    run_cancelled(&handler_plugin, &ex, t, 50); /* init() lazily by start() */
    assert_true(t->done.at_ms - t0 < 1000);
    /* the plugin returned within the grace: its own report */
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_FAILED);
    assert_non_null(strstr(t->done.res.error, "stopped after"));
    handler_plugin.fini(&ex);
    trun_free(t);
    ex_free(&ex);
}

static void expect_plugin_failure(const char *const *cmd, int retryable, const char *msg) {
    executor_t ex;
    ex_init(&ex);
    assert_int_equal(handler_plugin.init(&ex), 0);
    trun_t *t = trun_new(1, 5000, cmd);
    run_one(&handler_plugin, &ex, t);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_FAILED);
    assert_string_equal(t->done.error_class, "plugin");
    assert_int_equal(t->done.res.retryable, retryable);
    if (!strstr(t->done.res.error, msg))
        fail_msg("error '%s' does not contain '%s'", t->done.res.error, msg);
    handler_plugin.fini(&ex);
    trun_free(t);
    ex_free(&ex);
}

static void test_plugin_load_failures(void **state) {
    const char *missing[] = {AX_PLUGIN_DIR "/ax-no-such-plugin.so", NULL};
    expect_plugin_failure(missing, 0, "cannot load plugin");
    const char *badver[] = {PLUGIN("test-bad-version"), NULL};
    expect_plugin_failure(badver, 0, "plugin API version 1001");

    /* a real shared object without the entry symbol: the C library */
    Dl_info info;
    assert_int_not_equal(dladdr((void *)printf, &info), 0);
    assert_non_null(info.dli_fname);
    if (info.dli_fname[0] == '/') {
        const char *libc[] = {info.dli_fname, NULL};
        expect_plugin_failure(libc, 0, "has no symbol ax_plugin_entry");
    }
}

static void test_plugin_init_failures(void **state) {
    const char *notnum[] = {PLUGIN("sleep"), "soon", NULL};
    expect_plugin_failure(notnum, 0, "init: not a number of milliseconds: 'soon'");
    const char *toomany[] = {PLUGIN("sleep"), "1", "2", NULL};
    expect_plugin_failure(toomany, 0, "usage");
}

static void test_plugin_bad_commands(void **state) {
    executor_t ex;
    ex_init(&ex);
    handler_result_t res;
    const char *rel[] = {"ax-noop.so", NULL};
    trun_t *t = trun_new(1, 5000, rel);
    assert_int_equal(start(&handler_plugin, &ex, t, &res), -1);
    assert_int_equal(res.outcome, AX_OUTCOME_FAILED);
    assert_int_equal(res.retryable, 0);
    assert_non_null(strstr(res.error, "not absolute"));
    assert_null(t->r.hstate);
    const char *none[] = {NULL};
    trun_t *t2 = trun_new(2, 5000, none);
    assert_int_equal(start(&handler_plugin, &ex, t2, &res), -1);
    assert_int_equal(res.retryable, 0);
    handler_plugin.fini(&ex);
    trun_free(t);
    trun_free(t2);
    ex_free(&ex);
}

static void test_plugin_many(void **state) {
    executor_t ex;
    ex_init(&ex);
    assert_int_equal(handler_plugin.init(&ex), 0);
    enum { N = 40 };
    trun_t *t[N];
    handler_result_t res;
    const char *slow[] = {PLUGIN("sleep"), "20", NULL}, *fast[] = {PLUGIN("noop"), NULL};
    int64_t t0 = ax_mono_ms();
    for (int i = 0; i < N; i++) {
        t[i] = trun_new(i + 1, 10000, i % 2 ? fast : slow);
        assert_int_equal(start(&handler_plugin, &ex, t[i], &res), 0);
    }
    run_loop(&ex, SAFETY_MS);
    assert_int_equal(pending, 0);
    /* 20 sleeps of 20 ms on 4 workers take at least 100 ms */
    assert_true(ax_mono_ms() - t0 >= 100);
    for (int i = 0; i < N; i++) {
        assert_int_equal(t[i]->done.calls, 1);
        assert_int_equal(t[i]->done.res.outcome, AX_OUTCOME_SUCCESS);
        trun_free(t[i]);
    }
    handler_plugin.fini(&ex);
    ex_free(&ex);
}

/* Once the workers have seen cheap runs, a wave wakes fewer workers than
 * it has tasks (h_plugin.c, "Wake-ups"): a slow run at the head of such a
 * wave must not hold back the cheap ones queued behind it — the stall check
 * wakes another worker for them. */
static void test_plugin_slow_head(void **state) {
    executor_t ex;
    ex_init(&ex);
    assert_int_equal(handler_plugin.init(&ex), 0);
    const char *slow[] = {PLUGIN("sleep"), "600", NULL}, *fast[] = {PLUGIN("noop"), NULL};
    handler_result_t res;
    enum { WARM = 50, FAST = 3 };
    trun_t *w[WARM], *s, *f[FAST];
    for (int i = 0; i < WARM; i++) { /* the moving average learns they are cheap */
        w[i] = trun_new(100 + i, 10000, fast);
        assert_int_equal(start(&handler_plugin, &ex, w[i], &res), 0);
        run_loop(&ex, SAFETY_MS);
        assert_int_equal(w[i]->done.calls, 1);
        trun_free(w[i]);
    }
    /* one wave: the slow run first, then the cheap ones, one flush */
    s = trun_new(1, 10000, slow);
    in_start = 1;
    assert_int_equal(handler_plugin.start(&ex, &s->r, &res), 0);
    for (int i = 0; i < FAST; i++) {
        f[i] = trun_new(2 + i, 10000, fast);
        assert_int_equal(handler_plugin.start(&ex, &f[i]->r, &res), 0);
    }
    handler_plugin.flush(&ex);
    in_start = 0;
    pending += 1 + FAST;
    run_loop(&ex, SAFETY_MS);
    assert_int_equal(pending, 0);
    assert_int_equal(s->done.calls, 1);
    assert_int_equal(s->done.res.outcome, AX_OUTCOME_SUCCESS);
    for (int i = 0; i < FAST; i++) {
        assert_int_equal(f[i]->done.calls, 1);
        assert_int_equal(f[i]->done.res.outcome, AX_OUTCOME_SUCCESS);
        assert_true(f[i]->done.at_ms < s->done.at_ms); /* not behind the slow one */
        trun_free(f[i]);
    }
    trun_free(s);
    handler_plugin.fini(&ex);
    ex_free(&ex);
}

static void test_plugin_idem_no_database(void **state) {
    executor_t ex;
    char err[256];
    ex_init(&ex);
    /* a socket directory that does not exist: the connection fails at once */
    assert_int_equal(
        ax_conf_set(&ex.svc.conf, "pg.host", "/nonexistent-ax-test", "test", err, sizeof err), 0);
    assert_int_equal(handler_plugin.init(&ex), 0);
    const char *cmd[] = {PLUGIN("idem_example"), NULL};
    trun_t *t = trun_new(1, 5000, cmd);
    trun_set_payload(t, "order-42", 8);
    run_one(&handler_plugin, &ex, t);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_FAILED);
    assert_int_equal(t->done.res.retryable, 1);
    assert_non_null(strstr(t->done.res.error, "idempotency claim"));
    /* no payload and no key: the plugin refuses, not retryable */
    trun_t *t2 = trun_new(2, 5000, cmd);
    run_one(&handler_plugin, &ex, t2);
    assert_int_equal(t2->done.res.outcome, AX_OUTCOME_FAILED);
    assert_int_equal(t2->done.res.retryable, 0);
    handler_plugin.fini(&ex);
    trun_free(t);
    trun_free(t2);
    ex_free(&ex);
}

/* ---- http handler ----------------------------------------------------------- */

typedef struct server {
    struct evhttp *http;
    int port;
    int hits;
    char idem[128], trace[64], ctype[64], attempt[16];
    json_t *body;                 /* last JSON body received */
    struct evhttp_request *held;  /* /slow: never answered */
} server_t;

static void on_request(struct evhttp_request *req, void *arg) {
    server_t *s = arg;
    const char *path = evhttp_request_get_uri(req);
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *v;
    s->hits++;
#define GRAB(field, name)                                              \
    v = evhttp_find_header(in, name);                                  \
    snprintf(s->field, sizeof s->field, "%s", v ? v : "");
    GRAB(idem, "Idempotency-Key");
    GRAB(trace, "X-Ax-Trace-Id");
    GRAB(ctype, "Content-Type");
    GRAB(attempt, "X-Ax-Attempt");
#undef GRAB
    struct evbuffer *b = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(b);
    char *text = malloc(n + 1);
    evbuffer_copyout(b, text, n);
    text[n] = '\0';
    json_decref(s->body);
    s->body = json_loadb(text, n, 0, NULL);
    free(text);
    struct evbuffer *out = evbuffer_new();
    if (strcmp(path, "/ok") == 0) {
        evbuffer_add_printf(out, "hello from the server");
        evhttp_send_reply(req, 200, "OK", out);
    } else if (strcmp(path, "/fail") == 0) {
        evbuffer_add_printf(out, "backend down");
        evhttp_send_reply(req, 500, "Internal Server Error", out);
    } else if (strcmp(path, "/big") == 0) {
        for (int i = 0; i < 10000; i++)
            evbuffer_add(out, "0123456789", 10);
        evhttp_send_reply(req, 200, "OK", out);
    } else if (strcmp(path, "/slow") == 0) {
        s->held = req; /* dropped when the client goes away */
    } else {
        evhttp_send_reply(req, 404, "Not Found", out);
    }
    evbuffer_free(out);
}

static void server_start(executor_t *ex, server_t *s) {
    memset(s, 0, sizeof *s);
    s->http = evhttp_new(ex->svc.base);
    assert_non_null(s->http);
    evhttp_set_gencb(s->http, on_request, s);
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(s->http, "127.0.0.1", 0);
    assert_non_null(bs);
    struct sockaddr_in sin;
    socklen_t len = sizeof sin;
    assert_int_equal(getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sin, &len),
                     0);
    s->port = ntohs(sin.sin_port);
}

static void server_stop(server_t *s) {
    evhttp_free(s->http);
    json_decref(s->body);
}

static trun_t *http_run(server_t *s, int64_t id, int64_t timeout_ms, const char *path) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    const char *cmd[] = {url, NULL};
    return trun_new(id, timeout_ms, cmd);
}

static void test_http_success(void **state) {
    executor_t ex;
    server_t s;
    ex_init(&ex);
    server_start(&ex, &s);
    assert_int_equal(handler_http.init(&ex), 0);
    trun_t *t = http_run(&s, 42, 5000, "/ok");
    t->r.d.attempt = 2;
    t->r.d.idempotency_key = strdup("order-42");
    trun_set_payload(t, "caf\xc3\xa9 \xff!", 8); /* valid UTF-8, then an invalid byte */
    run_one(&handler_http, &ex, t);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_SUCCESS);
    assert_int_equal(t->done.res.exit_code_set, 1);
    assert_int_equal(t->done.res.exit_code, 200);
    assert_string_equal(t->done.output, "hello from the server");
    assert_int_equal(s.hits, 1);
    assert_string_equal(s.idem, "order-42");
    assert_string_equal(s.trace, "0123456789abcdef");
    assert_string_equal(s.ctype, "application/json");
    assert_string_equal(s.attempt, "2");
    assert_non_null(s.body);
    assert_int_equal(json_integer_value(json_object_get(s.body, "instance_id")), 42);
    assert_int_equal(json_integer_value(json_object_get(s.body, "attempt")), 2);
    assert_string_equal(json_string_value(json_object_get(s.body, "job")), "test-job");
    assert_string_equal(json_string_value(json_object_get(s.body, "idempotency_key")),
                        "order-42");
    assert_string_equal(json_string_value(json_object_get(s.body, "trace_id")),
                        "0123456789abcdef");
    assert_string_equal(json_string_value(json_object_get(s.body, "payload")), "caf\xc3\xa9 ?!");

    /* no key: every attempt of the instance carries ax-<id>; inline: job null */
    trun_t *t2 = http_run(&s, 7, 5000, "/ok");
    free(t2->r.d.job);
    t2->r.d.job = NULL;
    run_one(&handler_http, &ex, t2);
    assert_int_equal(t2->done.res.outcome, AX_OUTCOME_SUCCESS);
    assert_string_equal(s.idem, "ax-7");
    assert_true(json_is_null(json_object_get(s.body, "job")));
    assert_true(json_is_null(json_object_get(s.body, "idempotency_key")));
    assert_string_equal(json_string_value(json_object_get(s.body, "payload")), "");

    handler_http.fini(&ex);
    server_stop(&s);
    trun_free(t);
    trun_free(t2);
    ex_free(&ex);
}

/* A host name goes through evdns (localhost from /etc/hosts). */
static void test_http_localhost(void **state) {
    executor_t ex;
    server_t s;
    ex_init(&ex);
    server_start(&ex, &s);
    char url[128];
    snprintf(url, sizeof url, "http://localhost:%d/ok", s.port);
    const char *cmd[] = {url, NULL};
    trun_t *t = trun_new(1, 5000, cmd);
    run_one(&handler_http, &ex, t);
    if (t->done.res.outcome != AX_OUTCOME_SUCCESS)
        fail_msg("http://localhost: %s", t->done.res.error);
    handler_http.fini(&ex);
    server_stop(&s);
    trun_free(t);
    ex_free(&ex);
}

static void test_http_statuses(void **state) {
    executor_t ex;
    server_t s;
    ex_init(&ex);
    server_start(&ex, &s);
    trun_t *t = http_run(&s, 1, 5000, "/fail"); /* init() lazily by start() */
    run_one(&handler_http, &ex, t);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_FAILED);
    assert_string_equal(t->done.error_class, "http");
    assert_int_equal(t->done.res.exit_code, 500);
    assert_int_equal(t->done.res.retryable, 1);
    assert_non_null(strstr(t->done.res.error, "HTTP 500"));
    assert_string_equal(t->done.output, "backend down");

    trun_t *t2 = http_run(&s, 2, 5000, "/nope");
    run_one(&handler_http, &ex, t2);
    assert_int_equal(t2->done.res.outcome, AX_OUTCOME_FAILED);
    assert_string_equal(t2->done.error_class, "http");
    assert_int_equal(t2->done.res.exit_code, 404);
    assert_int_equal(t2->done.res.retryable, 0);

    ex.svc.conf.executor_output_cap = 1000;
    trun_t *t3 = http_run(&s, 3, 5000, "/big");
    run_one(&handler_http, &ex, t3);
    assert_int_equal(t3->done.res.outcome, AX_OUTCOME_SUCCESS);
    assert_int_equal(t3->done.res.output_len, 1000);
    assert_memory_equal(t3->done.output, "0123456789", 10);

    handler_http.fini(&ex);
    server_stop(&s);
    trun_free(t);
    trun_free(t2);
    trun_free(t3);
    ex_free(&ex);
}

static void test_http_timeout_and_cancel(void **state) {
    executor_t ex;
    server_t s;
    ex_init(&ex);
    server_start(&ex, &s);
    assert_int_equal(handler_http.init(&ex), 0);
    trun_t *t = http_run(&s, 1, 200, "/slow");
    int64_t t0 = ax_mono_ms();
    run_one(&handler_http, &ex, t);
    /* libevent arms the timer from its cached clock, which may lag the
     * ax_mono_ms() read above by a few ms: allow that, not an early fire. */
    assert_true(t->done.at_ms - t0 >= 180 && t->done.at_ms - t0 < 2000);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_TIMEOUT);
    assert_string_equal(t->done.error_class, "timeout");
    assert_int_equal(t->done.res.retryable, 1);
    assert_int_equal(s.hits, 1);

    trun_t *t2 = http_run(&s, 2, 30000, "/slow");
    t0 = ax_mono_ms();
    run_cancelled(&handler_http, &ex, t2, 100);
    assert_true(t2->done.at_ms - t0 < 2000);
    assert_int_equal(t2->done.res.outcome, AX_OUTCOME_FAILED);
    assert_string_equal(t2->done.error_class, "cancelled");

    handler_http.fini(&ex);
    server_stop(&s);
    trun_free(t);
    trun_free(t2);
    ex_free(&ex);
}

static void test_http_network_failure(void **state) {
    executor_t ex;
    ex_init(&ex);
    assert_int_equal(handler_http.init(&ex), 0);
    /* a port nobody listens on: bind one, note it, close it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sin;
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/x", ntohs(sin.sin_port));
    const char *cmd[] = {url, NULL};
    trun_t *t = trun_new(1, 5000, cmd);
    run_one(&handler_http, &ex, t);
    assert_int_equal(t->done.res.outcome, AX_OUTCOME_FAILED);
    assert_string_equal(t->done.error_class, "network");
    assert_int_equal(t->done.res.retryable, 1);
    assert_int_equal(t->done.res.exit_code_set, 0);
    handler_http.fini(&ex);
    trun_free(t);
    ex_free(&ex);
}

static void test_http_bad_commands(void **state) {
    executor_t ex;
    handler_result_t res;
    ex_init(&ex);
    const char *https[] = {"https://example.com/hook", NULL};
    trun_t *t = trun_new(1, 5000, https);
    assert_int_equal(start(&handler_http, &ex, t, &res), -1);
    assert_int_equal(res.outcome, AX_OUTCOME_FAILED);
    assert_int_equal(res.retryable, 0);
    assert_non_null(strstr(res.error, "https is not supported"));
    assert_null(t->r.hstate);
    const char *junk[] = {"not a url", NULL};
    trun_t *t2 = trun_new(2, 5000, junk);
    assert_int_equal(start(&handler_http, &ex, t2, &res), -1);
    assert_int_equal(res.retryable, 0);
    const char *two[] = {"http://127.0.0.1/", "extra", NULL};
    trun_t *t3 = trun_new(3, 5000, two);
    assert_int_equal(start(&handler_http, &ex, t3, &res), -1);
    assert_non_null(strstr(res.error, "{URL}"));
    handler_http.fini(&ex);
    trun_free(t);
    trun_free(t2);
    trun_free(t3);
    ex_free(&ex);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plugin_noop),
        cmocka_unit_test(test_plugin_sleep_args),
        cmocka_unit_test(test_plugin_timeout),
        cmocka_unit_test(test_plugin_cancel),
        cmocka_unit_test(test_plugin_load_failures),
        cmocka_unit_test(test_plugin_init_failures),
        cmocka_unit_test(test_plugin_bad_commands),
        cmocka_unit_test(test_plugin_many),
        cmocka_unit_test(test_plugin_slow_head),
        cmocka_unit_test(test_plugin_idem_no_database),
        cmocka_unit_test(test_http_success),
        cmocka_unit_test(test_http_statuses),
        cmocka_unit_test(test_http_localhost),
        cmocka_unit_test(test_http_timeout_and_cancel),
        cmocka_unit_test(test_http_network_failure),
        cmocka_unit_test(test_http_bad_commands),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
