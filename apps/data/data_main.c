/* ddprt-data: data set tools.
 *   convert --from IDXDIR --to OUT --format png|jpeg|cifar [--limit N] [--quality Q]
 *       Fashion-MNIST (IDX) as an image folder (OUT/train/CLASS, OUT/val/CLASS; class
 *       folders 0-tshirt ... 9-ankle-boot so the sorted ids equal the IDX labels) or as
 *       CIFAR-10-style binary (28x28 centred in 32x32, gray copied to R, G, B).
 *   synth --to OUT [--n N] [--size WxH] [--classes K] [--quality Q] [--noise A]
 *       JPEGs of ImageNet-like size with structure and noise (benchmark input).
 *   bench DIR [--image-size S] [--augment A] [--eval] [--n N] [--threads T]
 *       decode + transform throughput per thread on an image folder's train split. */
#include "rt/version.h"
#include "nn/data/dataset.h"
#include "nn/data/image_write.h"
#include "nn/data/jhuff.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char *const fm_classes[10] = {"0-tshirt-top", "1-trouser", "2-pullover", "3-dress", "4-coat",
                                           "5-sandal", "6-shirt", "7-sneaker", "8-bag", "9-ankle-boot"};

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

static void mkdirs(const char *p)
{
    char t[1024];
    snprintf(t, sizeof t, "%s", p);
    for (char *s = t + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(t, 0755);
            *s = '/';
        }
    if (mkdir(t, 0755) && errno != EEXIST) rt_fatal("%s: cannot create: %s", t, strerror(errno));
}

static void load_idx(const char *dir, const char *split, nn_dataset *d, rt_arena *a)
{
    char err[1024];
    memset(d, 0, sizeof *d);
    if (nn_idx_open(d, dir, split, err, sizeof err)) rt_fatal("%s", err);
    rt_arena_plan(a, "idx");
    nn_idx_load(d, a, err, sizeof err);
    size_t need = a->high;
    if (rt_arena_init(a, "idx", need)) rt_fatal("out of memory");
    if (nn_idx_load(d, a, err, sizeof err)) rt_fatal("%s", err);
}

static int convert(int argc, char **argv)
{
    const char *from = arg(argc, argv, "--from", NULL), *to = arg(argc, argv, "--to", NULL);
    const char *fmt = arg(argc, argv, "--format", "png");
    int limit = atoi(arg(argc, argv, "--limit", "0")), q = atoi(arg(argc, argv, "--quality", "95"));
    char err[1024], p[1400];
    if (!from) {
        if (nn_data_locate(NULL, p, sizeof p, err, sizeof err)) rt_fatal("%s", err);
        from = strdup(p);
    }
    if (!to) rt_fatal("convert: --to OUT is required");
    int png = !strcmp(fmt, "png"), jpg = !strcmp(fmt, "jpeg") || !strcmp(fmt, "jpg"), cif = !strcmp(fmt, "cifar");
    if (!png && !jpg && !cif) rt_fatal("convert: --format %s: expected png, jpeg or cifar", fmt);
    const char *splits[2] = {"train", "t10k"}, *outs[2] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        nn_dataset d;
        rt_arena a;
        load_idx(from, splits[s], &d, &a);
        int n = limit > 0 && limit < d.n ? (s ? (limit + 5) / 6 : limit) : d.n, H = d.src_h, W = d.src_w;
        if (cif) {
            int nf = s ? 1 : 5;
            for (int f = 0; f < nf; f++) {
                snprintf(p, sizeof p, "%s", to);
                mkdirs(p);
                if (s) snprintf(p, sizeof p, "%s/test_batch.bin", to);
                else snprintf(p, sizeof p, "%s/data_batch_%d.bin", to, f + 1);
                FILE *o = fopen(p, "wb");
                if (!o) rt_fatal("%s: cannot write: %s", p, strerror(errno));
                for (int i = (int)((long)n * f / nf); i < (int)((long)n * (f + 1) / nf); i++) {
                    unsigned char rec[3073];
                    memset(rec, 0, sizeof rec);
                    rec[0] = (unsigned char)d.labels[i];
                    for (int c = 0; c < 3; c++)
                        for (int y = 0; y < H && y < 32; y++)
                            for (int x = 0; x < W && x < 32; x++)
                                rec[1 + c * 1024 + (y + (32 - H) / 2) * 32 + x + (32 - W) / 2] =
                                    d.pixels[(size_t)i * H * W + y * W + x];
                    if (fwrite(rec, 1, sizeof rec, o) != sizeof rec) rt_fatal("%s: write failed", p);
                }
                if (fclose(o)) rt_fatal("%s: write failed", p);
            }
        } else
            for (int i = 0; i < n; i++) {
                snprintf(p, sizeof p, "%s/%s/%s", to, outs[s], fm_classes[d.labels[i]]);
                if (i < 10 || i % 1000 == 0) mkdirs(p);
                for (int k = 0; i == 0 && k < 10; k++) {
                    snprintf(p, sizeof p, "%s/%s/%s", to, outs[s], fm_classes[k]);
                    mkdirs(p);
                }
                snprintf(p, sizeof p, "%s/%s/%s/%05d.%s", to, outs[s], fm_classes[d.labels[i]], i, png ? "png" : "jpg");
                const uint8_t *px = d.pixels + (size_t)i * H * W;
                if ((png ? nn_img_write_png(p, px, W, H, 1, 0, err, sizeof err)
                         : nn_img_write_jpeg(p, px, W, H, 1, q, err, sizeof err)))
                    rt_fatal("%s", err);
            }
        printf("%s: %d %s samples -> %s (%s)\n", from, n, splits[s], to, fmt);
        rt_arena_free(&a);
    }
    return 0;
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Smooth colour fields, a few shapes and sensor-like noise: compresses to roughly
 * the bytes per pixel of photographs at quality 90. */
static int synth(int argc, char **argv)
{
    const char *to = arg(argc, argv, "--to", NULL), *size = arg(argc, argv, "--size", "500x375");
    int n = atoi(arg(argc, argv, "--n", "200")), K = atoi(arg(argc, argv, "--classes", "4"));
    int q = atoi(arg(argc, argv, "--quality", "90")), W = 0, H = 0, noise = atoi(arg(argc, argv, "--noise", "24"));
    char p[1400], err[1024];
    if (!to || sscanf(size, "%dx%d", &W, &H) != 2 || W <= 0 || H <= 0 || K <= 0) rt_fatal("synth: --to OUT [--size WxH]");
    uint8_t *px = malloc((size_t)W * H * 3);
    for (int i = 0; i < n; i++) {
        uint64_t s = 1234567 + (uint64_t)i;
        double f[6];
        for (int k = 0; k < 6; k++) f[k] = (double)(rnd(&s) % 1000) / 1000.0;
        int cx = (int)(rnd(&s) % (uint64_t)W), cy = (int)(rnd(&s) % (uint64_t)H), r = 20 + (int)(rnd(&s) % 120);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int in = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
                for (int c = 0; c < 3; c++) {
                    double v = 128 + 90 * sin(x * 0.02 * (1 + f[c]) + y * 0.03 * f[c + 3] + c) +
                               (in ? 60.0 * (c - 1) : 0) + (noise > 0 ? (double)(rnd(&s) % (uint64_t)(2 * noise)) - noise : 0);
                    px[((size_t)y * W + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
            }
        snprintf(p, sizeof p, "%s/train/class%02d", to, i % K);
        mkdirs(p);
        snprintf(p, sizeof p, "%s/train/class%02d/%06d.jpg", to, i % K, i);
        if (nn_img_write_jpeg(p, px, W, H, 3, q, err, sizeof err)) rt_fatal("%s", err);
    }
    free(px);
    printf("%d %dx%d JPEGs in %d classes -> %s/train\n", n, W, H, K, to);
    return 0;
}

typedef struct bench_arg { const nn_dataset *d; int n, first, train; double secs; char err[1024]; } bench_arg;

static void *bench_thread(void *p)
{
    bench_arg *b = p;
    nn_data_scratch s = {malloc(b->d->scratch_bytes), b->d->scratch_bytes};
    void *x = malloc(nn_data_sample_bytes(b->d));
    int32_t y;
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    for (int i = 0; i < b->n; i++)
        if (nn_data_sample(b->d, (b->first + i) % b->d->n, 1, b->train, x, &y, &s, b->err, sizeof b->err)) break;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    b->secs = (double)(c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9; /* CPU time: the machine may be shared */
    free(s.buf);
    free(x);
    return NULL;
}

static int bench(int argc, char **argv)
{
    nn_data_cfg cfg = {.dir = argc > 0 ? argv[0] : NULL, .dataset = "imagefolder",
                       .image_size = atoi(arg(argc, argv, "--image-size", "224")),
                       .augment = arg(argc, argv, "--augment", "imagenet"), .seed = 1};
    int n = atoi(arg(argc, argv, "--n", "200")), T = atoi(arg(argc, argv, "--threads", "1")), train = 1;
    for (int i = 0; i < argc; i++) {
        train &= strcmp(argv[i], "--eval") != 0;
        if (!strcmp(argv[i], "--libjpeg-huffman")) nn_jhuff_enabled = 0; /* for comparison */
    }
    char err[1024];
    nn_dataset d;
    rt_arena a;
    if (T < 1 || T > 64) T = 1;
    if (nn_data_open(&d, &cfg, "train", err, sizeof err)) rt_fatal("%s", err);
    rt_arena_plan(&a, "bench");
    nn_data_load(&d, &a, err, sizeof err);
    if (rt_arena_init(&a, "bench", a.high) || nn_data_load(&d, &a, err, sizeof err)) rt_fatal("%s", err);
    /* Warm the page cache so the table measures decoding, not the disk. */
    nn_data_scratch s = {malloc(d.scratch_bytes), d.scratch_bytes};
    void *x = malloc(nn_data_sample_bytes(&d));
    int32_t y;
    for (int i = 0; i < d.n && i < n; i++) nn_data_sample(&d, i, 0, 1, x, &y, &s, err, sizeof err);
    free(s.buf);
    free(x);
    bench_arg b[64];
    port_thread th[64];
    double t0 = port_now_s();
    for (int t = 0; t < T; t++) {
        b[t] = (bench_arg){&d, n, t * n, train, 0, ""};
        port_thread_start(&th[t], bench_thread, &b[t]);
    }
    for (int t = 0; t < T; t++) port_thread_join(th[t]);
    double wall = port_now_s() - t0, per = 0;
    for (int t = 0; t < T; t++) {
        if (b[t].err[0]) rt_fatal("%s", b[t].err);
        per += n / b[t].secs / T;
    }
    printf("| ddprt (C)%s | %s | %d | %d | %dx%d %s | %.1f | %.2f | %.1f |\n", nn_jhuff_enabled ? "" : " libjpeg-huffman", d.dir, d.n, T, d.h, d.w, train ? cfg.augment : "eval", per,
           1000.0 / per, n * T / wall);
    rt_arena_free(&a);
    return 0;
}

static const char *const usage[3][2] = {
    {"convert", "convert --from IDXDIR --to OUT --format png|jpeg|cifar [--limit N] [--quality Q]\n"
                "    Fashion-MNIST (IDX; default: the located data set) as an image folder OUT/{train,val}/CLASS\n"
                "    of PNG or JPEG files, or as CIFAR-10-style binary."},
    {"synth", "synth --to OUT [--n N] [--size WxH] [--classes K] [--quality Q] [--noise A]\n"
              "    N JPEGs (default 200, 500x375, 4 classes, quality 90, noise 24) in OUT/train/classKK:\n"
              "    benchmark input of ImageNet-like size."},
    {"bench", "bench DIR [--image-size S] [--augment none|cifar|imagenet] [--eval] [--n N] [--threads T]\n"
              "            [--libjpeg-huffman]\n"
              "    decode + transform throughput per thread (CPU time) on DIR/train; --libjpeg-huffman: libjpeg's\n"
              "    own entropy decoder instead of ddprt's (for comparison)."},
};

int main(int argc, char **argv)
{
    rt_log_init();
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        for (int i = 0; i < 3; i++) printf("%s ddprt-data %.*s\n", i ? "      " : "usage:", (int)strcspn(usage[i][1], "\n"), usage[i][1]);
        return argc < 2 ? 2 : 0;
    }
    /* `ddprt-data CMD --help` anywhere after the command: that command's usage, exit 0. */
    for (int c = 0; c < 3; c++)
        for (int i = 2; i < argc && !strcmp(argv[1], usage[c][0]); i++)
            if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                printf("usage: ddprt-data %s\n", usage[c][1]);
                return 0;
            }
    if (!strcmp(argv[1], "--version")) {
        printf("ddprt-data (ddprt) %s\n", DDPRT_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "convert")) return convert(argc - 2, argv + 2);
    if (!strcmp(argv[1], "synth")) return synth(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench")) return bench(argc - 2, argv + 2);
    rt_error("unknown command '%s' (convert, synth, bench; see --help)", argv[1]);
    return 2;
}
