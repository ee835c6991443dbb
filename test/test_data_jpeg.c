/* ddprt's Huffman decoder inside libjpeg (nn/data/jhuff.c): the same pixels as
 * libjpeg's own decoder on every baseline layout (subsampling, gray, CMYK, restart
 * intervals, optimised tables with long codes, crops), libjpeg's decoder kept for
 * progressive files, and damaged entropy data named as corrupt. */
#include "nn/data/image.h"
#include "nn/data/jhuff.h"
#include "test/t.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if DDPRT_JPEG
#include <jpeglib.h>

typedef struct variant { int c, h0, v0, restart, optimize, progressive, quality; } variant;

/* A noisy image (long codes, large values) as a JPEG in memory. */
static unsigned char *encode(const variant *v, int w, int h, unsigned long *n)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    unsigned char *out = NULL, *px = malloc((size_t)w * h * v->c);
    uint32_t s = 12345;
    for (int i = 0; i < w * h * v->c; i++) {
        s = s * 1664525u + 1013904223u;
        int x = i / v->c % w, y = i / v->c / w;
        px[i] = (uint8_t)((x * 3 + y * 2 + (int)(s >> 26)) & 255);
    }
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &out, n);
    ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h, ci.input_components = v->c;
    ci.in_color_space = v->c == 1 ? JCS_GRAYSCALE : v->c == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, v->quality, TRUE);
    if (v->c == 3) ci.comp_info[0].h_samp_factor = v->h0, ci.comp_info[0].v_samp_factor = v->v0;
    ci.restart_interval = (unsigned)v->restart;
    ci.optimize_coding = v->optimize;
    if (v->progressive) jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW r = px + (size_t)ci.next_scanline * w * v->c;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(px);
    return out;
}

static void whole(void *ctx, int W, int H, float crop[4], int *flip)
{
    (void)ctx;
    crop[0] = 0, crop[1] = 0, crop[2] = (float)W, crop[3] = (float)H;
    *flip = 0;
}
static void rrc(void *ctx, int W, int H, float crop[4], int *flip)
{
    nn_tf_plan(NN_TF_RRC, nn_tf_key(7, 1, *(int *)ctx), W, H, 24, crop, flip);
}

/* Decodes with libjpeg's and with ddprt's entropy decoder: returns 0 when both give
 * the same pixels (and ddprt's ran iff fast), else a line in err. */
static int same(const unsigned char *b, unsigned long n, int want_c, nn_img_plan_fn plan, void *ctx, int out, int fast,
                char *err, size_t errlen)
{
    size_t cap = 1 << 22;
    uint8_t *d0 = malloc(cap), *d1 = malloc(cap);
    nn_img a, f;
    int rc = -1;
    nn_jhuff_enabled = 0;
    if (nn_img_decode(b, n, want_c, plan, ctx, out, out, d0, cap, &a, err, errlen)) goto done;
    nn_jhuff_enabled = 1;
    if (nn_img_decode(b, n, want_c, plan, ctx, out, out, d1, cap, &f, err, errlen)) goto done;
    if (a.fast_entropy || f.fast_entropy != fast) {
        snprintf(err, errlen, "ddprt's decoder ran: %d %d (expected 0 %d)", a.fast_entropy, f.fast_entropy, fast);
        goto done;
    }
    if (a.w != f.w || a.h != f.h || a.c != f.c || memcmp(a.crop, f.crop, sizeof a.crop) ||
        memcmp(a.px, f.px, (size_t)a.w * a.h * a.c)) {
        snprintf(err, errlen, "pixels differ (%dx%dx%d)", a.w, a.h, a.c);
        goto done;
    }
    rc = 0;
done:
    nn_jhuff_enabled = 1;
    free(d0), free(d1);
    return rc;
}

TEST(jpeg_entropy_decoder_same_pixels_as_libjpeg)
{
    static const variant vs[] = {
        {3, 2, 2, 0, 0, 0, 90}, {3, 1, 1, 0, 0, 0, 95}, {3, 2, 1, 0, 0, 0, 75}, {1, 1, 1, 0, 0, 0, 90},
        {4, 1, 1, 0, 0, 0, 90}, {3, 2, 2, 1, 0, 0, 90}, {3, 2, 2, 7, 0, 0, 100}, {1, 1, 1, 3, 1, 0, 100},
        {3, 2, 2, 0, 1, 0, 100}, {3, 1, 1, 5, 1, 0, 98}, {3, 2, 2, 0, 0, 1, 90},
    };
    char err[256];
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
        unsigned long n;
        unsigned char *b = encode(&vs[i], 83, 61, &n);
        int fast = !vs[i].progressive;
        CHECKF(same(b, n, 3, whole, NULL, 0, fast, err, sizeof err) == 0, "variant %zu whole rgb: %s", i, err);
        CHECKF(same(b, n, 1, whole, NULL, 0, fast, err, sizeof err) == 0, "variant %zu whole gray: %s", i, err);
        for (int k = 0; k < 6; k++)
            CHECKF(same(b, n, 3, rrc, &k, 24, fast, err, sizeof err) == 0, "variant %zu crop %d: %s", i, k, err);
        free(b);
    }
}

static const char *decode_err(unsigned char *b, unsigned long n)
{
    static char err[256];
    size_t cap = 1 << 22;
    uint8_t *d = malloc(cap);
    nn_img img;
    err[0] = 0;
    if (nn_img_decode(b, n, 3, whole, NULL, 0, 0, d, cap, &img, err, sizeof err) == 0) snprintf(err, sizeof err, "decoded");
    free(d);
    return err;
}

/* Offset of the first entropy-coded byte (after SOS). */
static size_t scan_start(const unsigned char *b, unsigned long n)
{
    for (size_t i = 2; i + 4 < n;) {
        size_t len = (size_t)b[i + 2] << 8 | b[i + 3];
        if (b[i + 1] == 0xda) return i + 2 + len;
        i += 2 + len;
    }
    return 0;
}

TEST(jpeg_entropy_decoder_names_damaged_data)
{
    variant v = {3, 2, 2, 4, 0, 0, 90};
    unsigned long n;
    unsigned char *b = encode(&v, 83, 61, &n);
    size_t s = scan_start(b, n);
    CHECK(s > 0 && s < n / 2);
    CHECKF(!strcmp(decode_err(b, n), "decoded"), "%s", decode_err(b, n));
    /* The scan cut in the middle, end-of-image marker kept: premature end. */
    unsigned char *t = malloc(n);
    size_t m = s + (n - s) / 2;
    memcpy(t, b, m);
    t[m] = 0xff, t[m + 1] = 0xd9;
    CHECKF(strstr(decode_err(t, m + 2), "corrupt JPEG") && strstr(decode_err(t, m + 2), "premature end"), "%s",
           decode_err(t, m + 2));
    /* A restart marker out of order. */
    memcpy(t, b, n);
    size_t r = s;
    while (r + 1 < n && !(t[r] == 0xff && t[r + 1] == 0xd0)) r++;
    CHECK(r + 1 < n);
    t[r + 1] = 0xd3;
    CHECKF(strstr(decode_err(t, n), "corrupt JPEG") && strstr(decode_err(t, n), "restart"), "%s", decode_err(t, n));
    /* Every byte of the first half of the scan flipped: some problem is found. */
    memcpy(t, b, n);
    for (size_t i = s; i < s + (n - s) / 2; i++)
        if (t[i] != 0xff && t[i] != 0x00 && (t[i] ^ 0x5a) != 0xff) t[i] ^= 0x5a;
    CHECKF(strstr(decode_err(t, n), "corrupt JPEG"), "%s", decode_err(t, n));
    free(t);
    free(b);
}
#endif
