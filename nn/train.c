#include "nn/train.h"
#include "nn/metrics.h"
#include "nn/ckpt.h"
#include "nn/graph_cuda.h"
#include "nn/lm.h"
#include "ports/cuda/port_cuda.h"
#include "ports/posix/port.h"
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

int nn_trainer_eval(nn_trainer *t, double *loss_sum, long *correct, long *count)
{
    const void *xv;
    const int32_t *y;
    int n;
    double sums[3 + NN_MAX_TOPK] = {0};
    const nn_optim_cfg *oc = &t->opt.c;
    if (t->inv.on) {
        if (nn_inv_eval(t, sums, 3 + oc->ntopk)) return -1;
        goto out;
    }
    if (t->ddp && nn_ddp_sync_buffers(t->ddp))
        rt_fatal("rank %d: broadcasting the buffers before evaluation failed: %s", t->rank, nn_ddp_errmsg(t->ddp));
    nn_loader_begin(&t->loader, &t->test, NULL, t->test_first, t->test_count, t->eval_chunk, 0, 0);
    while ((n = nn_loader_next(&t->loader, &xv, &y)) > 0) {
        const void *x = xv;
        long c = 0;
        if (t->cuda) sums[0] += nn_cuda_eval(t->cuda, x, y, n, &c);
        else {
            nn_forward(&t->g, x, n, 0, 0, 0);
            sums[0] += nn_loss(&t->g, y, n, &c);
            long tk[NN_MAX_TOPK] = {0};
            nn_topk_count(t->g.nodes[t->g.out].y, y, n, t->g.num_classes, oc->topk, oc->ntopk, tk);
            for (int k = 0; k < oc->ntopk; k++) sums[3 + k] += (double)tk[k];
        }
        sums[1] += (double)c;
        sums[2] += n;
    }
    if (n < 0) return -1; /* a bad sample: nn_loader_error */
    if (t->ddp && nn_ddp_sum_f64(t->ddp, sums, 3 + oc->ntopk)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
out:
    for (int k = 0; k < oc->ntopk; k++) t->topk_correct[k] = (long)sums[3 + k];
    *loss_sum = sums[0];
    *correct = (long)sums[1];
    *count = (long)sums[2];
    return 0;
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

/* Rank 0 writes the checkpoint: after `epoch` complete epochs and, inside the next one,
 * epoch_steps optimizer steps (--save-every: the sampler's position; only then is it in
 * the metadata, so an epoch's checkpoint keeps its bytes). */
static void save_checkpoint(nn_trainer *t, int epoch, int epoch_steps)
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

static int restart_point(nn_trainer *t, int epoch, int epoch_steps);

int nn_trainer_step_done(nn_trainer *t, int epoch, int more)
{
    const nn_opts *o = &t->o;
    t->epoch_step++;
    /* --save-every needs --save (nn_opts_parse), on every rank ("--save given" agrees) */
    if (!o->save_every || t->epoch_step % o->save_every || !more) return 0;
    save_checkpoint(t, epoch - 1, t->epoch_step);
    return t->stop = restart_point(t, epoch, t->epoch_step);
}

/* One epoch; its wall time, or -1 when a bad sample stopped it (nn_loader_error). */
static double train_epoch(nn_trainer *t, int epoch, nn_metrics *mx)
{
    const nn_opts *o = &t->o;
    const void *x;
    const int32_t *y;
    int n, batch_idx = 0;
    int nbatches = (t->sampler.num_samples + o->batch_size - 1) / o->batch_size;
    t->epoch_step0 = t->step;
    if (t->inv.on) return nn_inv_train_epoch(t, epoch, mx);
    nn_sampler_set_epoch(&t->sampler, epoch);
    t->epoch = epoch;
    /* Resumed from a --save-every checkpoint: the epoch's first steps are done. */
    int skip = t->skip_steps * t->opt.c.accum < nbatches ? t->skip_steps * t->opt.c.accum : nbatches;
    t->epoch_step = skip / t->opt.c.accum, t->skip_steps = 0, batch_idx = skip;
    int from = skip * o->batch_size < t->sampler.num_samples ? skip * o->batch_size : t->sampler.num_samples;
    nn_loader_begin(&t->loader, &t->train, t->sampler.indices + from, 0, t->sampler.num_samples - from, o->batch_size,
                    epoch, 1);
    double t0 = port_now_s(), comm0 = t->ddp ? nn_ddp_get_stats(t->ddp).wait_s : 0;
    long samples = 0;
    while ((n = nn_loader_next(&t->loader, &x, &y)) > 0) {
        if (o->max_steps && t->step >= (uint64_t)o->max_steps) break;
        double loss = nn_trainer_step(t, x, y, n);
        samples += n;
        if (t->micro == 0 && nn_trainer_step_done(t, epoch, batch_idx + 1 < nbatches)) break;
        if (o->check_sync > 0 && t->micro == 0 && t->step % (uint64_t)o->check_sync == 0) {
            char err[512];
            if (t->cuda && nn_cuda_download(t->cuda, NULL)) rt_fatal("cuda: %s", port_cuda_errmsg());
            nn_zero_params_ready(t);
            if (nn_ddp_check_sync(t->ddp, t->step, err, sizeof err)) rt_fatal("%s", err);
        }
        if (batch_idx % o->log_interval == 0) {
            double el = port_now_s() - t0, rate = el > 0 ? samples * t->world / el : 0;
            double eta = rate > 0 ? (double)(nbatches - batch_idx - 1) * o->batch_size * t->world / rate : 0;
            nn_trainer_log_line(t, epoch, (long)batch_idx * n * t->world, 100.0 * batch_idx / nbatches, loss, rate, eta);
            mx->lr = t->cuda ? t->sgd.lr : t->opt.lr;
            double data = t->loader.wait_s, comm = t->ddp ? nn_ddp_get_stats(t->ddp).wait_s - comm0 : 0;
            nn_metrics_row(mx, "train", t->step, epoch, loss, -1, rate, el - data - comm, comm, data);
        }
        if (t->g.lm && t->micro == 0) {
            double e0 = port_now_s();
            if (o->eval_every > 0 && t->step % (uint64_t)o->eval_every == 0 && !o->no_eval) {
                double vl = nn_lm_eval(t, &t->lm);
                if (t->rank == 0) printf("step %llu: val loss %.4f\n", (unsigned long long)t->step, vl);
                nn_metrics_row(mx, "val", t->step, epoch, vl, -1, 0, 0, 0, 0);
            }
            if (o->sample_every > 0 && t->step % (uint64_t)o->sample_every == 0 && t->rank == 0) {
                char label[64];
                snprintf(label, sizeof label, "step %llu sample: ", (unsigned long long)t->step);
                nn_lm_sample(t, &t->lm, o->sample_len, label);
            }
            t0 += port_now_s() - e0; /* not training time */
        }
        batch_idx++;
    }
    if (n < 0) return -1;
    /* A pass cut short (--max-steps) decodes nothing more; evaluation reuses the loader. */
    nn_loader_end(&t->loader);
    if (!t->stop && !(o->max_steps && t->step >= (uint64_t)o->max_steps)) nn_trainer_flush(t);
    double dt = port_now_s() - t0;
    t->data_s = t->loader.wait_s;
    t->comm_s = t->ddp ? nn_ddp_get_stats(t->ddp).wait_s - comm0 : 0;
    t->compute_s = dt - t->data_s - t->comm_s;
    t->epoch_samples = samples * t->world;
    char skips[1600];
    nn_loader_skips(&t->loader, skips, sizeof skips);
    if (skips[0]) rt_warn("epoch %d: %s", epoch, skips);
    return dt;
}

/* A bad sample (fail mode) stopped a pass: one line here, and the same reason to the
 * other ranks (they would otherwise see only a closed connection). */
static int data_failed(nn_trainer *t)
{
    char why[1200];
    snprintf(why, sizeof why, "rank %d: %s", t->rank, nn_loader_error(&t->loader));
    rt_error("%s", nn_loader_error(&t->loader));
    if (t->ddp) nn_ddp_fail(t->ddp, why);
    return 1;
}

/* A resumed run whose checkpoint already completed --epochs (or --max-steps): one
 * line, exit 0 (a restarted job that had finished ends as finished). */
static int nothing_to_do(const nn_trainer *t)
{
    const nn_opts *o = &t->o;
    int epochs_done = t->start_epoch > o->epochs, steps_done = o->max_steps && t->step >= (uint64_t)o->max_steps;
    if (!epochs_done && !steps_done) return 0;
    if (t->rank == 0) {
        if (epochs_done)
            rt_info("--resume %s: all %d epochs are trained already: nothing to do (raise --epochs to train on)",
                    o->resume, o->epochs);
        else
            rt_info("--resume %s: the checkpoint is at step %llu, --max-steps is %d: nothing to do", o->resume,
                    (unsigned long long)t->step, o->max_steps);
    }
    return 1;
}

/* An elastic launcher asks for a stop at the next restart point (a new node waits to
 * join) by creating its DDPRT_ELASTIC file: after a checkpoint (an epoch's, or a
 * --save-every one) every rank says whether its launcher asked, and all stop together
 * when any did, the checkpoint written. A file, not a signal: it cannot arrive before
 * the program can take it, wrappers or not. Elastic only. */
static int restart_point(nn_trainer *t, int epoch, int epoch_steps)
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

int nn_trainer_run(nn_trainer *t)
{
    const nn_opts *o = &t->o;
    int rc = 0;
    double total = 0;
    nn_metrics mx;
    char err[512];
    if (t->g.lm && t->rank == 0) nn_lm_open_tokenizer(&t->lm, t);
    if (t->g.lm && o->generate > 0) { /* sampling from a checkpoint, no training */
        if (t->rank == 0) nn_lm_sample(t, &t->lm, o->generate, "");
        return 0;
    }
    if (nothing_to_do(t)) return 0;
    if (nn_metrics_open(&mx, t->rank == 0 ? o->metrics : NULL, err, sizeof err)) rt_fatal("%s", err);
    if (t->g.lm && t->rank == 0) nn_lm_sample(t, &t->lm, o->sample_len, "sample before training: ");
    uint64_t c0[6] = {0};
    for (int epoch = t->start_epoch; epoch <= o->epochs; epoch++) {
        double dt = train_epoch(t, epoch, &mx);
        if (dt < 0) return data_failed(t);
        total += dt;
        if (t->stop) { /* a restart point inside the epoch: its checkpoint is written */
            rc = NN_EXIT_RESTART_POINT;
            break;
        }
        long samples = t->epoch_samples;
        if (t->rank == 0) {
            printf("Epoch %d of %d took %.3fs\n", epoch, o->epochs, dt);
            rt_info("epoch %d: %.*f samples/s; time split per rank: compute %.3fs, communication wait %.3fs, data wait %.3fs",
                    epoch, nn_rate_decimals(samples / dt), samples / dt, t->compute_s, t->comm_s, t->data_s);
        }
        double loss = 0;
        long correct = 0, count = 1;
        if (!o->no_eval && t->g.lm) {
            loss = nn_lm_eval(t, &t->lm);
            if (t->rank == 0) printf("\nTest set: Average loss: %.4f (perplexity %.2f)\n\n", loss, exp(loss));
        } else if (!o->no_eval) {
            if (nn_trainer_eval(t, &loss, &correct, &count)) return data_failed(t);
            if (t->rank == 0)
                printf("\nTest set: Average loss: %.4f, Accuracy: %ld/%ld (%.0f%%)\n\n", loss / count, correct,
                       count, 100.0 * correct / count);
        }
        mx.acc1 = mx.acc5 = -1;
        if (!o->no_eval) {
            for (int k = 0; k < t->opt.c.ntopk && t->rank == 0; k++)
                printf("%sAcc@%d %.3f%s", k ? " " : " * ", t->opt.c.topk[k], 100.0 * t->topk_correct[k] / count,
                       k == t->opt.c.ntopk - 1 ? "\n\n" : "");
            for (int k = 0; k < t->opt.c.ntopk; k++) {
                if (t->opt.c.topk[k] == 1) mx.acc1 = (double)t->topk_correct[k] / count;
                if (t->opt.c.topk[k] == 5) mx.acc5 = (double)t->topk_correct[k] / count;
            }
        }
        /* This epoch's counts (the counters run from the start of this process). */
        nn_ddp_stats ds = t->ddp ? nn_ddp_get_stats(t->ddp) : (nn_ddp_stats){0};
        if (t->ddp && nn_ddp_comm(t->ddp) && t->rank == 0)
            rt_info("epoch %d: gradient allreduces: %llu rounds, %llu buckets, %llu bytes per rank (%s); "
                    "sync-bn allreduces %llu; optimizer steps %llu (%llu in all)", epoch,
                    (unsigned long long)(ds.rounds - c0[0]), (unsigned long long)(ds.launches - c0[1]),
                    (unsigned long long)(ds.wire_bytes - c0[2]), rt_dtype_names[ds.wire],
                    (unsigned long long)(ds.sync_calls - c0[3]), (unsigned long long)(t->step - t->epoch_step0),
                    (unsigned long long)t->step);
        if (nn_zero_sharded(t) && t->rank == 0)
            rt_info("epoch %d: --zero 1: %llu bucket reduce-scatters, %llu parameter allgathers", epoch,
                    (unsigned long long)(ds.zero_rs - c0[4]), (unsigned long long)(ds.zero_ag - c0[5]));
        c0[0] = ds.rounds, c0[1] = ds.launches, c0[2] = ds.wire_bytes, c0[3] = ds.sync_calls;
        c0[4] = ds.zero_rs, c0[5] = ds.zero_ag;
        if (t->ddp) nn_ddp_compress_report(t->ddp, epoch);
        fflush(stdout);
        nn_metrics_row(&mx, "epoch", t->step, epoch, o->no_eval ? -1 : loss / count,
                       o->no_eval ? -1 : (double)correct / count, samples / dt, t->compute_s, t->comm_s, t->data_s);
        save_checkpoint(t, epoch, 0);
        if (o->max_steps && t->step >= (uint64_t)o->max_steps) break;
        if (epoch < o->epochs && restart_point(t, epoch, 0)) {
            rc = NN_EXIT_RESTART_POINT;
            break;
        }
    }
    nn_zero_params_ready(t);
    if (t->g.lm && t->rank == 0) nn_lm_sample(t, &t->lm, o->sample_len, "sample after training: ");
    nn_metrics_close(&mx);
    if (o->plot && t->rank == 0 && nn_metrics_plot(o->metrics, o->plot, err, sizeof err)) rt_fatal("%s", err);
    t->peak_rss_mib = nn_peak_rss_mib();
    if (t->rank == 0) {
        printf("Total time= %.3fs\n", total);
        if (o->mem_report)
            printf("memory: planned %.2f MiB in the host arena and %.2f MiB in the data arena, peak RSS %.2f MiB\n",
                   t->host.high / 1048576.0, t->data.high / 1048576.0, t->peak_rss_mib);
    }
    return rc;
}

void nn_trainer_free(nn_trainer *t)
{
    nn_bpe_free(t->lm.bpe);
    nn_loader_stop(&t->loader);
    nn_cuda_close(t->cuda);
    rt_arena_free(&t->host);
    rt_arena_free(&t->data);
    free(t->nodes);
    free(t->pmeta);
    free(t->bmeta);
}
