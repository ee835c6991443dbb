/* A faster baseline Huffman (entropy) decoder that replaces libjpeg-turbo's own inside
 * its pipeline: entropy decoding is most of the time of decoding a photograph-like
 * JPEG, and libjpeg's refills its bit buffer a byte at a time. This one reads eight
 * bytes at once when none of them is 0xFF, and decodes most AC coefficients (code and
 * value together) with one table look-up. The coefficients it produces are the same,
 * so the pixels are identical (tested against libjpeg's own decoder). */
#ifndef NN_DATA_JHUFF_H
#define NN_DATA_JHUFF_H
#include <stdint.h>

#define NN_JH_FAST 9  /* symbol look-up bits */
#define NN_JH_ACB 11  /* code + value look-up bits for AC coefficients */

typedef struct nn_jh_tab {
    uint16_t fast[1 << NN_JH_FAST]; /* length << 8 | symbol; 0: a longer code (or none) */
    int32_t maxcode[18];            /* largest code of each length, -1: none */
    int32_t valoff[17];             /* code + valoff[len] indexes val */
    uint8_t val[256];
    int32_t ac[1 << NN_JH_ACB];     /* AC only: value << 16 | run << 8 | total bits; 0: not here */
} nn_jh_tab;

typedef struct nn_jh_bits {
    const uint8_t *p, *end;  /* next entropy-coded byte; never past a marker */
    uint64_t bits;           /* left-aligned bit buffer */
    int nbits, pad;          /* bits held; of those, zeros added after a marker */
    int marker;
    const char *bad;         /* first problem, NULL when none */
} nn_jh_bits;

typedef struct nn_jhuff {
    nn_jh_bits b;            /* copied into registers for each MCU */
    int togo, next_rst;
    int dc[4];
    const nn_jh_tab *dct[4], *act[4]; /* per component in the scan */
    nn_jh_tab tab[8];        /* DC 0-3, AC 4-7 */
} nn_jhuff;

/* Global switch (tests, benchmarks): 0 uses libjpeg's own entropy decoder. */
extern int nn_jhuff_enabled;
/* After jpeg_start_decompress(cinfo) on a baseline, single-scan, 8-bit Huffman file:
 * takes over its entropy decoding from the first scan byte (cinfo->client_data = j).
 * Returns 1 when installed (the caller must then end with jpeg_abort_decompress, as
 * libjpeg's input position is left behind), 0 when libjpeg keeps decoding. */
int nn_jhuff_install(void *cinfo, nn_jhuff *j);
#endif
