/*
 * flows.c — what the instances a batch ended advance, inside the batch's
 * transaction: a shard that ended for good may finish its parent; a
 * successful size probe splits its parent into shards; a flow stage's
 * instance advances its flow run. Parents finished here (by their last
 * shard, or by a probe of 0 shards) go into the results outbox too.
 */
#include <stdlib.h>

#include "ax/store_outbox.h"
#include "callback.h"

static int shards(callback_t *cb, const ax_outcome_finished_t *f, char *err, size_t errlen) {
    if (!f->nchildren)
        return 0;
    int64_t *parents = NULL;
    size_t nparents = 0;
    int rc = ax_store_outcome_shards_done(cb->svc.pg, f->children, f->nchildren, &parents,
                                          &nparents, err, errlen);
    /* parents finished by their last shard are published too */
    if (rc == 0 && nparents)
        rc = ax_store_outbox_add_finished(cb->svc.pg, parents, nparents, err, errlen);
    free(parents);
    return rc;
}

static int probes(callback_t *cb, char *err, size_t errlen) {
    probes_t *p = &cb->probes;
    if (!p->n)
        return 0;
    int rc = ax_store_outcome_probes_split(cb->svc.pg, p->v, p->n, err, errlen);
    if (rc < 0)
        return rc;
    /* a probe that found nothing (0 shards) finished its parent at once:
     * published like any other final outcome */
    int64_t *ids = malloc(p->n * sizeof *ids);
    if (!ids)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "size probes: out of memory");
    for (size_t i = 0; i < p->n; i++)
        ids[i] = p->v[i].instance_id;
    rc = ax_store_outbox_add_finished(cb->svc.pg, ids, p->n, err, errlen);
    free(ids);
    return rc;
}

int cb_advance(callback_t *cb, const ax_outcome_finished_t *f, char *err, size_t errlen) {
    int rc = shards(cb, f, err, errlen);
    if (rc == 0)
        rc = probes(cb, err, errlen);
    if (rc == 0 && f->nflows)
        rc = ax_store_outcome_flows_done(cb->svc.pg, f->flows, f->nflows, err, errlen);
    return rc;
}
