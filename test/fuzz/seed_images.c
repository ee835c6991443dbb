/* Writes small JPEG and PNG files of every kind the writers make (gray, RGB, CMYK;
 * 16-bit, alpha, interlaced) as seeds for the image fuzz targets: make fuzz. */
#include "nn/data/image_write.h"
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3) return fprintf(stderr, "usage: %s JPEG_DIR PNG_DIR\n", argv[0]), 2;
    uint8_t px[4 * 23 * 17];
    for (int i = 0; i < (int)sizeof px; i++) px[i] = (uint8_t)(i * 37 + (i >> 5) * 11);
    char p[512], err[256];
    static const int jc[] = {1, 3, 4}, pc[] = {1, 3, 1, 3, 3, 1};
    static const int pf[] = {0, 0, NN_PNG_16BIT, NN_PNG_ALPHA, NN_PNG_INTERLACE, NN_PNG_ALPHA | NN_PNG_16BIT};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/seed%d.jpg", argv[1], i);
        if (nn_img_write_jpeg(p, px, 23 - 7 * i, 17 - 4 * i, jc[i], 30 + 30 * i, err, sizeof err))
            return fprintf(stderr, "%s\n", err), 1;
    }
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/seed%d.png", argv[2], i);
        if (nn_img_write_png(p, px, 9 + i, 7 + 2 * i, pc[i], pf[i], err, sizeof err))
            return fprintf(stderr, "%s\n", err), 1;
    }
    return 0;
}
