/*
 * pool.c — the handler threads (api.threads). The loop accepts, parses,
 * routes, authorizes (tokens, scopes, rate limits) and reads bodies; a
 * route that only reads or writes the store is then handed to a thread of
 * the pool, which runs its handler on the thread's own PostgreSQL
 * connection and leaves the reply in the request (api_reply builds the
 * JSON text there); the loop sends it. So requests wait for PostgreSQL
 * concurrently, one per thread, while the loop keeps serving.
 *
 * What a thread may touch: its request (query, body, path: the loop's
 * copies, never the evhttp request), its connection, the configuration's
 * keys that SIGHUP never changes, and the metrics' atomics. Routes that
 * use the producer, the DLQ reader or the token table run on the loop as
 * before (route_t.on_loop). Finished requests come back through a pipe the
 * loop watches (as dlqw.c's jobs do).
 *
 * The threads' sessions never start parallel workers
 * (max_parallel_workers_per_gather=0): a page of 50 is an OLTP read, and a
 * Gather's worker start (27-43 ms under load, BENCHMARKS.md) cost more than
 * the page.
 *
 * Bounds: at most API_POOL_QUEUE requests wait for a thread, else 503 +
 * Retry-After on the loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "api.h"
#include "ax/common.h"
#include "ax/log.h"

#define API_POOL_QUEUE 4096

typedef struct api_thread {
    struct api_pool *pool;
    pthread_t th;
    int started;
    ax_pg_t *pg;
} api_thread_t;

struct api_pool {
    api_t *api;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req_t *todo, **todo_tail;
    req_t *done, **done_tail;
    int ntodo, stop;
    int fds[2];
    struct event *ev;
    ax_conf_t pgconf;    /* the service's, with pg.options for the threads' sessions */
    ax_kv_t *pgkv;
    char *pgopts;
    size_t n;
    api_thread_t *t;
};

static void push(req_t **head, req_t ***tail, req_t *rq) {
    rq->qnext = NULL;
    **tail = rq;
    *tail = &rq->qnext;
}

static req_t *pop(req_t **head, req_t ***tail) {
    req_t *rq = *head;
    if (rq && !(*head = rq->qnext))
        *tail = head;
    return rq;
}

static void *thread_main(void *arg) {
    api_thread_t *t = arg;
    api_pool_t *p = t->pool;
    char err[512];
    if (ax_pg_ensure(t->pg, err, sizeof err) < 0) /* else at its first request */
        ax_warn("api.threads: PostgreSQL not reachable yet: %s", err);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->todo && !p->stop)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        req_t *rq = pop(&p->todo, &p->todo_tail);
        p->ntodo--;
        pthread_mutex_unlock(&p->mu);
        rq->pg = t->pg;
        rq->fn(rq);
        if (!rq->replied)
            api_error(rq, 500, "internal", NULL, "no reply");
        pthread_mutex_lock(&p->mu);
        push(&p->done, &p->done_tail, rq);
        ssize_t n = write(p->fds[1], "x", 1); /* full: a wake-up is pending anyway */
        (void)n;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* On the loop: the finished requests' replies. */
static void on_done(evutil_socket_t fd, short what, void *arg) {
    api_pool_t *p = arg;
    char buf[256];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        req_t *rq = pop(&p->done, &p->done_tail);
        pthread_mutex_unlock(&p->mu);
        if (!rq)
            break;
        api_send(rq);
        api_req_free(rq);
    }
}

/* The threads' connection settings: pg.options + no parallel workers. */
static int pg_conf(api_pool_t *p, const ax_conf_t *c) {
    const char *user = NULL;
    p->pgconf = *c;
    p->pgkv = calloc(c->n_pg + 1, sizeof *p->pgkv);
    if (!p->pgkv)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < c->n_pg; i++) {
        if (strcmp(c->pg[i].key, "options") == 0)
            user = c->pg[i].value;
        else
            p->pgkv[k++] = c->pg[i];
    }
    if (asprintf(&p->pgopts, "-c max_parallel_workers_per_gather=0%s%s", user ? " " : "",
                 user ? user : "") < 0) {
        p->pgopts = NULL;
        return -1;
    }
    p->pgkv[k++] = (ax_kv_t){.key = "options", .value = p->pgopts};
    p->pgconf.pg = p->pgkv;
    p->pgconf.n_pg = k;
    return 0;
}

static int threads_start(api_pool_t *p, char *err, size_t len) {
    for (size_t i = 0; i < p->n; i++) {
        api_thread_t *t = &p->t[i];
        t->pool = p;
        if (!(t->pg = ax_pg_new(&p->pgconf, "ax-api", err, len)))
            return -1;
        if (pthread_create(&t->th, NULL, thread_main, t) != 0) {
            snprintf(err, len, "api.threads: cannot start a thread: %s", strerror(errno));
            return -1;
        }
        t->started = 1;
    }
    return 0;
}

api_pool_t *api_pool_start(api_t *a, char *err, size_t len) {
    api_pool_t *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    p->api = a;
    p->todo_tail = &p->todo;
    p->done_tail = &p->done;
    p->fds[0] = p->fds[1] = -1;
    p->n = (size_t)a->svc.conf.api_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (!(p->t = calloc(p->n, sizeof *p->t)) || pg_conf(p, &a->svc.conf) < 0) {
        snprintf(err, len, "out of memory");
        api_pool_stop(p);
        return NULL;
    }
    if (pipe2(p->fds, O_NONBLOCK | O_CLOEXEC) < 0 ||
        !(p->ev = event_new(a->svc.base, p->fds[0], EV_READ | EV_PERSIST, on_done, p)) ||
        event_add(p->ev, NULL) < 0) {
        snprintf(err, len, "api.threads: %s", strerror(errno));
        api_pool_stop(p);
        return NULL;
    }
    if (threads_start(p, err, len) < 0) {
        api_pool_stop(p);
        return NULL;
    }
    return p;
}

void api_pool_stop(api_pool_t *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; p->t && i < p->n; i++) {
        if (p->t[i].started)
            pthread_join(p->t[i].th, NULL);
        ax_pg_destroy(p->t[i].pg);
    }
    /* requests never answered go with the server (evhttp_free) */
    req_t *rq;
    while ((rq = pop(&p->todo, &p->todo_tail)) || (rq = pop(&p->done, &p->done_tail)))
        api_req_free(rq);
    if (p->ev)
        event_free(p->ev);
    for (int i = 0; i < 2; i++)
        if (p->fds[i] >= 0)
            close(p->fds[i]);
    free(p->t);
    free(p->pgkv);
    free(p->pgopts);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int api_pool_submit(api_pool_t *p, req_t *rq) {
    pthread_mutex_lock(&p->mu);
    int full = p->ntodo >= API_POOL_QUEUE;
    if (!full) {
        rq->pooled = 1;
        push(&p->todo, &p->todo_tail, rq);
        p->ntodo++;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return full ? -1 : 0;
}
