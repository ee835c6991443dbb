#include "nn/data/image.h"
#include "nn/data/image_libs.h"
#include "nn/data/jhuff.h"
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

int nn_img_have_jpeg(void) { return DDPRT_JPEG; }
int nn_img_have_png(void) { return DDPRT_PNG; }

const char *nn_img_kind(const uint8_t *b, size_t n)
{
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return "jpeg";
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return "png";
    return NULL;
}

#if !DDPRT_JPEG || !DDPRT_PNG
static int unsupported(const char *kind, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s image, but this build has no %s support: install %s and rebuild (make clean all)",
             kind, kind, !strcmp(kind, "JPEG") ? "libjpeg62-turbo-dev" : "libpng-dev");
    return -1;
}
#endif

/* Pillow's RGB -> L (ITU-R 601-2 luma, 16-bit fixed point), in place. */
static inline void to_luma(uint8_t *dst, const uint8_t *src, size_t npx, int stride)
{
    for (size_t i = 0; i < npx; i++, src += stride)
        dst[i] = (uint8_t)((src[0] * 19595 + src[1] * 38470 + src[2] * 7471 + 0x8000) >> 16);
}

/* Decoded pixels needed for the crop: its size at scale s, plus the filter margin. */
static inline void band(const float crop[4], double s, int out, int full, int *lo, int *hi)
{
    double c0 = crop[0] * s, cw = crop[2] * s, support = cw / out > 1 ? cw / out : 1;
    int m = (int)ceil(support) + 1;
    *lo = (int)floor(c0) - m;
    *hi = (int)ceil(c0 + cw) + m;
    if (*lo < 0) *lo = 0;
    if (*hi > full) *hi = full;
    if (*hi < *lo) *hi = *lo;
}

#if DDPRT_JPEG
typedef struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    int bad;
} jerr;

static void j_error_exit(j_common_ptr ci)
{
    jerr *e = (jerr *)ci->err;
    ci->err->format_message(ci, e->msg);
    longjmp(e->jb, 1);
}

/* Corrupt-data warnings (level -1: premature end, bad Huffman code, ...) make the
 * image bad: libjpeg would otherwise return grey or garbage rows silently. */
static void j_emit(j_common_ptr ci, int level)
{
    jerr *e = (jerr *)ci->err;
    if (level < 0 && !e->bad) {
        ci->err->format_message(ci, e->msg);
        e->bad = 1;
    }
}
static void j_output(j_common_ptr ci) { (void)ci; }

static int jpeg_decode(const uint8_t *buf, size_t n, int want_c, nn_img_plan_fn plan, void *ctx, int ow,
                       int oh, uint8_t *dst, size_t dst_bytes, nn_img *img, char *err, size_t errlen)
{
    struct jpeg_decompress_struct ci;
    jerr e;
    memset(&e, 0, sizeof e);
    ci.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = j_error_exit;
    e.pub.emit_message = j_emit;
    e.pub.output_message = j_output;
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&ci);
        snprintf(err, errlen, "corrupt JPEG: %s", e.msg);
        return -1;
    }
    jpeg_create_decompress(&ci);
    if (plan) {
        size_t i = n, stop = n > 4096 ? n - 4096 : 0; /* EOI, allowing some trailing bytes */
        while (i >= stop + 2 && !(buf[i - 2] == 0xff && buf[i - 1] == 0xd9)) i--;
        if (i < stop + 2) {
            jpeg_destroy_decompress(&ci);
            snprintf(err, errlen, "truncated JPEG: no end-of-image marker (%zu bytes)", n);
            return -1;
        }
    }
    jpeg_mem_src(&ci, buf, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    int W = (int)ci.image_width, H = (int)ci.image_height;
    img->src_w = W, img->src_h = H;
    if (!plan) { /* header only */
        img->c = ci.num_components == 1 ? 1 : 3;
        jpeg_destroy_decompress(&ci);
        return 0;
    }
    plan(ctx, W, H, img->crop, &img->flip);
    int cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
    ci.out_color_space = cmyk ? JCS_CMYK : want_c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    /* The smallest DCT scale (num/8) that keeps the crop at least out pixels wide and high. */
    int num = 8;
    /* 1/8, 1/4, 1/2: libjpeg-turbo's SIMD-accelerated reduced IDCTs (3/8, 5/8, ... are plain C
     * and slower than the full-size SIMD decode). */
    if (ow > 0 && oh > 0)
        for (num = 1; num < 8; num *= 2)
            if (img->crop[2] * num / 8.0 >= ow && img->crop[3] * num / 8.0 >= oh) break;
    ci.scale_num = (unsigned)num;
    ci.scale_denom = 8;
    jpeg_start_decompress(&ci);
    nn_jhuff jh;
    int hooked = nn_jhuff_install(&ci, &jh);
    int nc = ci.output_components, OW = (int)ci.output_width, OH = (int)ci.output_height;
    double sx = (double)OW / W, sy = (double)OH / H;
    int x0, x1, y0, y1;
    band(img->crop, sx, ow > 0 ? ow : OW, OW, &x0, &x1);
    float cy[4] = {img->crop[1], 0, img->crop[3], 0};
    band(cy, sy, oh > 0 ? oh : OH, OH, &y0, &y1);
    if (x1 <= x0 || y1 <= y0) x0 = 0, x1 = OW, y0 = 0, y1 = OH;
    JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
    if (cw < (JDIMENSION)OW) jpeg_crop_scanline(&ci, &xoff, &cw); /* widened to iMCU boundaries */
    else xoff = 0, cw = (JDIMENSION)OW;
    size_t row = (size_t)cw * nc;
    if ((size_t)(y1 - y0) * row > dst_bytes) {
        jpeg_destroy_decompress(&ci);
        snprintf(err, errlen, "image %dx%d too large to decode (%zu bytes, the buffer holds %zu)", W, H,
                 (size_t)(y1 - y0) * row, dst_bytes);
        return -1;
    }
    if (y0 > 0) jpeg_skip_scanlines(&ci, (JDIMENSION)y0);
    while ((int)ci.output_scanline < y1) {
        JSAMPROW r = dst + (size_t)((int)ci.output_scanline - y0) * row;
        jpeg_read_scanlines(&ci, &r, 1);
    }
    /* Rows below the crop are not decoded at all (entropy decoding is most of the
     * cost); a truncated file is still caught by its missing end-of-image marker. */
    int adobe = ci.saw_Adobe_marker;
    if ((int)ci.output_scanline < OH || hooked) jpeg_abort_decompress(&ci);
    else jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    if (hooked && jh.b.bad && !e.bad) snprintf(e.msg, sizeof e.msg, "%s", jh.b.bad), e.bad = 1;
    if (e.bad) {
        snprintf(err, errlen, "corrupt JPEG: %s", e.msg);
        return -1;
    }
    size_t npx = (size_t)(y1 - y0) * cw;
    if (cmyk) { /* to RGB or luma, in place (the output is never longer than the input) */
        for (size_t i = 0; i < npx; i++) {
            const uint8_t *p = dst + 4 * i;
            int k = adobe ? p[3] : 255 - p[3], rgb[3];
            for (int c = 0; c < 3; c++) rgb[c] = (adobe ? p[c] : 255 - p[c]) * k / 255;
            dst[3 * i] = (uint8_t)rgb[0], dst[3 * i + 1] = (uint8_t)rgb[1], dst[3 * i + 2] = (uint8_t)rgb[2];
        }
        nc = 3;
        if (want_c == 1) to_luma(dst, dst, npx, 3), nc = 1;
    }
    img->px = dst;
    img->fast_entropy = hooked;
    img->w = (int)cw, img->h = y1 - y0, img->c = nc;
    img->crop[0] = (float)(img->crop[0] * sx - (double)xoff);
    img->crop[1] = (float)(img->crop[1] * sy - y0);
    img->crop[2] = (float)(img->crop[2] * sx);
    img->crop[3] = (float)(img->crop[3] * sy);
    return 0;
}
#endif

#if DDPRT_PNG
typedef struct pctx {
    const uint8_t *buf;
    size_t n, pos;
    char msg[256];
} pctx;

static void p_error(png_structp p, png_const_charp m)
{
    pctx *c = png_get_error_ptr(p);
    snprintf(c->msg, sizeof c->msg, "%s", m);
    png_longjmp(p, 1);
}
static void p_warn(png_structp p, png_const_charp m) { (void)p, (void)m; }
static void p_read(png_structp p, png_bytep out, size_t n)
{
    pctx *c = png_get_io_ptr(p);
    if (n > c->n - c->pos) {
        snprintf(c->msg, sizeof c->msg, "truncated: the file ends at byte %zu", c->n);
        png_longjmp(p, 1);
    }
    memcpy(out, c->buf + c->pos, n);
    c->pos += n;
}

/* Reads the rows of a non-interlaced PNG keeping only the band the crop needs, each f x f
 * block averaged (f = 8, 4, 2 or 1: the largest that keeps the crop >= out). Layout in
 * dst: the band (bw x bh x nc), then one source row, then the block sums. img gets the
 * band and the crop in its coordinates. -1 when even that does not fit in dst. */
static int png_reduce(png_structp p, int W, int H, int nc, int out_w, int out_h, uint8_t *dst, size_t dst_bytes,
                      nn_img *img)
{
    int f = 8;
    while (f > 1 && !(img->crop[2] / f >= out_w && img->crop[3] / f >= out_h)) f /= 2;
    int RW = (W + f - 1) / f, RH = (H + f - 1) / f, x0, x1, y0, y1;
    band(img->crop, 1.0 / f, out_w, RW, &x0, &x1);
    float cy[4] = {img->crop[1], 0, img->crop[3], 0};
    band(cy, 1.0 / f, out_h, RH, &y0, &y1);
    if (x1 <= x0 || y1 <= y0) x0 = 0, x1 = RW, y0 = 0, y1 = RH;
    size_t bw = (size_t)(x1 - x0), bh = (size_t)(y1 - y0), keep = bw * bh * (size_t)nc;
    size_t need = keep + (size_t)W * nc + bw * (size_t)nc * sizeof(uint32_t) + 8;
    if (need > dst_bytes) return -1;
    uint8_t *rowbuf = dst + keep;
    uint32_t *acc = (uint32_t *)(((uintptr_t)(rowbuf + (size_t)W * nc) + 7) & ~(uintptr_t)7);
    for (int y = 0; y < H; y++) {
        png_read_row(p, rowbuf, NULL);
        int ry = y / f;
        if (ry < y0 || ry >= y1) continue;
        if (y % f == 0) memset(acc, 0, bw * (size_t)nc * sizeof *acc);
        for (int rx = x0; rx < x1; rx++)
            for (int x = rx * f; x < rx * f + f && x < W; x++)
                for (int c = 0; c < nc; c++) acc[(size_t)(rx - x0) * nc + c] += rowbuf[(size_t)x * nc + c];
        if (y % f == f - 1 || y == H - 1) { /* the block row is complete: average (edge blocks are partial) */
            int rows = y % f + 1;
            uint8_t *o = dst + (size_t)(ry - y0) * bw * nc;
            for (int rx = x0; rx < x1; rx++) {
                int cols = (rx * f + f <= W ? f : W - rx * f) * rows;
                for (int c = 0; c < nc; c++)
                    o[(size_t)(rx - x0) * nc + c] = (uint8_t)((acc[(size_t)(rx - x0) * nc + c] + (uint32_t)cols / 2) / (uint32_t)cols);
            }
        }
    }
    img->px = dst;
    img->w = (int)bw, img->h = (int)bh;
    img->crop[0] = img->crop[0] / f - x0;
    img->crop[1] = img->crop[1] / f - y0;
    img->crop[2] /= f;
    img->crop[3] /= f;
    return 0;
}

/* Everything after the header, for png_decode (a function of its own so that no local
 * of png_decode changes after its setjmp). 1: done (rows in img), 0: header only, -1:
 * too large (message in err). libpng errors longjmp out of here. */
static int png_rows(png_structp p, png_infop info, int want_c, nn_img_plan_fn plan, void *ctx, int out_w, int out_h,
                    uint8_t *dst, size_t dst_bytes, nn_img *img, char *err, size_t errlen)
{
    png_read_info(p, info);
    int W = (int)png_get_image_width(p, info), H = (int)png_get_image_height(p, info);
    int ct = png_get_color_type(p, info), depth = png_get_bit_depth(p, info);
    img->src_w = W, img->src_h = H;
    if (!plan) {
        img->c = ct & PNG_COLOR_MASK_COLOR ? 3 : 1;
        return 0;
    }
    plan(ctx, W, H, img->crop, &img->flip);
    /* As Pillow's convert("L"/"RGB"): 16-bit keeps the high byte, alpha is dropped. */
    if (depth == 16) png_set_strip_16(p);
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
    if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(p);
    if (ct & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(p);
    int color = (ct & PNG_COLOR_MASK_COLOR) != 0;
    if (want_c == 3 && !color) png_set_gray_to_rgb(p);
    int passes = png_set_interlace_handling(p);
    png_read_update_info(p, info);
    size_t row = png_get_rowbytes(p, info);
    if ((size_t)H * row > dst_bytes) {
        /* Too large to hold whole: keep only the crop's band, box-reduced by the
         * largest factor that keeps the crop at least as large as the output (as JPEGs
         * are decoded at a DCT scale). Interlaced files need every row in memory. */
        if (passes > 1 || png_reduce(p, W, H, (int)(row / (size_t)W), out_w, out_h, dst, dst_bytes, img)) {
            snprintf(err, errlen, "%simage %dx%d too large to decode (%zu bytes, the buffer holds %zu)",
                     passes > 1 ? "interlaced " : "", W, H, (size_t)H * row, dst_bytes);
            return -1;
        }
    } else {
        for (int pass = 0; pass < passes; pass++)
            for (int y = 0; y < H; y++) png_read_row(p, dst + (size_t)y * row, NULL);
        img->px = dst;
        img->w = W, img->h = H;
    }
    png_read_end(p, NULL);
    if (want_c == 1 && color) to_luma(dst, dst, (size_t)img->w * img->h, 3);
    img->c = want_c;
    return 1;
}

static int png_decode(const uint8_t *buf, size_t n, int want_c, nn_img_plan_fn plan, void *ctx, int out_w,
                      int out_h, uint8_t *dst, size_t dst_bytes, nn_img *img, char *err, size_t errlen)
{
    pctx c = {buf, n, 0, ""};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, p_error, p_warn);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        snprintf(err, errlen, "PNG: out of memory");
        return -1;
    }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        snprintf(err, errlen, "%s PNG: %s", strstr(c.msg, "truncated") ? "truncated" : "corrupt", c.msg);
        return -1;
    }
    png_set_read_fn(p, &c, p_read);
    int rc = png_rows(p, info, want_c, plan, ctx, out_w, out_h, dst, dst_bytes, img, err, errlen);
    png_destroy_read_struct(&p, &info, NULL);
    return rc < 0 ? -1 : 0;
}
#endif

int nn_img_decode(const uint8_t *buf, size_t n, int want_c, nn_img_plan_fn plan, void *ctx, int out_w,
                  int out_h, uint8_t *dst, size_t dst_bytes, nn_img *img, char *err, size_t errlen)
{
    const char *kind = nn_img_kind(buf, n);
    memset(img, 0, sizeof *img);
    if (!kind) {
        snprintf(err, errlen, "not a JPEG or PNG file (%zu bytes, starts %02x %02x)", n, n > 0 ? buf[0] : 0,
                 n > 1 ? buf[1] : 0);
        return -1;
    }
    if (!strcmp(kind, "jpeg")) {
#if DDPRT_JPEG
        return jpeg_decode(buf, n, want_c, plan, ctx, out_w, out_h, dst, dst_bytes, img, err, errlen);
#else
        (void)want_c, (void)plan, (void)ctx, (void)out_w, (void)out_h, (void)dst, (void)dst_bytes;
        return unsupported("JPEG", err, errlen);
#endif
    }
#if DDPRT_PNG
    return png_decode(buf, n, want_c, plan, ctx, out_w, out_h, dst, dst_bytes, img, err, errlen);
#else
    return unsupported("PNG", err, errlen);
#endif
}

int nn_img_info(const uint8_t *buf, size_t n, int *w, int *h, int *c, char *err, size_t errlen)
{
    nn_img img;
    if (nn_img_decode(buf, n, 3, NULL, NULL, 0, 0, NULL, 0, &img, err, errlen)) return -1;
    *w = img.src_w, *h = img.src_h, *c = img.c;
    return 0;
}
