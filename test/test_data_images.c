/* Image decoding, transforms, image folders and the multi-worker loader, on small
 * files written here with libjpeg / libpng. */
#include "nn/data/dataset.h"
#include "nn/data/image.h"
#include "nn/data/image_write.h"
#include "nn/data/loader.h"
#include "test/t.h"
#include "test/t_util.h"
#include "test/t_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static void pattern(uint8_t *px, int w, int h, int c, int seed)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) px[((size_t)y * w + x) * c + k] = (uint8_t)(x * 7 + y * 3 + k * 50 + seed * 11);
}

static void identity_plan(void *ctx, int W, int H, float crop[4], int *flip)
{
    (void)ctx;
    crop[0] = 0, crop[1] = 0, crop[2] = (float)W, crop[3] = (float)H;
    *flip = 0;
}

/* Decodes path at its own size into want_c channels; returns the max abs difference
 * from expect (want_c channels), or -1 on a decode error (message in err). */
static int decode_diff(const char *path, int want_c, const uint8_t *expect, int w, int h, char *err, size_t errlen)
{
    size_t n;
    uint8_t *b = slurp(path, &n), *dst = malloc((size_t)w * h * 4 + 64);
    nn_img img;
    int worst = -1;
    if (nn_img_decode(b, n, want_c, identity_plan, NULL, w, h, dst, (size_t)w * h * 4 + 64, &img, err, errlen) == 0) {
        worst = 0;
        CHECK_EQ(img.c, want_c);
        CHECK(img.src_w == w && img.src_h == h);
        for (int y = 0; y < h && y < img.h; y++)
            for (int x = 0; x < w; x++)
                for (int k = 0; k < want_c; k++) {
                    int d = abs((int)img.px[((size_t)y * img.w + x) * want_c + k] - (int)expect[((size_t)y * w + x) * want_c + k]);
                    if (d > worst) worst = d;
                }
    }
    free(b);
    free(dst);
    return worst;
}

TEST(image_png_gray_rgb_16bit_alpha_interlaced_decode_exactly)
{
    if (!nn_img_have_png()) return;
    const char *dir = t_tmpdir("png");
    char p[600], err[512];
    uint8_t rgb[20 * 13 * 3], gray[20 * 13], luma[20 * 13], grey3[20 * 13 * 3];
    pattern(rgb, 20, 13, 3, 1);
    pattern(gray, 20, 13, 1, 2);
    for (int i = 0; i < 20 * 13; i++) {
        for (int k = 0; k < 3; k++) grey3[3 * i + k] = gray[i];
        luma[i] = (uint8_t)((rgb[3 * i] * 19595 + rgb[3 * i + 1] * 38470 + rgb[3 * i + 2] * 7471 + 0x8000) >> 16);
    }
    static const int flags[] = {0, NN_PNG_16BIT, NN_PNG_ALPHA, NN_PNG_INTERLACE, NN_PNG_16BIT | NN_PNG_ALPHA};
    for (int f = 0; f < 5; f++) {
        snprintf(p, sizeof p, "%s/rgb%d.png", dir, f);
        CHECK(nn_img_write_png(p, rgb, 20, 13, 3, flags[f], err, sizeof err) == 0);
        CHECKF(decode_diff(p, 3, rgb, 20, 13, err, sizeof err) == 0, "rgb flags %d: %s", flags[f], err);
        CHECKF(decode_diff(p, 1, luma, 20, 13, err, sizeof err) == 0, "rgb->gray flags %d", flags[f]);
        snprintf(p, sizeof p, "%s/gray%d.png", dir, f);
        CHECK(nn_img_write_png(p, gray, 20, 13, 1, flags[f], err, sizeof err) == 0);
        CHECKF(decode_diff(p, 1, gray, 20, 13, err, sizeof err) == 0, "gray flags %d: %s", flags[f], err);
        CHECKF(decode_diff(p, 3, grey3, 20, 13, err, sizeof err) == 0, "gray->rgb flags %d", flags[f]);
    }
}

TEST(image_jpeg_gray_rgb_cmyk_decode_close)
{
    if (!nn_img_have_jpeg()) return;
    const char *dir = t_tmpdir("jpg");
    char p[600], err[512];
    int w = 32, h = 24;
    uint8_t rgb[32 * 24 * 3], cmyk[32 * 24 * 4], gray[32 * 24];
    for (int i = 0; i < w * h; i++) {
        int x = i % w, y = i / w;
        rgb[3 * i] = (uint8_t)(40 + x * 4), rgb[3 * i + 1] = (uint8_t)(60 + y * 5), rgb[3 * i + 2] = 128;
        gray[i] = (uint8_t)(30 + x * 3 + y * 2);
        /* Adobe (inverted) CMYK as Photoshop writes it: C = R, M = G, Y = B, K = 255. */
        cmyk[4 * i] = rgb[3 * i], cmyk[4 * i + 1] = rgb[3 * i + 1], cmyk[4 * i + 2] = rgb[3 * i + 2], cmyk[4 * i + 3] = 255;
    }
    snprintf(p, sizeof p, "%s/rgb.jpg", dir);
    CHECK(nn_img_write_jpeg(p, rgb, w, h, 3, 100, err, sizeof err) == 0);
    int d = decode_diff(p, 3, rgb, w, h, err, sizeof err);
    CHECKF(d >= 0 && d <= 8, "rgb jpeg diff %d %s", d, err);
    snprintf(p, sizeof p, "%s/gray.jpg", dir);
    CHECK(nn_img_write_jpeg(p, gray, w, h, 1, 100, err, sizeof err) == 0);
    d = decode_diff(p, 1, gray, w, h, err, sizeof err);
    CHECKF(d >= 0 && d <= 4, "gray jpeg diff %d %s", d, err);
    snprintf(p, sizeof p, "%s/cmyk.jpg", dir);
    CHECK(nn_img_write_jpeg(p, cmyk, w, h, 4, 100, err, sizeof err) == 0);
    d = decode_diff(p, 3, rgb, w, h, err, sizeof err);
    CHECKF(d >= 0 && d <= 8, "cmyk jpeg diff %d %s", d, err);
    size_t n;
    uint8_t *b = slurp(p, &n);
    int W, H, C;
    CHECK(nn_img_info(b, n, &W, &H, &C, err, sizeof err) == 0 && W == w && H == h && C == 3);
    free(b);
}

/* Damages a file: keep the first `keep` percent (truncate) or flip bytes after `from`. */
static void damage(const char *path, long keep, long from)
{
    size_t n;
    uint8_t *b = slurp(path, &n);
    if (from > 0)
        for (size_t i = (size_t)from; i < n - 4; i += 3) b[i] ^= 0xa5;
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, keep > 0 ? n * (size_t)keep / 100 : n, f);
    fclose(f);
    free(b);
}

static const char *decode_err(const char *path)
{
    static char err[512];
    size_t n;
    uint8_t *b = slurp(path, &n), *dst = malloc(1 << 20);
    nn_img img;
    err[0] = 0;
    if (nn_img_decode(b, n, 3, identity_plan, NULL, 64, 64, dst, 1 << 20, &img, err, sizeof err) == 0) err[0] = 0;
    free(b);
    free(dst);
    return err;
}

TEST(image_corrupt_and_truncated_files_are_named_problems)
{
    if (!nn_img_have_jpeg() || !nn_img_have_png()) return;
    const char *dir = t_tmpdir("bad");
    char p[600], err[512];
    uint8_t px[64 * 64 * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 2654435761u >> 13);
    /* A good file damaged: the first keep percent of it, or its bytes flipped after from. */
    static const struct { const char *name, *want; long keep, from; } bad[] = {
        {"t.jpg", "truncated JPEG", 50, 0}, {"c.jpg", "corrupt JPEG", 0, 700},
        {"t.png", "truncated PNG", 50, 0},  {"c.png", "corrupt PNG", 0, 200}};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, bad[i].name);
        if (strstr(bad[i].name, ".png")) nn_img_write_png(p, px, 64, 64, 3, 0, err, sizeof err);
        else nn_img_write_jpeg(p, px, 64, 64, 3, 90, err, sizeof err);
        damage(p, bad[i].keep, bad[i].from);
        CHECKF(strstr(decode_err(p), bad[i].want), "%s: %s", bad[i].name, decode_err(p));
    }
    snprintf(p, sizeof p, "%s/x.png", dir);
    t_write_file(dir, "x.png", "GIF89a....", 10, 0);
    CHECKF(strstr(decode_err(p), "not a JPEG or PNG"), "%s", decode_err(p));
}

TEST(transform_plans_follow_torchvision)
{
    float c[4];
    int flip, flips = 0;
    for (int i = 0; i < 500; i++) {
        nn_tf_plan(NN_TF_RRC, nn_tf_key(1, 1, i), 500, 375, 224, c, &flip);
        double area = (double)c[2] * c[3] / (500.0 * 375), r = (double)c[2] / c[3];
        CHECK(c[0] >= 0 && c[1] >= 0 && c[0] + c[2] <= 500 && c[1] + c[3] <= 375);
        CHECKF(area >= 0.079 && area <= 1.0 && r >= 0.74 && r <= 1.34, "area %g ratio %g", area, r);
        flips += flip;
    }
    CHECK(flips > 200 && flips < 300);
    /* Eval: Resize(256) + CenterCrop(224) of 500x375 -> a 328x328 crop centred. */
    nn_tf_plan(NN_TF_EVAL_IMAGENET, 0, 500, 375, 224, c, &flip);
    CHECK_NEAR(c[2], 224 * 375 / 256.0, 1e-4);
    CHECK_NEAR(c[0] + c[2] / 2, 250, 1.0);
    CHECK_NEAR(c[1] + c[3] / 2, 187.5, 1.0);
    /* Same key, same plan; RandomCrop(32, padding=4) offsets in -4..4. */
    float c2[4];
    int f2;
    nn_tf_plan(NN_TF_PADCROP, nn_tf_key(3, 2, 7), 32, 32, 32, c, &flip);
    nn_tf_plan(NN_TF_PADCROP, nn_tf_key(3, 2, 7), 32, 32, 32, c2, &f2);
    CHECK(!memcmp(c, c2, sizeof c) && flip == f2);
    CHECK(c[0] >= -4 && c[0] <= 4 && c[2] == 32);
}

TEST(transform_resample_identity_padding_and_flip)
{
    uint8_t src[4 * 3];
    for (int i = 0; i < 12; i++) src[i] = (uint8_t)(10 * i);
    float out[12], mean = 0, std = 1.0f / 255.0f, scratch[4096];
    float id[4] = {0, 0, 4, 3}, sh[4] = {1, -1, 4, 3};
    CHECK(nn_tf_resample(src, 4, 3, 1, 0, 1, 4, id, 0, 3, 4, &mean, &std, out, scratch, sizeof scratch) == 0);
    for (int i = 0; i < 12; i++) CHECK_NEAR(out[i], src[i], 1e-4);
    CHECK(nn_tf_resample(src, 4, 3, 1, 0, 1, 4, id, 1, 3, 4, &mean, &std, out, scratch, sizeof scratch) == 0);
    CHECK_NEAR(out[0], src[3], 1e-4);
    CHECK_NEAR(out[5], src[6], 1e-4);
    CHECK(nn_tf_resample(src, 4, 3, 1, 0, 1, 4, sh, 0, 3, 4, &mean, &std, out, scratch, sizeof scratch) == 0);
    CHECK_NEAR(out[0], 0, 1e-4); /* row -1: padding */
    CHECK_NEAR(out[4], src[1], 1e-4);
    CHECK_NEAR(out[7], 0, 1e-4); /* column 4: padding */
    /* 2x downscale averages (antialiasing), within the value range. */
    float half[4] = {0, 0, 4, 3};
    CHECK(nn_tf_resample(src, 4, 3, 1, 0, 1, 4, half, 0, 1, 2, &mean, &std, out, scratch, sizeof scratch) == 0);
    CHECK(out[0] > src[0] && out[0] < src[11] && out[1] > out[0]);
}

/* A folder DIR/{train,val}/CLASS/imgN.png of 12x10 gray images, 3 per class. */
static const char *make_folder(int with_val_class_c, int bad_file)
{
    static char root[512];
    char p[800], err[256];
    snprintf(root, sizeof root, "%s", t_tmpdir("folder"));
    const char *cls[3] = {"cat", "bird", "ant"};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 3; k++) {
            if (s == 1 && k == 2 && !with_val_class_c) continue;
            snprintf(p, sizeof p, "%s/%s", root, s ? "val" : "train");
            mkdir(p, 0755);
            snprintf(p, sizeof p, "%s/%s/%s", root, s ? "val" : "train", cls[k]);
            mkdir(p, 0755);
            for (int i = 0; i < 3; i++) {
                uint8_t px[120];
                pattern(px, 12, 10, 1, k * 10 + i);
                snprintf(p, sizeof p, "%s/%s/%s/img%d.png", root, s ? "val" : "train", cls[k], 2 - i);
                nn_img_write_png(p, px, 12, 10, 1, 0, err, sizeof err);
            }
        }
    if (bad_file) {
        snprintf(p, sizeof p, "%s/train/bird/img1.png", root);
        damage(p, 60, 0);
    }
    return root;
}

static int open_load(nn_dataset *d, rt_arena *a, nn_data_cfg *cfg, const char *split, char *err, size_t n)
{
    if (nn_data_open(d, cfg, split, err, n)) return -1;
    rt_arena_plan(a, "t");
    if (nn_data_load(d, a, err, n)) return -1;
    rt_arena_init(a, "t", a->high);
    return nn_data_load(d, a, err, n);
}

TEST(imagefolder_sorted_classes_labels_and_meta)
{
    if (!nn_img_have_png()) return;
    const char *root = make_folder(1, 0);
    nn_data_cfg cfg = {.dir = root, .image_size = 12, .augment = "none", .seed = 1};
    nn_dataset d;
    rt_arena a;
    char err[1024], p[700];
    CHECKF(open_load(&d, &a, &cfg, "train", err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(d.format, "imagefolder") && d.n == 9 && d.num_classes == 3 && d.c == 1 && d.h == 12);
    CHECK(!strcmp(nn_data_class_name(&d, 0), "ant") && !strcmp(nn_data_class_name(&d, 2), "cat"));
    char name[800];
    nn_data_sample_name(&d, 0, name, sizeof name);
    CHECKF(strstr(name, "train/ant/img0.png") != NULL, "%s", name);
    CHECK(d.labels[0] == 0 && d.labels[3] == 1 && d.labels[8] == 2);
    snprintf(p, sizeof p, "%s/ck", root);
    CHECK(nn_data_save_meta(&d, p, err, sizeof err) == 0);
    snprintf(p, sizeof p, "%s/ck.classes", root);
    size_t n;
    char *txt = (char *)slurp(p, &n);
    CHECK(txt && n == 13 && !memcmp(txt, "ant\nbird\ncat\n", 13));
    free(txt);
    nn_dataset v;
    rt_arena av;
    CHECKF(open_load(&v, &av, &cfg, "test", err, sizeof err) == 0, "%s", err);
    CHECK(v.n == 9 && v.meta_hash == d.meta_hash);
    rt_arena_free(&a);
    rt_arena_free(&av);
}

TEST(imagefolder_structure_errors)
{
    if (!nn_img_have_png()) return;
    nn_data_cfg cfg = {.image_size = 12, .seed = 1};
    nn_dataset d;
    rt_arena a;
    char err[1024], p[800];
    cfg.dir = make_folder(0, 0);
    CHECK(open_load(&d, &a, &cfg, "test", err, sizeof err) == -1);
    CHECKF(strstr(err, "class 'ant' of the training split is missing"), "%s", err);
    cfg.dir = make_folder(1, 0);
    snprintf(p, sizeof p, "%s/val/dog", cfg.dir);
    mkdir(p, 0755);
    CHECK(nn_data_open(&d, &cfg, "test", err, sizeof err) == -1);
    CHECKF(strstr(err, "val/dog: empty class folder"), "%s", err);
    t_write_file(p, "a.png", "x", 1, 0);
    CHECK(open_load(&d, &a, &cfg, "test", err, sizeof err) == -1);
    CHECKF(strstr(err, "val/dog: class not in the training split"), "%s", err);
}

static void run_pass(nn_loader *L, const nn_dataset *d, const int32_t *idx, int n, int epoch, float *out, int32_t *lab)
{
    const void *x;
    const int32_t *y;
    int k, got = 0;
    size_t sb = nn_data_sample_bytes(d);
    nn_loader_begin(L, d, idx, 0, n, 4, epoch, 1);
    while ((k = nn_loader_next(L, &x, &y)) > 0) {
        memcpy((char *)out + got * sb, x, (size_t)k * sb);
        memcpy(lab + got, y, (size_t)k * sizeof *y);
        got += k;
    }
    CHECK_EQ(got, n);
}

TEST(loader_batches_identical_for_1_and_3_workers)
{
    if (!nn_img_have_png()) return;
    nn_data_cfg cfg = {.dir = make_folder(1, 0), .image_size = 8, .augment = "imagenet", .seed = 5};
    nn_dataset d;
    rt_arena a;
    char err[1024];
    CHECKF(open_load(&d, &a, &cfg, "train", err, sizeof err) == 0, "%s", err);
    int32_t idx[9] = {4, 0, 8, 1, 7, 2, 6, 3, 5}, l1[9], l3[9];
    size_t sb = nn_data_sample_bytes(&d);
    float *o1 = malloc(9 * sb), *o3 = malloc(9 * sb), *o1b = malloc(9 * sb);
    for (int w = 1; w <= 3; w += 2) {
        rt_arena p, r;
        nn_loader L;
        rt_arena_plan(&p, "l");
        nn_loader_plan(&L, &p, &d, 4, w);
        rt_arena_init(&r, "l", p.high);
        nn_loader_plan(&L, &r, &d, 4, w);
        nn_loader_start_thread(&L);
        run_pass(&L, &d, idx, 9, 1, w == 1 ? o1 : o3, w == 1 ? l1 : l3);
        if (w == 1) run_pass(&L, &d, idx, 9, 2, o1b, l1);
        nn_loader_stop(&L);
        rt_arena_free(&r);
    }
    CHECK(memcmp(o1, o3, 9 * sb) == 0);
    CHECK(memcmp(l1, l3, sizeof l1) == 0);
    CHECK(memcmp(o1, o1b, 9 * sb) != 0); /* another epoch, other crops */
    free(o1), free(o3), free(o1b);
    rt_arena_free(&a);
}

TEST(loader_skip_mode_counts_and_names_bad_files)
{
    if (!nn_img_have_png()) return;
    nn_data_cfg cfg = {.dir = make_folder(1, 1), .image_size = 12, .augment = "none", .bad_skip = 1, .seed = 1};
    nn_dataset d;
    rt_arena a, p, r;
    char err[1024], msg[2048];
    CHECKF(open_load(&d, &a, &cfg, "train", err, sizeof err) == 0, "%s", err);
    nn_loader L;
    rt_arena_plan(&p, "l");
    nn_loader_plan(&L, &p, &d, 4, 2);
    rt_arena_init(&r, "l", p.high);
    nn_loader_plan(&L, &r, &d, 4, 2);
    nn_loader_start_thread(&L);
    const void *x;
    const int32_t *y;
    int k, got = 0;
    nn_loader_begin(&L, &d, NULL, 0, d.n, 4, 1, 1);
    while ((k = nn_loader_next(&L, &x, &y)) > 0) got += k;
    CHECK_EQ(got, 8);
    nn_loader_skips(&L, msg, sizeof msg);
    CHECKF(strstr(msg, "1 bad sample(s) skipped") && strstr(msg, "train/bird/img1.png: truncated PNG"), "%s", msg);
    nn_loader_stop(&L);
    rt_arena_free(&r);
    rt_arena_free(&a);
}

/* ddprt-data convert: the PNG folder holds exactly the IDX pixels (so LeNet sees the
 * same floats), and CIFAR-style binary loads as cifar10; a corrupt file in fail mode
 * stops ddprt-train with one line naming it. */
TEST(data_convert_png_folder_matches_idx_and_train_fails_on_bad_file)
{
    if (!nn_img_have_png()) return;
    char idx[512], out[600], cmd[4096], log[8192], err[1024];
    snprintf(idx, sizeof idx, "%s", t_tmpdir("conv"));
    t_write_synthetic_dataset(idx, 100, 100, 1);
    snprintf(out, sizeof out, "%s/png", idx);
    snprintf(cmd, sizeof cmd, "%s convert --from %s --to %s --format png 2>&1", t_prog("ddprt-data"), idx, out);
    CHECKF(t_sh(cmd, log, sizeof log) == 0, "%s", log);
    nn_data_cfg ci = {.dir = idx, .seed = 1}, cf = {.dir = out, .image_size = 28, .augment = "none", .seed = 1};
    nn_dataset di, df;
    rt_arena ai, af;
    CHECK(open_load(&di, &ai, &ci, "train", err, sizeof err) == 0);
    CHECKF(open_load(&df, &af, &cf, "train", err, sizeof err) == 0, "%s", err);
    CHECK(df.n == 100 && df.c == 1 && df.h == 28);
    float a[784], b[784];
    int32_t ya, yb;
    nn_data_scratch s = {malloc(df.scratch_bytes), df.scratch_bytes}, si = {malloc(di.scratch_bytes), di.scratch_bytes};
    for (int i = 0; i < df.n; i++) {
        char name[800];
        nn_data_sample_name(&df, i, name, sizeof name);
        int k = atoi(strrchr(name, '/') + 1);
        CHECK(nn_data_sample(&df, i, 1, 1, a, &ya, &s, err, sizeof err) == 0);
        CHECK(nn_data_sample(&di, k, 1, 1, b, &yb, &si, err, sizeof err) == 0);
        CHECK(ya == yb && memcmp(a, b, sizeof a) == 0);
    }
    free(s.buf), free(si.buf);
    rt_arena_free(&ai), rt_arena_free(&af);
    snprintf(cmd, sizeof cmd, "%s convert --from %s --to %s/cifar --format cifar 2>&1", t_prog("ddprt-data"), idx, idx);
    CHECKF(t_sh(cmd, log, sizeof log) == 0, "%s", log);
    snprintf(out, sizeof out, "%s/cifar", idx);
    nn_data_cfg cc = {.dir = out, .seed = 1};
    CHECKF(open_load(&di, &ai, &cc, "train", err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(di.format, "cifar10") && di.n == 100 && di.c == 3 && di.h == 32);
    rt_arena_free(&ai);
    /* A truncated PNG in the training split: one line naming the file. */
    snprintf(out, sizeof out, "%s/png/train/3-dress", idx);
    snprintf(cmd, sizeof cmd, "f=$(ls %s/*.png | head -1); head -c 50 \"$f\" > %s/t && mv %s/t \"$f\"; "
             "%s --data %s/png --image-size 28 --epochs 1 --threads 1 --batch-size 8 2>&1",
             out, idx, idx, t_prog("ddprt-train"), idx);
    CHECK(t_sh(cmd, log, sizeof log) != 0);
    CHECKF(strstr(log, "3-dress/") && strstr(log, "truncated PNG") && strstr(log, "--bad-sample skip"), "%s", log);
}

/* Issue 26, defect 11: a valid 5000x4000 PNG (60 MB of pixels, more than the decode
 * buffer) decodes by reading only the crop's band, box-reduced, as JPEGs do; the result
 * matches the image (left half dark, right half bright). An interlaced one that large
 * is still one clear line. */
TEST(image_large_png_decodes_through_a_reduced_band)
{
    if (!nn_img_have_png()) return;
    const char *dir = t_tmpdir("bigpng");
    char p[600], err[512];
    int W = 5000, H = 4000;
    uint8_t *px = malloc((size_t)W * H * 3);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int k = 0; k < 3; k++) px[((size_t)y * W + x) * 3 + k] = x < W / 2 ? 10 : 240;
    snprintf(p, sizeof p, "%s/big.png", dir);
    CHECKF(nn_img_write_png(p, px, W, H, 3, 0, err, sizeof err) == 0, "%s", err);
    size_t n;
    uint8_t *b = slurp(p, &n), *dst = malloc(48u << 20);
    nn_img img;
    static float out[3 * 224 * 224];
    static const float mean[3] = {0, 0, 0}, sd[3] = {1, 1, 1};
    CHECKF(nn_img_decode(b, n, 3, identity_plan, NULL, 224, 224, dst, 48u << 20, &img, err, sizeof err) == 0, "%s",
           err);
    CHECK(img.src_w == W && img.src_h == H && img.w < W && img.h < H); /* reduced */
    /* Through the resampler with the crop the decoder adjusted: dark left, bright right. */
    static uint8_t scratch[8u << 20];
    CHECK(nn_tf_resample(img.px, img.w, img.h, 3, 1, 3, (ptrdiff_t)img.w * 3, img.crop, img.flip, 224, 224, mean, sd,
                         out, scratch, sizeof scratch) == 0);
    CHECKF(out[100 * 224 + 5] < 0.1f && out[100 * 224 + 218] > 0.9f && out[2 * 224 * 224 + 5] < 0.1f, "%g %g",
           out[100 * 224 + 5], out[100 * 224 + 218]);
    free(b);
    /* Interlaced: every row is needed at once, so the same size is refused by name. */
    snprintf(p, sizeof p, "%s/big-i.png", dir);
    CHECKF(nn_img_write_png(p, px, W, H, 3, NN_PNG_INTERLACE, err, sizeof err) == 0, "%s", err);
    b = slurp(p, &n);
    CHECK(nn_img_decode(b, n, 3, identity_plan, NULL, 224, 224, dst, 48u << 20, &img, err, sizeof err) == -1);
    CHECKF(strstr(err, "interlaced image 5000x4000 too large to decode"), "%s", err);
    free(b);
    free(dst);
    free(px);
}

/* Defect 11: the first training image (which gives the channel count) corrupt:
 * --bad-sample skip passes over it (and the loader skips it); fail mode names it. */
TEST(imagefolder_first_image_corrupt_is_skipped_under_skip)
{
    if (!nn_img_have_png()) return;
    nn_data_cfg cfg = {.dir = make_folder(1, 0), .image_size = 12, .augment = "none", .seed = 1};
    char p[800], err[1024];
    snprintf(p, sizeof p, "%s/train/ant/img0.png", cfg.dir);
    damage(p, 5, 0);
    nn_dataset d;
    CHECK(nn_data_open(&d, &cfg, "train", err, sizeof err) == -1);
    CHECKF(strstr(err, "train/ant/img0.png"), "%s", err);
    cfg.bad_skip = 1;
    rt_arena a;
    CHECKF(open_load(&d, &a, &cfg, "train", err, sizeof err) == 0, "%s", err);
    CHECK(d.src_c == 1 && d.n == 9);
    rt_arena_free(&a);
}

/* Defect 11: a class only in val/ names val/CLASS and DIR/train (not "val/train"). */
TEST(imagefolder_val_only_class_names_the_right_paths)
{
    if (!nn_img_have_png()) return;
    nn_data_cfg cfg = {.dir = make_folder(1, 0), .image_size = 12, .seed = 1};
    char p[800], err[1024], want[1200];
    snprintf(p, sizeof p, "%s/val/zebra", cfg.dir);
    mkdir(p, 0755);
    uint8_t px[120] = {0};
    snprintf(p, sizeof p, "%s/val/zebra/a.png", cfg.dir);
    nn_img_write_png(p, px, 12, 10, 1, 0, err, sizeof err);
    nn_dataset d;
    rt_arena a;
    CHECK(open_load(&d, &a, &cfg, "test", err, sizeof err) == -1);
    snprintf(want, sizeof want, "%s/val/zebra: class not in the training split %s/train (", cfg.dir, cfg.dir);
    CHECKF(strstr(err, want) && !strstr(err, "val/train"), "%s", err);
}
