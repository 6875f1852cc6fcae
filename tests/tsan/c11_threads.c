/*
 * c11_threads.c — preloaded (LD_PRELOAD) into the programs of a
 * ThreadSanitizer build (-DAX_TSAN=ON; tests/tsan/README.md).
 *
 * librdkafka uses C11 threads. glibc 2.36's thrd_create, mtx_* and cnd_*
 * call glibc's internal pthread functions, which TSan's interceptors never
 * see: a thread created by thrd_create has no TSan state and crashes in its
 * first malloc, and librdkafka's locking looks like none (every hand-off
 * through its queues a "race"). These definitions, found before libc's,
 * route each call through the public pthread function TSan intercepts.
 * glibc's own mtx_t and cnd_t hold a pthread_mutex_t and a pthread_cond_t,
 * and its once_flag a pthread_once_t (its implementation casts them the
 * same way).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

static int c11(int rc) {
    return rc == 0           ? thrd_success
           : rc == ETIMEDOUT ? thrd_timedout
           : rc == EBUSY     ? thrd_busy
           : rc == ENOMEM    ? thrd_nomem
                             : thrd_error;
}

struct tramp {
    thrd_start_t fn;
    void *arg;
};

static void *tramp_run(void *p) {
    struct tramp t = *(struct tramp *)p;
    free(p);
    return (void *)(intptr_t)t.fn(t.arg);
}

int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg) {
    struct tramp *t = malloc(sizeof *t);
    if (!t)
        return thrd_nomem;
    t->fn = fn;
    t->arg = arg;
    int rc = pthread_create((pthread_t *)thr, NULL, tramp_run, t);
    if (rc)
        free(t);
    return c11(rc);
}

int thrd_join(thrd_t t, int *res) {
    void *r = NULL;
    int rc = pthread_join((pthread_t)t, &r);
    if (rc == 0 && res)
        *res = (int)(intptr_t)r;
    return c11(rc);
}

int thrd_detach(thrd_t t) { return c11(pthread_detach((pthread_t)t)); }

/* Any type, as glibc's: recursive when mtx_recursive is set, else normal. */
int mtx_init(mtx_t *m, int type) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (type & mtx_recursive)
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init((pthread_mutex_t *)m, &a);
    pthread_mutexattr_destroy(&a);
    return c11(rc);
}

int mtx_lock(mtx_t *m) { return c11(pthread_mutex_lock((pthread_mutex_t *)m)); }
int mtx_trylock(mtx_t *m) { return c11(pthread_mutex_trylock((pthread_mutex_t *)m)); }
int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts) {
    return c11(pthread_mutex_timedlock((pthread_mutex_t *)m, ts));
}
int mtx_unlock(mtx_t *m) { return c11(pthread_mutex_unlock((pthread_mutex_t *)m)); }
void mtx_destroy(mtx_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }

int cnd_init(cnd_t *c) { return c11(pthread_cond_init((pthread_cond_t *)c, NULL)); }
int cnd_signal(cnd_t *c) { return c11(pthread_cond_signal((pthread_cond_t *)c)); }
int cnd_broadcast(cnd_t *c) { return c11(pthread_cond_broadcast((pthread_cond_t *)c)); }
int cnd_wait(cnd_t *c, mtx_t *m) {
    return c11(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts) {
    return c11(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}
void cnd_destroy(cnd_t *c) { pthread_cond_destroy((pthread_cond_t *)c); }

/* librdkafka's one-time initializations: TSan sees what the first caller
 * wrote as happening before every other caller's return. */
void call_once(once_flag *flag, void (*func)(void)) {
    pthread_once((pthread_once_t *)&flag->__data, func);
}
