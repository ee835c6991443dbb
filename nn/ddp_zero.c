/* ZeRO-1's collectives (--zero 1; the layout is nn/shard.h's): during backward a
 * bucket's gradients reduce-scatter into the ranks' parts and its tail is all-reduced
 * (the same bytes as DDP's allreduce, half of them before the step); after the step
 * each part's parameters all-gather, and the next forward waits for a bucket only
 * when its first node that reads it runs, so the gathers overlap the forward. */
#include "nn/ddp_int.h"
#include "rt/log.h"

void nn_ddp_zero_launch(nn_ddp *d, nn_bucket *bk)
{
    float *g = d->m->grads + bk->off;
    size_t wq = (size_t)d->world * bk->q;
    if (!bk->q) {
        tp_iallreduce(d->comm, g, g, bk->count, RT_F32, TP_AVG, &bk->h);
        return;
    }
    /* In place: rank r's part is block r of the bucket. */
    d->s.zero_rs++;
    tp_ireduce_scatter(d->comm, g, g + (size_t)d->rank * bk->q, bk->q, RT_F32, TP_AVG, &bk->h);
    if ((bk->tail = bk->count > wq)) tp_iallreduce(d->comm, g + wq, g + wq, bk->count - wq, RT_F32, TP_AVG, &bk->h2);
}

int nn_ddp_zero_gather(nn_ddp *d, float *params)
{
    if (!d->zero) return 0;
    for (int i = d->nbuckets - 1; i >= 0; i--) { /* the first layers' bucket first */
        nn_bucket *bk = &d->b[i];
        if (!bk->q) continue;
        float *p = params + bk->off;
        /* An error is sticky in the comm (the handle complete): the wait reports it. */
        tp_iallgather(d->comm, p + (size_t)d->rank * bk->q, p, bk->q, RT_F32, &bk->hg);
        bk->ag = 1;
        d->s.zero_ag++;
    }
    return 0;
}

int nn_ddp_zero_wait(nn_ddp *d, int end_param)
{
    int rc = 0;
    for (int i = d->nbuckets - 1; d->zero && i >= 0; i--) {
        nn_bucket *bk = &d->b[i];
        if (!bk->ag || bk->first_param >= end_param) continue;
        bk->ag = 0;
        int r = tp_wait(d->comm, &bk->hg);
        if (r && !rc) rc = r;
    }
    return rc;
}

/* The forward's hook: the node about to run reads parameters below end_param. */
static void param_need(void *ctx, int end_param)
{
    nn_ddp *d = ctx;
    if (nn_ddp_zero_wait(d, end_param))
        rt_fatal("rank %d: --zero 1: gathering the parameters after the step failed: %s", d->rank, tp_errmsg(d->comm));
}

void nn_ddp_set_zero(nn_ddp *d, size_t blk)
{
    if (!d->comm) return;
    d->zero = 1;
    for (int i = 0; i < d->nbuckets; i++) d->b[i].q = nn_shard_q(d->b[i].count, d->world, blk);
    d->m->on_param_need = param_need;
    d->m->on_param_ctx = d;
}
