#include "nn/train.h"
#include "kernels/k.h"
#include "nn/metrics.h"
#include "nn/ckpt.h"
#include "nn/graph_cuda.h"
#include "ports/cuda/port_cuda.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

double nn_peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* The data (samples, sampler, loader ring) in its own arena, loaded before the model
 * is planned: a text set's vocabulary, and so the embedding's size, is known only
 * once the files are read. Each carve runs on a planning arena, then on the real one. */
static int carve_data(nn_trainer *t, rt_arena *a, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    if (nn_data_load(&t->train, a, err, errlen) || nn_data_load(&t->test, a, err, errlen))
        return -1;
    if (t->inv.on) nn_inv_carve_data(t, a);
    else nn_sampler_init(&t->sampler, a, t->train.n, t->world, t->rank, 1, o->drop_last, (uint64_t)o->seed);
    int max_batch = o->batch_size > t->eval_chunk ? o->batch_size : t->eval_chunk;
    nn_loader_plan(&t->loader, a, &t->train, max_batch, o->workers);
    return 0;
}

static int carve_model(nn_trainer *t, rt_arena *a, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    int max_batch = o->batch_size > t->eval_chunk ? o->batch_size : t->eval_chunk;
    /* Text: the vocabulary and the label names are known once the files are read. */
    t->mc.vocab = t->train.vocab;
    t->mc.num_classes = o->num_classes ? o->num_classes : t->train.num_classes;
    if (o->num_classes && o->num_classes < t->train.num_classes) {
        snprintf(err, errlen, "--num-classes %d: the data has %d classes", o->num_classes, t->train.num_classes);
        return -1;
    }
    if (nn_model_build(&t->g, t->nodes, t->pmeta, t->bmeta, &t->mc, err, errlen)) return -1;
    if (t->ddp && !t->cuda) nn_ddp_place_grads(t->ddp, &t->g);
    t->g.amp = o->amp && !strcmp(o->amp, "bf16") ? NN_AMP_BF16 : NN_AMP_NONE;
    t->g.recompute_macs = o->recompute_macs;
    if (nn_graph_finish(&t->g, a, max_batch, err, errlen)) return -1;
    nn_optim_plan(&t->opt, a, t->g.nparams);
    t->momentum = t->opt.m;
    t->g.grad_sum = t->opt.c.accum > 1 ? rt_arena_alloc(a, t->g.nparams * sizeof(float), RT_MEM_OPTIM,
                                                         "gradient accumulation (--accum-steps)")
                                       : NULL;
    if (t->inv.on) nn_inv_carve_model(t, a);
    return 0;
}

static int carve_all(nn_trainer *t, rt_arena *arena, const char *name, int (*carve)(nn_trainer *, rt_arena *, char *, size_t),
                     char *err, size_t errlen)
{
    rt_arena plan;
    rt_arena_plan(&plan, name);
    if (carve(t, &plan, err, errlen)) return -1;
    if (t->o.mem_report && t->rank == 0) rt_arena_report(&plan);
    if (rt_arena_init(arena, name, plan.high)) {
        snprintf(err, errlen, "cannot allocate the %s arena of %zu bytes", name, plan.high);
        return -1;
    }
    return carve(t, arena, err, errlen);
}

/* What a checkpoint holds besides the graph: the optimizer state and the position. */
static nn_ckpt_state ckpt_state(nn_trainer *t, int epoch)
{
    nn_ckpt_state st = {.epoch = epoch, .step = t->step, .nblocks = nn_optim_slots(&t->opt), .nscalars = 2};
    /* PyTorch's names for the state: SGD's momentum_buffer, Adam's exp_avg(_sq). */
    st.block_names[0] = st.nblocks == 1 ? "momentum" : "exp_avg";
    st.block_names[1] = "exp_avg_sq";
    st.blocks[0] = t->opt.m;
    st.blocks[1] = t->opt.v;
    st.scalar_names[0] = "optimizer";
    st.scalars[0] = t->opt.c.kind;
    st.scalar_names[1] = "optimizer_step";
    st.scalars[1] = (int64_t)t->opt.t;
    return st;
}

/* Data and memory: everything that can fail because of this rank's files. */
static int setup_local(nn_trainer *t, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    /* The GPU only when asked for (--no-cuda wins, as in the seed script); a build
     * without CUDA or a machine without a GPU says so here, in one line. */
    if (nn_optim_parse(o, &t->opt.c, err, errlen) || nn_inv_setup(t, err, errlen)) return -1;
    if (o->device && !strcmp(o->device, "cuda") && !o->no_cuda &&
        !(t->cuda = nn_cuda_open(t->ddp ? nn_ddp_local_rank(t->ddp) : 0, err, errlen)))
        return -1;
    if (t->cuda && (t->opt.c.kind != NN_OPT_SGD || t->opt.c.accum > 1 || t->opt.c.clip > 0 || t->opt.c.sync_bn ||
                    t->opt.c.compress || t->opt.c.sched || t->opt.c.warmup_epochs > 0 || t->opt.c.no_decay)) {
        snprintf(err, errlen, "--device cuda: only plain SGD runs on the GPU in this version (no --optimizer, "
                 "--lr-schedule, --warmup-epochs, --accum-steps, --clip-grad-norm, --sync-bn, --grad-compress, "
                 "--no-decay-bn-bias)");
        return -1;
    }
    nn_data_cfg dc = {.dir = o->data, .dataset = o->dataset, .image_size = o->image_size, .augment = o->augment,
                      .workers = o->workers, .bad_skip = o->bad_sample && !strcmp(o->bad_sample, "skip"),
                      .seq_len = o->seq_len, .min_freq = o->min_freq, .max_vocab = o->max_vocab,
                      .seed = (uint64_t)o->seed};
    /* --data synthetic: samples of the shape the model expects (the zoo's default
     * input; --image-size and --seq-len change it, --num-classes the classes). */
    nn_shape din;
    int dcls;
    if (!o->model_file && !nn_model_default_input(o->model, &din, &dcls)) {
        dc.syn_c = din.c;
        dc.syn_h = dc.syn_w = o->image_size ? o->image_size : din.h;
        if (din.tokens) dc.syn_h = 1, dc.syn_w = o->seq_len ? o->seq_len : din.w, dc.syn_vocab = 20000;
        dc.syn_classes = o->num_classes ? o->num_classes : dcls;
    }
    if (nn_data_open(&t->train, &dc, "train", err, errlen)) return -1;
    /* --no-eval needs no evaluation split: without one, the training split stands in
     * (it is never read for evaluation). */
    if (nn_data_open(&t->test, &dc, "test", err, errlen)) {
        if (!o->no_eval) return -1;
        t->test = t->train;
    }
    snprintf(t->data_dir, sizeof t->data_dir, "%s", t->train.dir);
    if (t->train.c != t->test.c || t->train.h != t->test.h || t->train.w != t->test.w ||
        t->train.tokens != t->test.tokens) {
        snprintf(err, errlen, "%s: training samples are %dx%dx%d, test samples %dx%dx%d", t->train.dir, t->train.c,
                 t->train.h, t->train.w, t->test.c, t->test.h, t->test.w);
        return -1;
    }
    t->mc = (nn_model_cfg){.name = o->model_file ? NULL : o->model, .file = o->model_file,
                           .in = {t->train.c, t->train.h, t->train.w, t->train.tokens},
                           .num_classes = o->num_classes ? o->num_classes : t->train.num_classes,
                           .vocab = t->train.vocab, .embed_dim = o->embed_dim};
    t->nodes = calloc(NN_MAX_NODES, sizeof *t->nodes);
    t->pmeta = calloc(NN_MAX_PARAMS, sizeof *t->pmeta);
    t->bmeta = calloc(NN_MAX_BUFS, sizeof *t->bmeta);
    if (!t->nodes || !t->pmeta || !t->bmeta) {
        snprintf(err, errlen, "out of memory for the model tables");
        return -1;
    }
    /* Evaluation in chunks no larger than the training batch: same sums, and the
     * activations planned for training suffice (--test-batch-size 1000 would
     * otherwise need 4x the activation memory of the whole training step). */
    t->eval_chunk = o->test_batch_size < o->batch_size ? o->test_batch_size : o->batch_size;
    /* Each rank evaluates a contiguous shard; the sums then cover every sample once.
     * --invariant: its virtual shards' test ranges, contiguous too. */
    int eshards = t->inv.on ? t->inv.t.K : t->world, efirst = t->inv.on ? t->inv.first : t->rank;
    int elast = t->inv.on ? t->inv.first + t->inv.m : t->rank + 1;
    t->test_first = (int)((long)t->test.n * efirst / eshards);
    t->test_count = (int)((long)t->test.n * elast / eshards) - t->test_first;

    if (carve_all(t, &t->data, "data", carve_data, err, errlen) ||
        carve_all(t, &t->host, "host", carve_model, err, errlen))
        return -1;
    /* Without AVX512-BF16 the bf16 kernels round operands and run the fp32 ones: the
     * same numerics, never faster (measured 0.83-0.95x fp32 on AVX2). Say so once. */
    if (t->g.amp == NN_AMP_BF16 && !t->cuda && strcmp(k_isa(), "avx512bf16") && t->rank == 0)
        rt_warn("--amp bf16: this CPU path (%s kernels) has no bf16 dot product (AVX512-BF16): bf16 operands are "
                "emulated on fp32 kernels, slower than --amp none", k_isa());
    if (o->mem_report && t->rank == 0)
        printf("activations: planned %.2f MiB (%.2f MiB keeping every output), %.2f MiB without reuse; "
               "workspace %.2f MiB at most per node%s\n", t->g.act_bytes / 1048576.0,
               t->g.act_bytes_keep / 1048576.0, t->g.act_bytes_noreuse / 1048576.0, t->g.ws_bytes / 1048576.0,
               t->g.ws ? "" : ", planned inside the activations");
    if (o->mem_report && t->rank == 0 && t->ddp && nn_ddp_get_stats(t->ddp).reg_bytes)
        printf("gradients: %.2f MiB outside the arena, in memory the ranks of a host reduce in place\n",
               nn_ddp_get_stats(t->ddp).reg_bytes / 1048576.0);
    if (t->train.classes_bytes && t->rank == 0) {
        char line[1024];
        size_t o2 = 0;
        for (int k = 0; k < t->train.num_classes && o2 < sizeof line; k++)
            o2 += (size_t)snprintf(line + o2, sizeof line - o2, "%s%s", k ? ", " : "", nn_data_class_name(&t->train, k));
        rt_info("%d classes: %s", t->train.num_classes, line);
    }
    nn_graph_init(&t->g, (uint64_t)o->seed);
    memset(t->g.grads, 0, t->g.nparams * sizeof(float));
    long nb = (t->sampler.num_samples + o->batch_size - 1) / o->batch_size;
    /* --lr-scale world: a K-rank job's rate under --invariant K, on any world size */
    nn_optim_reset(&t->opt, t->inv.on ? t->inv.t.K : t->world, (nb + t->opt.c.accum - 1) / t->opt.c.accum);
    /* A checkpoint this rank cannot read is this rank's failure, reported to all. */
    if (o->init_from && nn_ckpt_init_from(&t->g, o->init_from, err, errlen)) return -1;
    if (o->resume) {
        nn_ckpt_state st = ckpt_state(t, 0);
        int64_t kind;
        if (nn_ckpt_meta_int(o->resume, "optimizer", &kind, err, errlen)) return -1;
        if (kind != t->opt.c.kind) {
            snprintf(err, errlen, "--resume %s holds %s state, but --optimizer is %s", o->resume,
                     nn_optim_name((int)kind), nn_optim_name(t->opt.c.kind));
            return -1;
        }
        if (nn_ckpt_load(o->resume, &t->g, &st, err, errlen)) return -1;
        t->step = st.step;
        t->opt.t = (uint64_t)st.scalars[1];
        t->start_epoch = st.epoch + 1;
    }
    return t->cuda ? nn_cuda_setup(t->cuda, &t->g, t->ddp, o->mem_report && t->rank == 0, err, errlen) : 0;
}

int nn_trainer_setup(nn_trainer *t, const nn_opts *o, nn_ddp *ddp, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->o = *o;
    t->ddp = ddp;
    t->rank = ddp ? nn_ddp_rank(ddp) : 0;
    t->world = ddp ? nn_ddp_world(ddp) : 1;
    t->start_epoch = 1;
    char local[768] = "";
    int ok = setup_local(t, local, sizeof local) == 0;
    /* Every rank learns whether any rank failed (a corrupt file on one host must stop
     * the whole job with its message, not leave the others waiting). */
    if (ddp) {
        if (nn_ddp_agree(ddp, ok, local, err, errlen)) return -1;
    } else if (!ok) {
        snprintf(err, errlen, "%s", local);
        return -1;
    }
    t->sgd = (k_sgd_cfg){.lr = (float)o->lr, .momentum = (float)o->momentum,
                         .weight_decay = (float)o->weight_decay, .nesterov = o->nesterov};
    if (ddp) {
        /* Every option that changes what the ranks do together (the whole option table,
         * nn_opts_agreement), then what the ranks derived from their data and files. */
        static const char *names[NN_DDP_MAX_FIELDS];
        static int64_t v[NN_DDP_MAX_FIELDS];
        int nv = nn_opts_agreement(o, names, v, NN_DDP_MAX_FIELDS - 8);
        if (nv < 0) {
            snprintf(err, errlen, "too many options to compare across ranks");
            return -1;
        }
        const char *derived[] = {"model parameter count", "train samples", "test samples", "resumed step",
                                 "data classes/vocabulary hash", "--save given"};
        int64_t dv[] = {(int64_t)t->g.nparams, t->train.n, t->test.n, (int64_t)t->step,
                        (int64_t)(t->train.meta_hash >> 1), o->save != NULL};
        for (int i = 0; i < 6; i++) names[nv] = derived[i], v[nv++] = dv[i];
        if (nn_ddp_check_config(ddp, names, v, nv, err, errlen)) return -1;
        nn_ddp_attach(ddp, &t->g, o->bucket_mb);
        static const rt_dtype wire[] = {RT_F32, RT_F16, RT_BF16};
        if (nn_ddp_set_compress(ddp, wire[t->opt.c.compress])) {
            snprintf(err, errlen, "rank %d: out of memory for the --grad-compress buffers", t->rank);
            return -1;
        }
        if (t->inv.on && nn_inv_attach(t, err, errlen)) return -1;
        if (t->opt.c.sync_bn) nn_ddp_enable_sync_bn(ddp);
        if (nn_ddp_broadcast_params(ddp)) {
            snprintf(err, errlen, "%s", nn_ddp_errmsg(ddp));
            return -1;
        }
    }
    if (t->cuda && nn_cuda_upload(t->cuda, t->momentum)) {
        snprintf(err, errlen, "--device cuda: %s", port_cuda_errmsg());
        return -1;
    }
    nn_loader_start_thread(&t->loader);
    return 0;
}

void nn_trainer_nan_guard(nn_trainer *t, double loss)
{
    const nn_graph *g = &t->g;
    if (t->o.nan_check && !strcmp(t->o.nan_check, "off")) return;
    /* With several ranks only the averaged gradients count: they are the same
     * everywhere, so every rank stops at the same step with the same line. The
     * --invariant loss is the shards' reduced one: the same everywhere too. */
    int local = t->inv.on || !(t->ddp && nn_ddp_comm(t->ddp));
    if ((!local || isfinite(loss)) && k_first_nonfinite(g->nparams, g->grads) < 0) return;
    const char *name = NULL;
    for (int i = 0; i < g->np && !name; i++)
        if (k_first_nonfinite(g->p[i].numel, g->grads + g->p[i].offset) >= 0) name = g->p[i].name;
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
    if (t->opt.c.clip > 0) nn_optim_clip(&t->opt, g, t->opt.c.clip);
    nn_optim_step(&t->opt, g, nn_optim_lr(&t->opt, t->epoch ? t->epoch : t->start_epoch, t->step));
    t->micro = 0;
    t->step++;
}

double nn_trainer_step(nn_trainer *t, const void *x, const int32_t *y, int n)
{
    nn_graph *g = &t->g;
    uint64_t seed = (uint64_t)t->o.seed * 1000003u + (uint64_t)t->rank;
    if (t->cuda) {
        t->sgd.lr = (float)nn_optim_lr(&t->opt, t->epoch ? t->epoch : t->start_epoch, t->step);
        double loss = nn_cuda_step(t->cuda, x, y, n, &t->sgd, seed, t->step);
        t->step++;
        return loss;
    }
    /* DDP's broadcast_buffers: every rank runs with rank 0's BatchNorm statistics. */
    if (t->ddp && nn_ddp_sync_buffers(t->ddp)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
    int N = t->opt.c.accum, k = t->micro;
    /* DDP's no_sync on micro-batches 1..N-1: gradients stashed, no bucket launched. */
    g->grad_mode = N == 1 ? NN_GRAD_SET : k == 0 ? NN_GRAD_STASH_FIRST : k < N - 1 ? NN_GRAD_STASH : NN_GRAD_FINAL;
    nn_forward(g, x, n, 1, seed, t->step * (uint64_t)N + (uint64_t)k);
    double loss = nn_loss(g, y, n, NULL) / n;
    t->last_loss = loss;
    nn_backward(g, y, n, n * N); /* PyTorch's loss / accum_steps */
    if (++t->micro == N) optimizer_step(t);
    return loss;
}

void nn_trainer_flush(nn_trainer *t)
{
    if (!t->micro || t->cuda) return;
    /* The last backward only stashed: the sum becomes the gradient, every bucket goes. */
    memcpy(t->g.grads, t->g.grad_sum, t->g.nparams * sizeof(float));
    optimizer_step(t);
}

void nn_trainer_eval(nn_trainer *t, double *loss_sum, long *correct, long *count)
{
    const void *xv;
    const int32_t *y;
    int n;
    double sums[3 + NN_MAX_TOPK] = {0};
    const nn_optim_cfg *oc = &t->opt.c;
    if (t->inv.on) {
        nn_inv_eval(t, sums, 3 + oc->ntopk);
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
    if (t->ddp && nn_ddp_sum_f64(t->ddp, sums, 3 + oc->ntopk)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
out:
    for (int k = 0; k < oc->ntopk; k++) t->topk_correct[k] = (long)sums[3 + k];
    *loss_sum = sums[0];
    *correct = (long)sums[1];
    *count = (long)sums[2];
}

void nn_trainer_log_line(nn_trainer *t, int epoch, long done, double pct, double loss, double rate, double eta)
{
    if (t->rank == 0)
        printf("Train Epoch: %d [%ld/%d (%.0f%%)]\tLoss: %.6f\tLR: %.6g\t(%.0f samples/s, ETA %.1fs)\n", epoch, done,
               t->train.n, pct, loss, t->cuda ? t->sgd.lr : t->opt.lr, rate, eta);
}

static double train_epoch(nn_trainer *t, int epoch, nn_metrics *mx)
{
    const nn_opts *o = &t->o;
    const void *x;
    const int32_t *y;
    int n, batch_idx = 0;
    int nbatches = (t->sampler.num_samples + o->batch_size - 1) / o->batch_size;
    if (t->inv.on) return nn_inv_train_epoch(t, epoch, mx);
    nn_sampler_set_epoch(&t->sampler, epoch);
    t->epoch = epoch;
    nn_loader_begin(&t->loader, &t->train, t->sampler.indices, 0, t->sampler.num_samples, o->batch_size, epoch, 1);
    double t0 = port_now_s(), comm0 = t->ddp ? nn_ddp_get_stats(t->ddp).wait_s : 0;
    long samples = 0;
    while ((n = nn_loader_next(&t->loader, &x, &y)) > 0) {
        if (o->max_steps && t->step >= (uint64_t)o->max_steps) break;
        double loss = nn_trainer_step(t, x, y, n);
        samples += n;
        if (o->check_sync > 0 && t->micro == 0 && t->step % (uint64_t)o->check_sync == 0) {
            char err[512];
            if (t->cuda && nn_cuda_download(t->cuda, NULL)) rt_fatal("cuda: %s", port_cuda_errmsg());
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
        batch_idx++;
    }
    /* A pass cut short (--max-steps) decodes nothing more; evaluation reuses the loader. */
    nn_loader_end(&t->loader);
    if (!(o->max_steps && t->step >= (uint64_t)o->max_steps)) nn_trainer_flush(t);
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

/* An elastic launcher asks for a stop at the next restart point (a new node waits to
 * join): after an epoch's checkpoint every rank says whether it was asked, and all
 * stop together when any was, the checkpoint written. Once per epoch, elastic only. */
static int restart_point(nn_trainer *t, int epoch)
{
    if (!t->restart_req) return 0;
    double v = *t->restart_req ? 1 : 0;
    if (t->ddp && nn_ddp_sum_f64(t->ddp, &v, 1)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
    if (v > 0 && t->rank == 0)
        rt_info("epoch %d: stopping at this restart point (checkpoint written) for the launchers' new membership",
                epoch);
    return v > 0;
}

int nn_trainer_run(nn_trainer *t)
{
    const nn_opts *o = &t->o;
    int rc = 0;
    double total = 0;
    nn_metrics mx;
    char err[512];
    if (nn_metrics_open(&mx, t->rank == 0 ? o->metrics : NULL, err, sizeof err)) rt_fatal("%s", err);
    for (int epoch = t->start_epoch; epoch <= o->epochs; epoch++) {
        double dt = train_epoch(t, epoch, &mx);
        total += dt;
        long samples = t->epoch_samples;
        if (t->rank == 0) {
            printf("Epoch %d of %d took %.3fs\n", epoch, o->epochs, dt);
            rt_info("epoch %d: %.0f samples/s; time split per rank: compute %.3fs, communication wait %.3fs, data wait %.3fs",
                    epoch, samples / dt, t->compute_s, t->comm_s, t->data_s);
        }
        double loss = 0;
        long correct = 0, count = 1;
        if (!o->no_eval) {
            nn_trainer_eval(t, &loss, &correct, &count);
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
        nn_ddp_stats ds = t->ddp ? nn_ddp_get_stats(t->ddp) : (nn_ddp_stats){0};
        if (t->ddp && nn_ddp_comm(t->ddp) && t->rank == 0)
            rt_info("epoch %d: gradient allreduces: %llu rounds, %llu buckets, %llu bytes per rank (%s); "
                    "sync-bn allreduces %llu; optimizer steps %llu", epoch, (unsigned long long)ds.rounds,
                    (unsigned long long)ds.launches, (unsigned long long)ds.wire_bytes, rt_dtype_names[ds.wire],
                    (unsigned long long)ds.sync_calls, (unsigned long long)t->step);
        if (t->ddp) nn_ddp_compress_report(t->ddp, epoch);
        fflush(stdout);
        nn_metrics_row(&mx, "epoch", t->step, epoch, o->no_eval ? -1 : loss / count,
                       o->no_eval ? -1 : (double)correct / count, samples / dt, t->compute_s, t->comm_s, t->data_s);
        if (o->save && t->rank == 0 && t->cuda && nn_cuda_download(t->cuda, t->momentum))
            rt_fatal("cuda: %s", port_cuda_errmsg());
        if (o->save && t->rank == 0) {
            nn_ckpt_state st = ckpt_state(t, epoch);
            if (nn_ckpt_save(o->save, &t->g, &st, o->keep, err, sizeof err)) rt_fatal("%s", err);
        }
        if (o->save && t->rank == 0 && nn_data_save_meta(&t->train, o->save, err, sizeof err)) rt_fatal("%s", err);
        if (o->max_steps && t->step >= (uint64_t)o->max_steps) break;
        if (epoch < o->epochs && restart_point(t, epoch)) {
            rc = NN_EXIT_RESTART_POINT;
            break;
        }
    }
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
    nn_loader_stop(&t->loader);
    nn_cuda_close(t->cuda);
    rt_arena_free(&t->host);
    rt_arena_free(&t->data);
    free(t->nodes);
    free(t->pmeta);
    free(t->bmeta);
}
