/* Shared body of the JPEG and PNG libFuzzer targets: the image folder's per-sample path
 * (nn/data/folder.c) on arbitrary bytes: header (nn_img_info), decode at the planned
 * DCT scale and crop into a bounded buffer, then the torchvision resample. Transform
 * kind, channels, output size and key come from the input's length and last bytes, so
 * one input exercises one deterministic path. Only inputs of FUZZ_KIND are decoded. */
#include "nn/data/image.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PIX_BYTES (4u << 20) /* the folder reader uses 48 MiB; smaller keeps runs fast */
#define TF_BYTES (1u << 20)

typedef struct plan_ctx { int kind, out; uint64_t key; } plan_ctx;
static void plan_cb(void *ctx, int W, int H, float crop[4], int *flip)
{
    plan_ctx *p = ctx;
    nn_tf_plan(p->kind, p->key, W, H, p->out, crop, flip);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static uint8_t *pix, *tf;
    static float out[3 * 40 * 40];
    if (!pix && (!(pix = malloc(PIX_BYTES)) || !(tf = malloc(TF_BYTES)))) abort();
    const char *kind = nn_img_kind(d, n);
    if (!kind || strcmp(kind, FUZZ_KIND)) return 0;
    char err[512];
    int w, h, c;
    if (nn_img_info(d, n, &w, &h, &c, err, sizeof err)) {
        if (!err[0]) abort(); /* every failure says why */
        return 0;
    }
    if (w <= 0 || h <= 0 || (c != 1 && c != 3)) abort();
    /* Headers may claim 65535x65535; decoding that much padding takes seconds per input
     * and tests libjpeg/libpng's fill, not our code. Large images are in the unit tests. */
    if ((size_t)w * h > (1u << 20)) return 0;
    uint8_t t = d[n - 1];
    int want_c = t & 1 ? 1 : 3, sz = 8 + (t >> 1 & 31);
    plan_ctx pc = {(t >> 6) & 3, sz, (uint64_t)n * 0x9e3779b97f4a7c15ull ^ d[n / 2]};
    nn_img img;
    if (nn_img_decode(d, n, want_c, plan_cb, &pc, sz, sz, pix, PIX_BYTES, &img, err, sizeof err)) {
        if (!err[0]) abort();
        return 0;
    }
    if (img.px != pix || img.w <= 0 || img.h <= 0 || (size_t)img.w * img.h * img.c > PIX_BYTES) abort();
    if (img.c != want_c) abort();
    static const float mean[3] = {0.5f, 0.5f, 0.5f}, sd[3] = {0.25f, 0.25f, 0.25f};
    if (nn_tf_resample(img.px, img.w, img.h, img.c, 1, img.c, (ptrdiff_t)img.w * img.c, img.crop, img.flip, sz, sz,
                       mean, sd, out, tf, TF_BYTES))
        return 0; /* crop needs more scratch than given: a clean refusal */
    for (int i = 0; i < img.c * sz * sz; i++)
        if (!isfinite(out[i]) || out[i] < -2.01f || out[i] > 2.01f) abort(); /* (v/255-0.5)/0.25 */
    return 0;
}
