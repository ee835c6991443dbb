#include "nn/data/dataset.h"
#include "nn/sampler.h"
#include "test/t.h"
#include "test/t_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes a 5-sample dataset, then lets `corrupt` damage it, and returns the error
 * from opening + loading (empty string when it loads). */
static const char *load_err(int gz, void (*corrupt)(const char *dir, int gz))
{
    static char err[1024];
    uint8_t px[5 * 784], lb[5] = {0, 1, 2, 3, 9};
    for (int i = 0; i < 5 * 784; i++) px[i] = (uint8_t)i;
    const char *dir = t_tmpdir("data");
    const char *sfx = gz ? ".gz" : "";
    char a[64], b[64];
    snprintf(a, sizeof a, "train-images-idx3-ubyte%s", sfx);
    snprintf(b, sizeof b, "train-labels-idx1-ubyte%s", sfx);
    t_write_idx_images(dir, a, 5, 28, 28, px, gz);
    t_write_idx_labels(dir, b, 5, lb, gz);
    if (corrupt) corrupt(dir, gz);
    nn_dataset d;
    rt_arena ar;
    err[0] = 0;
    memset(&d, 0, sizeof d);
    if (nn_idx_open(&d, dir, "train", err, sizeof err)) return err;
    rt_arena_init(&ar, "t", 1 << 20);
    if (nn_idx_load(&d, &ar, err, sizeof err) == 0) {
        CHECK(d.n == 5 && d.src_h == 28 && d.src_w == 28);
        CHECK(d.pixels[784 * 2 + 3] == (uint8_t)(784 * 2 + 3));
        CHECK(d.labels[4] == 9);
    }
    rt_arena_free(&ar);
    return err;
}

static void raw(const char *dir, int gz, const char *which, const void *bytes, size_t n)
{
    char name[64];
    snprintf(name, sizeof name, "train-%s-idx%d-ubyte%s", which, which[0] == 'i' ? 3 : 1, gz ? ".gz" : "");
    t_write_file(dir, name, bytes, n, gz);
}

static void bad_magic(const char *dir, int gz) { raw(dir, gz, "images", "\x01\x02\x08\x03\0\0\0\5\0\0\0\x1c\0\0\0\x1c", 16); }
static void bad_type(const char *dir, int gz) { raw(dir, gz, "images", "\0\0\x0d\x03\0\0\0\5\0\0\0\x1c\0\0\0\x1c", 16); }
static void bad_ndims(const char *dir, int gz) { raw(dir, gz, "labels", "\0\0\x08\x02\0\0\0\5\0\0\0\5", 12); }
static void zero_dim(const char *dir, int gz) { raw(dir, gz, "images", "\0\0\x08\x03\0\0\0\5\0\0\0\0\0\0\0\x1c", 16); }
static void short_header(const char *dir, int gz) { raw(dir, gz, "images", "\0\0\x08\x03\0\0", 6); }
static void count_mismatch(const char *dir, int gz)
{
    uint8_t lb[4] = {0};
    t_write_idx_labels(dir, gz ? "train-labels-idx1-ubyte.gz" : "train-labels-idx1-ubyte", 4, lb, gz);
}
static void bad_label(const char *dir, int gz)
{
    uint8_t lb[5] = {0, 1, 10, 3, 4};
    t_write_idx_labels(dir, gz ? "train-labels-idx1-ubyte.gz" : "train-labels-idx1-ubyte", 5, lb, gz);
}
static void truncated(const char *dir, int gz)
{
    static uint8_t b[16 + 3 * 784];
    memcpy(b, "\0\0\x08\x03\0\0\0\5\0\0\0\x1c\0\0\0\x1c", 16);
    raw(dir, gz, "images", b, sizeof b);
}
static void trailing(const char *dir, int gz)
{
    static uint8_t b[8 + 5 + 2];
    memcpy(b, "\0\0\x08\x01\0\0\0\5", 8);
    raw(dir, gz, "labels", b, sizeof b);
}
/* Damages the gzip images file: chops the compressed stream in half (a truncated
 * download) or flips bytes inside the deflate data (a corrupt one). */
static void gz_damage(const char *dir, int flip)
{
    char p[512];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    FILE *f = fopen(p, "r+b");
    static uint8_t b[1 << 16];
    size_t n = fread(b, 1, sizeof b, f);
    if (flip)
        for (size_t i = 20; i < n - 10; i += 7) b[i] ^= 0x5a;
    else
        f = freopen(p, "wb", f), n /= 2;
    rewind(f);
    fwrite(b, 1, n, f);
    fclose(f);
}
static void gz_cut(const char *dir, int gz) { (void)gz, gz_damage(dir, 0); }
static void gz_flip(const char *dir, int gz) { (void)gz, gz_damage(dir, 1); }

#define EXPECT_ERR(gz, fn, what)                                                         \
    do {                                                                                 \
        const char *e_ = load_err(gz, fn);                                               \
        CHECKF(strstr(e_, what) && strstr(e_, "train-"), "%s: got '%s'", #fn, e_);       \
    } while (0)

TEST(idx_loads_plain_and_gzip)
{
    CHECK(load_err(0, NULL)[0] == 0);
    CHECK(load_err(1, NULL)[0] == 0);
}

TEST(idx_rejects_every_kind_of_corruption)
{
    for (int gz = 0; gz < 2; gz++) {
        EXPECT_ERR(gz, bad_magic, "bad magic");
        EXPECT_ERR(gz, bad_type, "element type 0x0d");
        EXPECT_ERR(gz, bad_ndims, "2 dimensions");
        EXPECT_ERR(gz, zero_dim, "out of range");
        EXPECT_ERR(gz, short_header, "truncated header");
        EXPECT_ERR(gz, count_mismatch, "4 labels");
        EXPECT_ERR(gz, bad_label, "label 10 at offset 10");
        EXPECT_ERR(gz, truncated, "truncated: data ends at offset 2368");
        EXPECT_ERR(gz, trailing, "trailing bytes after offset 13");
    }
    EXPECT_ERR(1, gz_cut, "images-idx3-ubyte.gz");
    EXPECT_ERR(1, gz_flip, "images-idx3-ubyte.gz");
}

TEST(data_locate_explains_how_to_get_data)
{
    char out[512], err[512];
    const char *dir = t_tmpdir("empty");
    CHECK(nn_data_locate(dir, out, sizeof out, err, sizeof err) == -1);
    CHECKF(strstr(err, dir) != NULL, "%s", err);
    setenv("DDPRT_DATA", dir, 1);
    t_write_synthetic_dataset(dir, 10, 10, 1);
    CHECK(nn_data_locate(NULL, out, sizeof out, err, sizeof err) == 0);
    CHECK(strcmp(out, dir) == 0);
}

/* DistributedSampler: equal counts per rank, padding from the start, disjoint
 * shards when n divides, deterministic per (seed, epoch). */
TEST(sampler_distributed_semantics)
{
    for (int world = 1; world <= 5; world++)
        for (int drop = 0; drop < 2; drop++) {
            int n = 23, seen[23] = {0}, num = -1;
            for (int r = 0; r < world; r++) {
                rt_arena a;
                rt_arena_init(&a, "s", 1 << 16);
                nn_sampler s;
                nn_sampler_init(&s, &a, n, world, r, 1, drop, 7);
                nn_sampler_set_epoch(&s, 3);
                if (num < 0) num = s.num_samples;
                CHECK_EQ(s.num_samples, num); /* same batch count on every rank */
                for (int i = 0; i < s.num_samples; i++) {
                    CHECK(s.indices[i] >= 0 && s.indices[i] < n);
                    seen[s.indices[i]]++;
                }
                rt_arena_free(&a);
            }
            int covered = 0, twice = 0;
            for (int i = 0; i < n; i++) { covered += seen[i] > 0; twice += seen[i] > 1; }
            if (!drop) {
                CHECK_EQ(num * world, n + (world - n % world) % world);
                CHECK_EQ(covered, n);
                CHECK_EQ(twice, (world - n % world) % world);
            } else {
                CHECK_EQ(num, n / world);
                CHECK_EQ(twice, 0);
            }
        }
}

TEST(sampler_reshuffles_per_epoch_deterministically)
{
    rt_arena a;
    rt_arena_init(&a, "s", 1 << 16);
    nn_sampler s;
    nn_sampler_init(&s, &a, 100, 1, 0, 1, 0, 1);
    int32_t e1[100], e1b[100];
    nn_sampler_set_epoch(&s, 1);
    memcpy(e1, s.indices, sizeof e1);
    nn_sampler_set_epoch(&s, 2);
    CHECK(memcmp(e1, s.indices, sizeof e1) != 0);
    nn_sampler_set_epoch(&s, 1);
    memcpy(e1b, s.indices, sizeof e1b);
    CHECK(memcmp(e1, e1b, sizeof e1) == 0);
    rt_arena_free(&a);
}
