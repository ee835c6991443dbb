/* libFuzzer target: PNG decoding (libpng through nn/data/image.c) and the transforms
 * after it; body in fuzz_img.h. Build and run: make fuzz. */
#define FUZZ_KIND "png"
#include "test/fuzz/fuzz_img.h"
