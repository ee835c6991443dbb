/* F(4x4, 3x3)'s filter matrix, and its input and output transforms on six values of any vector (or scalar)
 * type, shared by the planar (k_conv_wino4_simd.h) and channels-last
 * (k_conv_winoc_simd.h) kernels so that both round the same way. Included by
 * templates once per ISA level: no include guard, the user #undefs K4_BT and K4_AT. */

/* G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]:
 * U = G g G^T for a 3x3 filter g. */
#ifndef K4_G_INIT
#define K4_G_INIT                                                                                                    \
    {{0.25f, 0, 0},                                                                                                  \
     {-1.0f / 6, -1.0f / 6, -1.0f / 6},                                                                              \
     {-1.0f / 6, 1.0f / 6, -1.0f / 6},                                                                               \
     {1.0f / 24, 1.0f / 12, 1.0f / 6},                                                                               \
     {1.0f / 24, -1.0f / 12, 1.0f / 6},                                                                              \
     {0, 0, 1}}
#endif

/* B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0;
 * 0 4 0 -5 0 1] applied to d0..d5. */
#define K4_BT(d, r)                                                                                                  \
    do {                                                                                                             \
        r[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];                                                                     \
        r[1] = (d[3] + d[4]) - 4.0f * (d[1] + d[2]);                                                                 \
        r[2] = (d[4] - d[3]) + 4.0f * (d[1] - d[2]);                                                                 \
        r[3] = (d[4] - d[2]) + 2.0f * (d[3] - d[1]);                                                                 \
        r[4] = (d[4] - d[2]) + 2.0f * (d[1] - d[3]);                                                                 \
        r[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];                                                                     \
    } while (0)

/* A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1] applied to m0..m5. */
#define K4_AT(m, o)                                                                                                  \
    do {                                                                                                             \
        __typeof__(m[0]) s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];                 \
        o[0] = m[0] + s12 + s34;                                                                                     \
        o[1] = d12 + 2.0f * d34;                                                                                     \
        o[2] = s12 + 4.0f * s34;                                                                                     \
        o[3] = d12 + 8.0f * d34 + m[5];                                                                              \
    } while (0)
