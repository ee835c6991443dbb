/* ddprt-data convert and synth. Errors are returned (one line in err), never exits:
 * the fuzz targets run these on arbitrary files and arguments. */
#include "apps/data/data.h"
#include "nn/data/dataset.h"
#include "nn/data/image_write.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const fm_classes[10] = {"0-tshirt-top", "1-trouser", "2-pullover", "3-dress", "4-coat",
                                           "5-sandal", "6-shirt", "7-sneaker", "8-bag", "9-ankle-boot"};

static int mkdirs(const char *p, char *err, size_t errlen)
{
    char t[1024];
    if (snprintf(t, sizeof t, "%s", p) >= (int)sizeof t) {
        snprintf(err, errlen, "%.64s...: path too long", p);
        return -1;
    }
    for (char *s = t + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(t, 0755);
            *s = '/';
        }
    if (mkdir(t, 0755) && errno != EEXIST) {
        snprintf(err, errlen, "%s: cannot create: %s", t, strerror(errno));
        return -1;
    }
    return 0;
}

static int load_idx(const char *dir, const char *split, nn_dataset *d, rt_arena *a, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    memset(a, 0, sizeof *a);
    if (nn_idx_open(d, dir, split, err, errlen)) return -1;
    rt_arena_plan(a, "idx");
    nn_idx_load(d, a, err, errlen);
    size_t need = a->high;
    if (rt_arena_init(a, "idx", need)) {
        snprintf(err, errlen, "%s: out of memory for %zu bytes of samples", d->path[0], need);
        return -1;
    }
    return nn_idx_load(d, a, err, errlen);
}

/* CIFAR-10 records: label byte, then 32x32 R, G and B planes; a smaller gray image is
 * centred and copied to all three. */
static int write_cifar(const char *to, int test, const nn_dataset *d, int n, char *err, size_t errlen)
{
    int H = d->src_h, W = d->src_w, nf = test ? 1 : 5;
    char p[1400];
    if (mkdirs(to, err, errlen)) return -1;
    for (int f = 0; f < nf; f++) {
        if (test) snprintf(p, sizeof p, "%s/test_batch.bin", to);
        else snprintf(p, sizeof p, "%s/data_batch_%d.bin", to, f + 1);
        FILE *o = fopen(p, "wb");
        if (!o) {
            snprintf(err, errlen, "%s: cannot write: %s", p, strerror(errno));
            return -1;
        }
        int bad = 0;
        for (int i = (int)((long)n * f / nf); i < (int)((long)n * (f + 1) / nf) && !bad; i++) {
            unsigned char rec[3073];
            memset(rec, 0, sizeof rec);
            rec[0] = (unsigned char)d->labels[i];
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++)
                        rec[1 + c * 1024 + (y + (32 - H) / 2) * 32 + x + (32 - W) / 2] =
                            d->pixels[(size_t)i * H * W + (size_t)y * W + x];
            bad = fwrite(rec, 1, sizeof rec, o) != sizeof rec;
        }
        if (fclose(o) || bad) {
            snprintf(err, errlen, "%s: write failed: %s", p, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int write_images(const char *to, const char *split, const nn_dataset *d, int n, int png, int q, char *err,
                        size_t errlen)
{
    char p[1400];
    for (int k = 0; k < 10; k++) {
        snprintf(p, sizeof p, "%s/%s/%s", to, split, fm_classes[k]);
        if (mkdirs(p, err, errlen)) return -1;
    }
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s/%s/%05d.%s", to, split, fm_classes[d->labels[i]], i, png ? "png" : "jpg");
        const uint8_t *px = d->pixels + (size_t)i * d->src_h * d->src_w;
        if (png ? nn_img_write_png(p, px, d->src_w, d->src_h, 1, 0, err, errlen)
                : nn_img_write_jpeg(p, px, d->src_w, d->src_h, 1, q, err, errlen))
            return -1;
    }
    return 0;
}

int data_convert(const data_opts *o, char *err, size_t errlen)
{
    char p[1400];
    const char *from = o->from;
    if (!from) {
        if (nn_data_locate(NULL, p, sizeof p, err, errlen)) return -1;
        from = p;
    }
    int png = !strcmp(o->format, "png"), cif = !strcmp(o->format, "cifar");
    const char *splits[2] = {"train", "t10k"}, *outs[2] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        nn_dataset d;
        rt_arena a;
        int rc = load_idx(from, splits[s], &d, &a, err, errlen);
        int n = o->limit > 0 && o->limit < d.n ? (s ? (o->limit + 5) / 6 : o->limit) : d.n;
        /* A record holds 32x32: larger images would not fit (no resizing is implied). */
        if (!rc && cif && (d.src_h > 32 || d.src_w > 32)) {
            snprintf(err, errlen, "convert --format cifar: %s holds %dx%d images; CIFAR-10 records hold at most 32x32 "
                     "(use --format png or jpeg)", d.path[0], d.src_w, d.src_h);
            rc = -1;
        }
        if (!rc) rc = cif ? write_cifar(o->to, s, &d, n, err, errlen)
                          : write_images(o->to, outs[s], &d, n, png, o->quality, err, errlen);
        if (!rc) printf("%s: %d %s samples -> %s (%s)\n", from, n, splits[s], o->to, o->format);
        rt_arena_free(&a);
        if (rc) return -1;
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
int data_synth(const data_opts *o, char *err, size_t errlen)
{
    int W = o->size[0], H = o->size[1], K = o->classes, noise = o->noise;
    char p[1400];
    if (W < 1 || H < 1 || W > DATA_MAX_SIDE || H > DATA_MAX_SIDE || (long)W * H > DATA_MAX_PIXELS || K < 1) {
        snprintf(err, errlen, "synth: --size %dx%d --classes %d out of range", W, H, K);
        return -1;
    }
    uint8_t *px = malloc((size_t)W * H * 3);
    if (!px) {
        snprintf(err, errlen, "synth: out of memory for one %dx%d image (%zu bytes)", W, H, (size_t)W * H * 3);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < o->n && !rc; i++) {
        uint64_t s = 1234567 + (uint64_t)i;
        double f[6];
        for (int k = 0; k < 6; k++) f[k] = (double)(rnd(&s) % 1000) / 1000.0;
        long long cx = (long long)(rnd(&s) % (uint64_t)W), cy = (long long)(rnd(&s) % (uint64_t)H);
        long long r = 20 + (long long)(rnd(&s) % 120);
        for (long long y = 0; y < H; y++)
            for (long long x = 0; x < W; x++) {
                int in = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
                for (int c = 0; c < 3; c++) {
                    double v = 128 + 90 * sin((double)x * 0.02 * (1 + f[c]) + (double)y * 0.03 * f[c + 3] + c) +
                               (in ? 60.0 * (c - 1) : 0) +
                               (noise > 0 ? (double)(rnd(&s) % (uint64_t)(2 * noise)) - noise : 0);
                    px[((size_t)y * W + (size_t)x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
            }
        snprintf(p, sizeof p, "%s/train/class%02d", o->to, i % K);
        if (mkdirs(p, err, errlen)) { rc = -1; break; }
        snprintf(p + strlen(p), sizeof p - strlen(p), "/%06d.jpg", i);
        rc = nn_img_write_jpeg(p, px, W, H, 3, o->quality, err, errlen);
    }
    free(px);
    if (rc) return -1;
    printf("%d %dx%d JPEGs in %d classes -> %s/train\n", o->n, W, H, K, o->to);
    return 0;
}
