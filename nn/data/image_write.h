/* JPEG / PNG writers (fixtures for tests, ddprt-data convert and synth). */
#ifndef NN_DATA_IMAGE_WRITE_H
#define NN_DATA_IMAGE_WRITE_H
#include <stddef.h>
#include <stdint.h>

enum { NN_PNG_16BIT = 1, NN_PNG_ALPHA = 2, NN_PNG_INTERLACE = 4 };
/* px: h rows of w * c bytes; c = 1 (gray), 3 (RGB) or, for JPEG, 4 (CMYK). */
int nn_img_write_jpeg(const char *path, const uint8_t *px, int w, int h, int c, int quality, char *err, size_t errlen);
int nn_img_write_png(const char *path, const uint8_t *px, int w, int h, int c, int flags, char *err, size_t errlen);
#endif
