/*
 * spawn.c — the command runner behind ax/spawn.h: posix_spawnp() a command in
 * its own process group (or fork + setgroups/setgid/setuid + execve when it
 * runs as another user: posix_spawn cannot change ids), feed its stdin and
 * drain its combined output through libevent, reap it on SIGCHLD, and make
 * sure nothing in its group outlives it.
 *
 * The only shared state is a small registry keyed by event_base: one SIGCHLD
 * event (plus a slow backstop timer) and the list of live commands per base.
 * An entry exists only while its base has live commands, so a freed base can
 * never leave a stale entry behind for a new base at the same address.
 */
#include "ax/spawn.h"
#include "ax/common.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

extern char **environ;

#define AX_SPAWN_DEFAULT_CAP      65536u
#define AX_SPAWN_DEFAULT_GRACE_MS 2000
/* How long to wait for output EOF after the leader exited: a descendant that
 * left the process group may still hold the pipe, and we won't wait for it. */
#define AX_SPAWN_DRAIN_MS         200
/* libevent 2.1 delivers signals to one event_base at a time (the last one
 * that added a signal or started looping); with several bases, another base
 * may swallow our SIGCHLD. This timer bounds the delay that can cause. */
#define AX_SPAWN_BACKSTOP_MS      1000
/* Reads per readiness callback, so one chatty child can't starve the loop. */
#define AX_SPAWN_READS_PER_CB     16
#define AX_SPAWN_READ_CHUNK       16384

typedef struct ax__spawn_reg ax__spawn_reg_t;

struct ax_cmd {
    struct event_base *base;
    ax__spawn_reg_t *reg;
    ax_cmd_t *next;             /* in reg->cmds */
    ax_cmd_done_cb cb;
    void *arg;

    pid_t pid;                  /* 0 if the spawn failed */
    int in_fd;                  /* parent's write end, -1 once closed */
    int out_fd;                 /* parent's read end, -1 once closed */
    struct event *in_ev;
    struct event *out_ev;
    /* One timer, reused through the stages: timeout -> kill grace -> drain
     * after exit (or zero-delay completion). The stages never overlap. */
    struct event *timer;

    unsigned char *in_data;     /* private copy: the caller's buffer may go away */
    size_t in_len;
    size_t in_off;

    char *out;
    size_t out_len;
    size_t out_alloc;
    size_t out_cap;
    uint64_t out_total;         /* including the dropped bytes */

    int64_t grace_ms;
    int64_t start_ms;
    int term_sent;              /* SIGTERM went to the group (timeout or cancel) */
    int reaped;                 /* leader collected; the pid is no longer ours */
    int eof;
    int in_callback;

    ax_cmd_result_t res;
};

struct ax__spawn_reg {
    struct event_base *base;
    struct event *sigchld;
    struct event *backstop;
    ax_cmd_t *cmds;
    size_t n;
    ax__spawn_reg_t *next;
};

/* Guards everything reachable from reg_head. Bases are thread-confined, but
 * different bases may live on different threads and share this list. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static ax__spawn_reg_t *reg_head;

static void cmd_reap_scan(ax__spawn_reg_t *reg);

static void close_fd(int *fd) {
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void free_event(struct event **ev) {
    if (*ev) {
        event_free(*ev);
        *ev = NULL;
    }
}

/* ---- registry ----------------------------------------------------------- */

static void reg_sigchld_cb(evutil_socket_t sig, short what, void *arg) {
    cmd_reap_scan(arg);
}

static void reg_free(ax__spawn_reg_t *reg) {
    if (!reg)
        return;
    free_event(&reg->sigchld);
    free_event(&reg->backstop);
    free(reg);
}

/* Add cmd to its base's entry, creating the entry (and its SIGCHLD event) if
 * this is the base's only live command. Called before the spawn so that an
 * immediate exit can't slip past the handler. */
static int reg_attach(ax_cmd_t *cmd, char *errbuf, size_t errlen) {
    ax__spawn_reg_t *reg;
    int rc = AX_OK;

    pthread_mutex_lock(&reg_lock);
    for (reg = reg_head; reg; reg = reg->next)
        if (reg->base == cmd->base)
            break;
    if (!reg) {
        struct timeval tv = AX_TV_MS(AX_SPAWN_BACKSTOP_MS);

        reg = calloc(1, sizeof(*reg));
        if (!reg) {
            rc = ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "spawn: out of memory");
            goto out;
        }
        reg->base = cmd->base;
        reg->sigchld = evsignal_new(cmd->base, SIGCHLD, reg_sigchld_cb, reg);
        reg->backstop = event_new(cmd->base, -1, EV_PERSIST, reg_sigchld_cb, reg);
        if (!reg->sigchld || !reg->backstop || evsignal_add(reg->sigchld, NULL) != 0 ||
            event_add(reg->backstop, &tv) != 0) {
            reg_free(reg);
            rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "spawn: cannot watch SIGCHLD");
            goto out;
        }
        reg->next = reg_head;
        reg_head = reg;
    }
    cmd->reg = reg;
    cmd->next = reg->cmds;
    reg->cmds = cmd;
    reg->n++;
out:
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

/* Remove cmd; the last command out tears the entry down, which also gives
 * SIGCHLD back to whatever disposition it had before. */
static void reg_detach(ax_cmd_t *cmd) {
    ax__spawn_reg_t *reg = cmd->reg, **rp;
    ax_cmd_t **cp;

    if (!reg)
        return;
    pthread_mutex_lock(&reg_lock);
    for (cp = &reg->cmds; *cp; cp = &(*cp)->next) {
        if (*cp == cmd) {
            *cp = cmd->next;
            reg->n--;
            break;
        }
    }
    if (reg->n == 0) {
        for (rp = &reg_head; *rp; rp = &(*rp)->next) {
            if (*rp == reg) {
                *rp = reg->next;
                break;
            }
        }
        reg_free(reg);
    }
    pthread_mutex_unlock(&reg_lock);
    cmd->reg = NULL;
    cmd->next = NULL;
}

pid_t ax_cmd_pid(const ax_cmd_t *cmd) { return cmd ? cmd->pid : 0; }

/* Any thread: every reap happens under reg_lock, so an unreaped leader found
 * here pins its pid, and the pgid cannot be recycled under the killpg. */
int ax_cmd_kill_group(struct event_base *base, pid_t pid) {
    ax__spawn_reg_t *reg;
    ax_cmd_t *cmd;
    int killed = 0;

    if (pid <= 0)
        return 0;
    pthread_mutex_lock(&reg_lock);
    for (reg = reg_head; reg && reg->base != base; reg = reg->next)
        ;
    for (cmd = reg ? reg->cmds : NULL; cmd; cmd = cmd->next)
        if (cmd->pid == pid && !cmd->reaped) {
            killed = killpg(pid, SIGKILL) == 0;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return killed;
}

size_t ax_cmd_kill_all(struct event_base *base) {
    size_t n = 0;
    pthread_mutex_lock(&reg_lock);
    for (ax__spawn_reg_t *reg = reg_head; reg; reg = reg->next)
        for (ax_cmd_t *cmd = reg->base == base ? reg->cmds : NULL; cmd; cmd = cmd->next)
            if (cmd->pid > 0 && !cmd->reaped && killpg(cmd->pid, SIGKILL) == 0)
                n++;
    pthread_mutex_unlock(&reg_lock);
    return n;
}

size_t ax_cmd_running(struct event_base *base) {
    ax__spawn_reg_t *reg;
    size_t n = 0;

    pthread_mutex_lock(&reg_lock);
    for (reg = reg_head; reg; reg = reg->next) {
        if (reg->base == base) {
            n = reg->n;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    return n;
}

/* ---- lifecycle ------------------------------------------------------------ */

static void cmd_free(ax_cmd_t *cmd) {
    if (!cmd)
        return;
    reg_detach(cmd);
    free_event(&cmd->in_ev);
    free_event(&cmd->out_ev);
    free_event(&cmd->timer);
    close_fd(&cmd->in_fd);
    close_fd(&cmd->out_fd);
    free(cmd->in_data);
    free(cmd->out);
    free(cmd);
}

/* Only ever reached from the timer, so the callback always runs from the
 * loop and from exactly one place. */
static void cmd_complete(ax_cmd_t *cmd) {
    ax_cmd_done_cb cb = cmd->cb;
    void *arg = cmd->arg;
    char empty = '\0';

    /* Out of the registry before the callback, so ax_cmd_running() inside it
     * already excludes this command and a new start sees a consistent list. */
    reg_detach(cmd);
    free_event(&cmd->in_ev);
    free_event(&cmd->out_ev);
    free_event(&cmd->timer);
    close_fd(&cmd->in_fd);
    close_fd(&cmd->out_fd);

    cmd->res.output = cmd->out ? cmd->out : &empty;
    cmd->res.output[cmd->out_len] = '\0';
    cmd->res.output_len = cmd->out_len;
    cmd->res.duration_ms = ax_mono_ms() - cmd->start_ms;
    cmd->in_callback = 1;
    cb(&cmd->res, arg);
    cmd_free(cmd);
}

static void cmd_signal_group(ax_cmd_t *cmd, int sig) {
    /* Only while the leader is unreaped: its pid, and so the pgid, can't be
     * recycled before then. ESRCH just means the group is already empty. */
    if (cmd->pid > 0 && !cmd->reaped)
        (void)killpg(cmd->pid, sig);
}

static void cmd_terminate(ax_cmd_t *cmd) {
    struct timeval tv = AX_TV_MS(cmd->grace_ms);

    cmd->term_sent = 1;
    cmd_signal_group(cmd, SIGTERM);
    /* A stopped process would hold SIGTERM pending until the SIGKILL. */
    cmd_signal_group(cmd, SIGCONT);
    evtimer_add(cmd->timer, &tv);
}

/* Collect the leader if it has exited. waitid(WNOWAIT) first so the group can
 * be SIGKILLed while the zombie leader still pins the pgid, then reap. */
static void cmd_try_reap(ax_cmd_t *cmd) {
    siginfo_t si;
    int status = 0;
    pid_t r;

    if (cmd->reaped || cmd->pid <= 0)
        return;
    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)cmd->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0) {
        if (si.si_pid == 0)
            return;             /* still running */
        (void)killpg(cmd->pid, SIGKILL);
        do {
            r = waitpid(cmd->pid, &status, WNOHANG);
        } while (r < 0 && errno == EINTR);
        if (r == cmd->pid) {
            if (WIFEXITED(status)) {
                cmd->res.exited = 1;
                cmd->res.exit_code = WEXITSTATUS(status);
            } else if (WIFSIGNALED(status)) {
                cmd->res.term_signal = WTERMSIG(status);
            }
        }
    } else if (errno != ECHILD) {
        return;                 /* EINTR and the like: the next scan retries */
    }
    /* ECHILD: someone else (a waitpid(-1) elsewhere) took our child. We can't
     * know the status, and the pgid may be recycled, so no killpg. */
    cmd->reaped = 1;

    /* Nobody left to read stdin. */
    free_event(&cmd->in_ev);
    close_fd(&cmd->in_fd);

    struct timeval tv = AX_TV_MS(cmd->eof ? 0 : AX_SPAWN_DRAIN_MS);
    evtimer_add(cmd->timer, &tv);
}

static void cmd_reap_scan(ax__spawn_reg_t *reg) {
    ax_cmd_t *cmd;

    /* No user code runs in here (completion is deferred to each command's
     * timer), so the list can't change under the walk. */
    pthread_mutex_lock(&reg_lock);
    for (cmd = reg->cmds; cmd; cmd = cmd->next)
        cmd_try_reap(cmd);
    pthread_mutex_unlock(&reg_lock);
}

static void cmd_timer_cb(evutil_socket_t fd, short what, void *arg) {
    ax_cmd_t *cmd = arg;

    if (cmd->res.spawn_errno || cmd->reaped) {
        cmd_complete(cmd);
        return;
    }
    /* The leader may have exited with its SIGCHLD still queued: then this is
     * not a timeout, and reaping re-arms the timer for completion. (Under
     * the lock, as every reap: ax_cmd_kill_group may run on another
     * thread.) */
    pthread_mutex_lock(&reg_lock);
    cmd_try_reap(cmd);
    pthread_mutex_unlock(&reg_lock);
    if (cmd->reaped)
        return;
    if (!cmd->term_sent) {
        cmd->res.timed_out = 1;
        cmd_terminate(cmd);
    } else {
        cmd_signal_group(cmd, SIGKILL);
    }
}

/* ---- pipes ---------------------------------------------------------------- */

/* write() with SIGPIPE blocked for this thread, swallowing the SIGPIPE it may
 * raise, so a child that doesn't read its stdin can't kill us and we don't
 * change the process-wide disposition behind the application's back. */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t len) {
    sigset_t pipe_set, old_set, pending;
    int was_pending, saved;
    ssize_t n;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending = sigismember(&pending, SIGPIPE);

    n = write(fd, buf, len);
    saved = errno;
    if (n < 0 && saved == EPIPE && !was_pending) {
        static const struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old_set, NULL);
    errno = saved;
    return n;
}

static void cmd_stdin_cb(evutil_socket_t fd, short what, void *arg) {
    ax_cmd_t *cmd = arg;
    ssize_t n;

    while (cmd->in_off < cmd->in_len) {
        n = write_nosigpipe(cmd->in_fd, cmd->in_data + cmd->in_off, cmd->in_len - cmd->in_off);
        if (n > 0) {
            cmd->in_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;             /* EV_PERSIST brings us back when there's room */
        break;                  /* EPIPE: the child didn't want it; fine */
    }
    /* Closing is the EOF the child is waiting for. */
    free_event(&cmd->in_ev);
    close_fd(&cmd->in_fd);
}

/* Grow towards the cap only as output actually arrives: most commands print
 * little, and the cap may be large. Precondition: out_len < out_cap. */
static int out_reserve(ax_cmd_t *cmd) {
    size_t want;
    char *p;

    if (cmd->out_alloc > cmd->out_len + 1)
        return 0;
    want = cmd->out_alloc ? cmd->out_alloc * 2 : 4096;
    if (want > cmd->out_cap + 1)
        want = cmd->out_cap + 1;            /* +1 for the NUL */
    p = realloc(cmd->out, want);
    if (!p)
        return -1;
    cmd->out = p;
    cmd->out_alloc = want;
    return 0;
}

static void cmd_stdout_cb(evutil_socket_t fd, short what, void *arg) {
    ax_cmd_t *cmd = arg;
    char scratch[AX_SPAWN_READ_CHUNK];
    char *dst;
    size_t room;
    ssize_t n;
    int i, keep;

    for (i = 0; i < AX_SPAWN_READS_PER_CB; i++) {
        keep = cmd->out_len < cmd->out_cap && out_reserve(cmd) == 0;
        if (keep) {
            dst = cmd->out + cmd->out_len;
            room = cmd->out_alloc - 1 - cmd->out_len;
        } else {
            /* Past the cap (or out of memory): keep draining so the child
             * never blocks on a full pipe, but drop the bytes. */
            dst = scratch;
            room = sizeof(scratch);
        }
        n = read(cmd->out_fd, dst, room);
        if (n > 0) {
            if (keep)
                cmd->out_len += (size_t)n;
            else
                cmd->res.output_truncated = 1;
            cmd->out_total += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        break;                  /* EOF, or an error we treat as one */
    }
    if (i == AX_SPAWN_READS_PER_CB)
        return;                 /* more to read; let other events run first */

    cmd->eof = 1;
    free_event(&cmd->out_ev);
    close_fd(&cmd->out_fd);
    if (cmd->reaped) {
        struct timeval zero = {0, 0};
        evtimer_add(cmd->timer, &zero);
    } else {
        /* The leader usually closes the pipe by exiting; don't wait for the
         * SIGCHLD round trip if its zombie is already there. */
        cmd_try_reap(cmd);
    }
}

/* Pipe with both ends close-on-exec (so one command's pipes never leak into
 * another's child) and above 0..2, so the dup2 file actions can't clobber
 * each other when the parent runs with a closed stdin/stdout. */
static int pipe_cloexec(int p[2]) {
    int i, fd;

    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    for (i = 0; i < 2; i++) {
        if (p[i] >= 3)
            continue;
        fd = fcntl(p[i], F_DUPFD_CLOEXEC, 3);
        if (fd < 0) {
            close(p[0]);
            close(p[1]);
            p[0] = p[1] = -1;
            return -1;
        }
        close(p[i]);
        p[i] = fd;
    }
    return 0;
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);

    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ---- running as another user ---------------------------------------------- */

int ax_cmd_creds_resolve(const char *user, const char *group, ax_cmd_creds_t *out,
                         char *errbuf, size_t errlen) {
    struct passwd *pw = NULL;
    char *end;
    unsigned long n;

    memset(out, 0, sizeof(*out));
    out->uid = geteuid();
    out->gid = getegid();
    if (user && *user) {
        errno = 0;
        pw = getpwnam(user);
        if (!pw) {
            errno = 0;
            n = strtoul(user, &end, 10);
            if (*end || end == user || errno || n >= (unsigned long)(uid_t)-1)
                return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "unknown user '%s'", user);
            pw = getpwuid((uid_t)n);    /* may be NULL: a bare uid is fine */
            out->uid = (uid_t)n;
        } else {
            out->uid = pw->pw_uid;
        }
        if (pw)
            out->gid = pw->pw_gid;
    }
    if (group && *group) {
        struct group *gr = getgrnam(group);

        if (gr) {
            out->gid = gr->gr_gid;
        } else {
            errno = 0;
            n = strtoul(group, &end, 10);
            if (*end || end == group || errno || n >= (unsigned long)(gid_t)-1)
                return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "unknown group '%s'", group);
            out->gid = (gid_t)n;
        }
    }
    if (pw && !(group && *group)) {
        /* The user's own groups, as a login would give them. */
        int ng = 16;

        for (;;) {
            gid_t *g = realloc(out->groups, (size_t)ng * sizeof(*g));
            int want = ng;

            if (!g) {
                ax_cmd_creds_free(out);
                return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
            }
            out->groups = g;
            if (getgrouplist(pw->pw_name, out->gid, g, &want) >= 0) {
                out->ngroups = (size_t)want;
                return AX_OK;
            }
            if (want <= ng || want > 65536)
                break;
            ng = want;
        }
        free(out->groups);
        out->groups = NULL;
    }
    out->groups = malloc(sizeof(*out->groups));
    if (!out->groups)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    out->groups[0] = out->gid;
    out->ngroups = 1;
    return AX_OK;
}

void ax_cmd_creds_free(ax_cmd_creds_t *creds) {
    if (!creds)
        return;
    free(creds->groups);
    creds->groups = NULL;
    creds->ngroups = 0;
}

static const int child_default_signals[] = {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD};

/* In the forked child: only async-signal-safe calls from here on (the parent
 * has other threads; their locks may be held forever in this copy). Reports
 * a failure as its errno on err_fd, then _exit(127). */
static void child_exec_as(char *const *argv, char *const *env, const char *path,
                          const ax_cmd_creds_t *creds, int in_fd, int out_fd, int err_fd) {
    struct sigaction sa;
    sigset_t empty;
    char buf[4096];
    int e = 0, saw_eacces = 0;
    size_t i;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (i = 0; i < sizeof(child_default_signals) / sizeof(child_default_signals[0]); i++)
        (void)sigaction(child_default_signals[i], &sa, NULL);
    if (setpgid(0, 0) != 0 || dup2(in_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 ||
        dup2(out_fd, STDERR_FILENO) < 0)
        goto fail;
    /* Groups first, then the gid, then the uid: each later step needs the
     * privilege the one after it gives up. */
    if (setgroups(creds->ngroups, creds->groups) != 0 || setgid(creds->gid) != 0 ||
        setuid(creds->uid) != 0)
        goto fail;
    /* Make sure the uid switch cannot be undone (a saved uid of 0 would). */
    if (creds->uid != 0 && setuid(0) == 0) {
        errno = EPERM;
        goto fail;
    }
    sigemptyset(&empty);
    (void)sigprocmask(SIG_SETMASK, &empty, NULL);

    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, env);
        goto fail;
    }
    /* PATH lookup as posix_spawnp does it (the caller's PATH), but without
     * execvp's fall-back of running a non-executable file with /bin/sh. */
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t dlen = colon ? (size_t)(colon - path) : strlen(path);
        size_t alen = strlen(argv[0]);

        if (dlen + alen + 2 <= sizeof(buf)) {
            if (dlen == 0) {
                buf[0] = '.';
                dlen = 1;
            } else {
                memcpy(buf, path, dlen);
            }
            buf[dlen] = '/';
            memcpy(buf + dlen + 1, argv[0], alen + 1);
            execve(buf, argv, env);
            if (errno == EACCES)
                saw_eacces = 1;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE &&
                     errno != ENODEV && errno != ETIMEDOUT)
                goto fail;
        }
        if (!colon)
            break;
        path = colon + 1;
    }
    errno = saw_eacces ? EACCES : ENOENT;
fail:
    e = errno;
    while (write(err_fd, &e, sizeof(e)) < 0 && errno == EINTR)
        ;
    _exit(127);
}

/* fork + set ids + exec, with posix_spawn's contract: returns 0 and *pid
 * once the child has exec'd, or the errno of the step that failed (the child
 * is reaped then). in_fd/out_fd become the child's stdin and stdout+stderr. */
static int spawn_as(pid_t *pid, char *const *argv, char *const *env,
                    const ax_cmd_creds_t *creds, int in_fd, int out_fd) {
    int ep[2], e = 0, saved;
    sigset_t all, old;
    const char *path = getenv("PATH");
    ssize_t n;
    pid_t p;

    if (!path)
        path = "/bin:/usr/bin";
    if (pipe_cloexec(ep) != 0)
        return errno;
    /* No handler of ours may run in the child before it resets them. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    p = fork();
    if (p == 0) {
        close(ep[0]);
        child_exec_as(argv, env, path, creds, in_fd, out_fd, ep[1]);
    }
    saved = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    if (p < 0) {
        close(ep[0]);
        return saved;
    }
    (void)setpgid(p, p);        /* also here, so a killpg right after us finds the group */
    do {
        n = read(ep[0], &e, sizeof(e));
    } while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n == (ssize_t)sizeof(e) && e != 0) {
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
        return e;
    }
    *pid = p;
    return 0;
}

/* ---- public API ----------------------------------------------------------- */

/* The file actions and attributes of the child: the pipes as stdin and
 * stdout/stderr, a process group of its own, no blocked signals, default
 * dispositions. 0, or the errno of the step that failed (nothing left to
 * destroy then). */
static int spawn_setup(posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr, int child_in,
                       int child_out, int parent_in, int parent_out) {
    sigset_t empty, dflt;
    int err = posix_spawn_file_actions_init(fa);
    if (err != 0)
        return err;
    if ((err = posix_spawnattr_init(attr)) != 0) {
        posix_spawn_file_actions_destroy(fa);
        return err;
    }
    sigemptyset(&empty);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGPIPE);
    sigaddset(&dflt, SIGTERM);
    sigaddset(&dflt, SIGINT);
    sigaddset(&dflt, SIGHUP);
    sigaddset(&dflt, SIGCHLD);
    /* The originals are O_CLOEXEC; the explicit closes just state intent and
     * cover the parent's ends too. */
    if ((err = posix_spawn_file_actions_adddup2(fa, child_in, STDIN_FILENO)) != 0 ||
        (err = posix_spawn_file_actions_adddup2(fa, child_out, STDOUT_FILENO)) != 0 ||
        (err = posix_spawn_file_actions_adddup2(fa, child_out, STDERR_FILENO)) != 0 ||
        (err = posix_spawn_file_actions_addclose(fa, child_in)) != 0 ||
        (err = posix_spawn_file_actions_addclose(fa, child_out)) != 0 ||
        (err = posix_spawn_file_actions_addclose(fa, parent_in)) != 0 ||
        (err = posix_spawn_file_actions_addclose(fa, parent_out)) != 0 ||
        (err = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                  POSIX_SPAWN_SETSIGDEF)) != 0 ||
        (err = posix_spawnattr_setpgroup(attr, 0)) != 0 ||
        (err = posix_spawnattr_setsigmask(attr, &empty)) != 0 ||
        (err = posix_spawnattr_setsigdefault(attr, &dflt)) != 0) {
        posix_spawn_file_actions_destroy(fa);
        posix_spawnattr_destroy(attr);
        return err;
    }
    return 0;
}

/* A command not started yet: its stdin copied, the parent's pipe ends
 * (in_pipe/out_pipe: the child's ends stay there for the spawn) non-
 * blocking with their events, the timeout armed, the SIGCHLD registry
 * attached. Everything that can fail for lack of resources happens here,
 * before the spawn, so a NULL return really means nothing was started. */
static ax_cmd_t *cmd_prepare(struct event_base *base, const ax_cmd_spec_t *spec,
                             ax_cmd_done_cb cb, void *arg, int in_pipe[2], int out_pipe[2],
                             char *errbuf, size_t errlen) {
    ax_cmd_t *cmd = calloc(1, sizeof(*cmd));
    if (!cmd) {
        ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "spawn: out of memory");
        return NULL;
    }
    cmd->base = base;
    cmd->cb = cb;
    cmd->arg = arg;
    cmd->in_fd = cmd->out_fd = -1;
    cmd->out_cap = spec->output_cap ? spec->output_cap : AX_SPAWN_DEFAULT_CAP;
    cmd->grace_ms = spec->kill_grace_ms > 0 ? spec->kill_grace_ms : AX_SPAWN_DEFAULT_GRACE_MS;
    if (spec->stdin_len > 0) {
        cmd->in_data = malloc(spec->stdin_len);
        if (!cmd->in_data) {
            ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "spawn: out of memory for %zu stdin bytes",
                      spec->stdin_len);
            goto fail;
        }
        memcpy(cmd->in_data, spec->stdin_data, spec->stdin_len);
        cmd->in_len = spec->stdin_len;
    }
    if (pipe_cloexec(in_pipe) != 0 || pipe_cloexec(out_pipe) != 0) {
        ax_seterr(errbuf, errlen, AX_ERR_IO, "spawn: pipe: %s", strerror(errno));
        goto fail;
    }
    cmd->in_fd = in_pipe[1];
    cmd->out_fd = out_pipe[0];
    in_pipe[1] = out_pipe[0] = -1;
    if (set_nonblock(cmd->in_fd) != 0 || set_nonblock(cmd->out_fd) != 0) {
        ax_seterr(errbuf, errlen, AX_ERR_IO, "spawn: fcntl: %s", strerror(errno));
        goto fail;
    }
    cmd->timer = evtimer_new(base, cmd_timer_cb, cmd);
    cmd->out_ev = event_new(base, cmd->out_fd, EV_READ | EV_PERSIST, cmd_stdout_cb, cmd);
    if (cmd->in_len > 0)
        cmd->in_ev = event_new(base, cmd->in_fd, EV_WRITE | EV_PERSIST, cmd_stdin_cb, cmd);
    if (!cmd->timer || !cmd->out_ev || (cmd->in_len > 0 && !cmd->in_ev)) {
        ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "spawn: cannot allocate events");
        goto fail;
    }
    if (event_add(cmd->out_ev, NULL) != 0 || (cmd->in_ev && event_add(cmd->in_ev, NULL) != 0)) {
        ax_seterr(errbuf, errlen, AX_ERR_IO, "spawn: cannot register pipe events");
        goto fail;
    }
    if (spec->timeout_ms > 0) {
        struct timeval tv = AX_TV_MS(spec->timeout_ms);
        if (evtimer_add(cmd->timer, &tv) != 0) {
            ax_seterr(errbuf, errlen, AX_ERR_IO, "spawn: cannot arm the timeout");
            goto fail;
        }
    }
    if (reg_attach(cmd, errbuf, errlen) != AX_OK)
        goto fail;
    return cmd;
fail:
    cmd_free(cmd);
    return NULL;
}

/* ---- public API ----------------------------------------------------------- */

ax_cmd_t *ax_cmd_start(struct event_base *base, const ax_cmd_spec_t *spec,
                       ax_cmd_done_cb cb, void *arg, char *errbuf, size_t errlen) {
    int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    pid_t pid = 0;

    if (!base || !spec || !spec->argv || !spec->argv[0] || !cb ||
        (spec->stdin_len > 0 && !spec->stdin_data)) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "spawn: missing base, argv, callback or stdin data");
        return NULL;
    }
    ax_cmd_t *cmd = cmd_prepare(base, spec, cb, arg, in_pipe, out_pipe, errbuf, errlen);
    if (!cmd)
        goto fail;
    int err = spawn_setup(&fa, &attr, in_pipe[0], out_pipe[1], cmd->in_fd, cmd->out_fd);
    if (err != 0) {
        ax_seterr(errbuf, errlen, AX_ERR_IO, "spawn: posix_spawn setup: %s", strerror(err));
        goto fail;
    }
    cmd->start_ms = ax_mono_ms();
    if (spec->creds)
        err = spawn_as(&pid, spec->argv, spec->env ? spec->env : environ, spec->creds,
                       in_pipe[0], out_pipe[1]);
    else
        err = posix_spawnp(&pid, spec->argv[0], &fa, &attr, spec->argv,
                           spec->env ? spec->env : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close_fd(&in_pipe[0]);
    close_fd(&out_pipe[1]);

    if (err != 0) {
        /* Reported through the callback, from the loop: callers get one path
         * for "the command didn't run", and never a re-entrant callback. */
        struct timeval zero = {0, 0};

        cmd->res.spawn_errno = err;
        free_event(&cmd->in_ev);
        free_event(&cmd->out_ev);
        close_fd(&cmd->in_fd);
        close_fd(&cmd->out_fd);
        if (evtimer_add(cmd->timer, &zero) != 0) {
            ax_seterr(errbuf, errlen, AX_ERR_IO, "spawn: cannot schedule the callback");
            goto fail;
        }
        return cmd;
    }
    pthread_mutex_lock(&reg_lock); /* ax_cmd_kill_group reads it from other threads */
    cmd->pid = pid;
    pthread_mutex_unlock(&reg_lock);
    cmd->res.pid = pid;
    if (cmd->in_len == 0)
        close_fd(&cmd->in_fd);  /* immediate EOF on the child's stdin */
    return cmd;

fail:
    close_fd(&in_pipe[0]);
    close_fd(&in_pipe[1]);
    close_fd(&out_pipe[0]);
    close_fd(&out_pipe[1]);
    cmd_free(cmd);
    return NULL;
}

void ax_cmd_cancel(ax_cmd_t *cmd) {
    /* Nothing to do once it is terminating, gone, or never started; the
     * callback is on its way in each of those cases. */
    if (!cmd || cmd->in_callback || cmd->res.spawn_errno || cmd->reaped || cmd->term_sent)
        return;
    cmd_terminate(cmd);
}
