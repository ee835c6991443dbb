/* libFuzzer target: the --resume path (nn_ckpt_load) on an arbitrary pair of files, a
 * small model's checkpoint PATH and its optimizer state PATH.state, written into a
 * private directory in /dev/shm. Input: byte 0 picks the run's optimizer (sgd or adam),
 * bytes 1-4 the length of PATH's bytes (little-endian; the rest is PATH.state). A load
 * that succeeds must hand back values in their documented ranges; every error names a
 * file. With FUZZ_SEED_DIR set, real checkpoints (SGD and Adam) are written there as
 * seeds before the corpus is read. Build and run: make fuzz. */
#include "nn/ckpt.h"
#include "nn/graph.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], path[128], spath[160];
static nn_graph g;
static nn_param params[4];
static nn_buf bufs[2];
static float weights[64], *blocks[2];
static unsigned char bufdata[64];

static void cleanup(void)
{
    char p[200];
    unlink(path), unlink(spath);
    snprintf(p, sizeof p, "%s.prev", spath), unlink(p);
    rmdir(dir);
}

static void put(const char *p, const uint8_t *b, size_t n)
{
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f)) abort();
}

/* What the checkpoint code sees of a model: parameters (a conv and a linear layer)
 * and buffers of both dtypes (BatchNorm's running mean and num_batches_tracked). */
static void build_model(void)
{
    static const struct { const char *name; int ndim, shape[4]; } p[4] = {
        {"conv.weight", 4, {2, 1, 3, 3}}, {"conv.bias", 1, {2}}, {"fc.weight", 2, {3, 8}}, {"fc.bias", 1, {3}}};
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        nn_param *q = &params[i];
        snprintf(q->name, sizeof q->name, "%s", p[i].name);
        q->ndim = p[i].ndim, q->offset = off, q->numel = 1;
        for (int d = 0; d < q->ndim; d++) q->shape[d] = p[i].shape[d], q->numel *= (size_t)p[i].shape[d];
        off += q->numel;
    }
    bufs[0] = (nn_buf){.name = "bn.running_mean", .dtype = RT_F32, .ndim = 1, .shape = {2}, .offset = 0, .numel = 2};
    bufs[1] = (nn_buf){.name = "bn.num_batches_tracked", .dtype = RT_I64, .ndim = 0, .offset = 8, .numel = 1};
    g = (nn_graph){.model = "fuzz", .p = params, .np = 4, .b = bufs, .nb = 2, .nparams = off, .params = weights,
                   .bufs = bufdata, .buf_bytes = 16};
    for (int k = 0; k < 2; k++) blocks[k] = calloc(off, sizeof(float));
}

static nn_ckpt_state state_for(int adam)
{
    nn_ckpt_state s = {.epoch = 2, .step = 7, .optimizer = adam ? "adam" : "sgd", .optimizer_step = 7,
                       .nblocks = adam ? 2 : 1, .block_names = {adam ? "exp_avg" : "momentum", "exp_avg_sq"},
                       .blocks = {blocks[0], blocks[1]}};
    return s;
}

/* Seeds: a real pair per optimizer, in this target's input format. */
static void write_seeds(const char *to)
{
    for (int adam = 0; adam < 2; adam++) {
        char err[512], seed[300];
        nn_ckpt_state s = state_for(adam);
        for (size_t i = 0; i < g.nparams; i++) blocks[0][i] = 0.5f * (float)i, blocks[1][i] = 0.25f;
        if (nn_ckpt_save(path, &g, &s, 1, err, sizeof err)) { fprintf(stderr, "%s\n", err); abort(); }
        FILE *f = fopen(path, "rb"), *sf = fopen(spath, "rb");
        static uint8_t b[1 << 20];
        size_t n = fread(b + 5, 1, sizeof b / 2, f), m = fread(b + 5 + n, 1, sizeof b / 2 - 5, sf);
        fclose(f), fclose(sf);
        b[0] = (uint8_t)adam;
        for (int k = 0; k < 4; k++) b[1 + k] = (uint8_t)(n >> (8 * k));
        snprintf(seed, sizeof seed, "%s/seed-%s", to, adam ? "adam" : "sgd");
        put(seed, b, 5 + n + m);
    }
}

/* Before the corpus is read: the model, the directory, the seeds. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/dev/shm/ddprt-fuzz-ckpt.XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(path, sizeof path, "%s/ck.st", dir);
    snprintf(spath, sizeof spath, "%s.state", path);
    atexit(cleanup);
    rt_log_set_level(-1);
    build_model();
    if (getenv("FUZZ_SEED_DIR")) write_seeds(getenv("FUZZ_SEED_DIR"));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 5) return 0;
    size_t len = (size_t)d[1] | (size_t)d[2] << 8 | (size_t)d[3] << 16 | (size_t)d[4] << 24;
    if (len > n - 5) len = n - 5;
    put(path, d + 5, len);
    put(spath, d + 5 + len, n - 5 - len);
    nn_ckpt_state s = state_for(d[0] & 1);
    char err[2048];
    if (nn_ckpt_load(path, &g, &s, err, sizeof err) == 0) {
        if (s.epoch < 1 || s.epoch > NN_CKPT_MAX_EPOCH || s.optimizer_step > s.step || s.step > (1ull << 53)) abort();
    } else if (!strstr(err, "--resume ") || !strstr(err, dir)) {
        abort(); /* one line naming the file */
    }
    return 0;
}
