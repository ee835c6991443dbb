/* ZeRO-1 (--zero 1): each rank keeps the optimizer state of its shard of the
 * parameters only (nn_optim_shard), updates that shard, and the shards are sent back
 * to every rank after the step. Checkpoints hold the whole state, so a run resumes on
 * another world size. */
#include "nn/train.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nn_zero_sharded(const nn_trainer *t) { return t->opt.hi - t->opt.lo != t->g.nparams; }

/* Every rank broadcasts its shard of n floats at base; the others receive it in place. */
void nn_zero_gather(nn_trainer *t, float *base, size_t n, const char *what)
{
    tp_comm *c = t->ddp ? nn_ddp_comm(t->ddp) : NULL;
    for (int r = 0; c && r < t->world; r++) {
        size_t lo, hi;
        nn_optim_shard_range(n, r, t->world, &lo, &hi);
        if (hi > lo && tp_broadcast(c, base + lo, hi - lo, RT_F32, r))
            rt_fatal("rank %d: --zero 1: gathering the %s from rank %d failed: %s", t->rank, what, r, tp_errmsg(c));
    }
}

/* Checkpoints are rare (between epochs, or every --save-every steps) and every rank
 * takes part; malloc is fine here. */
void nn_zero_full_state(nn_trainer *t, float **full)
{
    int k = nn_optim_slots(&t->opt);
    float *src[2] = {t->opt.m, t->opt.v};
    for (int i = 0; i < k; i++) {
        full[i] = calloc(t->g.nparams, sizeof(float));
        if (!full[i]) rt_fatal("rank %d: out of memory gathering the optimizer state", t->rank);
        memcpy(full[i] + t->opt.lo, src[i], (t->opt.hi - t->opt.lo) * sizeof(float));
        nn_zero_gather(t, full[i], t->g.nparams, "optimizer state");
    }
}

/* The file holds the whole state (written on any world size): read it, keep the shard. */
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
    float *mine[2] = {t->opt.m, t->opt.v};
    for (int i = 0; i < 2; i++) {
        if (full[i] && !rc) memcpy(mine[i], full[i] + t->opt.lo, (t->opt.hi - t->opt.lo) * sizeof(float));
        free(full[i]);
    }
    return rc;
}
