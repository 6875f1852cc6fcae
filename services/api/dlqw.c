/*
 * dlqw.c — the DLQ reader off the loop. Reading the dead-letter topic
 * (metadata, watermarks, polls of several seconds) would hold up every
 * other request if it ran on the loop, so one worker thread owns the one
 * long-lived reader (ax_dlq_t, a consumer made once at start; each request
 * assigns, reads and unassigns it) and serves a bounded queue of jobs.
 * Finished jobs go back through a pipe the loop watches; the loop replies
 * (evhttp replies only from the loop). A replay's produce and store look-up
 * then run on the loop, through the service's producer and connection,
 * without waiting: the delivery report (served by the loop's producer
 * watch) sends the reply.
 *
 * Bounds: at most API_DLQ_QUEUE jobs wait (else 503 + Retry-After); a job
 * that waited over API_DLQ_WAIT_MS before the worker took it is answered
 * 503 + Retry-After without touching Kafka; Kafka away is 503 + Retry-After.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "api.h"
#include "ax/common.h"
#include "ax/log.h"

#define API_DLQ_QUEUE 16
#define API_DLQ_WAIT_MS 20000

struct api_dlqw {
    api_t *api;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    api_dlq_job_t *todo, **todo_tail;
    api_dlq_job_t *done, **done_tail;
    api_dlq_job_t *flying;   /* the loop's only: replays awaiting delivery */
    int ntodo, stop;
    int fds[2];
    struct event *ev;
    ax_dlq_t *dlq;   /* the worker's; only its topic names are read by the loop */
    char open_err[512];
    int open_rc;
};

static void push(api_dlq_job_t **head, api_dlq_job_t ***tail, api_dlq_job_t *j) {
    j->next = NULL;
    **tail = j;
    *tail = &j->next;
}

static api_dlq_job_t *pop(api_dlq_job_t **head, api_dlq_job_t ***tail) {
    api_dlq_job_t *j = *head;
    if (j && !(*head = j->next))
        *tail = head;
    return j;
}

/* The worker's part of one job: the Kafka reads. */
static void run_job(api_dlqw_t *w, api_dlq_job_t *j) {
    if (ax_mono_ms() - j->queued_ms > API_DLQ_WAIT_MS) {
        j->rc = ax_seterr(j->err, sizeof j->err, AX_ERR_IO,
                          "the dead-letter reader is busy; try again");
        return;
    }
    if (!w->dlq && !(w->dlq = ax_dlq_open(&w->api->svc.conf, &w->open_rc, w->open_err,
                                          sizeof w->open_err))) {
        j->rc = ax_seterr(j->err, sizeof j->err, AX_ERR_IO, "%s", w->open_err);
        return;
    }
    j->dlq = w->dlq;
    if (j->op == API_DLQ_LIST)
        j->rc = ax_dlq_list(w->dlq, j->limit, j->since, j->reason[0] ? j->reason : NULL,
                            &j->recs, &j->nrecs, j->err, sizeof j->err);
    else
        j->rc = ax_dlq_fetch(w->dlq, j->part, j->off, &j->msg, j->err, sizeof j->err);
}

static void *worker(void *arg) {
    api_dlqw_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->todo && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop)
            break;
        api_dlq_job_t *j = pop(&w->todo, &w->todo_tail);
        w->ntodo--;
        pthread_mutex_unlock(&w->mu);
        run_job(w, j);
        pthread_mutex_lock(&w->mu);
        push(&w->done, &w->done_tail, j);
        ssize_t n = write(w->fds[1], "x", 1); /* full: a wake-up is pending anyway */
        (void)n;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* On the loop: the finished jobs, each to its handler's continuation. */
static void on_done(evutil_socket_t fd, short what, void *arg) {
    api_dlqw_t *w = arg;
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        api_dlq_job_t *j = pop(&w->done, &w->done_tail);
        pthread_mutex_unlock(&w->mu);
        if (!j)
            break;
        j->finish(j);
    }
}

api_dlqw_t *api_dlqw_start(api_t *a, char *err, size_t len) {
    api_dlqw_t *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    w->api = a;
    w->todo_tail = &w->todo;
    w->done_tail = &w->done;
    w->fds[0] = w->fds[1] = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* the reader is made now, once (a bad kafka.* key was refused earlier,
     * by the service's own producer); Kafka away only fails its reads */
    w->dlq = ax_dlq_open(&a->svc.conf, &w->open_rc, w->open_err, sizeof w->open_err);
    if (pipe2(w->fds, O_NONBLOCK | O_CLOEXEC) < 0 ||
        !(w->ev = event_new(a->svc.base, w->fds[0], EV_READ | EV_PERSIST, on_done, w)) ||
        event_add(w->ev, NULL) < 0 || pthread_create(&w->th, NULL, worker, w) != 0) {
        snprintf(err, len, "cannot start the DLQ reader: %s", strerror(errno));
        api_dlqw_stop(w);
        return NULL;
    }
    w->started = 1;
    return w;
}

void api_dlqw_stop(api_dlqw_t *w) {
    if (!w)
        return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
    }
    /* jobs never answered: their requests go with the server */
    api_dlq_job_t *j;
    while ((j = pop(&w->todo, &w->todo_tail)) || (j = pop(&w->done, &w->done_tail)))
        api_dlq_job_free(j);
    for (j = w->flying; j; j = j->fly_next) {
        j->orphan = 1;
        api_req_free(j->rq);
        j->rq = NULL;
    }
    if (w->ev)
        event_free(w->ev);
    for (int i = 0; i < 2; i++)
        if (w->fds[i] >= 0)
            close(w->fds[i]);
    ax_dlq_close(w->dlq);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

int api_dlqw_submit(api_dlqw_t *w, api_dlq_job_t *j) {
    j->queued_ms = ax_mono_ms();
    pthread_mutex_lock(&w->mu);
    int full = w->ntodo >= API_DLQ_QUEUE;
    if (!full) {
        push(&w->todo, &w->todo_tail, j);
        w->ntodo++;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return full ? -1 : 0;
}

void api_dlq_job_free(api_dlq_job_t *j) {
    if (!j)
        return;
    free(j->recs);
    if (j->msg)
        rd_kafka_message_destroy(j->msg);
    if (j->rq)
        api_req_free(j->rq);
    free(j);
}

void api_dlqw_flying(api_dlqw_t *w, api_dlq_job_t *j) {
    j->fly_next = w->flying;
    w->flying = j;
}

void api_dlqw_landed(api_dlqw_t *w, api_dlq_job_t *j) {
    api_dlq_job_t **p = &w->flying;
    while (*p && *p != j)
        p = &(*p)->fly_next;
    if (*p)
        *p = j->fly_next;
}
