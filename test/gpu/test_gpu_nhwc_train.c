/* --channels-last in the trainer beyond ResNet-20 (test_gpu_graph_train.c; the kernels:
 * test_gpu_nhwc.c): ResNet-18's stem (7x7 stride-2 conv, 3x3 stride-2 max pool) on
 * small images, one process and two (DDP, and SyncBatchNorm), each against the same run
 * with --channels-last off. The two layouts run the same products; BN's sums go in
 * another order, so the runs agree within act16's bound, not bit for bit. */
#include "test/gpu/g.h"
#include "nn/stio.h"
#include "test/t_data.h"

/* ResNet-18's stem, then two basic blocks (one with a stride-2 downsample), 16 / 32 wide. */
static const char stem_net[] = "[conv2d] name=conv1 filters=16 size=7 stride=2 pad=3 bias=0 init=kaiming\n"
                               "[batchnorm] name=bn1\n[relu]\n[maxpool] size=3 stride=2 pad=1\n"
                               "[basic_block] name=layer1.0 filters=16\n"
                               "[basic_block] name=layer2.0 filters=32 stride=2\n"
                               "[avgpool]\n[flatten]\n[linear] name=fc out=classes\n";

/* The net's file, and 3 x 32 x 32 images in CIFAR-100's format (train.bin, test.bin: a
 * coarse and a fine label byte, then the planes), noise from a fixed seed. */
static const char *stem_dir(void)
{
    const char *dir = t_tmpdir("gpunhwc");
    t_write_file(dir, "stem.cfg", stem_net, sizeof stem_net - 1, 0);
    enum { N = 32, REC = 2 + 3 * 32 * 32 };
    uint8_t *b = malloc((size_t)N * REC);
    uint32_t r = 12345;
    for (int i = 0; i < N; i++) {
        b[i * REC] = 0, b[i * REC + 1] = (uint8_t)(i % 10);
        for (int k = 2; k < REC; k++) r = r * 1664525u + 1013904223u, b[i * REC + k] = (uint8_t)(r >> 24);
    }
    t_write_file(dir, "train.bin", b, (size_t)N * REC, 0);
    t_write_file(dir, "test.bin", b, (size_t)N * REC, 0);
    free(b);
    return dir;
}

/* The trainer on the stem net (3 bf16 steps of 2 images a rank), --channels-last
 * cl; ranks > 1 through ddprt-launch with --check-sync 1 (every step: the ranks' parameters
 * bit for bit); save: a checkpoint path or NULL. */
static void stem_run(const char *dir, int ranks, const char *cl, const char *extra, const char *save, char *out,
                     size_t len)
{
    char cmd[2000], launch[512] = "", ck[600] = "";
    if (ranks > 1) snprintf(launch, sizeof launch, "%s --nproc-per-node %d --", t_prog("ddprt-launch"), ranks);
    if (save) snprintf(ck, sizeof ck, " --save %s/%s", dir, save);
    snprintf(cmd, sizeof cmd, "%s %s --model-file %s/stem.cfg --device cuda --amp bf16 --data %s --dataset cifar100 "
             "--augment none --epochs 1 --max-steps 3 --log-interval 1 --batch-size 2 --no-eval --mem-report --lr 0.05 "
             "--channels-last %s%s%s%s 2>&1",
             launch, g_train(), dir, dir, cl, ranks > 1 ? " --check-sync 1" : "", ck, extra);
    CHECKF(g_run(cmd, out, len) == 0, "%s", out);
}

/* The run's layout line: outputs channels last (of all), max pools channels last (of all). */
static void layout_of(const char *out, const char *cl, int *k, int *all, int *kp, int *pools)
{
    char key[64];
    snprintf(key, sizeof key, "--channels-last %s: ", cl);
    const char *d = strstr(out, key);
    *k = *all = *kp = *pools = -1;
    if (d) sscanf(d + strlen(key), "%d of %d device activations", k, all);
    d = d ? strstr(d, "max pools: ") : NULL;
    if (d) sscanf(d, "max pools: %d of %d", kp, pools);
}

static unsigned long permutes_of(const char *out)
{
    const char *d = strstr(out, "device convs: ");
    unsigned long p = ~0ul;
    if (d) sscanf(d, "device convs: %lu permutes", &p);
    return p;
}

/* The max pool on NHWC tensors between the stem conv and the first block: every stored
 * output but the head's (the pool's [n, c], the linear's) channels last, the max pool
 * among them, no conv permuting x or dy, the losses within act16's bound of NCHW's. */
TEST(gpu_amp_channels_last_maxpool_stem_tracks_nchw)
{
    static char on[32768], off[32768];
    char why[128] = "";
    const char *dir = stem_dir();
    stem_run(dir, 1, "on", "", NULL, on, sizeof on);
    stem_run(dir, 1, "off", "", NULL, off, sizeof off);
    int k, all, kp, pools;
    layout_of(on, "on", &k, &all, &kp, &pools);
    CHECKF(k > 0 && k == all - 2 && kp == 1 && pools == 1, "%d of %d outputs, %d of %d max pools channels last\n%s", k,
           all, kp, pools, on);
    layout_of(off, "off", &k, &all, &kp, &pools);
    CHECKF(k == 0 && kp == 0 && pools == 1, "%s", off);
    CHECKF(permutes_of(on) == 0 && permutes_of(off) > 0, "%lu permutes channels last, %lu NCHW", permutes_of(on),
           permutes_of(off));
    int n = g_same_losses(on, off, 5e-3, why, sizeof why);
    CHECKF(n == 3, "%d loss lines agree; %s\n%s\n%s", n, why, on, off);
}

/* The checkpoint's parameters (F32 tensors less BN's running statistics), concatenated;
 * their count in *n. */
static float *ck_params(const char *path, size_t *n)
{
    char err[256];
    stio_file *f;
    g_need(stio_open(&f, path, err, sizeof err) == 0, err);
    float *all = NULL;
    *n = 0;
    for (int i = 0; i < stio_count(f); i++) {
        stio_tensor t;
        g_need(stio_info(f, i, &t) == 0, "stio_info");
        if (t.dtype != STIO_F32 || strstr(t.name, "running_")) continue;
        size_t e = 1;
        for (int d = 0; d < t.ndim; d++) e *= (size_t)t.shape[d];
        all = realloc(all, (*n + e) * sizeof(float));
        t.data = all + *n;
        g_need(stio_read(f, &t, 1, err, sizeof err) == 0, err);
        *n += e;
    }
    stio_close(f);
    return all;
}

/* ||a - b|| / ||b - c||: how far a is from b against how far the steps moved b from c. */
static double rel_to_update(const float *a, const float *b, const float *c, size_t n)
{
    double d = 0, u = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - b[i], y = (double)b[i] - c[i];
        d += x * x, u += y * y;
    }
    return u > 0 ? sqrt(d / u) : INFINITY;
}

static float *saved(const char *dir, const char *name, size_t *n)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return ck_params(path, n);
}

/* The parameters before any step, in *np: a CPU run saves them after one step at --lr
 * 1e-30 (--lr 0 is refused), which moves no weight measurably. */
static float *init_params(const char *dir, size_t *np)
{
    static char out[32768];
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s --model-file %s/stem.cfg --device cpu --data %s --dataset cifar100 --augment none "
             "--epochs 1 --max-steps 1 --batch-size 2 --no-eval --lr 1e-30 --save %s/init.st 2>&1",
             t_prog("ddprt-train"), dir, dir, dir);
    CHECKF(g_run(cmd, out, sizeof out) == 0, "%s", out);
    return saved(dir, "init.st", np);
}

/* 2 ranks with extra (DDP; --sync-bn) channels last and NCHW: the ranks agree bit for bit
 * every step (--check-sync), the losses within act16's bound, and the parameters after
 * the steps within 2% of the update from init. The channels-last run's checkpoint: on.st. */
static void ddp_pair(const char *dir, const char *extra, const char *tag, const float *init, size_t np)
{
    static char on[65536], off[65536];
    char why[128] = "";
    stem_run(dir, 2, "on", extra, "on.st", on, sizeof on);
    stem_run(dir, 2, "off", extra, "off.st", off, sizeof off);
    int k, all, kp, pools;
    layout_of(on, "on", &k, &all, &kp, &pools);
    CHECKF(k == all - 2 && kp == 1 && permutes_of(on) == 0, "%s: %d of %d channels last, %lu permutes\n%s", tag, k, all,
           permutes_of(on), on);
    int n = g_same_losses(on, off, 5e-3, why, sizeof why);
    CHECKF(n == 3, "%s: %d loss lines agree; %s\n%s\n%s", tag, n, why, on, off);
    size_t a, b;
    float *pon = saved(dir, "on.st", &a), *poff = saved(dir, "off.st", &b);
    g_need(a == np && b == np, "the checkpoints' parameters");
    float *zero = calloc(np, sizeof(float));
    double r = rel_to_update(pon, poff, init, np), u = rel_to_update(poff, init, zero, np);
    /* the steps moved the parameters, not all of them (the same initial ones) */
    CHECKF(u > 1e-4 && u < 0.3, "%s: the steps moved the parameters by %.3g of their norm", tag, u);
    CHECKF(r < 0.02, "%s: channels last's parameters %.3g of the update away from NCHW's", tag, r);
    free(pon), free(poff), free(zero);
}

/* DDP, 2 processes: channels last against NCHW (the gpu_amp_* 2-process tests run
 * channels last by default, against the CPU). */
TEST(gpu_amp_channels_last_2_processes_track_nchw)
{
    const char *dir = stem_dir();
    size_t np;
    float *init = init_params(dir, &np);
    ddp_pair(dir, "", "DDP", init, np);
    free(init);
}

/* --sync-bn, 2 processes: the statistics and gradient sums each rank exchanges are per
 * channel in either layout (the NHWC sums' kernels write the same [c] arrays), so SyncBN
 * on channels-last activations tracks NCHW's; and it is on: its parameters differ from
 * plain DDP's (channels last both) by far more than the layouts' do. */
TEST(gpu_amp_channels_last_sync_bn_2_processes_track_nchw)
{
    static char out[65536];
    const char *dir = stem_dir();
    size_t np, n;
    float *init = init_params(dir, &np);
    ddp_pair(dir, " --sync-bn", "SyncBN", init, np);
    stem_run(dir, 2, "on", "", "plain.st", out, sizeof out);
    float *sync = saved(dir, "on.st", &n), *plain = saved(dir, "plain.st", &n);
    double r = rel_to_update(sync, plain, init, np);
    CHECKF(r > 0.1, "--sync-bn: parameters %.3g of the update from plain DDP's (not synchronised?)", r);
    free(plain), free(sync), free(init);
}
