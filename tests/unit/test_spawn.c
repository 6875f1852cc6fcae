/*
 * test_spawn.c — unit tests for the command runner (ax/spawn.h): output
 * capture, stdin, exit status, exec failures, timeouts and process-group
 * cleanup, output cap, environment, cancel, a group killed from another
 * thread (the executor's fence), concurrency, fd hygiene, and
 * running as another user (root only; skipped otherwise).
 *
 * Each test runs its own event_base until the callbacks fired, with a safety
 * timer so a bug shows up as a failure instead of a hang. The test process is
 * a child subreaper: a killed grandchild is re-parented to us rather than to
 * PID 1 (which may reap late), so "the group is gone" can be checked promptly.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "ax/common.h"
#include "ax/spawn.h"

#define SAFETY_MS 5000

typedef struct capture {
    int done;                   /* times the callback ran */
    ax_cmd_result_t res;
    char *out;                  /* copy of res.output (it dies with the callback) */
    int64_t done_at_ms;
    int *pending;               /* shared countdown: break the loop at zero */
    struct event_base *base;
    ax_cmd_t *cancel_in_cb;     /* cancel this one from our callback */
} capture_t;

static void on_done(const ax_cmd_result_t *res, void *arg) {
    capture_t *c = arg;

    c->done++;
    c->res = *res;
    c->out = malloc(res->output_len + 1);
    assert_non_null(c->out);
    memcpy(c->out, res->output, res->output_len + 1);
    c->res.output = c->out;
    c->done_at_ms = ax_mono_ms();
    if (c->cancel_in_cb)
        ax_cmd_cancel(c->cancel_in_cb);
    if (--*c->pending == 0)
        event_base_loopbreak(c->base);
}

static void on_safety(evutil_socket_t fd, short what, void *arg) {
    event_base_loopbreak(arg);
}

/* Run `base` until *pending reaches zero or limit_ms passes. */
static void run_until(struct event_base *base, int *pending, int64_t limit_ms) {
    struct event *safety = evtimer_new(base, on_safety, base);
    struct timeval tv = {(time_t)(limit_ms / 1000), (suseconds_t)(limit_ms % 1000) * 1000};

    assert_non_null(safety);
    evtimer_add(safety, &tv);
    if (*pending > 0)
        event_base_dispatch(base);
    event_free(safety);
}

static void capture_init(capture_t *c, struct event_base *base, int *pending) {
    memset(c, 0, sizeof(*c));
    c->base = base;
    c->pending = pending;
}

/* Start one command, run it to completion, fill *c. */
static void run_one(const ax_cmd_spec_t *spec, capture_t *c) {
    struct event_base *base = event_base_new();
    int pending = 1;
    char err[256] = "";
    ax_cmd_t *cmd;

    assert_non_null(base);
    capture_init(c, base, &pending);
    cmd = ax_cmd_start(base, spec, on_done, c, err, sizeof(err));
    assert_non_null(cmd);
    assert_int_equal(c->done, 0);   /* never synchronous */
    assert_int_equal(ax_cmd_running(base), 1);
    run_until(base, &pending, SAFETY_MS);
    assert_int_equal(c->done, 1);
    assert_int_equal(ax_cmd_running(base), 0);
    event_base_free(base);
}

/* Reap whatever of the group was re-parented to us, and wait until
 * kill(-pgid, 0) says the group is empty. */
static int group_gone(pid_t pgid, int64_t limit_ms) {
    int64_t deadline = ax_mono_ms() + limit_ms;

    for (;;) {
        while (waitpid(-pgid, NULL, WNOHANG) > 0)
            ;
        if (kill(-pgid, 0) < 0 && errno == ESRCH)
            return 1;
        if (ax_mono_ms() > deadline)
            return 0;
        usleep(5000);
    }
}

static void test_echo_hello(void **state) {
    char *argv[] = {"echo", "hello", NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.spawn_errno, 0);
    assert_int_equal(c.res.exited, 1);
    assert_int_equal(c.res.exit_code, 0);
    assert_int_equal(c.res.term_signal, 0);
    assert_int_equal(c.res.timed_out, 0);
    assert_true(c.res.pid > 0);
    assert_string_equal(c.out, "hello\n");
    assert_int_equal(c.res.output_len, 6);
    assert_int_equal(c.res.output_truncated, 0);
    assert_true(c.res.duration_ms >= 0 && c.res.duration_ms < 2000);
    free(c.out);
}

static void test_stderr_combined(void **state) {
    char *argv[] = {"sh", "-c", "echo out; echo err >&2", NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;

    run_one(&spec, &c);
    assert_string_equal(c.out, "out\nerr\n");
    free(c.out);
}

static void test_stdin_cat(void **state) {
    char *argv[] = {"cat", NULL};
    const char payload[] = "some payload\nsecond line";
    ax_cmd_spec_t spec = {.argv = argv, .stdin_data = payload, .stdin_len = strlen(payload)};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.exit_code, 0);
    assert_string_equal(c.out, payload);
    free(c.out);
}

static void test_exit_code(void **state) {
    char *argv[] = {"sh", "-c", "exit 3", NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.exited, 1);
    assert_int_equal(c.res.exit_code, 3);
    assert_int_equal(c.res.term_signal, 0);
    free(c.out);
}

static void test_killed_by_signal(void **state) {
    char *argv[] = {"sh", "-c", "kill -KILL $$", NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.exited, 0);
    assert_int_equal(c.res.term_signal, SIGKILL);
    assert_int_equal(c.res.timed_out, 0);
    free(c.out);
}

static void test_enoent(void **state) {
    char *argv[] = {"ax-test-no-such-program-9f3b", NULL};
    ax_cmd_spec_t spec = {.argv = argv, .timeout_ms = 5000};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.spawn_errno, ENOENT);
    assert_int_equal(c.res.exited, 0);
    assert_int_equal(c.res.pid, 0);
    assert_int_equal(c.res.output_len, 0);
    assert_string_equal(c.out, "");
    free(c.out);
}

static void test_eacces(void **state) {
    char path[] = "/tmp/ax-test-spawn-XXXXXX";
    int fd = mkstemp(path);
    char *argv[] = {path, NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;

    assert_true(fd >= 0);
    assert_int_equal(write(fd, "#!/bin/sh\n", 10), 10);
    close(fd);
    assert_int_equal(chmod(path, 0644), 0);   /* no x bit: EACCES even for root */
    run_one(&spec, &c);
    unlink(path);
    assert_int_equal(c.res.spawn_errno, EACCES);
    free(c.out);
}

static void test_timeout_kills_group(void **state) {
    char *argv[] = {"sh", "-c", "sleep 30 & sleep 30", NULL};
    ax_cmd_spec_t spec = {.argv = argv, .timeout_ms = 300};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.timed_out, 1);
    assert_int_equal(c.res.exited, 0);
    assert_int_equal(c.res.term_signal, SIGTERM);
    assert_true(c.res.duration_ms >= 290 && c.res.duration_ms < 1500);
    assert_true(group_gone(c.res.pid, 2000));
    free(c.out);
}

static void test_timeout_term_ignored(void **state) {
    char *argv[] = {"sh", "-c", "trap '' TERM; sleep 30", NULL};
    ax_cmd_spec_t spec = {.argv = argv, .timeout_ms = 300, .kill_grace_ms = 200};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.timed_out, 1);
    assert_int_equal(c.res.term_signal, SIGKILL);
    assert_true(c.res.duration_ms >= 490 && c.res.duration_ms < 2000);
    assert_true(group_gone(c.res.pid, 2000));
    free(c.out);
}

static void test_output_cap(void **state) {
    char *argv[] = {"head", "-c", "1000000", "/dev/zero", NULL};
    ax_cmd_spec_t spec = {.argv = argv, .output_cap = 1000};
    capture_t c;
    size_t i;

    run_one(&spec, &c);
    assert_int_equal(c.res.exited, 1);
    assert_int_equal(c.res.exit_code, 0);
    assert_int_equal(c.res.output_len, 1000);
    assert_int_equal(c.res.output_truncated, 1);
    for (i = 0; i < 1000; i++)
        assert_int_equal(c.out[i], 0);
    free(c.out);
}

static void test_output_cap_exact(void **state) {
    char *argv[] = {"printf", "abc", NULL};
    ax_cmd_spec_t spec = {.argv = argv, .output_cap = 3};
    capture_t c;

    run_one(&spec, &c);
    assert_string_equal(c.out, "abc");
    assert_int_equal(c.res.output_truncated, 0);
    free(c.out);

    spec.output_cap = 2;
    run_one(&spec, &c);
    assert_string_equal(c.out, "ab");
    assert_int_equal(c.res.output_truncated, 1);
    free(c.out);
}

static void test_big_stdin(void **state) {
    char *argv[] = {"wc", "-c", NULL};
    size_t len = 1000000;
    char *payload = malloc(len);
    ax_cmd_spec_t spec = {.argv = argv, .stdin_len = len};
    capture_t c;

    assert_non_null(payload);
    memset(payload, 'x', len);
    spec.stdin_data = payload;
    run_one(&spec, &c);
    free(payload);
    assert_int_equal(c.res.exit_code, 0);
    assert_int_equal(atol(c.out), 1000000);
    free(c.out);
}

static void test_stdin_not_read(void **state) {
    /* The child exits without reading: the write gets EPIPE, and that must
     * not kill us (SIGPIPE) or stall completion. */
    char *argv[] = {"true", NULL};
    size_t len = 1 << 20;
    char *payload = calloc(1, len);
    ax_cmd_spec_t spec = {.argv = argv, .stdin_len = len};
    capture_t c;

    assert_non_null(payload);
    spec.stdin_data = payload;
    run_one(&spec, &c);
    free(payload);
    assert_int_equal(c.res.exit_code, 0);
    free(c.out);
}

static void test_custom_env(void **state) {
    char *argv[] = {"sh", "-c", "echo \"$AX_X-$AX_TEST_LEAK\"", NULL};
    char *env[] = {"AX_X=1", "PATH=/usr/bin:/bin", NULL};
    ax_cmd_spec_t spec = {.argv = argv, .env = env};
    capture_t c;

    setenv("AX_TEST_LEAK", "leaked", 1);
    run_one(&spec, &c);
    unsetenv("AX_TEST_LEAK");
    assert_string_equal(c.out, "1-\n");
    free(c.out);
}

static void on_cancel_timer(evutil_socket_t fd, short what, void *arg) {
    ax_cmd_cancel(arg);
}

static void test_cancel(void **state) {
    char *argv[] = {"sleep", "30", NULL};
    ax_cmd_spec_t spec = {.argv = argv, .timeout_ms = 10000};
    struct event_base *base = event_base_new();
    struct timeval tv = {0, 100 * 1000};
    struct event *t;
    int pending = 1;
    capture_t c;
    ax_cmd_t *cmd;

    assert_non_null(base);
    capture_init(&c, base, &pending);
    cmd = ax_cmd_start(base, &spec, on_done, &c, NULL, 0);
    assert_non_null(cmd);
    t = evtimer_new(base, on_cancel_timer, cmd);
    evtimer_add(t, &tv);
    run_until(base, &pending, SAFETY_MS);
    event_free(t);
    event_base_free(base);

    assert_int_equal(c.done, 1);
    assert_int_equal(c.res.timed_out, 0);
    assert_int_equal(c.res.term_signal, SIGTERM);
    assert_true(c.res.duration_ms < 1000);
    assert_true(group_gone(c.res.pid, 2000));
    free(c.out);

    /* Cancel before the loop ever ran: exec has already happened by the time
     * ax_cmd_start returns, so the default SIGTERM action applies. */
    base = event_base_new();
    assert_non_null(base);
    pending = 1;
    capture_init(&c, base, &pending);
    cmd = ax_cmd_start(base, &spec, on_done, &c, NULL, 0);
    assert_non_null(cmd);
    ax_cmd_cancel(cmd);
    ax_cmd_cancel(cmd);         /* idempotent */
    assert_int_equal(c.done, 0);
    run_until(base, &pending, SAFETY_MS);
    event_base_free(base);
    assert_int_equal(c.done, 1);
    assert_int_equal(c.res.term_signal, SIGTERM);
    assert_int_equal(c.res.timed_out, 0);
    free(c.out);
}

typedef struct killer {
    struct event_base *base;
    pid_t pid;
    int killed;
} killer_t;

static void *kill_from_thread(void *arg) {
    killer_t *k = arg;
    k->killed = ax_cmd_kill_group(k->base, k->pid);
    return NULL;
}

/* The executor's fence thread: ax_cmd_kill_group from another thread kills
 * the whole group (sh and its sleep) while the loop is not even running;
 * the loop then reports the SIGKILL once. After the reap it is a no-op (the
 * pgid is no longer the command's), as it is for a pid not ours. */
static void test_kill_group_from_thread(void **state) {
    char *argv[] = {"sh", "-c", "sleep 30; true", NULL};
    ax_cmd_spec_t spec = {.argv = argv, .timeout_ms = 10000};
    struct event_base *base = event_base_new();
    int pending = 1;
    capture_t c;
    ax_cmd_t *cmd;
    pthread_t thr;

    assert_non_null(base);
    capture_init(&c, base, &pending);
    cmd = ax_cmd_start(base, &spec, on_done, &c, NULL, 0);
    assert_non_null(cmd);
    killer_t k = {base, ax_cmd_pid(cmd), 0};
    assert_true(k.pid > 0);
    usleep(100 * 1000); /* sh has started its sleep */
    assert_int_equal(pthread_create(&thr, NULL, kill_from_thread, &k), 0);
    pthread_join(thr, NULL);
    assert_int_equal(k.killed, 1);
    assert_int_equal(ax_cmd_kill_group(base, getpid()), 0); /* not a command of base */
    run_until(base, &pending, SAFETY_MS);
    assert_int_equal(c.done, 1);
    assert_int_equal(c.res.term_signal, SIGKILL);
    assert_true(group_gone(k.pid, 2000));
    assert_int_equal(ax_cmd_kill_group(base, k.pid), 0); /* reaped: not ours any more */
    event_base_free(base);
    free(c.out);
}

static void test_concurrent(void **state) {
    enum { N = 20 };
    struct event_base *base = event_base_new();
    capture_t c[N];
    char num[N][8];
    int pending = N, i;

    assert_non_null(base);
    for (i = 0; i < N; i++) {
        char *argv[] = {"sh", "-c", "echo \"$1\"", "sh", num[i], NULL};
        ax_cmd_spec_t spec = {.argv = argv};

        snprintf(num[i], sizeof(num[i]), "%d", i);
        capture_init(&c[i], base, &pending);
        assert_non_null(ax_cmd_start(base, &spec, on_done, &c[i], NULL, 0));
    }
    assert_int_equal(ax_cmd_running(base), N);
    run_until(base, &pending, SAFETY_MS);
    assert_int_equal(ax_cmd_running(base), 0);
    event_base_free(base);

    for (i = 0; i < N; i++) {
        char want[16];

        snprintf(want, sizeof(want), "%d\n", i);
        assert_int_equal(c[i].done, 1);
        assert_int_equal(c[i].res.exit_code, 0);
        assert_string_equal(c[i].out, want);
        free(c[i].out);
    }
}

static void test_background_child_holds_pipe(void **state) {
    char *argv[] = {"sh", "-c", "sleep 30 & echo done", NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.exit_code, 0);
    assert_int_equal(c.res.timed_out, 0);
    assert_string_equal(c.out, "done\n");
    assert_true(c.res.duration_ms < 1000);
    assert_true(group_gone(c.res.pid, 2000));
    free(c.out);
}

static void test_escaped_grandchild_drain(void **state) {
    /* setsid takes the grandchild out of the group, so killpg can't reach it
     * and it keeps the pipe open: completion must come from the 200 ms drain
     * limit after the leader's exit. It prints its pid so we can clean up. */
    /* The leader waits until the child is its own session leader (field 6
     * of stat), else the leader's exit could kill it before it escapes. */
    char *argv[] = {"sh", "-c",
                    "setsid sleep 30 & "
                    "while [ \"$(cut -d' ' -f6 /proc/$!/stat)\" != $! ]; do :; done; echo $!",
                    NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;
    pid_t escaped;

    run_one(&spec, &c);
    escaped = (pid_t)atoi(c.out);
    assert_true(escaped > 1);
    kill(escaped, SIGKILL);
    waitpid(escaped, NULL, 0);  /* re-parented to us: we are the subreaper */
    assert_int_equal(c.res.exit_code, 0);
    assert_true(c.res.duration_ms >= 190 && c.res.duration_ms < 1000);
    free(c.out);
}

static void test_own_process_group(void **state) {
    /* Field 5 of /proc/PID/stat is the process group. */
    char *argv[] = {"sh", "-c", "echo $$; cut -d' ' -f5 /proc/$$/stat", NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;
    long pid, pgid;

    run_one(&spec, &c);
    assert_int_equal(sscanf(c.out, "%ld %ld", &pid, &pgid), 2);
    assert_int_equal(pid, c.res.pid);
    assert_int_equal(pgid, c.res.pid);
    assert_int_not_equal(pgid, getpgrp());
    free(c.out);
}

static void test_sigchld_wakes_loop(void **state) {
    /* Output closes long before the exit, so only SIGCHLD (not EOF, and not
     * the 1 s backstop) can complete this promptly. */
    char *argv[] = {"sh", "-c", "exec >&- 2>&-; sleep 0.2", NULL};
    ax_cmd_spec_t spec = {.argv = argv};
    capture_t c;

    run_one(&spec, &c);
    assert_int_equal(c.res.exit_code, 0);
    assert_true(c.res.duration_ms >= 190 && c.res.duration_ms < 700);
    free(c.out);
}

/* Fds the test process itself passes to any child (inherited from whoever
 * started us without CLOEXEC); they are not the runner's to close. */
static int fd_inheritable(int fd) {
    int fl = fcntl(fd, F_GETFD);

    return fl >= 0 && !(fl & FD_CLOEXEC);
}

static void test_no_fd_leak(void **state) {
    /* While another command (with its own pipes) is live, a child must see
     * only 0..2 plus what the test process itself leaves inheritable. */
    char *argv_sleep[] = {"sleep", "30", NULL};
    char *argv_ls[] = {"sh", "-c", "ls /proc/$$/fd; true", NULL};
    ax_cmd_spec_t sleep_spec = {.argv = argv_sleep};
    ax_cmd_spec_t ls_spec = {.argv = argv_ls};
    struct event_base *base = event_base_new();
    capture_t cs, cl;
    int pending = 2;
    char *line, *save = NULL;

    assert_non_null(base);
    capture_init(&cs, base, &pending);
    capture_init(&cl, base, &pending);
    cl.cancel_in_cb = ax_cmd_start(base, &sleep_spec, on_done, &cs, NULL, 0);
    assert_non_null(cl.cancel_in_cb);  /* the ls callback ends the sleep */
    assert_non_null(ax_cmd_start(base, &ls_spec, on_done, &cl, NULL, 0));
    run_until(base, &pending, SAFETY_MS);
    event_base_free(base);

    assert_int_equal(cl.done, 1);
    assert_int_equal(cs.done, 1);
    for (line = strtok_r(cl.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int fd = atoi(line);

        if (fd > 2 && !fd_inheritable(fd))
            fail_msg("fd %d leaked into the child", fd);
    }
    free(cs.out);
    free(cl.out);
}

static void quiet_log(int severity, const char *msg) {
}

static void test_two_bases_backstop(void **state) {
    /* libevent 2.1 sends every signal to one base. B's child exits while A is
     * the signal base, so B never sees its SIGCHLD; its output closed early,
     * so no EOF either. Only the backstop timer can complete it. */
    char *argv_b[] = {"sh", "-c", "exec >&- 2>&-; sleep 0.3", NULL};
    char *argv_a[] = {"sleep", "0.6", NULL};
    ax_cmd_spec_t spec_b = {.argv = argv_b};
    ax_cmd_spec_t spec_a = {.argv = argv_a};
    struct event_base *a = event_base_new(), *b = event_base_new();
    capture_t ca, cb;
    int pa = 1, pb = 1;
    int64_t t0 = ax_mono_ms();

    assert_non_null(a);
    assert_non_null(b);
    event_set_log_callback(quiet_log);  /* libevent warns about two signal bases */
    capture_init(&cb, b, &pb);
    capture_init(&ca, a, &pa);
    assert_non_null(ax_cmd_start(b, &spec_b, on_done, &cb, NULL, 0));
    run_until(b, &pb, 50);          /* consume B's EOF while B is still running */
    assert_int_equal(cb.done, 0);
    assert_non_null(ax_cmd_start(a, &spec_a, on_done, &ca, NULL, 0));
    run_until(a, &pa, SAFETY_MS);
    assert_int_equal(ca.done, 1);
    run_until(b, &pb, SAFETY_MS);
    event_set_log_callback(NULL);
    assert_int_equal(cb.done, 1);
    assert_int_equal(cb.res.exit_code, 0);
    assert_true(ax_mono_ms() - t0 < 2500);
    event_base_free(a);
    event_base_free(b);
    free(ca.out);
    free(cb.out);
}

static void test_bad_args(void **state) {
    struct event_base *base = event_base_new();
    char *argv_empty[] = {NULL};
    ax_cmd_spec_t spec = {.argv = argv_empty};
    char err[128] = "";

    assert_non_null(base);
    assert_null(ax_cmd_start(base, &spec, on_done, NULL, err, sizeof(err)));
    assert_true(err[0] != '\0');
    assert_int_equal(ax_cmd_running(base), 0);
    ax_cmd_cancel(NULL);
    event_base_free(base);
}

/* ---- run as another user (fork + set ids + execve) -------------------------- */

static void test_creds_resolve(void **state) {
    ax_cmd_creds_t cr;
    char err[256] = "";
    struct passwd *pw = getpwnam("nobody");

    assert_int_equal(ax_cmd_creds_resolve("ax-no-such-user-7c1", NULL, &cr, err, sizeof(err)),
                     AX_ERR_INVALID);
    assert_non_null(strstr(err, "unknown user 'ax-no-such-user-7c1'"));
    assert_int_equal(ax_cmd_creds_resolve(NULL, "ax-no-such-group-7c1", &cr, err, sizeof(err)),
                     AX_ERR_INVALID);
    assert_non_null(strstr(err, "unknown group"));
    /* A bare uid and gid: just those, one group. */
    assert_int_equal(ax_cmd_creds_resolve("54321", "12345", &cr, err, sizeof(err)), AX_OK);
    assert_int_equal(cr.uid, 54321);
    assert_int_equal(cr.gid, 12345);
    assert_int_equal(cr.ngroups, 1);
    assert_int_equal(cr.groups[0], 12345);
    ax_cmd_creds_free(&cr);
    if (pw) {
        assert_int_equal(ax_cmd_creds_resolve("nobody", NULL, &cr, err, sizeof(err)), AX_OK);
        assert_int_equal(cr.uid, pw->pw_uid);
        assert_int_equal(cr.gid, pw->pw_gid);
        assert_true(cr.ngroups >= 1);
        ax_cmd_creds_free(&cr);
    }
}

/* Resolve nobody, or skip: switching ids needs root. */
static int nobody_creds(ax_cmd_creds_t *cr) {
    char err[256];

    if (geteuid() != 0 || !getpwnam("nobody"))
        return 0;
    assert_int_equal(ax_cmd_creds_resolve("nobody", NULL, cr, err, sizeof(err)), AX_OK);
    return 1;
}

static void test_run_as_user(void **state) {
    char *argv[] = {"sh", "-c", "id -u; id -g; id -G; cut -d' ' -f5 /proc/$$/stat; cat", NULL};
    const char payload[] = "stdin as nobody\n";
    ax_cmd_creds_t cr;
    ax_cmd_spec_t spec = {.argv = argv, .stdin_data = payload, .stdin_len = strlen(payload),
                          .creds = &cr};
    capture_t c;
    char want[256];

    if (!nobody_creds(&cr))
        skip();
    run_one(&spec, &c);
    assert_int_equal(c.res.spawn_errno, 0);
    assert_int_equal(c.res.exit_code, 0);
    snprintf(want, sizeof(want), "%d\n%d\n%d\n%d\n%s", (int)cr.uid, (int)cr.gid, (int)cr.gid,
             (int)c.res.pid, payload);
    if (cr.ngroups == 1)    /* nobody normally has no other group */
        assert_string_equal(c.out, want);
    else
        assert_true(strncmp(c.out, want, strlen("65534\n65534\n")) == 0);
    free(c.out);
    ax_cmd_creds_free(&cr);
}

static void test_run_as_enoent(void **state) {
    char *argv_path[] = {"ax-test-no-such-program-9f3b", NULL};
    char *argv_abs[] = {"/nonexistent/ax-test-9f3b", NULL};
    ax_cmd_creds_t cr;
    ax_cmd_spec_t spec = {.argv = argv_path, .creds = &cr};
    capture_t c;

    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;

    if (!nobody_creds(&cr))
        skip();
    /* A PATH directory nobody cannot search would make it EACCES (as execvp). */
    setenv("PATH", "/usr/bin:/bin", 1);
    run_one(&spec, &c);
    if (path)
        setenv("PATH", path, 1);
    free(path);
    assert_int_equal(c.res.spawn_errno, ENOENT);
    assert_int_equal(c.res.pid, 0);
    assert_string_equal(c.out, "");
    free(c.out);
    spec.argv = argv_abs;
    run_one(&spec, &c);
    assert_int_equal(c.res.spawn_errno, ENOENT);
    free(c.out);
    ax_cmd_creds_free(&cr);
}

static void test_run_as_not_executable(void **state) {
    /* A file without x bits is EACCES, never run through /bin/sh. */
    char path[] = "/tmp/ax-test-spawn-XXXXXX";
    int fd = mkstemp(path);
    char *argv[] = {path, NULL};
    ax_cmd_creds_t cr;
    ax_cmd_spec_t spec = {.argv = argv, .creds = &cr};
    capture_t c;

    assert_true(fd >= 0);
    assert_true(write(fd, "echo ran\n", 9) == 9);
    close(fd);
    chmod(path, 0644);
    if (!nobody_creds(&cr)) {
        unlink(path);
        skip();
    }
    run_one(&spec, &c);
    unlink(path);
    assert_int_equal(c.res.spawn_errno, EACCES);
    assert_string_equal(c.out, "");
    free(c.out);
    ax_cmd_creds_free(&cr);
}

static void test_run_as_timeout_kills_group(void **state) {
    char *argv[] = {"sh", "-c", "sleep 30 & sleep 30", NULL};
    ax_cmd_creds_t cr;
    ax_cmd_spec_t spec = {.argv = argv, .timeout_ms = 200, .kill_grace_ms = 200, .creds = &cr};
    capture_t c;

    if (!nobody_creds(&cr))
        skip();
    run_one(&spec, &c);
    assert_int_equal(c.res.timed_out, 1);
    assert_int_equal(c.res.term_signal, SIGTERM);
    assert_true(group_gone(c.res.pid, 2000));
    free(c.out);
    ax_cmd_creds_free(&cr);
}

static void test_run_as_no_fd_leak(void **state) {
    char *argv[] = {"sh", "-c", "ls /proc/$$/fd; true", NULL};
    ax_cmd_creds_t cr;
    ax_cmd_spec_t spec = {.argv = argv, .creds = &cr};
    capture_t c;
    char *line, *save = NULL;

    if (!nobody_creds(&cr))
        skip();
    run_one(&spec, &c);
    assert_int_equal(c.res.exit_code, 0);
    for (line = strtok_r(c.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int fd = atoi(line);

        if (fd > 2 && !fd_inheritable(fd))
            fail_msg("fd %d leaked into the child", fd);
    }
    free(c.out);
    ax_cmd_creds_free(&cr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_hello),
        cmocka_unit_test(test_stderr_combined),
        cmocka_unit_test(test_stdin_cat),
        cmocka_unit_test(test_exit_code),
        cmocka_unit_test(test_killed_by_signal),
        cmocka_unit_test(test_kill_group_from_thread),
        cmocka_unit_test(test_enoent),
        cmocka_unit_test(test_eacces),
        cmocka_unit_test(test_timeout_kills_group),
        cmocka_unit_test(test_timeout_term_ignored),
        cmocka_unit_test(test_output_cap),
        cmocka_unit_test(test_output_cap_exact),
        cmocka_unit_test(test_big_stdin),
        cmocka_unit_test(test_stdin_not_read),
        cmocka_unit_test(test_custom_env),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_background_child_holds_pipe),
        cmocka_unit_test(test_escaped_grandchild_drain),
        cmocka_unit_test(test_own_process_group),
        cmocka_unit_test(test_sigchld_wakes_loop),
        cmocka_unit_test(test_no_fd_leak),
        cmocka_unit_test(test_two_bases_backstop),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_creds_resolve),
        cmocka_unit_test(test_run_as_user),
        cmocka_unit_test(test_run_as_enoent),
        cmocka_unit_test(test_run_as_not_executable),
        cmocka_unit_test(test_run_as_timeout_kills_group),
        cmocka_unit_test(test_run_as_no_fd_leak),
    };

    /* Orphaned grandchildren come to us, not PID 1; see the banner. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
