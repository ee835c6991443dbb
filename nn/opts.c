#include "nn/opts.h"
#include "nn/optim.h"
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
    F("init-from", T_STR, init_from, "start from the weights of a safetensors state_dict (fine-tuning)"),
    F("optimizer", T_STR, optimizer, "sgd, adam or adamw (PyTorch's; betas 0.9/0.999, eps 1e-8) (default: sgd)"),
    F("no-decay-bn-bias", T_FLAG, no_decay_bn_bias, "no weight decay on biases and BatchNorm parameters"),
    F("lr-schedule", T_STR, lr_schedule, "none, step, multistep or cosine, per epoch (default: none)"),
    F("lr-step", T_POSINT, lr_step, "step schedule: epochs between decays (default: 30)"),
    F("lr-gamma", T_DOUBLE, lr_gamma, "step/multistep: decay factor (default: 0.1)"),
    F("lr-milestones", T_STR, lr_milestones, "multistep: epochs at which to decay, e.g. 30,60,90"),
    F("warmup-epochs", T_DOUBLE, warmup_epochs, "linear learning-rate warmup over X epochs, per step (default: 0)"),
    F("lr-scale", T_STR, lr_scale, "none or world (multiply --lr by the world size, Goyal et al.)"),
    F("accum-steps", T_POSINT, accum_steps, "micro-batches per optimizer step, one allreduce each step (default: 1)"),
    F("clip-grad-norm", T_DOUBLE, clip_grad_norm, "clip the global gradient L2 norm to X (default: off)"),
    F("sync-bn", T_FLAG, sync_bn, "SyncBatchNorm: batch statistics over all ranks"),
    F("grad-compress", T_STR, grad_compress, "none, fp16 or bf16: gradient buckets sent in 16 bits (default: none)"),
    F("topk", T_STR, topk, "report top-k test accuracy for these k, e.g. 1,5"),
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
    o->lr_step = 30;
    o->lr_gamma = 0.1;
    o->accum_steps = 1;
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
    if (o->bucket_mb <= 0) { rt_error("--bucket-mb must be > 0"); return -1; }
    if (o->device && strcmp(o->device, "cpu") && strcmp(o->device, "cuda")) {
        rt_error("--device: expected cpu or cuda, got '%s'", o->device);
        return -1;
    }
    char oerr[256];
    nn_optim_cfg oc;
    if (nn_optim_parse(o, &oc, oerr, sizeof oerr)) { rt_error("%s", oerr); return -1; }
    return 0;
}
