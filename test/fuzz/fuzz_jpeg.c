/* libFuzzer target: JPEG decoding (libjpeg-turbo through nn/data/image.c) and the
 * transforms after it; body in fuzz_img.h. Build and run: make fuzz. */
#define FUZZ_KIND "jpeg"
#include "test/fuzz/fuzz_img.h"
