/* The trainer up to its first step (nn_trainer_setup): every check a run needs, the data
 * located and loaded, memory planned and carved, the model built and initialised or
 * resumed, the ranks agreed. Each step of setup_local either succeeds or returns -1
 * with one line; the loop itself is in train.c.
 *
 * train.c, train_setup.c and train_inv.c are one module (the trainer, nn/trainer.h)
 * in three files for size: they call each other by design (a circle of files, not of
 * layers). */
#include "nn/train_setup.h"
#include "nn/train_epoch.h"
#include "nn/train_inv.h"
#include "nn/train_step.h"
#include "nn/train_zero.h"
#include "kernels/k.h"
#include "nn/ckpt.h"
#include "nn/graph_cuda.h"
#include "nn/lm.h"
#include "ports/cuda/port_cuda.h"
#include "ports/posix/port.h"
#include "rt/env.h"
#include "rt/isa.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (t->train.lm) nn_lm_plan(&t->lm, a, t);
    return 0;
}

static int has_conv(const nn_graph *g)
{
    for (int i = 1; i < g->nn; i++)
        if (!strcmp(g->nodes[i].op->kind, "conv2d") || !strcmp(g->nodes[i].op->kind, "conv1d")) return 1;
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
    _Static_assert((int)NN_AMP_BF16 == (int)NN_SET_AMP_BF16 && (int)NN_AMP_FP16 == (int)NN_SET_AMP_FP16, "one numbering");
    t->g.amp = t->set.amp;
    t->g.act16 = t->set.act16;
    t->g.channels_last = t->set.channels_last;
    t->g.tf32 = t->set.device == NN_DEVICE_CUDA && t->set.k.matmul_high;
    t->g.recompute_macs = o->recompute_macs;
    /* A quarter of this rank's share of the host's memory: the rest for data, parameters
     * and whatever else the machine runs. */
    t->g.mem_budget = port_mem_total() / 4 / (size_t)(t->ddp ? nn_ddp_local_world(t->ddp) : 1);
    if (nn_graph_finish(&t->g, a, max_batch, err, errlen)) return -1;
    nn_zero_plan(t, a);
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

/* The steps of setup_local, in order. Each either succeeds or returns -1 with one line
 * in err; together they check everything the run needs before its first step. */

/* The optimizer's flags and --invariant's layout (nn/train_inv.h). */
static int check_optimizer(nn_trainer *t, char *err, size_t errlen)
{
    return nn_optim_parse(&t->o, &t->opt.c, err, errlen) || nn_inv_setup(t, err, errlen) ? -1 : 0;
}

/* --grad-compress none|fp16|bf16: the buckets' type on the wire. */
static const rt_dtype grad_wire[] = {RT_F32, RT_F16, RT_BF16};

/* The GPU only when asked for (--no-cuda wins, as in the seed script); a build without
 * CUDA or a machine without a GPU says so here, in one line, as does a flag the GPU
 * path does not run. */
static int open_device(nn_trainer *t, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    if (t->set.device == NN_DEVICE_CUDA &&
        !(t->cuda = nn_cuda_open(t->ddp ? nn_ddp_local_rank(t->ddp) : 0, err, errlen)))
        return -1;
    const nn_optim_cfg *c = &t->opt.c;
    if (t->cuda && (c->q8 || o->zero)) {
        snprintf(err, errlen, "--device cuda: the GPU runs SGD, Adam and AdamW with their schedules, "
                 "--clip-grad-norm, --accum-steps, --sync-bn and --grad-compress in this version (no --zero, "
                 "8-bit optimizers)");
        return -1;
    }
    if (t->cuda) nn_cuda_use_optim(t->cuda, &t->opt);
    if (t->cuda && t->set.amp == NN_SET_AMP_FP16) nn_cuda_use_scaler(t->cuda, &(nn_scaler){o->loss_scale, 0});
    /* what of the settings the device path honours (nn_settings_build refused the rest) */
    if (t->cuda && t->rank == 0) {
        int amp = t->set.amp != NN_SET_AMP_NONE;
        char tc[320];
        snprintf(tc, sizeof tc, "kernels: conv, linear, GPT's Conv1D%s on the tensor cores (%s: %s)",
                 amp ? " and attention" : "", nn_cuda_wgmma(t->cuda) ? "wgmma" : "mma.sync", nn_cuda_wgmma_why(t->cuda));
        rt_info("--device cuda: %d thread(s) per rank and the %s kernels serve the host's work (data, checkpoints, "
                "--check-sync); the device runs its own %s%s", t->set.k.threads, rt_isa_name(t->set.k.isa),
                amp || t->set.k.matmul_high ? tc : "fp32 kernels",
                t->set.amp == NN_SET_AMP_BF16 ? " with bf16 operands (fp32 accumulation and master weights), "
                "activations in bf16 where every reader takes them (--amp-activations); the norms' statistics, softmax "
                "and the loss in fp32"
                : t->set.amp == NN_SET_AMP_FP16 ? " with f16 operands (fp32 accumulation and master weights, dynamic "
                "loss scaling), activations in f16 where every reader takes them (--amp-activations); the norms' "
                "statistics, softmax and the loss in fp32"
                : t->set.k.matmul_high ? " in TF32 (--matmul-precision high; fp32 accumulation), the rest in fp32" : "");
    }
    return 0;
}

/* Both splits located, detected and opened (headers read, not the samples yet). */
static int open_data(nn_trainer *t, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
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
    /* A language model: windows of T + 1 tokens, T the zoo model's context unless
     * --seq-len (cfg models: 64); synthetic tokens in its vocabulary (cfg: vocab=, else
     * bytes). */
    nn_gpt_cfg gm;
    int lm_file = o->model_file && nn_cfg_lm_shape(o->model_file, &gm.vocab, &gm.ctx);
    if (lm_file || (!o->model_file && !nn_model_gpt(o->model, &gm))) {
        if (!o->seq_len) dc.seq_len = lm_file ? 64 : gm.ctx;
        if (lm_file && gm.vocab <= 0) gm.vocab = 256;
        dc.syn_c = dc.syn_h = 1;
        dc.syn_w = dc.seq_len + 1, dc.syn_vocab = gm.vocab, dc.syn_lm = 1, dc.syn_classes = gm.vocab;
    }
    if (nn_data_open(&t->train, &dc, "train", err, errlen)) return -1;
    /* --no-eval needs no evaluation split: without one, the training split stands in
     * (it is never read for evaluation). */
    if (nn_data_open(&t->test, &dc, "test", err, errlen)) {
        if (!o->no_eval) return -1;
        t->test = t->train;
    }
    snprintf(t->data_dir, sizeof t->data_dir, "%s", t->train.dir);
    if (nn_tokens_same_vocab(&t->train, &t->test, err, errlen)) return -1;
    if (t->train.c != t->test.c || t->train.h != t->test.h || t->train.w != t->test.w ||
        t->train.tokens != t->test.tokens) {
        snprintf(err, errlen, "%s: training samples are %dx%dx%d, test samples %dx%dx%d", t->train.dir, t->train.c,
                 t->train.h, t->train.w, t->test.c, t->test.h, t->test.w);
        return -1;
    }
    return 0;
}

/* The model's description and tables, the evaluation chunk and this rank's test shard. */
static int describe_model(nn_trainer *t, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    t->mc = (nn_model_cfg){.name = o->model_file ? NULL : o->model, .file = o->model_file,
                           .in = {t->train.c, t->train.h, t->train.w, t->train.tokens},
                           .num_classes = o->num_classes ? o->num_classes : t->train.num_classes,
                           .vocab = t->train.vocab, .embed_dim = o->embed_dim, .lm = t->train.lm};
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
    return 0;
}

/* Data loaded and model built in their arenas (each planned first). */
static int plan_memory(nn_trainer *t, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    if (carve_all(t, &t->data, "data", carve_data, err, errlen) ||
        carve_all(t, &t->host, "host", carve_model, err, errlen))
        return -1;
    /* Without AVX512-BF16 the bf16 kernels round operands and run the fp32 ones: the
     * same numerics, never faster (measured 0.83-0.95x fp32 on AVX2). Say so once. */
    if (t->g.amp == NN_AMP_BF16 && !t->cuda && strcmp(k_isa(), "avx512bf16") && t->rank == 0)
        rt_warn("--amp bf16: this CPU path (%s kernels) has no bf16 dot product (AVX512-BF16): bf16 operands are "
                "emulated on fp32 kernels, slower than --amp none", k_isa());
    else if (t->g.amp == NN_AMP_BF16 && !t->cuda && !k_bf16_conv_dot() && has_conv(&t->g) && t->rank == 0)
        rt_warn("--amp bf16: this CPU's vdpbf16ps runs at half its FMA rate (Intel): the convs take bf16-rounded "
                "operands through the fp32 kernels, slower than --amp none (DDPRT_BF16_GEMM=dpbf16 forces it)");
    if (o->mem_report && t->rank == 0)
        printf("activations: planned %.2f MiB (%.2f MiB keeping every output), %.2f MiB without reuse; "
               "workspace %.2f MiB at most per node%s\n", t->g.act_bytes / 1048576.0,
               t->g.act_bytes_keep / 1048576.0, t->g.act_bytes_noreuse / 1048576.0, t->g.ws_bytes / 1048576.0,
               t->g.ws ? "" : ", planned inside the activations");
    if (o->mem_report && t->rank == 0 && !t->cuda)
        printf("recompute: convs / Conv1D layers with at most %d multiply-adds per output (0: none); budget for the activations "
               "%.0f MiB (a quarter of this rank's share of the host's memory; --recompute-macs)\n",
               t->g.recompute_macs > 0 ? t->g.recompute_macs : 0, t->g.mem_budget / 1048576.0);
    if (o->mem_report && t->rank == 0 && t->ddp && nn_ddp_get_stats(t->ddp).reg_bytes)
        printf("gradients: %.2f MiB outside the arena, in memory the ranks of a host reduce in place\n",
               nn_ddp_get_stats(t->ddp).reg_bytes / 1048576.0);
    return 0;
}

/* What the built model makes checkable: the flags that depend on it, and that the
 * first save (an epoch away) can hold its tensors. */
static int check_model(nn_trainer *t, char *err, size_t errlen)
{
    const nn_optim_cfg *c = &t->opt.c;
    for (int k = 0; k < c->ntopk; k++)
        if (c->topk[k] > t->g.num_classes) {
            snprintf(err, errlen, "--topk %d: the model has %d classes (k must be at most that)", c->topk[k],
                     t->g.num_classes);
            return -1;
        }
    /* A language model reads its token ids as rows of its embedding: the data's ids
     * (checked against the shards' vocabulary as they are read) must be rows of the
     * model's, or the embedding and the sampler read and write past their tables. */
    int mv = t->g.lm ? nn_lm_vocab(&t->g) : 0;
    const nn_dataset *big = t->test.vocab > t->train.vocab ? &t->test : &t->train;
    if (t->g.lm && big->vocab > mv) {
        snprintf(err, errlen, "%s: token ids up to %d (a vocabulary of %d) but the model's vocabulary is %d: give the "
                 "model vocab=%d or more (a [gpt] cfg's vocab=0 takes the data's)", big->dir, big->vocab - 1,
                 big->vocab, mv, big->vocab);
        return -1;
    }
    if (t->g.lm && t->o.generate > 0 && !t->o.init_from && !t->o.resume) {
        snprintf(err, errlen, "--generate %d samples from trained weights: give them with --init-from FILE or "
                 "--resume FILE (without, it would print random tokens)", t->o.generate);
        return -1;
    }
    /* A tokenizer that cannot print the samples is refused now, not warned about after
     * the first epoch's sample. */
    if (t->o.tokenizer) {
        char e2[512];
        nn_bpe *b = t->g.lm ? nn_bpe_load(t->o.tokenizer, e2, sizeof e2) : NULL;
        if (!b) {
            snprintf(err, errlen, "--tokenizer %s: %s", t->o.tokenizer,
                     t->g.lm ? e2 : "the model is not a language model (it prints no text)");
            return -1;
        }
        nn_bpe_free(b);
    }
    return t->o.save ? nn_ckpt_check_names(&t->g, err, errlen) : 0;
}

static void log_classes(const nn_trainer *t)
{
    if (!t->train.classes_bytes || t->rank != 0) return;
    char line[1024];
    size_t o2 = 0;
    for (int k = 0; k < t->train.num_classes && o2 < sizeof line; k++)
        o2 += (size_t)snprintf(line + o2, sizeof line - o2, "%s%s", k ? ", " : "", nn_data_class_name(&t->train, k));
    rt_info("%d classes: %s", t->train.num_classes, line);
}

/* Parameters from the seed, or from --init-from; the optimizer's state zeroed. */
static int init_weights(nn_trainer *t, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    nn_graph_init(&t->g, (uint64_t)o->seed);
    memset(t->g.grads, 0, t->g.nparams * sizeof(float));
    long nb = (t->sampler.num_samples + o->batch_size - 1) / o->batch_size;
    /* --lr-scale world: a K-rank job's rate under --invariant K, on any world size */
    nn_optim_reset(&t->opt, t->inv.on ? t->inv.t.K : t->world, (nb + t->opt.c.accum - 1) / t->opt.c.accum);
    if (!o->init_from) return 0;
    int skipped[2];
    if (nn_ckpt_init_from(&t->g, o->init_from, !o->init_non_strict, skipped, err, errlen)) return -1;
    if (o->init_non_strict && t->rank == 0)
        rt_info("--init-from %s: %d of the model's tensors not in the file (initialised from the seed), %d of the "
                "file's not in the model (ignored)", o->init_from, skipped[0], skipped[1]);
    return 0;
}

/* --resume: the checkpoint's weights, optimizer state and position, checked against
 * this run (--optimizer, --epochs). */
static int resume(nn_trainer *t, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    if (!o->resume) return 0;
    if (o->generate > 0) { /* sampling: the weights only, whatever optimizer trained them */
        char e2[1024];
        int skipped[2];
        if (!nn_ckpt_init_from(&t->g, o->resume, 1, skipped, e2, sizeof e2)) return 0;
        const char *m = strncmp(e2, "--init-from ", 12) ? e2 : e2 + 12;
        snprintf(err, errlen, "--resume %.700s", m);
        return -1;
    }
    nn_ckpt_state st = nn_trainer_ckpt_state(t, 0);
    /* ZeRO-1: the file holds the whole state (any world size), the rank keeps its shard. */
    if (nn_zero_sharded(t) || t->opt.c.q8 ? nn_zero_load(t, o->resume, &st, err, errlen) : nn_ckpt_load(o->resume, &t->g, &st, err, errlen))
        return -1;
    if (st.epoch > o->epochs && !o->generate) { /* --generate samples, whatever --epochs says */
        snprintf(err, errlen, "--resume %s: the checkpoint has trained %d epochs, more than --epochs %d (raise --epochs "
                 "to train on)", o->resume, st.epoch, o->epochs);
        return -1;
    }
    t->step = st.step;
    t->opt.t = st.optimizer_step;
    if (t->cuda && t->set.amp == NN_SET_AMP_FP16 && st.loss_scale > 0) /* the scaler goes on where it was */
        nn_cuda_use_scaler(t->cuda, &(nn_scaler){st.loss_scale, st.scale_good});
    t->start_epoch = st.epoch + 1;
    t->skip_steps = (int)st.epoch_steps; /* a --save-every checkpoint: its epoch goes on from there */
    return 0;
}

/* Data and memory: everything that can fail because of this rank's files. */
static int setup_local(nn_trainer *t, char *err, size_t errlen)
{
    int local_world = t->ddp ? nn_ddp_local_world(t->ddp) : 1;
    if (nn_settings_build(&t->set, &t->o, local_world, err, errlen) || nn_settings_apply(&t->set, err, errlen))
        return -1;
    if (check_optimizer(t, err, errlen) || open_device(t, err, errlen) || open_data(t, err, errlen) ||
        describe_model(t, err, errlen) || plan_memory(t, err, errlen) || check_model(t, err, errlen))
        return -1;
    log_classes(t);
    t->mode = t->inv.on ? &nn_mode_invariant : t->g.lm ? &nn_mode_lm : &nn_mode_classifier;
    /* A checkpoint this rank cannot read is this rank's failure, reported to all. */
    if (init_weights(t, err, errlen) || resume(t, err, errlen)) return -1;
    if (!t->cuda) return 0;
    /* the device graph, then DDP wired to it (nn_ddp_attach comes later, for both graphs) */
    if (nn_cuda_setup(t->cuda, &t->g, nn_ddp_cuda_stage_bytes(t->ddp), t->o.mem_report && t->rank == 0, err, errlen) ||
        nn_ddp_use_cuda(t->ddp, t->cuda, grad_wire[t->opt.c.compress], err, errlen))
        return -1;
    if (t->rank == 0 && t->set.amp != NN_SET_AMP_NONE) {
        int all, k = nn_cuda_nhwc_outputs(t->cuda, &all), pools;
        int kp = nn_cuda_nhwc_of_kind(t->cuda, "maxpool2d", &pools);
        char mp[64] = "";
        if (pools) snprintf(mp, sizeof mp, "; max pools: %d of %d", kp, pools);
        rt_info("--channels-last %s: %d of %d device activations channels last (NHWC: conv, BatchNorm, ReLU, add, max "
                "pool where the convs' channels allow; the rest NCHW)%s", t->set.channels_last ? "on" : "off", k, all,
                mp);
    }
    /* Its own allocation, not the device arena's: CUDA IPC maps an allocation from its
     * base, and the peers map exactly the buckets (nn/ddp_cuda.c). */
    size_t wb = t->ddp ? nn_ddp_get_stats(t->ddp).dev_wire_bytes : 0;
    if (t->o.mem_report && t->rank == 0 && wb)
        printf("device gradient buckets (--grad-compress %s): %.2f MiB (%zu bytes), one allocation beside the device "
               "arena, which CUDA IPC maps alone\n", rt_dtype_names[grad_wire[t->opt.c.compress]], wb / 1048576.0, wb);
    return 0;
}

/* Node i as the ranks compare it (nn_ddp_check_lines). */
static void model_line(void *g, int i, char *buf, size_t len)
{
    int k = snprintf(buf, len, "node %d: ", i);
    if (k > 0 && (size_t)k < len) nn_node_describe(g, i, buf + k, len - (size_t)k);
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
    /* The network itself, node by node (kind, name, inputs, attributes, shapes): two
     * ranks reading different files of the same name, or the same file by different
     * paths, are told apart by what they built, not by the --model-file string. */
    if (ddp && nn_ddp_check_lines(ddp, "the model", t->g.nn, model_line, &t->g, err, errlen)) return -1;
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
        /* The data's content too: the same sizes with other bytes would train silently. */
        const char *derived[] = {"model parameter count", "train samples", "test samples", "resumed step",
                                 "data classes/vocabulary hash", "--save given",
                                 "the training data's content (a checksum of the samples read)",
                                 "the test data's content (a checksum of the samples read)"};
        int64_t dv[] = {(int64_t)t->g.nparams, t->train.n, t->test.n, (int64_t)t->step,
                        (int64_t)(t->train.meta_hash >> 1), o->save != NULL, (int64_t)t->train.data_hash,
                        (int64_t)t->test.data_hash};
        for (int i = 0; i < 8; i++) names[nv] = derived[i], v[nv++] = dv[i];
        if (nn_ddp_check_config(ddp, names, v, nv, err, errlen)) return -1;
        nn_ddp_attach(ddp, &t->g, o->bucket_mb);
        if (nn_zero_sharded(t)) nn_ddp_set_zero(ddp, t->blk);
        if (nn_ddp_set_compress(ddp, grad_wire[t->opt.c.compress])) {
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
    t->restart_file = rt_env_str(RT_ENV_ELASTIC); /* ddprt-launch --nnodes MIN:MAX */
    char how[160];
    nn_settings_describe(&t->set, how, sizeof how);
    rt_info("training %s on %s: %d train / %d test samples, %d rank(s), %s", o->model_file ? o->model_file : o->model,
            t->data_dir, t->train.n, t->test.n, t->world, how);
    return 0;
}

void nn_trainer_free(nn_trainer *t)
{
    nn_bpe_free(t->lm.bpe);
    nn_loader_stop(&t->loader);
    if (t->cuda) nn_ddp_use_cuda(t->ddp, NULL, RT_F32, NULL, 0);
    nn_cuda_close(t->cuda);
    rt_arena_free(&t->host);
    rt_arena_free(&t->data);
    free(t->nodes);
    free(t->pmeta);
    free(t->bmeta);
}
