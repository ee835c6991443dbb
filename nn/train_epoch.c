/* The classifier mode (nn/train_mode.h) and the generic epoch that the language-model
 * mode shares: the sampler's batches through nn_trainer_step, the seed's log lines,
 * the per-epoch time split; evaluation over this rank's shard of the test set, summed
 * over the ranks, printed as the seed script prints it. */
#include "nn/train_epoch.h"
#include "nn/train_step.h"
#include "nn/train_zero.h"
#include "nn/graph_cuda.h"
#include "nn/metrics.h"
#include "ports/cuda/port_cuda.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <stdio.h>
#include <string.h>

/* One epoch; its wall time, or -1 when a bad sample stopped it (nn_loader_error). */
double nn_trainer_epoch(nn_trainer *t, int epoch, nn_metrics *mx)
{
    const nn_opts *o = &t->o;
    const void *x;
    const int32_t *y;
    int n, batch_idx = 0;
    int nbatches = (t->sampler.num_samples + o->batch_size - 1) / o->batch_size;
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
        /* the mode's work between steps (a language model's validation and samples): not training time */
        if (t->micro == 0 && t->mode->after_step) t0 += t->mode->after_step(t, epoch, mx);
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

/* sums: loss, correct, count, then the top-k counts; summed over the ranks. */
static int eval_sums(nn_trainer *t, double *sums)
{
    const void *xv;
    const int32_t *y;
    int n;
    const nn_optim_cfg *oc = &t->opt.c;
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
    return 0;
}

int nn_trainer_eval(nn_trainer *t, double *loss_sum, long *correct, long *count)
{
    double sums[3 + NN_MAX_TOPK] = {0};
    if (eval_sums(t, sums)) return -1;
    for (int k = 0; k < t->opt.c.ntopk; k++) t->topk_correct[k] = (long)sums[3 + k];
    *loss_sum = sums[0];
    *correct = (long)sums[1];
    *count = (long)sums[2];
    return 0;
}

void nn_trainer_report_eval(nn_trainer *t, const double *sums, nn_eval_result *r)
{
    const nn_optim_cfg *oc = &t->opt.c;
    for (int k = 0; k < oc->ntopk; k++) t->topk_correct[k] = (long)sums[3 + k];
    r->loss = sums[0], r->correct = (long)sums[1], r->count = (long)sums[2];
    if (t->rank != 0) return;
    printf("\nTest set: Average loss: %.4f, Accuracy: %ld/%ld (%.0f%%)\n\n", r->loss / r->count, r->correct, r->count,
           100.0 * r->correct / r->count);
    for (int k = 0; k < oc->ntopk; k++)
        printf("%sAcc@%d %.3f%s", k ? " " : " * ", oc->topk[k], 100.0 * t->topk_correct[k] / r->count,
               k == oc->ntopk - 1 ? "\n\n" : "");
}

static int classifier_evaluate(nn_trainer *t, nn_eval_result *r)
{
    double sums[3 + NN_MAX_TOPK] = {0};
    if (eval_sums(t, sums)) return -1;
    nn_trainer_report_eval(t, sums, r);
    return 0;
}

const nn_train_mode nn_mode_classifier = {
    .name = "classifier", .train_epoch = nn_trainer_epoch, .evaluate = classifier_evaluate};
