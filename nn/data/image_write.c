/* Writing JPEG and PNG files: ddprt-data convert/synth and the tests' fixtures. */
#include "nn/data/image_write.h"
#include "nn/data/image_libs.h"
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DDPRT_JPEG || DDPRT_PNG
static FILE *open_out(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "wb");
    if (!f) snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return f;
}

/* fclose's error is the last write's (a full disk): reported. */
static int close_out(FILE *f, const char *path, char *err, size_t errlen)
{
    if (!fclose(f)) return 0;
    snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return -1;
}
#endif
#if !DDPRT_JPEG || !DDPRT_PNG
static int no_support(const char *format, const char *package, char *err, size_t errlen)
{
    snprintf(err, errlen, "this build has no %s support: install %s and rebuild", format, package);
    return -1;
}
#endif

int nn_img_write_jpeg(const char *path, const uint8_t *px, int w, int h, int c, int quality, char *err, size_t errlen)
{
#if DDPRT_JPEG
    FILE *f = open_out(path, err, errlen);
    if (!f) return -1;
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : c == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW r = (JSAMPROW)(px + (size_t)ci.next_scanline * w * c);
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return close_out(f, path, err, errlen);
#else
    (void)path, (void)px, (void)w, (void)h, (void)c, (void)quality;
    return no_support("JPEG", "libjpeg62-turbo-dev", err, errlen);
#endif
}

int nn_img_write_png(const char *path, const uint8_t *px, int w, int h, int c, int flags, char *err, size_t errlen)
{
#if DDPRT_PNG
    FILE *f = open_out(path, err, errlen);
    if (!f) return -1;
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(p);
    int depth = flags & NN_PNG_16BIT ? 16 : 8, alpha = (flags & NN_PNG_ALPHA) != 0, oc = c + alpha;
    unsigned char *row = malloc((size_t)w * oc * 2);
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_write_struct(&p, &info);
        fclose(f);
        free(row);
        snprintf(err, errlen, "%s: libpng write error", path);
        return -1;
    }
    png_init_io(p, f);
    int ct = c == 1 ? (alpha ? PNG_COLOR_TYPE_GRAY_ALPHA : PNG_COLOR_TYPE_GRAY) : (alpha ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB);
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, depth, ct,
                 flags & NN_PNG_INTERLACE ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(p, info);
    int passes = flags & NN_PNG_INTERLACE ? png_set_interlace_handling(p) : 1;
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < h; y++) {
            const uint8_t *s = px + (size_t)y * w * c;
            size_t k = 0;
            for (int x = 0; x < w; x++)
                for (int ch = 0; ch < oc; ch++) {
                    /* 16-bit: v * 257 (high byte = v, low byte = v ^ 0x5a so it is not a copy). */
                    uint8_t v = ch < c ? s[x * c + ch] : 255;
                    row[k++] = v;
                    if (depth == 16) row[k++] = v ^ 0x5a;
                }
            png_write_row(p, row);
        }
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    free(row);
    return close_out(f, path, err, errlen);
#else
    (void)path, (void)px, (void)w, (void)h, (void)c, (void)flags;
    return no_support("PNG", "libpng-dev", err, errlen);
#endif
}
