/* libFuzzer target: ddprt-data convert (apps/data/data_convert.c) on arbitrary IDX
 * files, and the CIFAR reader (nn/data/cifar.c) on arbitrary record files, in a
 * private directory in /dev/shm. Byte 0 picks what runs: bit 0 convert or CIFAR,
 * bits 1-2 the format (cifar, png, jpeg); bytes 1-8 the lengths (16-bit little-endian)
 * of the train images, train labels and t10k images files, the rest is t10k labels
 * (CIFAR: everything after byte 0 is train.bin and test.bin). At most 4 samples are
 * converted, so the output names stay few. Every error names a file. With
 * FUZZ_SEED_DIR set, seeds are written there before the corpus is read (a small IDX set, CIFAR-100
 * records). Build and run: make fuzz. */
#include "apps/data/data.h"
#include "nn/data/dataset.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], out[96];

static void put(const char *name, const uint8_t *p, size_t n)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) abort();
}

static void cleanup(void)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
}

static void cifar(const uint8_t *d, size_t n)
{
    put("train.bin", d, n);
    put("test.bin", d, n / 2);
    nn_data_cfg cfg = {.dir = dir, .dataset = "cifar100", .augment = "cifar", .seed = 1};
    nn_dataset ds;
    rt_arena a;
    char err[1024];
    if (nn_data_open(&ds, &cfg, "train", err, sizeof err)) {
        if (!strstr(err, dir)) abort();
        return;
    }
    rt_arena_plan(&a, "fuzz");
    if (nn_data_load(&ds, &a, err, sizeof err) || rt_arena_init(&a, "fuzz", a.high)) abort();
    if (nn_data_load(&ds, &a, err, sizeof err) == 0) {
        static float x[3 * 32 * 32];
        static unsigned char scratch[1 << 20];
        nn_data_scratch s = {scratch, sizeof scratch < ds.scratch_bytes ? 0 : sizeof scratch};
        int32_t y;
        for (int i = 0; i < ds.n && i < 3 && s.bytes; i++) {
            if (nn_data_sample(&ds, i, 1, 1, x, &y, &s, err, sizeof err)) abort();
            if (y < 0 || y >= ds.num_classes) abort();
        }
    } else if (!strstr(err, dir)) {
        abort();
    }
    rt_arena_free(&a);
}

static void be32(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v; }

/* Seeds in this target's input format: 3 images of 6x5 per split; 2 CIFAR-100 records. */
static void write_seeds(const char *to)
{
    static uint8_t b[16384];
    char p[300];
    for (int fmt = 0; fmt < 3; fmt++) {
        size_t at = 9;
        b[0] = (uint8_t)(fmt << 1);
        for (int k = 0; k < 4; k++) {
            size_t start = at;
            be32(b + at, k % 2 ? 0x801 : 0x803), be32(b + at + 4, 3), at += 8;
            if (k % 2 == 0) be32(b + at, 5), be32(b + at + 4, 6), at += 8;
            for (int i = 0; i < (k % 2 ? 3 : 90); i++) b[at++] = (uint8_t)(k % 2 ? i * 3 : i * 7);
            if (k < 3) b[1 + 2 * k] = (uint8_t)(at - start), b[2 + 2 * k] = (uint8_t)((at - start) >> 8);
        }
        snprintf(p, sizeof p, "%s/seed-idx%d", to, fmt);
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(b, 1, at, f) != at || fclose(f)) abort();
    }
    b[0] = 1;
    for (int i = 0; i < 2 * 3074; i++) b[1 + i] = (uint8_t)(i % 3074 < 2 ? 7 : i);
    snprintf(p, sizeof p, "%s/seed-cifar", to);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, 1 + 2 * 3074, f) != 1 + 2 * 3074 || fclose(f)) abort();
}

/* Before the corpus is read: the directory and the seeds. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/dev/shm/ddprt-fuzz-convert.XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(out, sizeof out, "%s/out", dir);
    atexit(cleanup);
    rt_log_set_level(-1);
    if (getenv("FUZZ_SEED_DIR")) write_seeds(getenv("FUZZ_SEED_DIR"));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static int quiet;
    if (!quiet++ && !freopen("/dev/null", "w", stdout)) abort(); /* convert's progress lines */
    if (n < 9) return 0;
    if (d[0] & 1) {
        cifar(d + 1, n - 1);
        return 0;
    }
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                         "t10k-labels-idx1-ubyte"};
    size_t at = 9;
    for (int k = 0; k < 4; k++) {
        size_t len = k < 3 ? (size_t)d[1 + 2 * k] | (size_t)d[2 + 2 * k] << 8 : n - at;
        if (len > n - at) len = n - at;
        put(names[k], d + at, len);
        at += len;
    }
    static const char *const fmts[4] = {"cifar", "png", "jpeg", "cifar"};
    data_opts o = {.cmd = DATA_CONVERT, .from = dir, .to = out, .format = fmts[d[0] >> 1 & 3], .limit = 4,
                   .quality = 90};
    char err[1024];
    if (data_convert(&o, err, sizeof err) && !strstr(err, dir)) abort();
    return 0;
}
