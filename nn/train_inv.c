/* --invariant K: training whose bits do not depend on the world size.
 *
 * Data: the sampler runs with world K (PyTorch's DistributedSampler for K ranks), so
 * shard v's samples are positions v, v + K, ... of the epoch's padded permutation; its
 * micro-batch j is its samples [j b, (j + 1) b) (b = --batch-size), the same on every
 * W. One optimizer step takes micro-batches s N .. s N + N - 1 (N = --accum-steps) of
 * every shard; this rank runs its shards first .. first + m - 1 in order, each shard's
 * N micro-batches together (the loader is handed that order), so a shard's gradient is
 * its own --accum-steps sum before the next shard starts.
 *
 * Randomness: dropout is seeded by the shard (seed * 1000003 + v, PyTorch's per-rank
 * seed of a K-rank job) and the step, augmentation by the sample and the epoch:
 * nothing depends on which rank runs a shard, and there is no RNG state to reshard.
 *
 * Reductions, all over the shards' tree (nn/vshard.h): the gradients in nn_ddp (fold,
 * tree collective, / K); per step, one row per shard of f64 values: the shard's loss
 * and, per micro-batch, every BatchNorm's batch mean and unbiased variance; per
 * evaluation, the shard's loss sum, correct and top-k counts.
 *
 * BatchNorm: ghost batch norm, i.e. each shard's micro-batch is normalised with its
 * own statistics (what each rank of a K-rank job does without --sync-bn). SyncBN would
 * need every shard's activations at once, which a rank holding K / W shards as
 * micro-batches does not have; and a shard's statistics must not depend on which
 * shards share its rank. The running statistics are updated once per micro-batch
 * index with the tree's average of the shards' batch statistics (nn_bn_update), the
 * same momentum step a forward takes; every rank then holds the same buffers, so no
 * broadcast_buffers is needed.
 *
 * The --invariant mode (nn/train_mode.h): it calls down into the step machinery
 * (nn/train_step.c) and the classifier's report (nn/train_epoch.c). */
#include "nn/train_epoch.h"
#include "nn/train_inv.h"
#include "nn/train_step.h"
#include "nn/train_zero.h"
#include "nn/metrics.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <stdio.h>
#include <string.h>

int nn_inv_setup(nn_trainer *t, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    nn_inv *v = &t->inv;
    memset(v, 0, sizeof *v);
    if (!o->invariant || !*o->invariant || !strcmp(o->invariant, "0")) return 0;
    if (nn_vtree_parse(o->invariant, &v->t, err, errlen)) return -1;
    int cuda = o->device && !strcmp(o->device, "cuda") && !o->no_cuda;
    const char *why = cuda                     ? "--device cuda (the CPU kernels are the ones checked for it)"
                      : t->opt.c.sync_bn       ? "--sync-bn (a shard's BatchNorm is ghost BN over its own "
                                                 "micro-batch: the shards of one rank never exist at once)"
                                               : NULL;
    if (why) {
        snprintf(err, errlen, "--invariant cannot honour %s", why);
        return -1;
    }
    if ((v->nlocal = nn_vtree_split(&v->t, t->world, err, errlen)) < 0) return -1;
    v->on = 1;
    v->m = v->t.K / t->world;
    v->first = t->rank * v->m;
    return 0;
}

/* Evaluation chunks: each local shard's test range [n v / K, n (v + 1) / K) cut into
 * chunks of eval_chunk, positions relative to the rank's first test sample. */
static int eval_plan(nn_trainer *t, int32_t *b, int32_t *who)
{
    nn_inv *v = &t->inv;
    int nb = 0, K = v->t.K;
    long n = t->test.n;
    if (b) b[0] = 0;
    for (int i = 0; i < v->m; i++) {
        long lo = n * (v->first + i) / K, hi = n * (v->first + i + 1) / K;
        for (long p = lo; p < hi; p += t->eval_chunk) {
            if (b) b[nb + 1] = (int32_t)((p + t->eval_chunk < hi ? p + t->eval_chunk : hi) - t->test_first);
            if (who) who[nb] = i;
            nb++;
        }
    }
    return nb;
}

void nn_inv_carve_data(nn_trainer *t, rt_arena *a)
{
    nn_inv *v = &t->inv;
    const nn_opts *o = &t->o;
    nn_sampler_init(&t->sampler, a, t->train.n, v->t.K, v->first, 1, o->drop_last, (uint64_t)o->seed);
    v->ns = t->sampler.num_samples;
    v->nb = (v->ns + o->batch_size - 1) / o->batch_size;
    v->steps = (v->nb + t->opt.c.accum - 1) / t->opt.c.accum;
    size_t all = (size_t)v->m * (size_t)(v->ns ? v->ns : 1);
    v->shard_idx = rt_arena_alloc(a, all * sizeof(int32_t), RT_MEM_DATA, "--invariant shard samples");
    v->order = rt_arena_alloc(a, all * sizeof(int32_t), RT_MEM_DATA, "--invariant micro-batch order");
    v->bounds = rt_arena_alloc(a, ((size_t)v->m * v->nb + 1) * sizeof(int32_t), RT_MEM_DATA, "--invariant micro-batches");
    v->enbatches = eval_plan(t, NULL, NULL);
    v->ebounds = rt_arena_alloc(a, (size_t)(v->enbatches + 1) * sizeof(int32_t), RT_MEM_DATA, "--invariant test chunks");
    v->eshard = rt_arena_alloc(a, (size_t)(v->enbatches + 1) * sizeof(int32_t), RT_MEM_DATA, "--invariant test chunks");
    if (!a->planning) eval_plan(t, v->ebounds, v->eshard);
}

void nn_inv_carve_model(nn_trainer *t, rt_arena *a)
{
    nn_inv *v = &t->inv;
    v->nstats = nn_bn_stats_len(&t->g);
    v->ne = 1 + t->opt.c.accum * v->nstats;
    if (v->ne < 3 + NN_MAX_TOPK) v->ne = 3 + NN_MAX_TOPK; /* the rows also carry the test sums */
    v->rows = rt_arena_alloc(a, (size_t)v->m * v->ne * sizeof(double), RT_MEM_OTHER, "--invariant shard rows");
    v->sum = rt_arena_alloc(a, (size_t)v->ne * sizeof(double), RT_MEM_OTHER, "--invariant shard rows");
}

int nn_inv_attach(nn_trainer *t, char *err, size_t errlen)
{
    return nn_ddp_set_tree(t->ddp, &t->inv.t, t->inv.nlocal, t->inv.ne, err, errlen);
}

/* The epoch's micro-batches in this rank's order: step by step, shard by shard, each
 * shard's micro-batches of the step together. */
static void plan_epoch(nn_trainer *t)
{
    nn_inv *v = &t->inv;
    int b = t->o.batch_size, N = t->opt.c.accum, pos = 0, nb = 0;
    for (int i = 0; i < v->m; i++) nn_sampler_shard(&t->sampler, v->first + i, v->shard_idx + (size_t)i * v->ns);
    v->bounds[0] = 0;
    for (int s = 0; s < v->steps; s++)
        for (int i = 0; i < v->m; i++)
            for (int j = s * N; j < s * N + N && j < v->nb; j++) {
                int lo = j * b, hi = lo + b < v->ns ? lo + b : v->ns;
                memcpy(v->order + pos, v->shard_idx + (size_t)i * v->ns + lo, (size_t)(hi - lo) * sizeof(int32_t));
                pos += hi - lo;
                v->bounds[++nb] = pos;
            }
    v->nbatches = nb;
}

/* One optimizer step: every local shard's micro-batches, then the reductions. -1: a
 * bad sample stopped it (nn_loader_error). */
static int step(nn_trainer *t, int s)
{
    nn_inv *v = &t->inv;
    nn_graph *g = &t->g;
    int N = t->opt.c.accum, an = v->nb - s * N < N ? v->nb - s * N : N;
    for (int i = 0; i < v->m; i++) {
        double *row = v->rows + (size_t)i * v->ne;
        uint64_t seed = (uint64_t)t->o.seed * 1000003u + (uint64_t)(v->first + i);
        memset(row, 0, (size_t)v->ne * sizeof *row);
        nn_ddp_begin_shard(t->ddp, i);
        for (int a = 0; a < an; a++) {
            const void *x;
            const int32_t *y;
            int n = nn_loader_next(&t->loader, &x, &y);
            if (n < 0) return -1;
            if (n == 0) rt_fatal("--invariant: the data ran out inside step %d", s);
            /* DDP's no_sync on all but the shard's last micro-batch, as --accum-steps does */
            g->grad_mode = an == 1 ? NN_GRAD_SET : a == 0 ? NN_GRAD_STASH_FIRST : a < an - 1 ? NN_GRAD_STASH
                                                                                               : NN_GRAD_FINAL;
            g->bn_stats = row + 1 + a * v->nstats;
            g->bn_pos = 0;
            nn_forward(g, x, n, 1, seed, t->step * (uint64_t)N + (uint64_t)a);
            row[0] += nn_loss(g, y, n, NULL) / n;
            nn_backward(g, y, n, n * N); /* PyTorch's loss / accum_steps */
        }
        nn_ddp_end_shard(t->ddp);
    }
    g->bn_stats = NULL;
    if (nn_ddp_finish_grads(t->ddp) || nn_ddp_tree_sum_f64(t->ddp, v->rows, v->ne, 1 + an * v->nstats, v->sum))
        rt_fatal("%s", nn_ddp_errmsg(t->ddp));
    for (int a = 0; a < an && v->nstats; a++) nn_bn_update(g, v->sum + 1 + a * v->nstats, 1.0 / v->t.K);
    v->loss = v->sum[0] / ((double)v->t.K * an);
    nn_trainer_nan_guard(t, v->loss);
    nn_trainer_update(t);
    return 0;
}

double nn_inv_train_epoch(nn_trainer *t, int epoch, nn_metrics *mx)
{
    nn_inv *v = &t->inv;
    const nn_opts *o = &t->o;
    nn_sampler_set_epoch(&t->sampler, epoch);
    t->epoch = epoch;
    plan_epoch(t);
    /* Resumed from a --save-every checkpoint: its steps (m shards x N micro-batches each) are done. */
    int s0 = t->skip_steps < v->steps ? t->skip_steps : v->steps, skip = s0 * v->m * t->opt.c.accum;
    t->skip_steps = 0, t->epoch_step = s0;
    nn_loader_begin_plan(&t->loader, &t->train, v->order, 0, v->bounds + skip, v->nbatches - skip, epoch, 1);
    double t0 = port_now_s(), comm0 = nn_ddp_get_stats(t->ddp).wait_s;
    long per_step = (long)v->t.K * o->batch_size * t->opt.c.accum, samples = 0;
    for (int s = s0; s < v->steps; s++) {
        if (o->max_steps && t->step >= (uint64_t)o->max_steps) break;
        if (step(t, s)) return -1;
        if (nn_trainer_step_done(t, epoch, s + 1 < v->steps)) break;
        long done = per_step * s, in = per_step < v->t.K * (long)v->ns - done ? per_step : v->t.K * (long)v->ns - done;
        samples += in;
        if (o->check_sync > 0 && t->step % (uint64_t)o->check_sync == 0) {
            char err[512];
            nn_zero_params_ready(t);
            if (nn_ddp_check_sync(t->ddp, t->step, err, sizeof err)) rt_fatal("%s", err);
        }
        if (s % o->log_interval == 0) {
            double el = port_now_s() - t0, rate = el > 0 ? samples / el : 0;
            double eta = rate > 0 ? (double)(v->steps - s - 1) * per_step / rate : 0;
            nn_trainer_log_line(t, epoch, done, 100.0 * s / v->steps, v->loss, rate, eta);
            mx->lr = t->opt.lr;
            double data = t->loader.wait_s, comm = nn_ddp_get_stats(t->ddp).wait_s - comm0;
            nn_metrics_row(mx, "train", t->step, epoch, v->loss, -1, rate, el - data - comm, comm, data);
        }
    }
    nn_loader_end(&t->loader);
    double dt = port_now_s() - t0;
    t->data_s = t->loader.wait_s;
    t->comm_s = nn_ddp_get_stats(t->ddp).wait_s - comm0;
    t->compute_s = dt - t->data_s - t->comm_s;
    t->epoch_samples = samples;
    char skips[1600];
    nn_loader_skips(&t->loader, skips, sizeof skips);
    if (skips[0]) rt_warn("epoch %d: %s", epoch, skips);
    return dt;
}

int nn_inv_eval(nn_trainer *t, double *sums, int nsums)
{
    nn_inv *v = &t->inv;
    const nn_optim_cfg *oc = &t->opt.c;
    const void *x;
    const int32_t *y;
    int n, b = 0;
    memset(v->rows, 0, (size_t)v->m * v->ne * sizeof *v->rows);
    nn_loader_begin_plan(&t->loader, &t->test, NULL, t->test_first, v->ebounds, v->enbatches, 0, 0);
    while ((n = nn_loader_next(&t->loader, &x, &y)) > 0) {
        double *row = v->rows + (size_t)v->eshard[b++] * v->ne;
        long c = 0, tk[NN_MAX_TOPK] = {0};
        nn_forward(&t->g, x, n, 0, 0, 0);
        row[0] += nn_loss(&t->g, y, n, &c);
        nn_topk_count(t->g.nodes[t->g.out].y, y, n, t->g.num_classes, oc->topk, oc->ntopk, tk);
        row[1] += (double)c;
        row[2] += n;
        for (int k = 0; k < oc->ntopk; k++) row[3 + k] += (double)tk[k];
    }
    if (n < 0) return -1; /* a bad sample: nn_loader_error */
    if (nn_ddp_tree_sum_f64(t->ddp, v->rows, v->ne, nsums, sums)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
    return 0;
}

static int inv_evaluate(nn_trainer *t, nn_eval_result *r)
{
    double sums[3 + NN_MAX_TOPK] = {0};
    if (nn_inv_eval(t, sums, 3 + t->opt.c.ntopk)) return -1;
    nn_trainer_report_eval(t, sums, r);
    return 0;
}

const nn_train_mode nn_mode_invariant = {.name = "invariant", .train_epoch = nn_inv_train_epoch,
                                         .evaluate = inv_evaluate};
