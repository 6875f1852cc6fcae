/*
 * h_command.c — the command handler: argv through posix_spawnp (never a
 * shell; fork + set ids + execve as executor.run.user), its own process group, the payload on stdin, the AX_* variables
 * in its environment, stdout+stderr captured up to executor.output.cap, and
 * on timeout SIGTERM to the group, then SIGKILL after executor.kill.grace.ms
 * (libax/src/adapters/spawn.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ax/spawn.h"
#include "executor.h"

static void on_done(const ax_cmd_result_t *res, void *arg) {
    run_t *r = arg;
    handler_result_t h = {.output = res->output, .output_len = res->output_len};
    if (res->spawn_errno) {
        h.outcome = AX_OUTCOME_FAILED;
        h.error_class = "spawn";
        snprintf(h.error, sizeof h.error, "cannot execute '%s': %s", r->d.command[0],
                 strerror(res->spawn_errno));
    } else if (res->timed_out) {
        h.outcome = AX_OUTCOME_TIMEOUT;
        h.error_class = "timeout";
        snprintf(h.error, sizeof h.error, "timed out after %lld ms; process group killed",
                 (long long)r->d.timeout_ms);
        h.retryable = 1;
    } else if (res->exited) {
        h.exit_code = res->exit_code;
        h.exit_code_set = 1;
        if (res->exit_code == 0) {
            h.outcome = AX_OUTCOME_SUCCESS;
        } else {
            h.outcome = AX_OUTCOME_FAILED;
            h.error_class = "exit";
            snprintf(h.error, sizeof h.error, "exited with status %d", res->exit_code);
            h.retryable = 1;
        }
    } else {
        h.outcome = AX_OUTCOME_FAILED;
        h.error_class = "signal";
        snprintf(h.error, sizeof h.error, "killed by signal %d (%s)", res->term_signal,
                 strsignal(res->term_signal));
        h.retryable = 1;
    }
    r->hstate = NULL; /* spawn.c frees the ax_cmd_t after this callback */
    run_done(r, &h);
}

static int start(executor_t *ex, run_t *r, handler_result_t *res) {
    char err[256];
    char **env = child_env(ex, r);
    ax_cmd_spec_t spec = {
        .argv = r->d.command,
        .env = env,
        .stdin_data = r->d.payload,
        .stdin_len = r->d.payload_len,
        .timeout_ms = r->d.timeout_ms,
        .kill_grace_ms = ex->svc.conf.executor_kill_grace_ms,
        .output_cap = (size_t)ex->svc.conf.executor_output_cap,
        .creds = privilege_creds(ex),
    };
    r->hstate = ax_cmd_start(ex->svc.base, &spec, on_done, r, err, sizeof err);
    free_child_env(ex, env);
    if (!r->hstate) {
        res->outcome = AX_OUTCOME_FAILED;
        res->error_class = "spawn";
        snprintf(res->error, sizeof res->error, "%s", err);
        res->retryable = 1;
        return -1;
    }
    return 0;
}

static void cancel(executor_t *ex, run_t *r, const char *why) {
    if (r->hstate)
        ax_cmd_cancel(r->hstate);
}

pid_t handler_command_pid(const run_t *r) { return r->hstate ? ax_cmd_pid(r->hstate) : 0; }

static int init(executor_t *ex) {
    privilege_log(ex);
    return 0;
}

static void fini(executor_t *ex) {
    privilege_fini(ex);
}

const handler_ops_t handler_command = {"command", init, fini, start, cancel, NULL};
