/* --invariant in nn_ddp: the gradients of a rank's m virtual shards folded over the
 * tree's lower levels (nn_fold), the rank's value reduced over the upper levels by
 * tp_itree_allreduce, the sum divided by K (true division: the same bits whatever W;
 * in the collective, by the rank that finished an element, when it carries fp32).
 *
 * The last local shard's buckets still go out from the backward hook: the hook folds
 * the bucket's slice (the earlier shards are in the fold already) and launches the
 * tree op on it, so communication overlaps the last backward as in plain DDP. Under
 * --grad-compress the shards' gradients are rounded to 16 bits first and folded in
 * 16 bits (tp_reduce rounds after every pairwise step, as the collective does), so the
 * compressed values go through the same tree. A world of one folds without a comm. */
#include "nn/ddp_int.h"
#include "transport/tp_reduce.h"
#include "ports/posix/port.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Row-sparse gradients (embedding tables): their rows are folded only where a shard
 * touched them (nn_fold_rows), the op marking the rows (nn_param.rows_nz). Textcnn's
 * table is 2.6M floats, of which a micro-batch of 16 x 64 tokens touches <= 1024 x 128. */
static int fold_rows(nn_ddp *d)
{
    nn_graph *m = d->m;
    int ns = 0;
    for (int p = 0; p < m->np; p++) ns += m->p[p].sparse_rows && m->p[p].ndim == 2;
    if (!ns || !d->fold.nlev) return 0;
    if (!(d->fold.sp = calloc((size_t)ns, sizeof *d->fold.sp))) return -1;
    for (int p = 0; p < m->np; p++) {
        nn_param *q = &m->p[p];
        if (!q->sparse_rows || q->ndim != 2) continue;
        nn_fold_rows *s = &d->fold.sp[d->fold.nsp++];
        *s = (nn_fold_rows){.off = q->offset, .rows = (size_t)q->shape[0], .len = (size_t)q->shape[1]};
        if (!(q->rows_nz = calloc(s->rows, 1))) return -1;
        s->nz = q->rows_nz;
        for (int l = 0; l < d->fold.nlev; l++)
            if (!(s->acc_nz[l] = calloc(s->rows, 1))) return -1;
    }
    return 0;
}

int nn_ddp_set_tree(nn_ddp *d, const nn_vtree *t, int nlocal, int max_sums, char *err, size_t errlen)
{
    size_t n = d->m->nparams ? d->m->nparams : 1, es = rt_dtype_size(d->wire);
    d->tree = 1, d->K = t->K, d->shard = 0;
    d->max_sums = max_sums > 0 ? max_sums : 1;
    d->fold = (nn_fold){.nlev = nlocal, .dt = d->wire, .n = d->m->nparams};
    d->sums = (nn_fold){.nlev = nlocal, .dt = RT_F64, .n = (size_t)d->max_sums};
    memcpy(d->fold.radix, t->radix, sizeof *t->radix * (size_t)nlocal);
    memcpy(d->sums.radix, t->radix, sizeof *t->radix * (size_t)nlocal);
    /* start-up, once: one accumulator per local level */
    for (int l = 0; l < nlocal; l++)
        if (!(d->fold.acc[l] = port_alloc_large(n * es)) || !(d->sums.acc[l] = calloc((size_t)d->max_sums, sizeof(double)))) {
            snprintf(err, errlen, "rank %d: out of memory for the --invariant accumulators (%d x %zu bytes)", d->rank,
                     nlocal, n * es);
            return -1;
        }
    if (fold_rows(d)) {
        snprintf(err, errlen, "rank %d: out of memory for the --invariant row marks", d->rank);
        return -1;
    }
    if (d->wire != RT_F32 && !d->half && !(d->half = calloc(n, sizeof *d->half))) {
        snprintf(err, errlen, "rank %d: out of memory for the --grad-compress buffer", d->rank);
        return -1;
    }
    free(d->cref); /* DDPRT_COMPRESS_CHECK compares with a plain average: not this mode's */
    d->cref = NULL;
    if (d->comm && tp_set_tree(d->comm, t->radix + nlocal, t->nlev - nlocal)) {
        snprintf(err, errlen, "--invariant %s: the transport refused the tree over %d ranks", t->spec, d->world);
        return -1;
    }
    return 0;
}

void nn_ddp_tree_free(nn_ddp *d)
{
    for (int l = 0; l < d->fold.nlev; l++) free(d->fold.acc[l]), free(d->sums.acc[l]);
    /* the graph may be gone by now (the trainer frees it first): its rows_nz are freed
     * through the fold's copies of the pointers */
    for (int k = 0; k < d->fold.nsp; k++) {
        for (int l = 0; l < d->fold.nlev; l++) free(d->fold.sp[k].acc_nz[l]);
        free((void *)d->fold.sp[k].nz);
    }
    free(d->fold.sp);
    d->fold.sp = NULL, d->fold.nsp = 0;
    d->fold.nlev = d->sums.nlev = 0;
    if (!d->comm) free(d->half); /* else tp_mem_alloc's, freed with the comm's */
    if (!d->comm) d->half = NULL;
}

void nn_ddp_begin_shard(nn_ddp *d, int i) { d->shard = i; }

/* The fold's operand for the whole vector or a slice: the gradients, or their 16-bit
 * rounding in d->half (which then also takes the rank's value). */
static void *operand(nn_ddp *d, size_t off, size_t cnt)
{
    if (d->wire == RT_F32) return d->m->grads;
    tp_f32_to_half(d->half + off, d->m->grads + off, cnt, d->wire);
    return d->half;
}

void nn_ddp_end_shard(nn_ddp *d)
{
    if (!d->tree || d->shard == nn_fold_shards(&d->fold) - 1) return;
    size_t n = d->m->nparams;
    void *v = operand(d, 0, n);
    nn_fold_push(&d->fold, d->shard, v, 0, n, v);
}

/* The rank's value (then the sum) lands in the gradients of [off, off + cnt): the row
 * marks no longer cover the tables there. */
static void rows_unknown(nn_ddp *d, size_t off, size_t cnt)
{
    for (int p = 0; d->fold.nsp && p < d->m->np; p++) {
        nn_param *q = &d->m->p[p];
        if (q->rows_nz && q->offset < off + cnt && off < q->offset + q->numel) q->rows_known = 0;
    }
}

void nn_ddp_tree_launch(nn_ddp *d, nn_bucket *bk)
{
    size_t es = rt_dtype_size(d->wire);
    rows_unknown(d, bk->off, bk->count);
    unsigned char *v = operand(d, bk->off, bk->count);
    nn_fold_push(&d->fold, nn_fold_shards(&d->fold) - 1, v, bk->off, bk->count, v);
    /* fp32: the / K inside the collective, each rank on its part of the sum (a 16-bit
     * sum is divided after its widening, in nn_ddp_tree_finish) */
    if (d->wire == RT_F32) tp_itree_allreduce_div(d->comm, v + bk->off * es, bk->count, d->wire, d->K, &bk->h);
    else tp_itree_allreduce(d->comm, v + bk->off * es, bk->count, d->wire, TP_SUM, &bk->h);
}

int nn_ddp_tree_finish(nn_ddp *d)
{
    size_t n = d->m->nparams;
    float *g = d->m->grads;
    rows_unknown(d, 0, n);
    if (!d->comm) { /* no buckets: the last shard folds here */
        void *v = operand(d, 0, n);
        nn_fold_push(&d->fold, nn_fold_shards(&d->fold) - 1, v, 0, n, v);
    }
    if (d->wire != RT_F32) tp_half_to_f32(g, d->half, n, d->wire);
    /* / K: the vectorised true division of the collectives' AVG (same bits as the scalar
     * loop, which took 13 % of a textcnn step at --invariant 2); done by the collective
     * when it carried fp32. */
    if (d->K > 1 && (!d->comm || d->wire != RT_F32)) tp_avg_finish(g, n, RT_F32, d->K);
    d->shard = 0;
    return 0;
}

int nn_ddp_tree_sum_f64(nn_ddp *d, const double *vals, int stride, int n, double *out)
{
    if (n > d->max_sums) return TP_EINVAL;
    int m = nn_fold_shards(&d->sums);
    for (int i = 0; i < m; i++) nn_fold_push(&d->sums, i, vals + (size_t)i * (size_t)stride, 0, (size_t)n, out);
    return d->comm ? tp_tree_allreduce(d->comm, out, (size_t)n, RT_F64, TP_SUM) : 0;
}
