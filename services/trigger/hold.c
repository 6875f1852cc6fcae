/*
 * hold.c — instances the leader does not produce, and why (docs/EXECUTORS.md).
 *
 * The leader never produces to a topic that does not exist: such a produce
 * waits in librdkafka until the metadata gives up (30 s) and holds the
 * whole Kafka transaction — and the loop and lease — with it. So a thread
 * of its own (never the loop) lists the cluster's dispatch topics
 * (<prefix>dispatch…) every HOLD_REFRESH_MS on its own client handle, and
 * the dispatch path looks the target topic up in that list
 * (hold_topic_known) before producing.
 *
 * An instance that cannot be produced is *held*: it keeps its
 * dispatched_at (so the due scan does not take it again), and a row of
 * instance_hold (migration 013) records the reason, shown by `axctl
 * instance show` as held_reason. A hold naming a topic (its executor
 * group's lane topic is missing) is released by hold_tick once the topic
 * exists: the instance is made undispatched and the due scan produces it.
 * Holds without a topic (a reserved group name, a dispatch record over
 * message.max.bytes, a record the broker refused) stay until the instance
 * is cancelled. Each new hold reason raises the alert `held` once per
 * topic (or instance) until it is released.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/alert.h"
#include "ax/kafka.h"
#include "ax/log.h"
#include "ax/store_hold.h"
#include "trigger.h"

#define HOLD_REFRESH_MS 1000
/* hold keys remembered as alerted; beyond, the oldest is forgotten (a key
 * leaves when its hold ends: topic released, instance no longer held) */
#define HOLD_ALERTED_MAX 4096

struct holds {
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, started;
    rd_kafka_t *rk;
    char prefix[300]; /* <topic.prefix>dispatch */
    /* under mu: the dispatch topics that exist, sorted */
    char **names;
    size_t n;
    int loaded;
    unsigned failures;
    /* loop side: hold keys alerted and not released since */
    char **alerted; /* oldest first */
    size_t nalerted, capalerted;
    int64_t last_clean_ms;
};

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* One listing of the cluster's topics; 0, or -1 with err. */
static int list_topics(struct holds *h, char *err, size_t errlen) {
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e = rd_kafka_metadata(h->rk, 1, NULL, &md, 5000);
    if (e) {
        snprintf(err, errlen, "metadata: %s", rd_kafka_err2str(e));
        return -1;
    }
    size_t plen = strlen(h->prefix), n = 0;
    char **names = calloc((size_t)md->topic_cnt + 1, sizeof *names);
    for (int i = 0; names && i < md->topic_cnt; i++) {
        const char *tn = md->topics[i].topic;
        if (md->topics[i].err || strncmp(tn, h->prefix, plen) != 0 ||
            md->topics[i].partition_cnt <= 0)
            continue;
        if (!(names[n] = strdup(tn)))
            break;
        n++;
    }
    rd_kafka_metadata_destroy(md);
    if (!names) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    qsort(names, n, sizeof *names, cmp_name);
    pthread_mutex_lock(&h->mu);
    char **old = h->names;
    size_t oldn = h->n;
    h->names = names;
    h->n = n;
    h->loaded = 1;
    pthread_mutex_unlock(&h->mu);
    free_names(old, oldn);
    return 0;
}

static void *lister(void *arg) {
    struct holds *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        pthread_mutex_unlock(&h->mu);
        char err[256];
        int rc = list_topics(h, err, sizeof err);
        pthread_mutex_lock(&h->mu);
        if (rc < 0) {
            /* the last list stays in use */
            if (h->failures++ % 30 == 0)
                ax_warn("topic list: %s (the last list of dispatch topics stays in use)", err);
        } else {
            h->failures = 0;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + (int64_t)HOLD_REFRESH_MS % 1000 * 1000000;
        ts.tv_sec += HOLD_REFRESH_MS / 1000 + ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        if (!h->stop)
            pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int hold_start(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    struct holds *h = calloc(1, sizeof *h);
    if (!h)
        return -1;
    ax_conf_topic(&svc->conf, "dispatch", h->prefix, sizeof h->prefix);
    h->rk = ax_kafka_producer_new(&svc->conf, "ax-trigger-topics", err, sizeof err);
    if (!h->rk) {
        ax_error("topic list: %s", err);
        free(h);
        return -1;
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->thr, NULL, lister, h) != 0) {
        rd_kafka_destroy(h->rk);
        free(h);
        return -1;
    }
    h->started = 1;
    t->holds = h;
    return 0;
}

void hold_stop(trigger_t *t) {
    struct holds *h = t->holds;
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->started)
        pthread_join(h->thr, NULL);
    rd_kafka_destroy(h->rk);
    free_names(h->names, h->n);
    for (size_t i = 0; i < h->nalerted; i++)
        free(h->alerted[i]);
    free(h->alerted);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
    t->holds = NULL;
}

int hold_topic_known(trigger_t *t, const char *topic) {
    struct holds *h = t->holds;
    if (!h)
        return 1; /* no list (its handle could not be made): produce as before */
    pthread_mutex_lock(&h->mu);
    int rc = -1;
    if (h->loaded) {
        const char *key = topic;
        rc = bsearch(&key, h->names, h->n, sizeof *h->names, cmp_name) != NULL;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* The alert for a hold key, once until it is released. */
static void hold_alert(trigger_t *t, const char *key, const char *job, const char *text) {
    struct holds *h = t->holds;
    if (h) {
        for (size_t i = 0; i < h->nalerted; i++)
            if (strcmp(h->alerted[i], key) == 0)
                return;
        if (h->nalerted == HOLD_ALERTED_MAX) {
            free(h->alerted[0]);
            memmove(h->alerted, h->alerted + 1, --h->nalerted * sizeof *h->alerted);
        }
        if (h->nalerted == h->capalerted) {
            size_t cap = h->capalerted ? h->capalerted * 2 : 64;
            char **v = realloc(h->alerted, cap * sizeof *v);
            if (v) {
                h->alerted = v;
                h->capalerted = cap;
            }
        }
        char *k = h->nalerted < h->capalerted ? strdup(key) : NULL;
        if (k)
            h->alerted[h->nalerted++] = k;
    }
    alert_raise(t->svc.pg, "held", job, text);
}

static void hold_unalert(trigger_t *t, const char *key) {
    struct holds *h = t->holds;
    for (size_t i = 0; h && i < h->nalerted; i++)
        if (strcmp(h->alerted[i], key) == 0) {
            free(h->alerted[i]);
            memmove(h->alerted + i, h->alerted + i + 1, (--h->nalerted - i) * sizeof *h->alerted);
            return;
        }
}

void hold_add(hold_list_t *l, int64_t id, const char *job, const char *topic, int alert,
              const char *fmt, ...) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        hold_t *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return; /* not recorded: recovered as unconfirmed later */
        l->v = v;
        l->cap = cap;
    }
    hold_t *x = &l->v[l->n++];
    memset(x, 0, sizeof *x);
    x->id = id;
    x->alert = alert;
    snprintf(x->job, sizeof x->job, "%s", job ? job : "");
    snprintf(x->topic, sizeof x->topic, "%s", topic ? topic : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->reason, sizeof x->reason, fmt, ap);
    va_end(ap);
}

void hold_list_free(hold_list_t *l) {
    free(l->v);
    memset(l, 0, sizeof *l);
}

int hold_record(trigger_t *t, const int64_t *pending, size_t npending, const hold_list_t *l,
                char *err, size_t errlen) {
    ax_store_hold_t *v = calloc(l->n + 1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "recording holds: out of memory");
        return AX_ERR_NOMEM;
    }
    for (size_t i = 0; i < l->n; i++)
        v[i] = (ax_store_hold_t){l->v[i].id, l->v[i].topic, l->v[i].reason};
    int rc = ax_store_hold_record(t->svc.pg, pending, npending, v, l->n, t->svc.conf.topic_prefix,
                                  err, errlen);
    free(v);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < l->n; i++) {
        const hold_t *x = &l->v[i];
        char text[900], key[320];
        snprintf(text, sizeof text, "instance %lld held: %s", (long long)x->id, x->reason);
        if (!x->alert) {
            ax_info("%s", text);
            continue;
        }
        ax_warn("%s", text);
        if (x->topic[0])
            snprintf(key, sizeof key, "%s", x->topic);
        else
            snprintf(key, sizeof key, "instance:%lld", (long long)x->id);
        hold_alert(t, key, x->job[0] ? x->job : NULL, text);
    }
    return 0;
}

/* Held instances whose topic exists now go back to the due scan. */
static void release_topics(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    ax_store_strs_t held = {0}, released = {0};
    if (ax_store_hold_topics(svc->pg, svc->conf.topic_prefix, &held, err, sizeof err) < 0) {
        ax_warn("held instances: %s", err);
        return;
    }
    size_t nready = 0; /* the ready ones first */
    for (size_t i = 0; i < held.n; i++)
        if (hold_topic_known(t, held.v[i]) == 1) {
            hold_unalert(t, held.v[i]);
            char *x = held.v[nready];
            held.v[nready++] = held.v[i];
            held.v[i] = x;
        }
    if (nready && ax_store_hold_release(svc->pg, svc->conf.topic_prefix,
                                        (const char *const *)held.v, nready, &released, err,
                                        sizeof err) < 0) {
        ax_warn("releasing held instances: %s", err);
    } else if (released.n > 0) {
        ax_info("%zu held instance(s) released: topic %s exists now", released.n, released.v[0]);
        arm_scan(t, 0);
    }
    ax_store_strs_free(&released);
    ax_store_strs_free(&held);
}

/* Held instances whose topic exists now, and holds of instances that are no
 * longer SCHEDULED (cancelled, finished), go. */
void hold_tick(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    struct holds *h = t->holds;
    if (!h || svc->stopping || !lead_active(t))
        return;
    release_topics(t);
    int64_t now = ax_mono_ms();
    if (now - h->last_clean_ms < 10000)
        return;
    h->last_clean_ms = now;
    char err[512];
    int64_t *ids = NULL;
    size_t n = 0;
    if (ax_store_hold_clean(svc->pg, svc->conf.topic_prefix, &ids, &n, err, sizeof err) < 0) {
        ax_warn("held instances: %s", err);
        return;
    }
    /* their alert keys go: the list keeps only holds that last */
    for (size_t i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "instance:%lld", (long long)ids[i]);
        hold_unalert(t, key);
    }
    free(ids);
}
