/* ZeRO-1 (--zero 1) in the trainer: each rank keeps the optimizer state of its
 * segments only (its part of every bucket and the buckets' tails, nn/shard.h) and
 * updates those parameters; the gradients reduce-scatter during backward and the
 * parameters all-gather after the step (nn/ddp_zero.c). The gradient norm is summed in
 * blocks the same way with or without sharding. Checkpoints hold the whole state, so
 * a run resumes on another world size. */
#include "nn/train_zero.h"
#include "kernels/k.h"
#include "rt/log.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nn_zero_sharded(const nn_trainer *t) { return t->opt.nseg > 0; }

void nn_zero_plan(nn_trainer *t, rt_arena *a)
{
    t->nbk = nn_buckets(&t->g, t->o.bucket_mb, t->bk);
    t->blk = nn_shard_block(t->g.nparams);
    int on = t->o.zero && t->world > 1;
    int n = on ? nn_shard_segments(t->bk, t->nbk, t->rank, t->world, t->blk, t->zseg) : 0;
    nn_optim_shard(&t->opt, t->zseg, n);
    t->nnorm = nn_norm_nblocks(t->bk, t->nbk, t->blk);
    t->norm_part = on && t->opt.c.clip > 0 ? rt_arena_alloc(a, t->nnorm * sizeof(double), RT_MEM_OPTIM,
                                                            "gradient norm blocks (--zero 1)")
                                           : NULL;
}

/* The rank that sums norm block [lo, hi) of bucket b: its part's, or rank 0 in the tail. */
static int block_owner(const nn_trainer *t, const nn_bucket_span *b, size_t lo)
{
    size_t q = nn_shard_q(b->f.hi - b->f.lo, t->world, t->blk), off = lo - b->f.lo;
    return off < (size_t)t->world * q ? (int)(off / q) : 0;
}

double nn_trainer_grad_norm(nn_trainer *t)
{
    int sharded = nn_zero_sharded(t);
    double ss = 0;
    size_t k = 0;
    for (int i = 0; i < t->nbk; i++) {
        const nn_bucket_span *b = &t->bk[i];
        for (size_t lo = b->f.lo; lo < b->f.hi; lo += t->blk, k++) {
            size_t hi = lo + t->blk < b->f.hi ? lo + t->blk : b->f.hi;
            if (!sharded) ss += nn_grad_sumsq(&t->g, lo, hi);
            else t->norm_part[k] = block_owner(t, b, lo) == t->rank ? nn_grad_sumsq(&t->g, lo, hi) : 0.0;
        }
    }
    if (sharded) {
        /* One rank's block sums, zeros elsewhere: the sum is exact in any order. */
        if (nn_ddp_sum_f64(t->ddp, t->norm_part, (int)t->nnorm))
            rt_fatal("rank %d: --zero 1: summing the gradient norm failed: %s", t->rank, nn_ddp_errmsg(t->ddp));
        for (k = 0; k < t->nnorm; k++) ss += t->norm_part[k];
    }
    return sqrt(ss);
}

int nn_zero_first_nonfinite(nn_trainer *t)
{
    const nn_graph *g = &t->g;
    int bad = -1;
    for (int i = 0; i < t->opt.nseg && bad < 0; i++) {
        const nn_span *s = &t->zseg[i];
        long at = k_first_nonfinite(s->hi - s->lo, g->grads + s->lo);
        if (at < 0) continue;
        size_t f = s->lo + (size_t)at;
        for (int p = 0; p < g->np && bad < 0; p++)
            if (f >= g->p[p].offset && f < g->p[p].offset + g->p[p].numel) bad = p;
        if (bad < 0) bad = g->np; /* the padding between parameters */
    }
    /* The lowest bad parameter of any rank: every rank stops with the same line. */
    double v = bad >= 0 ? (double)bad : (double)INT_MAX;
    if (tp_allreduce(nn_ddp_comm(t->ddp), &v, &v, 1, RT_F64, TP_MIN))
        rt_fatal("rank %d: --zero 1: checking the gradients failed: %s", t->rank, nn_ddp_errmsg(t->ddp));
    return v < INT_MAX ? (int)v : -1;
}

void nn_zero_params_ready(nn_trainer *t)
{
    if (nn_zero_sharded(t) && nn_ddp_zero_wait(t->ddp, INT_MAX))
        rt_fatal("rank %d: --zero 1: gathering the parameters after the step failed: %s", t->rank,
                 nn_ddp_errmsg(t->ddp));
}

void nn_zero_gather_params(nn_trainer *t)
{
    if (nn_zero_sharded(t) && nn_ddp_zero_gather(t->ddp, t->g.params))
        rt_fatal("rank %d: --zero 1: gathering the parameters failed: %s", t->rank, nn_ddp_errmsg(t->ddp));
}

/* Between this rank's segments (state back to back) and a whole array of nparams. */
static void seg_copy(const nn_trainer *t, float *full, float *state, int to_full)
{
    size_t at = 0;
    for (int i = 0; i < t->opt.nseg; i++) {
        size_t n = t->zseg[i].hi - t->zseg[i].lo;
        if (to_full) memcpy(full + t->zseg[i].lo, state + at, n * sizeof(float));
        else memmove(state + at, full + t->zseg[i].lo, n * sizeof(float)); /* may be in place */
        at += n;
    }
}

/* The whole optimizer state in fp32 (full[], malloc'd) for a checkpoint, where it is
 * not the optimizer's own arrays: sharded (the tails every rank holds, the parts
 * gather: every rank takes part) or 8-bit (decoded). Checkpoints are rare (between
 * epochs, or every --save-every steps); malloc is fine here. */
void nn_zero_full_state(nn_trainer *t, float **full)
{
    int k = nn_optim_slots(&t->opt), sharded = nn_zero_sharded(t);
    tp_comm *c = sharded ? nn_ddp_comm(t->ddp) : NULL;
    for (int i = 0; i < k; i++) {
        float *mine = malloc(nn_optim_nstate(&t->opt) * sizeof(float));
        full[i] = sharded ? calloc(t->g.nparams, sizeof(float)) : mine;
        if (!mine || !full[i]) rt_fatal("rank %d: out of memory gathering the optimizer state", t->rank);
        nn_optim_get_state(&t->opt, &t->g, i, mine);
        if (!sharded) continue;
        seg_copy(t, full[i], mine, 1);
        free(mine);
        for (int b = 0; b < t->nbk; b++) {
            size_t lo = t->bk[b].f.lo, q = nn_shard_q(t->bk[b].f.hi - lo, t->world, t->blk);
            if (q && tp_allgather(c, full[i] + lo + (size_t)t->rank * q, full[i] + lo, q, RT_F32))
                rt_fatal("rank %d: --zero 1: gathering the optimizer state failed: %s", t->rank, tp_errmsg(c));
        }
    }
}

/* The file holds the whole state in fp32 (written on any world size, sharded or not,
 * 8-bit or not): read it, keep this rank's segments, in the optimizer's format. */
int nn_zero_load(nn_trainer *t, const char *path, nn_ckpt_state *st, char *err, size_t errlen)
{
    float *full[2] = {NULL, NULL};
    for (int i = 0; i < st->nblocks && i < 2; i++)
        if (!(st->blocks[i] = full[i] = malloc(t->g.nparams * sizeof(float)))) {
            snprintf(err, errlen, "out of memory reading the optimizer state of %s", path);
            free(full[0]);
            return -1;
        }
    int rc = nn_ckpt_load(path, &t->g, st, err, errlen);
    for (int i = 0; i < 2; i++) {
        if (full[i] && !rc) {
            if (nn_zero_sharded(t)) seg_copy(t, full[i], full[i], 0); /* the segments, back to back: in place, ascending */
            nn_optim_set_state(&t->opt, &t->g, i, full[i]);
        }
        free(full[i]);
    }
    return rc;
}
