/*
 * ax/spawn.h — run one command without a shell, driven by a libevent loop.
 *
 * The command is started with posix_spawnp() from an argv array (or, to run
 * it as another user, fork + setgroups/setgid/setuid + execve, still from the
 * argv, never through a shell), in a new process group, with the payload written to its stdin and stdout+stderr
 * captured (up to output_cap bytes; the rest is read and dropped so the
 * child never blocks). On timeout the whole group gets SIGTERM, then SIGKILL
 * after kill_grace_ms. When the leader exits, whatever it left in its group
 * gets SIGKILL, so no process outlives its attempt.
 *
 * @locality the event_base's thread. One SIGCHLD handler per event_base is
 * installed by the first ax_cmd_start() on it.
 */
#ifndef AX_SPAWN_H
#define AX_SPAWN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct event_base;
typedef struct ax_cmd ax_cmd_t;

/* The identity a command runs as (ax_cmd_creds_resolve). The child sets its
 * supplementary groups, then its gid, then its uid, before it execs; that
 * needs a privileged caller (root). */
typedef struct ax_cmd_creds {
    uid_t uid;
    gid_t gid;
    gid_t *groups;              /* supplementary groups, ngroups of them */
    size_t ngroups;
} ax_cmd_creds_t;

typedef struct ax_cmd_spec {
    char *const *argv;          /* argv[0] is looked up in PATH; NULL-terminated */
    char *const *env;           /* full environment (NULL-terminated), or NULL = inherit */
    const void *stdin_data;     /* may be NULL */
    size_t stdin_len;
    int64_t timeout_ms;         /* <= 0: no timeout */
    int64_t kill_grace_ms;      /* SIGTERM -> SIGKILL delay; <= 0 means 2000 */
    size_t output_cap;          /* bytes kept of stdout+stderr; 0 means 65536 */
    const ax_cmd_creds_t *creds; /* NULL: the caller's identity (posix_spawnp); else
                                  * fork + set ids + exec in the child */
} ax_cmd_spec_t;

typedef struct ax_cmd_result {
    int spawn_errno;            /* != 0: the command could not be started */
    int exited;                 /* 1: exit_code valid */
    int exit_code;
    int term_signal;            /* != 0: killed by this signal */
    int timed_out;              /* 1: killed because of the timeout */
    pid_t pid;                  /* == pgid */
    char *output;               /* NUL-terminated; valid during the callback only */
    size_t output_len;
    int output_truncated;
    int64_t duration_ms;
} ax_cmd_result_t;

/* Called once, from the loop, when the process has ended and its output is
 * read. The ax_cmd_t is freed right after the callback returns. */
typedef void (*ax_cmd_done_cb)(const ax_cmd_result_t *res, void *arg);

/* Start a command. Returns NULL only on resource failure before anything was
 * started (errbuf says why); a command that cannot be exec'd (ENOENT, EACCES)
 * still returns a handle and reports spawn_errno through the callback. */
ax_cmd_t *ax_cmd_start(struct event_base *base, const ax_cmd_spec_t *spec,
                       ax_cmd_done_cb cb, void *arg, char *errbuf, size_t errlen);

/* Resolve user (name or numeric uid; NULL/"" = the calling process's uid)
 * and group (name or numeric gid; NULL/"" = the user's primary group, or the
 * caller's gid when no user is given) into *out. A named user brings its
 * supplementary groups (getgrouplist); otherwise the only group is the gid.
 * Returns AX_ERR_INVALID naming the unknown user or group. Not thread-safe
 * (getpwnam): call it at start-up. */
int ax_cmd_creds_resolve(const char *user, const char *group, ax_cmd_creds_t *out,
                         char *errbuf, size_t errlen);
void ax_cmd_creds_free(ax_cmd_creds_t *creds);

/* Cancel: SIGTERM the group now, SIGKILL after the grace. The callback still
 * runs once the process is gone. */
void ax_cmd_cancel(ax_cmd_t *cmd);

/* The command's pid, which is its process group's id (0: not started). */
pid_t ax_cmd_pid(const ax_cmd_t *cmd);

/* SIGKILL the process group of `base`'s command whose leader is `pid`, if
 * that leader is not reaped yet (so the pgid is still the command's). Safe
 * from any thread (the executor's fence thread). 1 when a signal was sent. */
int ax_cmd_kill_group(struct event_base *base, pid_t pid);

/* Any thread: SIGKILL the process group of every unreaped command started
 * on base (a process about to exit leaves none behind); how many. */
size_t ax_cmd_kill_all(struct event_base *base);

/* Number of commands still running on `base` (for graceful shutdown). */
size_t ax_cmd_running(struct event_base *base);

#endif
