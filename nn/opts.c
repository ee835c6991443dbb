#include "nn/opts.h"
#include "rt/log.h"
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_INT, T_POSINT, T_DOUBLE, T_STR, T_FLAG };
typedef struct flag { const char *name; int type; size_t off; const char *help; } flag;
#define F(n, t, field, h) {n, t, offsetof(nn_opts, field), h}
static const flag flags[] = {
    F("batch-size", T_POSINT, batch_size, "input batch size per rank for training (default: 64)"),
    F("test-batch-size", T_POSINT, test_batch_size, "input batch size for testing (default: 1000)"),
    F("epochs", T_POSINT, epochs, "number of epochs to train (default: 10)"),
    F("lr", T_DOUBLE, lr, "learning rate (default: 0.01)"),
    F("momentum", T_DOUBLE, momentum, "SGD momentum (default: 0.5)"),
    F("weight-decay", T_DOUBLE, weight_decay, "SGD weight decay (default: 0)"),
    F("nesterov", T_FLAG, nesterov, "Nesterov momentum"),
    F("no-cuda", T_FLAG, no_cuda, "disables CUDA training"),
    F("device", T_STR, device, "cpu or cuda (default: cpu; cuda needs a CUDA build and a GPU)"),
    F("seed", T_INT, seed, "random seed (default: 1)"),
    F("log-interval", T_POSINT, log_interval, "how many batches to wait before logging training status (default: 10)"),
    F("data", T_STR, data, "dataset directory (default: $DDPRT_DATA, ./data, /usr/share/datasets/fashion-mnist)"),
    F("model", T_STR, model, "lenet, resnet20, resnet18, resnet34, resnet50 or textcnn (default: lenet)"),
    F("threads", T_POSINT, threads, "compute threads (default: the cores available to this rank)"),
    F("mem-report", T_FLAG, mem_report, "print the memory plan at start-up and the peak RSS at the end"),
    F("drop-last", T_FLAG, drop_last, "drop the tail of the dataset instead of padding"),
    F("init-method", T_STR, init_method, "rendezvous: tcp://HOST:PORT, file:///path or env://"),
    F("backend", T_STR, backend, "transport: tcp, verbs or auto (default: auto)"),
    F("rank", T_INT, rank, "rank of this process"),
    F("world-size", T_POSINT, world_size, "number of processes"),
    F("bucket-mb", T_DOUBLE, bucket_mb, "gradient bucket size in MiB (default: 25)"),
    F("check-sync", T_INT, check_sync, "check every N steps that all ranks hold identical parameters"),
    F("metrics", T_STR, metrics, "write a CSV row per log interval and epoch to FILE"),
    F("plot", T_STR, plot, "draw loss/accuracy curves into FILE.svg"),
    F("save", T_STR, save, "checkpoint path (safetensors), written every epoch"),
    F("resume", T_STR, resume, "resume from a checkpoint"),
    F("max-steps", T_INT, max_steps, "stop after N training steps (0: no limit)"),
    F("model-file", T_STR, model_file, "build the network from a plain-text description (see README)"),
    F("num-classes", T_POSINT, num_classes, "output classes (default: the data's)"),
    F("embed-dim", T_POSINT, embed_dim, "textcnn embedding size (default: 128)"),
    F("no-eval", T_FLAG, no_eval, "skip the test-set evaluation after each epoch (throughput runs)"),
    F("init-from", T_STR, init_from, "start from the weights of a safetensors state_dict (fine-tuning)"),
    F("dataset", T_STR, dataset, "data format: idx, cifar10, cifar100, imagefolder, text, synthetic (default: detect)"),
    F("image-size", T_POSINT, image_size, "image side after transforms (default: the data's own; image folders 224)"),
    F("augment", T_STR, augment, "none, cifar or imagenet (default: cifar for CIFAR, imagenet for folders)"),
    F("workers", T_POSINT, workers, "data loader threads per rank (default: 1)"),
    F("bad-sample", T_STR, bad_sample, "fail or skip: what a corrupt image or bad text line does (default: fail)"),
    F("seq-len", T_POSINT, seq_len, "text: tokens per sample, padded or truncated (default: 64)"),
    F("min-freq", T_POSINT, min_freq, "text: minimum count of a word in the vocabulary (default: 1)"),
    F("max-vocab", T_POSINT, max_vocab, "text: vocabulary size limit incl. <pad> and <unk> (default: none)"),
    F("amp", T_STR, amp, "mixed precision: none or bf16 (conv/linear in bf16, fp32 master weights); fp16 needs CUDA"),
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
}

/* Levenshtein distance, for "did you mean" hints. */
static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b), d[64];
    if (la > 62 || lb > 62) return 99;
    for (int j = 0; j <= lb; j++) d[j] = j;
    for (int i = 1; i <= la; i++) {
        int prev = d[0];
        d[0] = i;
        for (int j = 1; j <= lb; j++) {
            int cur = d[j], best = prev + (a[i - 1] != b[j - 1]);
            if (d[j] + 1 < best) best = d[j] + 1;
            if (d[j - 1] + 1 < best) best = d[j - 1] + 1;
            d[j] = best;
            prev = cur;
        }
    }
    return d[lb];
}

static int set_value(nn_opts *o, const flag *f, const char *v)
{
    char *end;
    void *dst = (char *)o + f->off;
    errno = 0;
    if (f->type == T_STR) {
        *(const char **)dst = v;
        return 0;
    }
    if (f->type == T_DOUBLE) {
        double x = strtod(v, &end);
        if (*v && !*end && !errno && x == x) { *(double *)dst = x; return 0; }
        rt_error("--%s: expected a number, got '%s'", f->name, v);
        return -1;
    }
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < INT_MIN || x > INT_MAX || (f->type == T_POSINT && x <= 0)) {
        rt_error("--%s: expected a%s integer, got '%s'", f->name, f->type == T_POSINT ? " positive" : "n", v);
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
                int dist = edit_distance(name, flags[k].name);
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
    if (o->lr <= 0 || o->momentum < 0 || o->weight_decay < 0) {
        rt_error("--lr must be > 0 and --momentum, --weight-decay >= 0");
        return -1;
    }
    if (o->bad_sample && strcmp(o->bad_sample, "fail") && strcmp(o->bad_sample, "skip")) {
        rt_error("--bad-sample: expected fail or skip, got '%s'", o->bad_sample);
        return -1;
    }
    if (o->bucket_mb <= 0) { rt_error("--bucket-mb must be > 0"); return -1; }
    if (o->device && strcmp(o->device, "cpu") && strcmp(o->device, "cuda")) {
        rt_error("--device: expected cpu or cuda, got '%s'", o->device);
        return -1;
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
