#include "nn/opts.h"
#include "nn/optim.h"
#include "rt/args.h"
#include "rt/version.h"
#include "rt/env.h"
#include "rt/hash.h"
#include "rt/log.h"
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Scope (the rt_arg tag): JOB = changes what the ranks do together, so
 * nn_opts_agreement compares it across ranks; RANK = may differ per rank (paths,
 * threads, logging). A new flag is a JOB flag unless marked otherwise, so the agreement
 * covers it without a second list. */
enum { JOB = 0, RANK = 1 };
#define F(n, t, field, sc, d, h) {n, 0, t, d, offsetof(nn_opts, field), 0, 0, NULL, NULL, h, sc, NULL}
/* A flag with its default, written here once: nn_opts_default sets it, --help prints it. */
#define FD(n, t, field, sc, d, dflt, h) {n, 0, t, d, offsetof(nn_opts, field), 0, 0, NULL, NULL, h, sc, dflt}
#define FR(n, field, sc, lo, hi, h) {n, 0, RT_ARG_INT, RT_ARG_RANGE, offsetof(nn_opts, field), lo, hi, NULL, NULL, h, sc, NULL}
#define FC(n, field, sc, ch, h) {n, 0, RT_ARG_STR, RT_ARG_ANY, offsetof(nn_opts, field), 0, 0, ch, NULL, h, sc, NULL}
static const rt_arg flags[] = {
    FD("batch-size", RT_ARG_INT, batch_size, JOB, RT_ARG_POS, "64", "input batch size per rank for training"),
    FD("test-batch-size", RT_ARG_INT, test_batch_size, JOB, RT_ARG_POS, "1000", "input batch size for testing"),
    FD("epochs", RT_ARG_INT, epochs, JOB, RT_ARG_POS, "10", "number of epochs to train"),
    FD("lr", RT_ARG_DOUBLE, lr, JOB, RT_ARG_POS, "0.01", "learning rate"),
    FD("momentum", RT_ARG_DOUBLE, momentum, JOB, RT_ARG_UNIT, "0.5", "SGD momentum, in [0, 1)"),
    FD("weight-decay", RT_ARG_DOUBLE, weight_decay, JOB, RT_ARG_NONNEG, "0", "SGD weight decay"),
    F("nesterov", RT_ARG_FLAG, nesterov, JOB, RT_ARG_ANY, "Nesterov momentum"),
    F("no-cuda", RT_ARG_FLAG, no_cuda, JOB, RT_ARG_ANY, "disables CUDA training"),
    FC("device", device, JOB, "cpu|cuda", "cpu or cuda (default: cpu; cuda needs a CUDA build and a GPU)"),
    FD("seed", RT_ARG_INT, seed, JOB, RT_ARG_ANY, "1", "random seed"),
    FD("log-interval", RT_ARG_INT, log_interval, RANK, RT_ARG_POS, "10", "how many batches to wait before logging training status"),
    F("data", RT_ARG_STR, data, RANK, RT_ARG_ANY, "dataset directory (default: $DDPRT_DATA, ./data, /usr/share/datasets/fashion-mnist)"),
    FD("model", RT_ARG_STR, model, JOB, RT_ARG_ANY, "lenet", "model"),
    F("threads", RT_ARG_INT, threads, RANK, RT_ARG_POS, "compute threads (default: the cores available to this rank)"),
    F("mem-report", RT_ARG_FLAG, mem_report, RANK, RT_ARG_ANY, "print the memory plan at start-up and the peak RSS at the end"),
    FR("recompute-macs", recompute_macs, RANK, -2, INT_MAX,
      "recompute in backward the convs and GPT's Conv1D layers with at most N multiply-adds per output, trading time for memory, same results "
      "(default -2: none while the planned activations fit in a quarter of this rank's share of the host's memory "
      "(RAM or cgroup limit), else as -1; -1: the fewest that halve the planned activations or bring them under 32 MiB; "
      "no recomputation at all when they are under 32 MiB anyway; 0: BN/ReLU/add only)"),
    F("drop-last", RT_ARG_FLAG, drop_last, JOB, RT_ARG_ANY, "drop the tail of the dataset instead of padding"),
    F("init-method", RT_ARG_STR, init_method, RANK, RT_ARG_ANY, "rendezvous: tcp://HOST:PORT, file:///path or env://"),
    FC("backend", backend, JOB, "tcp|verbs|auto", "transport: tcp, verbs or auto (default: auto)"),
    F("rank", RT_ARG_INT, rank, RANK, RT_ARG_NONNEG, "rank of this process"),
    F("world-size", RT_ARG_INT, world_size, JOB, RT_ARG_POS, "number of processes"),
    FD("bucket-mb", RT_ARG_DOUBLE, bucket_mb, JOB, RT_ARG_POS, "25", "gradient bucket size in MiB"),
    F("check-sync", RT_ARG_INT, check_sync, JOB, RT_ARG_NONNEG, "check every N steps that all ranks hold identical parameters"),
    F("metrics", RT_ARG_STR, metrics, RANK, RT_ARG_ANY, "write a CSV row per log interval and epoch to FILE"),
    F("plot", RT_ARG_STR, plot, RANK, RT_ARG_ANY, "draw loss/accuracy curves into FILE.svg"),
    F("save", RT_ARG_STR, save, RANK, RT_ARG_ANY, "checkpoint path (safetensors), written every epoch"),
    F("resume", RT_ARG_STR, resume, RANK, RT_ARG_ANY, "resume from a checkpoint"),
    FR("keep", keep, RANK, 1, 1000, "checkpoint generations kept: PATH, PATH.1, ... (1-1000; default: 1)"),
    F("max-steps", RT_ARG_INT, max_steps, JOB, RT_ARG_NONNEG, "stop after N training steps (0: no limit)"),
    F("save-every", RT_ARG_INT, save_every, JOB, RT_ARG_NONNEG,
      "with --save: also checkpoint every N optimizer steps inside an epoch (the sampler position too: --resume goes "
      "on mid-epoch; elastic restart points); 0: at epoch ends only"),
    /* RANK: the ranks compare the network they built from it (nn_trainer_setup), not the path. */
    F("model-file", RT_ARG_STR, model_file, RANK, RT_ARG_ANY, "build the network from a plain-text description (see README)"),
    F("num-classes", RT_ARG_INT, num_classes, JOB, RT_ARG_POS, "output classes (default: the data's)"),
    F("embed-dim", RT_ARG_INT, embed_dim, JOB, RT_ARG_POS, "textcnn embedding size (default: 128)"),
    FC("nan-check", nan_check, JOB, "on|off", "stop when the loss or a gradient is not finite (default: on)"),
    F("no-eval", RT_ARG_FLAG, no_eval, JOB, RT_ARG_ANY, "skip the test-set evaluation after each epoch (throughput runs)"),
    F("init-from", RT_ARG_STR, init_from, RANK, RT_ARG_ANY,
      "start from the weights of a safetensors state_dict (fine-tuning); as load_state_dict(strict=True): exactly the "
      "model's tensors"),
    F("init-non-strict", RT_ARG_FLAG, init_non_strict, RANK, RT_ARG_ANY,
      "--init-from as load_state_dict(strict=False): the tensors that match by name, the rest counted and skipped"),
    FC("dataset", dataset, JOB, "idx|cifar10|cifar100|imagefolder|text|synthetic|tokens",
       "data format: idx, cifar10, cifar100, imagefolder, text, synthetic, tokens (default: detect)"),
    F("image-size", RT_ARG_INT, image_size, JOB, RT_ARG_POS, "image side after transforms (default: the data's own; image folders 224)"),
    FC("augment", augment, JOB, "none|cifar|imagenet", "none, cifar or imagenet (default: cifar for CIFAR, imagenet for folders)"),
    FD("workers", RT_ARG_INT, workers, RANK, RT_ARG_POS, "1", "data loader threads per rank"),
    FC("bad-sample", bad_sample, JOB, "fail|skip", "fail or skip: what a corrupt image or bad text line does (default: fail)"),
    F("seq-len", RT_ARG_INT, seq_len, JOB, RT_ARG_POS, "text: tokens per sample, padded or truncated (default: 64); language models: T (default: the model's context, cfg models 64)"),
    F("min-freq", RT_ARG_INT, min_freq, JOB, RT_ARG_POS, "text: minimum count of a word in the vocabulary (default: 1)"),
    F("max-vocab", RT_ARG_INT, max_vocab, JOB, RT_ARG_POS, "text: vocabulary size limit incl. <pad> and <unk> (default: none)"),
    FC("optimizer", optimizer, JOB, "sgd|adam|adamw|adam8bit|adamw8bit", "sgd, adam or adamw (PyTorch's; betas 0.9/0.999, eps 1e-8); adam8bit, adamw8bit: their moments in 8 bits (a quarter of the memory; bitsandbytes' Adam8bit) (default: sgd)"),
    F("no-decay-bn-bias", RT_ARG_FLAG, no_decay_bn_bias, JOB, RT_ARG_ANY, "no weight decay on biases and BatchNorm parameters"),
    FC("lr-schedule", lr_schedule, JOB, "none|step|multistep|cosine|cosine-step", "none, step, multistep or cosine, per epoch; cosine-step: cosine stepped every optimizer step, reaching 0 at the end (default: none)"),
    FD("lr-step", RT_ARG_INT, lr_step, JOB, RT_ARG_POS, "30", "step schedule: epochs between decays"),
    FD("lr-gamma", RT_ARG_DOUBLE, lr_gamma, JOB, RT_ARG_POS, "0.1", "step/multistep: decay factor"),
    F("lr-milestones", RT_ARG_STR, lr_milestones, JOB, RT_ARG_ANY, "multistep: epochs at which to decay, e.g. 30,60,90"),
    FD("warmup-epochs", RT_ARG_DOUBLE, warmup_epochs, JOB, RT_ARG_NONNEG, "0", "linear learning-rate warmup over X epochs, per step"),
    FC("lr-scale", lr_scale, JOB, "none|world", "none or world (multiply --lr by the world size, Goyal et al.)"),
    FD("accum-steps", RT_ARG_INT, accum_steps, JOB, RT_ARG_POS, "1", "micro-batches per optimizer step, one allreduce each step"),
    F("clip-grad-norm", RT_ARG_DOUBLE, clip_grad_norm, JOB, RT_ARG_NONNEG, "clip the global gradient L2 norm to X (default: off)"),
    F("sync-bn", RT_ARG_FLAG, sync_bn, JOB, RT_ARG_ANY, "SyncBatchNorm: batch statistics over all ranks"),
    FC("grad-compress", grad_compress, JOB, "none|fp16|bf16", "none, fp16 or bf16: gradient buckets sent in 16 bits (default: none)"),
    F("topk", RT_ARG_STR, topk, JOB, RT_ARG_ANY, "report top-k test accuracy for these k, e.g. 1,5"),
    FC("conv-algo", conv_algo, JOB, "auto|direct|winograd|winograd4|winograd4c",
       "fp32 CPU 3x3 stride-1 pad-1 convs: auto (Winograd where measured faster), direct (the shifted-row GEMMs' "
       "bits), winograd (F(2x2,3x3)), winograd4 (F(4x4,3x3) fwd/dX), winograd4c (the same channels-last) "
       "(default: auto, or $DDPRT_CONV)"),
    FC("matmul-precision", matmul_precision, JOB, "highest|high",
       "fp32 linear layers' products, as torch.set_float32_matmul_precision: highest (fp32 FMAs) or high "
       "(bf16x3 on Intel AMX tiles: each operand as two bf16 parts, ~2^-16 relative per product, about 2x the fp32 GEMMs; "
       "as highest without AMX) (default: highest)"),
    FC("amp", amp, JOB, "none|bf16|fp16", "mixed precision: none or bf16 (conv/linear in bf16, fp32 master weights); fp16 needs CUDA"),
    FD("loss-scale", RT_ARG_DOUBLE, loss_scale, JOB, RT_ARG_POS, "65536",
       "--amp fp16: the initial dynamic loss scale (GradScaler's init_scale; halves on inf/NaN, doubles after 2000 clean steps)"),
    FC("amp-activations", amp_act, JOB, "16|32",
       "--amp with --device cuda: keep activations in 16 bits where every op reading them takes them so, as autocast "
       "does (half the memory), or all in fp32 (default: 16)"),
    FC("channels-last", channels_last, JOB, "auto|on|off",
       "--amp with --device cuda: keep conv / BN / ReLU / add / pool activations channels last (NHWC, as "
       "model.to(memory_format=torch.channels_last)) where the convs' channels allow; auto: on there (default: auto)"),
    F("invariant", RT_ARG_STR, invariant, JOB, RT_ARG_ANY,
      "K[:r0xr1..]: K virtual shards of --batch-size each, the same bits on any world size that holds whole subtrees "
      "of their reduction tree (K=8: 1, 2, 4, 8 ranks); 0: off, as without the flag"),
    FR("zero", zero, JOB, 0, 1, "ZeRO stage: 1 keeps each rank's shard of the optimizer state only (parameters all-gathered after the step; results as without) (default: 0)"),
    F("eval-every", RT_ARG_INT, eval_every, JOB, RT_ARG_NONNEG, "language models: validation loss every N steps too (default: 0, per epoch)"),
    FD("eval-batches", RT_ARG_INT, eval_batches, JOB, RT_ARG_NONNEG, "20", "language models: validation batches per evaluation (0: all)"),
    F("sample-every", RT_ARG_INT, sample_every, JOB, RT_ARG_NONNEG, "language models: print generated text every N steps (default: 0, at the start and end)"),
    FD("sample-len", RT_ARG_INT, sample_len, RANK, RT_ARG_POS, "64", "language models: tokens per printed sample"),
    FD("temperature", RT_ARG_DOUBLE, temperature, RANK, RT_ARG_POS, "1.0", "language models: sampling temperature"),
    F("top-k", RT_ARG_INT, top_k, RANK, RT_ARG_NONNEG, "language models: sample among the k likeliest tokens (default: 0, all)"),
    F("generate", RT_ARG_INT, generate, RANK, RT_ARG_NONNEG, "language models: print N generated tokens (after --init-from or --resume) and exit"),
    F("tokenizer", RT_ARG_STR, tokenizer, RANK, RT_ARG_ANY, "language models: a directory with encoder.json + vocab.bpe to print samples as text (default: the data's)"),
};
#define NFLAGS (int)(sizeof flags / sizeof flags[0])
static const rt_args spec = {"ddprt-train", flags, NFLAGS, 0, 0};

void nn_opts_default(nn_opts *o)
{
    char err[256];
    memset(o, 0, sizeof *o);
    /* the table's defaults (FD), each checked against its flag's domain */
    if (rt_args_defaults(&spec, o, err, sizeof err)) rt_fatal("ddprt-train's option table: %s", err);
    o->rank = -1;       /* not given: the launcher's environment, or the rendezvous's */
    o->world_size = -1;
    o->recompute_macs = -2; /* its help text explains -2 */
}

void nn_opts_usage(void)
{
    printf("usage: ddprt-train [flags]\n\nTrains a model data-parallel (PyTorch's MNIST example flags).\n\n");
    rt_args_usage(&spec, stdout);
}

int nn_opts_parse(nn_opts *o, int argc, char **argv)
{
    char err[512];
    int rc = rt_args_parse(&spec, o, argc, argv, NULL, NULL, err, sizeof err);
    if (rc == RT_ARGS_HELP) {
        nn_opts_usage();
        return 1;
    }
    if (rc == RT_ARGS_VERSION) {
        printf("ddprt-train (ddprt) %s\n", DDPRT_VERSION);
        return 1;
    }
    if (rc) {
        rt_error("%s", err);
        return -1;
    }
    if (o->rank >= 0 && o->world_size > 0 && o->rank >= o->world_size) {
        rt_error("--rank %d is out of range for --world-size %d", o->rank, o->world_size);
        return -1;
    }
    if (o->invariant && !strcmp(o->invariant, "0")) o->invariant = NULL; /* off: as without, for the agreement too */
    if (o->save_every && !o->save) {
        rt_error("--save-every %d: the checkpoints need a path: --save PATH", o->save_every);
        return -1;
    }
    nn_optim_cfg oc;
    if (nn_optim_parse(o, &oc, err, sizeof err)) { rt_error("%s", err); return -1; }
    return 0;
}

int nn_opts_agreement(const nn_opts *o, const char **names, int64_t *vals, int max)
{
    int n = 0;
    for (int i = 0; i < NFLAGS; i++) {
        const rt_arg *f = &flags[i];
        if (f->tag == RANK) continue;
        if (n == max) return -1;
        const void *src = (const char *)o + f->off;
        int64_t v;
        if (f->type == RT_ARG_STR) {
            const char *s = *(const char *const *)src;
            v = s ? (int64_t)rt_fnv1a_str(RT_FNV1A_INIT, s) : 0;
        } else if (f->type == RT_ARG_DOUBLE) {
            double x = *(const double *)src;
            if (x == 0) x = 0; /* -0 and 0 agree */
            memcpy(&v, &x, sizeof v);
        } else {
            v = *(const int *)src;
        }
        names[n] = f->name;
        vals[n++] = v;
    }
    return n;
}

int nn_opts_flags(const char **names, int *per_rank, int max)
{
    int n = 0;
    for (int i = 0; i < NFLAGS && n < max; i++, n++) {
        names[n] = flags[i].name;
        per_rank[n] = flags[i].tag == RANK;
    }
    return n;
}

int nn_opts_check_paths(const nn_opts *o, char *err, size_t errlen)
{
    const char *const which[][2] = {{"plot", o->plot}, {"metrics", o->metrics}, {"save", o->save}};
    for (int i = 0; i < 3; i++) {
        const char *p = which[i][1];
        if (!p || !*p) continue;
        char dir[4096];
        struct stat st;
        const char *slash = strrchr(p, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else snprintf(dir, sizeof dir, "%.*s", slash == p ? 1 : (int)(slash - p), p);
        if (slash && !slash[1]) {
            snprintf(err, errlen, "--%s %s: names a directory; give a file path (e.g. %sck.st)", which[i][0], p, p);
            return -1;
        }
        if (access(dir, W_OK | X_OK)) {
            snprintf(err, errlen, "--%s %s: cannot write into %s: %s", which[i][0], p, dir, strerror(errno));
            return -1;
        }
        /* The file is replaced by a rename at the end of the epoch: a directory there
         * would make the first save fail an epoch late. */
        if (!stat(p, &st) && S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "--%s %s: names a directory; give a file path (e.g. %s/ck.st)", which[i][0], p, p);
            return -1;
        }
    }
    return 0;
}
