/*
 * ax/store_hold.h — the store's hold family (instance_hold, migration
 * 013): instances the trigger's leader did not produce, with the reason;
 * released once their topic exists, cleaned once they are no longer
 * SCHEDULED. Errors as in ax/store.h. Nothing here logs.
 */
#ifndef AX_STORE_HOLD_H
#define AX_STORE_HOLD_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

typedef struct ax_store_hold {
    int64_t instance_id;
    const char *topic;  /* NULL or "": not released by a topic appearing */
    const char *reason;
} ax_store_hold_t;

/* Settle a dispatch batch with holds, in one statement: the
 * npending instances leave their pending batches, the n holds are
 * recorded (a hold already there gets the new topic and reason). */
int ax_store_hold_record(ax_pg_t *pg, const int64_t *pending, size_t npending,
                         const ax_store_hold_t *holds, size_t n, const char *deployment,
                         char *errbuf, size_t errlen);

/* A list of strings (free with ax_store_strs_free). */
typedef struct ax_store_strs {
    char **v;
    size_t n;
} ax_store_strs_t;
void ax_store_strs_free(ax_store_strs_t *s);

/* The topics held instances of deployment wait for. */
int ax_store_hold_topics(ax_pg_t *pg, const char *deployment, ax_store_strs_t *ret,
                         char *errbuf, size_t errlen);

/* Release the holds on the n topics: their instances that are still
 * SCHEDULED become undispatched (the due scan produces them). *ret gets
 * the topic of each instance released. */
int ax_store_hold_release(ax_pg_t *pg, const char *deployment, const char *const *topics,
                          size_t n, ax_store_strs_t *ret, char *errbuf, size_t errlen);

/* Drop the holds of instances no longer SCHEDULED; *ret_ids (malloc'd,
 * free()) gets their *ret_n instance ids. */
int ax_store_hold_clean(ax_pg_t *pg, const char *deployment, int64_t **ret_ids, size_t *ret_n,
                        char *errbuf, size_t errlen);

#endif
