/* The epochs loop: one loop for every mode (nn/train_mode.h: classifier, language
 * model, --invariant), calling down into the mode for what differs; the per-epoch
 * lines (timing, time split, the gradient allreduces' counts) and the checkpoint at
 * each epoch's end are the same for all. */
#include "nn/train.h"
#include "nn/graph_cuda.h"
#include "nn/train_step.h"
#include "nn/train_zero.h"
#include "nn/metrics.h"
#include "rt/log.h"
#include <stdio.h>

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

/* This epoch's collective counts: the counters run from the start of the process,
 * so the line gives the difference from the last epoch's (prev, then updated). */
static void report_comm(nn_trainer *t, int epoch, nn_ddp_stats *prev)
{
    if (!t->ddp) return;
    nn_ddp_stats ds = nn_ddp_get_stats(t->ddp);
    if (nn_ddp_comm(t->ddp) && t->rank == 0)
        rt_info("epoch %d: gradient allreduces: %llu rounds, %llu buckets, %llu bytes per rank (%s); "
                "sync-bn allreduces %llu; optimizer steps %llu (%llu in all)", epoch,
                (unsigned long long)(ds.rounds - prev->rounds), (unsigned long long)(ds.launches - prev->launches),
                (unsigned long long)(ds.wire_bytes - prev->wire_bytes), rt_dtype_names[ds.wire],
                (unsigned long long)(ds.sync_calls - prev->sync_calls), (unsigned long long)(t->step - t->epoch_step0),
                (unsigned long long)t->step);
    if (nn_zero_sharded(t) && t->rank == 0)
        rt_info("epoch %d: --zero 1: %llu bucket reduce-scatters, %llu parameter allgathers", epoch,
                (unsigned long long)(ds.zero_rs - prev->zero_rs), (unsigned long long)(ds.zero_ag - prev->zero_ag));
    *prev = ds;
    nn_ddp_compress_report(t->ddp, epoch);
}

int nn_trainer_run(nn_trainer *t)
{
    const nn_opts *o = &t->o;
    const nn_train_mode *m = t->mode;
    int rc = 0;
    double total = 0;
    nn_metrics mx;
    char err[512];
    if (m->start && m->start(t)) return 0;
    if (nothing_to_do(t)) return 0;
    if (nn_metrics_open(&mx, t->rank == 0 ? o->metrics : NULL, err, sizeof err)) rt_fatal("%s", err);
    if (m->begin) m->begin(t);
    nn_ddp_stats prev = {0};
    for (int epoch = t->start_epoch; epoch <= o->epochs; epoch++) {
        t->epoch_step0 = t->step;
        double dt = m->train_epoch(t, epoch, &mx);
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
        nn_eval_result r = {0, 0, 1};
        if (!o->no_eval && m->evaluate(t, &r)) return data_failed(t);
        mx.acc1 = mx.acc5 = -1;
        for (int k = 0; k < t->opt.c.ntopk && !o->no_eval; k++) {
            if (t->opt.c.topk[k] == 1) mx.acc1 = (double)t->topk_correct[k] / r.count;
            if (t->opt.c.topk[k] == 5) mx.acc5 = (double)t->topk_correct[k] / r.count;
        }
        report_comm(t, epoch, &prev);
        fflush(stdout);
        nn_metrics_row(&mx, "epoch", t->step, epoch, o->no_eval ? -1 : r.loss / r.count,
                       o->no_eval ? -1 : (double)r.correct / r.count, samples / dt, t->compute_s, t->comm_s, t->data_s);
        nn_trainer_save(t, epoch, 0);
        if (o->max_steps && t->step >= (uint64_t)o->max_steps) break;
        if (epoch < o->epochs && nn_trainer_restart_point(t, epoch, 0)) {
            rc = NN_EXIT_RESTART_POINT;
            break;
        }
    }
    nn_zero_params_ready(t);
    if (m->end) m->end(t);
    nn_metrics_close(&mx);
    if (o->plot && t->rank == 0 && nn_metrics_plot(o->metrics, o->plot, err, sizeof err)) rt_fatal("%s", err);
    t->peak_rss_mib = nn_peak_rss_mib();
    if (t->rank == 0) {
        printf("Total time= %.3fs\n", total);
        if (o->mem_report)
            printf("memory: planned %.2f MiB in the host arena and %.2f MiB in the data arena, peak RSS %.2f MiB\n",
                   t->host.high / 1048576.0, t->data.high / 1048576.0, t->peak_rss_mib);
        if (o->mem_report && t->cuda && t->g.amp)
            printf("device convs: %lu permutes of x / dy into NHWC copies in the training steps (--channels-last)\n",
                   nn_cuda_conv_permutes(t->cuda));
    }
    return rc;
}
