/* The optional image libraries of image.c (decoding) and image_write.c (encoding):
 * DDPRT_JPEG / DDPRT_PNG are 1 where the Makefile found libjpeg / libpng (JPEG=0 and
 * PNG=0 opt out), 0 in a build that does not say; their headers when 1. */
#ifndef NN_DATA_IMAGE_LIBS_H
#define NN_DATA_IMAGE_LIBS_H
#include <stdio.h> /* before jpeglib.h, which uses FILE and size_t */
#ifndef DDPRT_JPEG
#define DDPRT_JPEG 0
#endif
#ifndef DDPRT_PNG
#define DDPRT_PNG 0
#endif
#if DDPRT_JPEG
#include <jpeglib.h>
#endif
#if DDPRT_PNG
#include <png.h>
#endif
#endif
