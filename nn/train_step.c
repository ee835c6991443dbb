/* The trainer's step machinery, shared by every mode (nn/train_mode.h): one
 * micro-batch forward and backward, the optimizer step on the averaged gradients
 * (clipping, schedule, the NaN guard), the seed's log line, checkpoints and elastic
 * restart points. The modes call down into it; it calls no mode. */
#include "nn/train_step.h"
#include "nn/train_zero.h"
#include "nn/ckpt.h"
#include "nn/graph_cuda.h"
#include "nn/metrics.h"
#include "ports/cuda/port_cuda.h"
#include "rt/log.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

double nn_peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

void nn_trainer_nan_guard(nn_trainer *t, double loss)
{
    const nn_graph *g = &t->g;
    if (t->o.nan_check && !strcmp(t->o.nan_check, "off")) return;
    /* With several ranks only the averaged gradients count: they are the same
     * everywhere, so every rank stops at the same step with the same line. The
     * --invariant loss is the shards' reduced one: the same everywhere too. Under
     * --zero 1 a rank holds its parts averaged only: the ranks agree on the verdict. */
    int local = t->inv.on || !(t->ddp && nn_ddp_comm(t->ddp)), bad = -1;
    if (nn_zero_sharded(t)) bad = nn_zero_first_nonfinite(t);
    else if (k_first_nonfinite(g->nparams, g->grads) >= 0) {
        for (bad = 0; bad < g->np; bad++)
            if (k_first_nonfinite(g->p[bad].numel, g->grads + g->p[bad].offset) >= 0) break;
    }
    if ((!local || isfinite(loss)) && bad < 0) return;
    const char *name = bad >= 0 && bad < g->np ? g->p[bad].name : NULL;
    rt_fatal("step %llu: %s%s is not finite (loss %g on rank %d): the training diverged; lower --lr, or "
             "--nan-check off to go on", (unsigned long long)t->step + 1, name ? "the gradient of " : "the loss",
             name ? name : "", loss, t->rank);
}

/* After the last micro-batch's backward: average, clip, schedule, update. */
static void optimizer_step(nn_trainer *t)
{
    nn_graph *g = &t->g;
    if (t->ddp && nn_ddp_finish_grads(t->ddp)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
    /* Divergence stops the job instead of training on NaN. The gradients are averaged,
     * so every rank sees the same values and stops at the same step. */
    nn_trainer_nan_guard(t, t->last_loss);
    (void)g;
    nn_trainer_update(t);
}

void nn_trainer_update(nn_trainer *t)
{
    nn_graph *g = &t->g;
    nn_zero_params_ready(t); /* a parameter no node read may still be gathering */
    if (t->opt.c.clip > 0) nn_optim_clip(&t->opt, g, nn_trainer_grad_norm(t), t->opt.c.clip);
    nn_optim_step(&t->opt, g, nn_optim_lr(&t->opt, t->epoch ? t->epoch : t->start_epoch, t->step));
    nn_zero_gather_params(t); /* the next forward waits for each bucket's */
    t->micro = 0;
    t->step++;
}

double nn_trainer_step(nn_trainer *t, const void *x, const int32_t *y, int n)
{
    nn_graph *g = &t->g;
    uint64_t seed = (uint64_t)t->o.seed * 1000003u + (uint64_t)t->rank;
    if (t->cuda) {
        t->sgd.lr = (float)nn_optim_lr(&t->opt, t->epoch ? t->epoch : t->start_epoch, t->step);
        double loss = nn_cuda_step(t->cuda, x, y, n, &t->sgd, seed, t->step, t->micro);
        if (++t->micro == t->opt.c.accum) t->micro = 0, t->step++;
        return loss;
    }
    /* DDP's broadcast_buffers: every rank runs with rank 0's BatchNorm statistics. */
    if (t->ddp && nn_ddp_sync_buffers(t->ddp)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
    int N = t->opt.c.accum, k = t->micro;
    /* DDP's no_sync on micro-batches 1..N-1: gradients stashed, no bucket launched. */
    g->grad_mode = N == 1 ? NN_GRAD_SET : k == 0 ? NN_GRAD_STASH_FIRST : k < N - 1 ? NN_GRAD_STASH : NN_GRAD_FINAL;
    g->lm_fuse = g->lm, g->lm_scale = 1.0f / (float)(n * N); /* the backward below, with this scale */
    nn_forward(g, x, n, 1, seed, t->step * (uint64_t)N + (uint64_t)k);
    g->lm_fuse = 0;
    double loss = nn_loss(g, y, n, NULL) / n;
    t->last_loss = loss;
    nn_backward(g, y, n, n * N); /* PyTorch's loss / accum_steps */
    if (++t->micro == N) optimizer_step(t);
    return loss;
}

void nn_trainer_flush(nn_trainer *t)
{
    if (!t->micro) return;
    if (t->cuda) {
        nn_cuda_flush(t->cuda, &t->sgd, t->step);
        t->micro = 0, t->step++;
        return;
    }
    /* The last backward only stashed: the sum becomes the gradient, every bucket goes. */
    memcpy(t->g.grads, t->g.grad_sum, t->g.nparams * sizeof(float));
    optimizer_step(t);
}

void nn_trainer_log_line(nn_trainer *t, int epoch, long done, double pct, double loss, double rate, double eta)
{
    if (t->rank == 0 && t->g.lm) /* language models: tokens, as llm.c counts */
        printf("Train Epoch: %d [%ld/%d (%.0f%%)]\tLoss: %.6f\tLR: %.6g\t(%.*f tokens/s, ETA %.1fs)\n", epoch, done,
               t->train.n, pct, loss, t->opt.lr, nn_rate_decimals(rate * (t->train.w - 1)), rate * (t->train.w - 1), eta);
    else if (t->rank == 0)
        printf("Train Epoch: %d [%ld/%d (%.0f%%)]\tLoss: %.6f\tLR: %.6g\t(%.*f samples/s, ETA %.1fs)\n", epoch, done,
               t->train.n, pct, loss, t->cuda ? t->sgd.lr : t->opt.lr, nn_rate_decimals(rate), rate, eta);
}

nn_ckpt_state nn_trainer_ckpt_state(nn_trainer *t, int epoch)
{
    nn_ckpt_state st = {.epoch = epoch, .step = t->step, .optimizer = nn_optim_name(t->opt.c.kind),
                        .optimizer_step = t->opt.t, .nblocks = nn_optim_slots(&t->opt)};
    /* PyTorch's names for the state: SGD's momentum_buffer, Adam's exp_avg(_sq). */
    nn_scaler sc;
    if (t->cuda && nn_cuda_scaler(t->cuda, &sc)) st.loss_scale = sc.scale, st.scale_good = sc.good;
    st.block_names[0] = st.nblocks == 1 ? "momentum" : "exp_avg";
    st.block_names[1] = "exp_avg_sq";
    st.blocks[0] = t->opt.m;
    st.blocks[1] = t->opt.v;
    return st;
}

/* Rank 0 writes the checkpoint: after `epoch` complete epochs and, inside the next one,
 * epoch_steps optimizer steps (--save-every: the sampler's position; only then is it in
 * the metadata, so an epoch's checkpoint keeps its bytes). */
void nn_trainer_save(nn_trainer *t, int epoch, int epoch_steps)
{
    const nn_opts *o = &t->o;
    char err[512];
    if (!o->save) return;
    nn_zero_params_ready(t);
    float *full[2] = {NULL, NULL};
    if (nn_zero_sharded(t) || t->opt.c.q8) nn_zero_full_state(t, full); /* sharded: every rank takes part */
    if (t->rank == 0) {
        if (t->cuda && nn_cuda_download(t->cuda, t->momentum)) rt_fatal("cuda: %s", port_cuda_errmsg());
        nn_ckpt_state st = nn_trainer_ckpt_state(t, epoch);
        st.epoch_steps = (uint64_t)epoch_steps;
        for (int i = 0; i < 2; i++)
            if (full[i]) st.blocks[i] = full[i];
        if (nn_ckpt_save(o->save, &t->g, &st, o->keep, err, sizeof err)) rt_fatal("%s", err);
        if (nn_data_save_meta(&t->train, o->save, err, sizeof err)) rt_fatal("%s", err);
    }
    free(full[0]);
    free(full[1]);
}

/* An elastic launcher asks for a stop at the next restart point (a new node waits to
 * join) by creating its DDPRT_ELASTIC file: after a checkpoint (an epoch's, or a
 * --save-every one) every rank says whether its launcher asked, and all stop together
 * when any did, the checkpoint written. A file, not a signal: it cannot arrive before
 * the program can take it, wrappers or not. Elastic only. */
int nn_trainer_restart_point(nn_trainer *t, int epoch, int epoch_steps)
{
    if (!t->restart_file || !*t->restart_file) return 0;
    double v = access(t->restart_file, F_OK) == 0;
    if (t->ddp && nn_ddp_sum_f64(t->ddp, &v, 1)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
    char in[48] = "";
    if (epoch_steps) snprintf(in, sizeof in, ", step %d of it", epoch_steps);
    if (v > 0 && t->rank == 0)
        rt_info("epoch %d%s: stopping at this restart point (checkpoint written) for the launchers' new membership",
                epoch, in);
    return v > 0;
}

int nn_trainer_step_done(nn_trainer *t, int epoch, int more)
{
    const nn_opts *o = &t->o;
    t->epoch_step++;
    /* --save-every needs --save (nn_opts_parse), on every rank ("--save given" agrees) */
    if (!o->save_every || t->epoch_step % o->save_every || !more) return 0;
    nn_trainer_save(t, epoch - 1, t->epoch_step);
    return t->stop = nn_trainer_restart_point(t, epoch, t->epoch_step);
}
