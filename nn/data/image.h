/* Image decoding (libjpeg-turbo, libpng; built when their headers exist) and the
 * torchvision transforms, as one pass: the crop is chosen from the header, JPEGs are
 * decoded at the smallest DCT scale that keeps the crop at least as large as the
 * output and only the crop's columns are converted, then one separable antialiased
 * (PIL-style triangle) resample writes normalised floats, CHW. */
#ifndef NN_DATA_IMAGE_H
#define NN_DATA_IMAGE_H
#include <stddef.h>
#include <stdint.h>

/* Chooses the crop (x, y, w, h in source pixels, may extend past the image: padding)
 * and the flip for a W x H source and an out x out result. */
typedef void (*nn_img_plan_fn)(void *ctx, int W, int H, float crop[4], int *flip);

typedef struct nn_img {
    uint8_t *px;           /* decoded region, rows of w * c bytes */
    int w, h, c;
    int src_w, src_h;      /* the file's own size */
    float crop[4];         /* the crop in px coordinates */
    int flip;
    int fast_entropy;      /* 1: ddprt's Huffman decoder ran (nn/data/jhuff.h), 0: libjpeg's */
} nn_img;

int nn_img_have_jpeg(void);
int nn_img_have_png(void);
/* "jpeg", "png" or NULL from the first bytes. */
const char *nn_img_kind(const uint8_t *buf, size_t n);
/* Header only: size and channels (1 gray, 3 colour). 0, or -1 with the problem in err. */
int nn_img_info(const uint8_t *buf, size_t n, int *w, int *h, int *c, char *err, size_t errlen);
/* Decodes buf into dst (dst_bytes) as want_c channels (1: luma, 3: RGB), at a scale
 * and region that keep plan's crop at >= out_w x out_h pixels. 0, or -1 with
 * "corrupt JPEG: ...", "truncated PNG: ..." etc. in err. */
int nn_img_decode(const uint8_t *buf, size_t n, int want_c, nn_img_plan_fn plan, void *ctx, int out_w,
                  int out_h, uint8_t *dst, size_t dst_bytes, nn_img *img, char *err, size_t errlen);

/* torchvision's transforms, deterministic in key (a hash of seed, epoch, index). */
enum { NN_TF_EVAL, NN_TF_EVAL_IMAGENET, NN_TF_RRC, NN_TF_PADCROP };
void nn_tf_plan(int kind, uint64_t key, int W, int H, int out, float crop[4], int *flip);
/* Resamples the crop of src (uint8; strides in bytes between channels, columns and
 * rows) to out_c x out_h x out_w floats, normalised: (v/255 - mean) / std. Pixels whose
 * filter window lies wholly outside the image are 0 before normalising (padding).
 * Returns 0, or -1 when scratch (scratch_bytes) is too small for this crop. */
int nn_tf_resample(const uint8_t *src, int W, int H, int C, ptrdiff_t cs, ptrdiff_t xs, ptrdiff_t ys,
                   const float crop[4], int flip, int out_h, int out_w, const float *mean, const float *std,
                   float *out, void *scratch, size_t scratch_bytes);
uint64_t nn_tf_key(uint64_t seed, int epoch, int idx);
#endif
