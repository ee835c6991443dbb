#include "nn/opts.h"
#include "nn/optim.h"
#include "rt/env.h"
#include "rt/log.h"
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { T_INT, T_POSINT, T_DOUBLE, T_STR, T_FLAG };
/* Domains checked at parse time. D_POS: finite > 0; D_NONNEG: finite (or integer) >= 0;
 * D_UNIT: [0, 1); D_CHOICE: one of the '|'-separated words in choices. */
enum { D_ANY, D_POS, D_NONNEG, D_UNIT, D_CHOICE };
/* Scope: JOB = changes what the ranks do together, so nn_opts_agreement compares it
 * across ranks; RANK = may differ per rank (paths, threads, logging). A new flag is a
 * JOB flag unless marked otherwise, so the agreement covers it without a second list. */
enum { JOB = 0, RANK = 1 };
typedef struct flag {
    const char *name;
    int type;
    size_t off;
    int scope, dom;
    const char *choices, *help;
} flag;
#define F(n, t, field, sc, d, h) {n, t, offsetof(nn_opts, field), sc, d, NULL, h}
#define FC(n, field, sc, ch, h) {n, T_STR, offsetof(nn_opts, field), sc, D_CHOICE, ch, h}
static const flag flags[] = {
    F("batch-size", T_POSINT, batch_size, JOB, D_ANY, "input batch size per rank for training (default: 64)"),
    F("test-batch-size", T_POSINT, test_batch_size, JOB, D_ANY, "input batch size for testing (default: 1000)"),
    F("epochs", T_POSINT, epochs, JOB, D_ANY, "number of epochs to train (default: 10)"),
    F("lr", T_DOUBLE, lr, JOB, D_POS, "learning rate (default: 0.01)"),
    F("momentum", T_DOUBLE, momentum, JOB, D_UNIT, "SGD momentum, in [0, 1) (default: 0.5)"),
    F("weight-decay", T_DOUBLE, weight_decay, JOB, D_NONNEG, "SGD weight decay (default: 0)"),
    F("nesterov", T_FLAG, nesterov, JOB, D_ANY, "Nesterov momentum"),
    F("no-cuda", T_FLAG, no_cuda, JOB, D_ANY, "disables CUDA training"),
    FC("device", device, JOB, "cpu|cuda", "cpu or cuda (default: cpu; cuda needs a CUDA build and a GPU)"),
    F("seed", T_INT, seed, JOB, D_ANY, "random seed (default: 1)"),
    F("log-interval", T_POSINT, log_interval, RANK, D_ANY, "how many batches to wait before logging training status (default: 10)"),
    F("data", T_STR, data, RANK, D_ANY, "dataset directory (default: $DDPRT_DATA, ./data, /usr/share/datasets/fashion-mnist)"),
    F("model", T_STR, model, JOB, D_ANY, "model (default: lenet)"),
    F("threads", T_POSINT, threads, RANK, D_ANY, "compute threads (default: the cores available to this rank)"),
    F("mem-report", T_FLAG, mem_report, RANK, D_ANY, "print the memory plan at start-up and the peak RSS at the end"),
    F("recompute-macs", T_INT, recompute_macs, RANK, D_ANY,
      "recompute in backward the convs with at most N multiply-adds per output, trading time for memory, same results "
      "(default -1: the fewest that halve the planned activations or bring them under 32 MiB; no recomputation at all "
      "when they are under 32 MiB anyway; 0: BN/ReLU/add only)"),
    F("drop-last", T_FLAG, drop_last, JOB, D_ANY, "drop the tail of the dataset instead of padding"),
    F("init-method", T_STR, init_method, RANK, D_ANY, "rendezvous: tcp://HOST:PORT, file:///path or env://"),
    FC("backend", backend, JOB, "tcp|verbs|auto", "transport: tcp, verbs or auto (default: auto)"),
    F("rank", T_INT, rank, RANK, D_NONNEG, "rank of this process"),
    F("world-size", T_POSINT, world_size, JOB, D_ANY, "number of processes"),
    F("bucket-mb", T_DOUBLE, bucket_mb, JOB, D_POS, "gradient bucket size in MiB (default: 25)"),
    F("check-sync", T_INT, check_sync, JOB, D_NONNEG, "check every N steps that all ranks hold identical parameters"),
    F("metrics", T_STR, metrics, RANK, D_ANY, "write a CSV row per log interval and epoch to FILE"),
    F("plot", T_STR, plot, RANK, D_ANY, "draw loss/accuracy curves into FILE.svg"),
    F("save", T_STR, save, RANK, D_ANY, "checkpoint path (safetensors), written every epoch"),
    F("resume", T_STR, resume, RANK, D_ANY, "resume from a checkpoint"),
    F("keep", T_POSINT, keep, RANK, D_ANY, "checkpoint generations kept: PATH, PATH.1, ... (default: 1)"),
    F("max-steps", T_INT, max_steps, JOB, D_NONNEG, "stop after N training steps (0: no limit)"),
    F("model-file", T_STR, model_file, JOB, D_ANY, "build the network from a plain-text description (see README)"),
    F("num-classes", T_POSINT, num_classes, JOB, D_ANY, "output classes (default: the data's)"),
    F("embed-dim", T_POSINT, embed_dim, JOB, D_ANY, "textcnn embedding size (default: 128)"),
    FC("nan-check", nan_check, JOB, "on|off", "stop when the loss or a gradient is not finite (default: on)"),
    F("no-eval", T_FLAG, no_eval, JOB, D_ANY, "skip the test-set evaluation after each epoch (throughput runs)"),
    F("init-from", T_STR, init_from, RANK, D_ANY, "start from the weights of a safetensors state_dict (fine-tuning)"),
    FC("dataset", dataset, JOB, "idx|cifar10|cifar100|imagefolder|text|synthetic",
       "data format: idx, cifar10, cifar100, imagefolder, text, synthetic (default: detect)"),
    F("image-size", T_POSINT, image_size, JOB, D_ANY, "image side after transforms (default: the data's own; image folders 224)"),
    FC("augment", augment, JOB, "none|cifar|imagenet", "none, cifar or imagenet (default: cifar for CIFAR, imagenet for folders)"),
    F("workers", T_POSINT, workers, RANK, D_ANY, "data loader threads per rank (default: 1)"),
    FC("bad-sample", bad_sample, JOB, "fail|skip", "fail or skip: what a corrupt image or bad text line does (default: fail)"),
    F("seq-len", T_POSINT, seq_len, JOB, D_ANY, "text: tokens per sample, padded or truncated (default: 64)"),
    F("min-freq", T_POSINT, min_freq, JOB, D_ANY, "text: minimum count of a word in the vocabulary (default: 1)"),
    F("max-vocab", T_POSINT, max_vocab, JOB, D_ANY, "text: vocabulary size limit incl. <pad> and <unk> (default: none)"),
    FC("optimizer", optimizer, JOB, "sgd|adam|adamw", "sgd, adam or adamw (PyTorch's; betas 0.9/0.999, eps 1e-8) (default: sgd)"),
    F("no-decay-bn-bias", T_FLAG, no_decay_bn_bias, JOB, D_ANY, "no weight decay on biases and BatchNorm parameters"),
    FC("lr-schedule", lr_schedule, JOB, "none|step|multistep|cosine|cosine-step", "none, step, multistep or cosine, per epoch; cosine-step: cosine stepped every optimizer step, reaching 0 at the end (default: none)"),
    F("lr-step", T_POSINT, lr_step, JOB, D_ANY, "step schedule: epochs between decays (default: 30)"),
    F("lr-gamma", T_DOUBLE, lr_gamma, JOB, D_POS, "step/multistep: decay factor (default: 0.1)"),
    F("lr-milestones", T_STR, lr_milestones, JOB, D_ANY, "multistep: epochs at which to decay, e.g. 30,60,90"),
    F("warmup-epochs", T_DOUBLE, warmup_epochs, JOB, D_NONNEG, "linear learning-rate warmup over X epochs, per step (default: 0)"),
    FC("lr-scale", lr_scale, JOB, "none|world", "none or world (multiply --lr by the world size, Goyal et al.)"),
    F("accum-steps", T_POSINT, accum_steps, JOB, D_ANY, "micro-batches per optimizer step, one allreduce each step (default: 1)"),
    F("clip-grad-norm", T_DOUBLE, clip_grad_norm, JOB, D_NONNEG, "clip the global gradient L2 norm to X (default: off)"),
    F("sync-bn", T_FLAG, sync_bn, JOB, D_ANY, "SyncBatchNorm: batch statistics over all ranks"),
    FC("grad-compress", grad_compress, JOB, "none|fp16|bf16", "none, fp16 or bf16: gradient buckets sent in 16 bits (default: none)"),
    F("topk", T_STR, topk, JOB, D_ANY, "report top-k test accuracy for these k, e.g. 1,5"),
    FC("amp", amp, JOB, "none|bf16|fp16", "mixed precision: none or bf16 (conv/linear in bf16, fp32 master weights); fp16 needs CUDA"),
};
#define NFLAGS (int)(sizeof flags / sizeof flags[0])

void nn_opts_default(nn_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 64;
    o->test_batch_size = 1000;
    o->epochs = 10;
    o->lr = 0.01;
    o->momentum = 0.5;
    o->seed = 1;
    o->log_interval = 10;
    o->model = "lenet";
    o->rank = -1;
    o->world_size = -1;
    o->bucket_mb = 25;
    o->workers = 1;
    o->lr_step = 30;
    o->lr_gamma = 0.1;
    o->accum_steps = 1;
    o->recompute_macs = -1;
}

void nn_opts_usage(void)
{
    printf("usage: ddprt-train [flags]\n\nTrains a model data-parallel (PyTorch's MNIST example flags).\n\n");
    for (int i = 0; i < NFLAGS; i++) {
        const char *arg = flags[i].type == T_FLAG ? "" : flags[i].type == T_STR ? " S" : flags[i].type == T_DOUBLE ? " X" : " N";
        char left[48];
        snprintf(left, sizeof left, "--%s%s", flags[i].name, arg);
        printf("  %-24s %s\n", left, flags[i].help);
    }
    printf("  %-24s %s\n", "--help", "show this help");
    printf("  %-24s %s\n", "--version", "print the version and exit");
}

static int in_choices(const char *v, const char *choices)
{
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        size_t k = strcspn(c, "|");
        if (k == n && !strncmp(c, v, n)) return 1;
        c += k + (c[k] == '|');
    }
    return 0;
}

static int set_value(nn_opts *o, const flag *f, const char *v)
{
    char *end;
    void *dst = (char *)o + f->off;
    errno = 0;
    if (f->type == T_STR) {
        if (f->dom == D_CHOICE && !in_choices(v, f->choices)) {
            rt_error("--%s: expected one of %s, got '%s'", f->name, f->choices, v);
            return -1;
        }
        *(const char **)dst = v;
        return 0;
    }
    if (f->type == T_DOUBLE) {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) {
            rt_error("--%s: expected a finite number, got '%s'", f->name, v);
            return -1;
        }
        const char *want = f->dom == D_POS && !(x > 0) ? "> 0" : f->dom == D_NONNEG && !(x >= 0) ? ">= 0"
                         : f->dom == D_UNIT && !(x >= 0 && x < 1) ? "in [0, 1)" : NULL;
        if (want) { rt_error("--%s: must be %s, got '%s'", f->name, want, v); return -1; }
        *(double *)dst = x;
        return 0;
    }
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < INT_MIN || x > INT_MAX || (f->type == T_POSINT && x <= 0) ||
        (f->dom == D_NONNEG && x < 0)) {
        rt_error("--%s: expected a%s integer, got '%s'", f->name,
                 f->type == T_POSINT ? " positive" : f->dom == D_NONNEG ? " non-negative" : "n", v);
        return -1;
    }
    *(int *)dst = (int)x;
    return 0;
}

int nn_opts_parse(nn_opts *o, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            nn_opts_usage();
            return 1;
        }
        if (strncmp(a, "--", 2)) {
            rt_error("unexpected argument '%s' (flags start with --; see --help)", a);
            return -1;
        }
        char name[64];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), a + 2);
        /* Accept the argparse spelling with underscores too (--batch_size). */
        for (char *p = name; *p; p++) if (*p == '_') *p = '-';
        const flag *f = NULL;
        for (int k = 0; k < NFLAGS; k++)
            if (!strcmp(flags[k].name, name)) f = &flags[k];
        if (!f) {
            int best = 99, bi = 0;
            for (int k = 0; k < NFLAGS; k++) {
                int dist = rt_edit_distance(name, flags[k].name);
                if (dist < best) { best = dist; bi = k; }
            }
            if (best <= 3) rt_error("unknown flag --%s (did you mean --%s? see --help)", name, flags[bi].name);
            else rt_error("unknown flag --%s (see --help)", name);
            return -1;
        }
        if (f->type == T_FLAG) {
            if (eq) { rt_error("--%s takes no value", f->name); return -1; }
            *(int *)((char *)o + f->off) = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) { rt_error("--%s needs a value (see --help)", f->name); return -1; }
        if (set_value(o, f, v)) return -1;
    }
    if (o->rank >= 0 && o->world_size > 0 && o->rank >= o->world_size) {
        rt_error("--rank %d is out of range for --world-size %d", o->rank, o->world_size);
        return -1;
    }
    char oerr[256];
    nn_optim_cfg oc;
    if (nn_optim_parse(o, &oc, oerr, sizeof oerr)) { rt_error("%s", oerr); return -1; }
    return 0;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

int nn_opts_agreement(const nn_opts *o, const char **names, int64_t *vals, int max)
{
    int n = 0;
    for (int i = 0; i < NFLAGS; i++) {
        const flag *f = &flags[i];
        if (f->scope == RANK) continue;
        if (n == max) return -1;
        const void *src = (const char *)o + f->off;
        int64_t v;
        if (f->type == T_STR) {
            const char *s = *(const char *const *)src;
            v = s ? (int64_t)fnv1a(s) : 0;
        } else if (f->type == T_DOUBLE) {
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
        per_rank[n] = flags[i].scope == RANK;
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
        const char *slash = strrchr(p, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else snprintf(dir, sizeof dir, "%.*s", slash == p ? 1 : (int)(slash - p), p);
        if (access(dir, W_OK | X_OK)) {
            snprintf(err, errlen, "--%s %s: cannot write into %s: %s", which[i][0], p, dir, strerror(errno));
            return -1;
        }
    }
    if (o->amp && strcmp(o->amp, "none") && strcmp(o->amp, "bf16") && strcmp(o->amp, "fp16")) {
        rt_error("--amp: expected none, bf16 or fp16, got '%s'", o->amp);
        return -1;
    }
    int cuda = o->device && !strcmp(o->device, "cuda");
    if (o->amp && !strcmp(o->amp, "fp16") && !cuda) {
        rt_error("--amp fp16 needs the CUDA build and a GPU (--device cuda); on the CPU use --amp bf16");
        return -1;
    }
    if (o->amp && strcmp(o->amp, "none") && cuda) {
        rt_error("--amp %s: mixed precision on --device cuda is not implemented yet (CPU: --amp bf16)", o->amp);
        return -1;
    }
    return 0;
}
