/* k_gemm_nn and k_gemm_nn_packed (B packed into panels or read in place, row offsets
 * or not) against a scalar reference with the micro-kernel's FMA order: per element
 * s = acc ? C : bias (or 0), then s = A[i][k]*B[k][j] + s for k = 0, 1, ... (fused on
 * AVX2/AVX-512, a product and a sum on the generic level). The same bits, on every
 * ISA, over shapes with partial row blocks, panels, N blocks and super-blocks, K
 * chunks (cut evenly), several row-block groups, and shapes too small to pack B. */
#include "test/t.h"
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* -std=c11 implies -ffp-contract=off: p + s below stays two roundings. */
static void ref_nn(int fused, int m, int n, int kk, const float *a, long ars, long acs,
                   const float *b, long ldb, const long *boff, float *c, const float *bias, int acc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = acc ? c[(long)i * n + j] : bias ? bias[i] : 0.0f;
            for (int k = 0; k < kk; k++) {
                float x = a[(long)i * ars + (long)k * acs];
                float y = boff ? b[boff[k] + j] : b[(long)k * ldb + j];
                if (fused) s = fmaf(x, y, s);
                else {
                    float p = x * y;
                    s = p + s;
                }
            }
            c[(long)i * n + j] = s;
        }
}

enum { MM = 150, MN = 1630, MK = 300, MAXA = MM * (2 * MK + 1) + 2 * MK + 64, MAXB = MK * MN + 64, MAXC = MM * MN };
static float a[MAXA], b[MAXB], bias[MM], c0[MAXC], c1[MAXC], c2[MAXC], ap[(MM + 11) * MK];
static long boff[MK];
static const char *const isas[] = {"generic", "avx2", "avx512"};

/* a and b uniform in [-1, 1) from seeds seed and seed + 1; then each_case(s, h, shape h)
 * for every shape (rows of `width` ints) at every ISA level s of isas[] this machine has. */
static void each_isa_shape(uint64_t seed, const int *shapes, int width, size_t nshapes,
                           void (*each_case)(int s, size_t h, const int *shape))
{
    for (long i = 0; i < MAXA; i++) a[i] = 2.0f * k_rand_uniform(seed, (uint64_t)i) - 1.0f;
    for (long i = 0; i < MAXB; i++) b[i] = 2.0f * k_rand_uniform(seed + 1, (uint64_t)i) - 1.0f;
    for (int s = 0; s < 3; s++) {
        if (k_set_isa(isas[s]) != 0) continue;
        for (size_t h = 0; h < nshapes; h++) each_case(s, h, shapes + h * (size_t)width);
    }
    k_set_isa(NULL);
}
#define EACH_ISA_SHAPE(seed, shapes, each_case) \
    each_isa_shape(seed, shapes[0], (int)(sizeof shapes[0] / sizeof shapes[0][0]), sizeof shapes / sizeof shapes[0], each_case)

TEST(kernels_gemm_nn_bits_as_reference)
{
    static const int shapes[][3] = {{150, 600, 300}, {50, 1630, 130}, {97, 130, 257}, {40, 33, 140},
                                    {25, 33, 15},    {13, 70, 40},   {7, 5, 9},      {1, 40, 3}};
    for (long i = 0; i < MAXA; i++) a[i] = 2.0f * k_rand_uniform(91, (uint64_t)i) - 1.0f;
    for (long i = 0; i < MAXB; i++) b[i] = 2.0f * k_rand_uniform(92, (uint64_t)i) - 1.0f;
    for (int i = 0; i < MM; i++) bias[i] = k_rand_uniform(93, (uint64_t)i);
    for (int s = 0; s < 3; s++) {
        if (k_set_isa(isas[s]) != 0) continue;
        int fused = s > 0;
        for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++) {
            int m = shapes[h][0], n = shapes[h][1], kk = shapes[h][2], big = (long)m * n * kk > 1000000;
            /* rows contiguous (padded), columns contiguous, both strided */
            long lay[3][2] = {{kk + 3, 1}, {1, m + 5}, {2 * kk + 1, 2}};
            long ldb = h % 2 ? n + 263 : n + 7; /* >= 256 floats apart or not: B packed or in place */
            for (int l = 0; l < 3; l++)
                for (int mode = 0; mode < 3; mode++) {
                    if (big && mode != l) continue; /* the large shapes: each layout once */
                    const float *bi = mode == 1 ? bias : NULL;
                    int acc = mode == 2;
                    for (int i = 0; i < m * n; i++) c0[i] = c1[i] = c2[i] = k_rand_uniform(94, (uint64_t)i);
                    ref_nn(fused, m, n, kk, a, lay[l][0], lay[l][1], b, ldb, NULL, c0, bi, acc);
                    k_gemm_nn(m, n, kk, a, lay[l][0], lay[l][1], b, ldb, c1, n, bi, acc);
                    k_gemm_pack_a(m, kk, a, lay[l][0], lay[l][1], ap);
                    k_gemm_nn_packed(m, n, kk, ap, b, ldb, NULL, c2, n, bi, acc);
                    CHECKF(!memcmp(c0, c1, sizeof(float) * (size_t)(m * n)), "nn isa %s %dx%dx%d layout %d mode %d",
                           isas[s], m, n, kk, l, mode);
                    CHECKF(!memcmp(c0, c2, sizeof(float) * (size_t)(m * n)),
                           "nn_packed isa %s %dx%dx%d layout %d mode %d", isas[s], m, n, kk, l, mode);
                }
            /* B's rows at offsets (the conv taps): rows out of order, shifted columns */
            for (int k = 0; k < kk; k++) boff[k] = (long)((k * 7) % kk) * ldb + k % 5;
            int mode = (int)(h % 3), acc = mode == 2;
            const float *bi = mode == 1 ? bias : NULL;
            for (int i = 0; i < m * n; i++) c0[i] = c2[i] = k_rand_uniform(95, (uint64_t)i);
            ref_nn(fused, m, n, kk, a, lay[0][0], 1, b, 0, boff, c0, bi, acc);
            k_gemm_pack_a(m, kk, a, lay[0][0], 1, ap);
            k_gemm_nn_packed(m, n, kk, ap, b, 0, boff, c2, n, bi, acc);
            CHECKF(!memcmp(c0, c2, sizeof(float) * (size_t)(m * n)), "nn_packed boff isa %s %dx%dx%d mode %d",
                   isas[s], m, n, kk, mode);
        }
    }
    k_set_isa(NULL);
}

/* k_gemm_nt_pb (C = A B^T as a packed NN GEMM, B^T packed by 8x8 transposes) against
 * the scalar reference of its FMA order, per element s = acc ? C : bias[j] (or 0), then
 * s = A[i][k]*B[j][k] + s for k = 0, 1, ...: the same bits on every ISA; and within
 * a tight bound of a double-precision sum. Shapes with partial row blocks, panels,
 * transposes (n, l not multiples of 8), N super-blocks (n > 512), K chunks (l > 256),
 * several row-block groups, and strided A, B, C. */
static void ref_nt(int fused, int m, int n, int l, const float *a, long lda, const float *b, long ldb,
                   float *c, long ldc, const float *bias, int acc, double *err, double *mag)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = acc ? c[(long)i * ldc + j] : bias ? bias[j] : 0.0f;
            double d = s, g = fabs(s);
            for (int k = 0; k < l; k++) {
                float x = a[(long)i * lda + k], y = b[(long)j * ldb + k];
                d += (double)x * y;
                g += fabs((double)x * y);
                if (fused) s = fmaf(x, y, s);
                else {
                    float p = x * y;
                    s = p + s;
                }
            }
            c[(long)i * ldc + j] = s;
            if (fabs(s - d) > *err) *err = fabs(s - d);
            if (g > *mag) *mag = g;
        }
}

static float nb[MN]; /* a bias */

static void nt_pb_case(int s, size_t h, const int *sh)
{
    int m = sh[0], n = sh[1], l = sh[2], fused = s > 0;
    long lda = l + (h % 2 ? 3 : 0), ldb = l + (h % 3 ? 5 : 0), ldc = n + (long)(h % 2) * 2;
    if ((long)m * lda > MAXA || (long)n * ldb > MAXB || (long)m * ldc > MAXC) return;
    for (int mode = 0; mode < 3; mode++) {
        const float *bi = mode == 1 ? nb : NULL;
        int acc = mode == 2;
        for (long i = 0; i < (long)m * ldc; i++) c0[i] = c1[i] = k_rand_uniform(84, (uint64_t)i);
        double err = 0, mag = 0;
        ref_nt(fused, m, n, l, a, lda, b, ldb, c0, ldc, bi, acc, &err, &mag);
        k_gemm_nt_pb(m, n, l, a, lda, b, ldb, c1, ldc, bi, acc);
        CHECKF(!memcmp(c0, c1, sizeof(float) * (size_t)((long)m * ldc)), "nt_pb isa %s %dx%dx%d mode %d",
               isas[s], m, n, l, mode);
        /* |error| <= (l+1) u sum |terms| (u = 2^-24) */
        CHECKF(err <= (l + 1) * 0x1p-24 * mag, "nt_pb isa %s %dx%dx%d mode %d: error %g of %g", isas[s], m,
               n, l, mode, err, mag);
    }
}

TEST(kernels_gemm_nt_pb_bits_as_reference)
{
    static const int shapes[][3] = {{150, 530, 300}, {37, 1030, 77}, {97, 130, 257}, {40, 33, 140},
                                    {25, 33, 15},    {13, 70, 40},   {7, 5, 9},      {1, 40, 3}, {3, 1, 1}};
    for (int j = 0; j < MN; j++) nb[j] = k_rand_uniform(83, (uint64_t)j);
    EACH_ISA_SHAPE(81, shapes, nt_pb_case);
}

/* k_linear_fwd on the packed form: rows split (batch >= out) and columns split (batch
 * < out) across 1, 2 and 3 threads give the same bits, those of the reference order. */
static void linear_case(int s, size_t h, const int *sh)
{
    (void)h;
    int n = sh[0], in = sh[1], out = sh[2];
    if ((long)n * in > MAXA || (long)out * in > MAXB || (long)n * out > MAXC) return;
    double err = 0, mag = 0;
    ref_nt(s > 0, n, out, in, a, in, b, in, c0, out, nb, 0, &err, &mag);
    for (int t = 1; t <= 3; t++) {
        k_set_threads(t);
        for (long i = 0; i < (long)n * out; i++) c1[i] = -1.0f;
        k_linear_fwd(n, in, out, a, b, nb, c1);
        if (t == 1) memcpy(c2, c1, sizeof(float) * (size_t)((long)n * out));
        CHECKF(!memcmp(c1, c2, sizeof(float) * (size_t)((long)n * out)), "isa %s %dx%d->%d: %d threads differ from 1",
               isas[s], n, in, out, t);
        /* AVX2/AVX-512 take the packed form here: the reference's bits */
        if (s > 0)
            CHECKF(!memcmp(c0, c1, sizeof(float) * (size_t)((long)n * out)), "isa %s %dx%d->%d threads %d: not the packed form's bits",
                   isas[s], n, in, out, t);
    }
}

TEST(kernels_linear_fwd_packed_threads_agree)
{
    static const int shapes[][3] = {{300, 100, 130}, {70, 100, 1030}, {64, 520, 520}, {100, 900, 300}};
    for (int j = 0; j < MN; j++) nb[j] = k_rand_uniform(73, (uint64_t)j);
    EACH_ISA_SHAPE(71, shapes, linear_case);
    k_set_threads(1);
}

/* k_gemm_nt_off (conv dW: C[i][j] (+)= sum over ng images of A_g row i . B_g row at
 * boff[j]) against the vector order of AVX2 (W = 8 lanes) and AVX-512 (16): per
 * element W lane sums (column x in lane x % W, the masked tail adding 0*0 in the empty
 * lanes), image after image, then the horizontal sum folding halves (lane i + lane
 * i + W/2, ... down to one). Rows of 2048+ columns (the stem's dW) take the
 * column-chunked form, shorter ones one pass: the same bits either way. Generic: within
 * the error bound of a double sum. */
static float ref_nt_off_lanes(int lw, int l, int ng, const float *a, long a_img, const float *b, long b_img, float c,
                              int acc)
{
    float s[16] = {0};
    for (int g = 0; g < ng; g++, a += a_img, b += b_img) {
        int x = 0, xe = l / lw * lw;
        for (; x < xe; x++) s[x % lw] = fmaf(a[x], b[x], s[x % lw]);
        if (xe < l)
            for (int u = 0; u < lw; u++, x++) s[u] = x < l ? fmaf(a[x], b[x], s[u]) : fmaf(0.0f, 0.0f, s[u]);
    }
    for (int h = lw / 2; h > 0; h /= 2)
        for (int u = 0; u < h; u++) s[u] = s[u] + s[u + h];
    return acc ? c + s[0] : s[0];
}

/* One case of k_gemm_nt_off at ISA level s (of isas[]). */
static void nt_off_case(int s, size_t h, const int *sh)
{
    (void)h;
    int m = sh[0], n = sh[1], l = sh[2], ng = sh[3];
    long lda = l + 5, a_img = (long)m * lda, b_img = 3L * l + 17;
    if (ng * a_img > MAXA || ng * b_img > MAXB) return;
    /* B's rows at offsets within an image: out of order, overlapping (taps) */
    for (int j = 0; j < n; j++) boff[j] = (long)((j * 5) % 3) * l + j % 7;
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < m * n; i++) c0[i] = c1[i] = k_rand_uniform(63, (uint64_t)i);
        k_gemm_nt_off(m, n, l, ng, a, lda, a_img, b, boff, b_img, c1, n, acc);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                float want = ref_nt_off_lanes(s == 1 ? 8 : 16, l, ng, a + (long)i * lda, a_img,
                                              b + boff[j], b_img, c0[i * n + j], acc);
                double d = acc ? c0[i * n + j] : 0.0, mag = fabs(d);
                for (int g = 0; g < ng; g++)
                    for (int x = 0; x < l; x++) {
                        double t = (double)a[g * a_img + (long)i * lda + x] * b[g * b_img + boff[j] + x];
                        d += t;
                        mag += fabs(t);
                    }
                float got = c1[i * n + j];
                if (s > 0)
                    CHECKF(!memcmp(&got, &want, sizeof got), "nt_off %s %dx%dx%d ng %d acc %d (%d,%d): %.9g want %.9g",
                           isas[s], m, n, l, ng, acc, i, j, got, want);
                CHECKF(fabs(got - d) <= (ng * l + 2) * 0x1p-24 * mag, "nt_off isa %s %dx%dx%d ng %d acc %d (%d,%d): %.9g vs %.9g",
                       isas[s], m, n, l, ng, acc, i, j, got, d);
            }
    }
}

TEST(kernels_gemm_nt_off_bits_as_reference)
{
    /* m, n, l, ng: chunked (l >= 2048: tails, exact chunks, images), one-pass */
    static const int shapes[][4] = {{13, 11, 2600, 2}, {64, 19, 2053, 1}, {5, 7, 4096, 1},
                                    {9, 10, 2049, 3},  {7, 6, 777, 2},    {4, 3, 2047, 1}};
    EACH_ISA_SHAPE(61, shapes, nt_off_case);
}

/* k_gemm_tb_off (conv dW with the taps broadcast): per element C (acc) or 0, then one
 * FMA per (image, column) in order (fused on AVX2/AVX-512, a product and a sum on the
 * generic level): the same bits as that chain, whatever the tap tiles, the filter
 * vectors (masked tails: n off the vector width), the column chunks (l * n past 4096
 * floats: several chunks) or the images. Tap rows at out-of-order, overlapping
 * offsets; C rows wider than n (padding left alone). Then k_transpose_ld against the
 * scalar copy, odd sizes around its 8x8 blocks. */
/* One case of k_gemm_tb_off at ISA level s (of isas[]). */
static void tb_off_case(int s, size_t h, const int *sh)
{
    (void)h;
    int m = sh[0], n = sh[1], l = sh[2], ng = sh[3];
    long ldd = n + 3, ldc = n + 2, b_img = 3L * l + 17;
    if ((long)ng * l * ldd > MAXA || ng * b_img > MAXB || m > MK || m * ldc > MAXC) return;
    for (int t = 0; t < m; t++) boff[t] = (long)((t * 5) % 3) * l + t % 7;
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < m * ldc; i++) c0[i] = c1[i] = k_rand_uniform(73, (uint64_t)i);
        k_gemm_tb_off(m, n, l, ng, b, boff, b_img, a, ldd, c1, ldc, acc);
        for (int t = 0; t < m; t++)
            for (int k = 0; k < ldc; k++) {
                float got = c1[t * ldc + k];
                if (k >= n) { /* the padding of C's rows: untouched */
                    CHECKF(!memcmp(&got, &c0[t * ldc + k], sizeof got), "tb_off %s wrote C[%d][%d] past n %d",
                           isas[s], t, k, n);
                    continue;
                }
                float want = acc ? c0[t * ldc + k] : 0.0f;
                double d = want, mag = fabs(d);
                for (int g = 0; g < ng; g++)
                    for (int j = 0; j < l; j++) {
                        float x = b[g * b_img + boff[t] + j], y = a[((long)g * l + j) * ldd + k];
                        if (s > 0) want = fmaf(x, y, want);
                        else {
                            float p = x * y;
                            want = p + want;
                        }
                        d += (double)x * y;
                        mag += fabs((double)x * y);
                    }
                CHECKF(!memcmp(&got, &want, sizeof got), "tb_off %s %dx%dx%d ng %d acc %d (%d,%d): %.9g want %.9g",
                       isas[s], m, n, l, ng, acc, t, k, got, want);
                CHECKF(fabs(got - d) <= (ng * l + 2) * 0x1p-24 * mag, "tb_off %s (%d,%d): %.9g vs %.9g", isas[s],
                       t, k, got, d);
            }
    }
}

TEST(kernels_gemm_tb_off_bits_as_reference)
{
    /* m taps, n filters, l columns, ng images */
    static const int shapes[][4] = {{144, 16, 784, 1}, {29, 33, 196, 3}, {13, 64, 49, 4},
                                    {7, 5, 300, 2},   {1, 24, 9, 1},    {6, 1, 1, 2}};
    EACH_ISA_SHAPE(71, shapes, tb_off_case);
    for (int s = 0; s < 3; s++) {
        if (k_set_isa(isas[s]) != 0) continue;
        static const int tr[][2] = {{16, 784}, {9, 17}, {1, 5}, {33, 8}, {8, 1}, {64, 49}};
        for (size_t h = 0; h < sizeof tr / sizeof tr[0]; h++) {
            int rows = tr[h][0], cols = tr[h][1];
            long lds = cols + 1, ldt = rows + 5;
            for (long i = 0; i < cols * ldt; i++) c1[i] = -1.0f;
            k_transpose_ld(rows, cols, a, lds, c1, ldt);
            for (int j = 0; j < cols; j++)
                for (int i = 0; i < ldt; i++) {
                    float want = i < rows ? a[(long)i * lds + j] : -1.0f;
                    CHECKF(!memcmp(&c1[(long)j * ldt + i], &want, sizeof want), "transpose %s %dx%d: [%d][%d]", isas[s],
                           rows, cols, j, i);
                }
        }
    }
    k_set_isa(NULL);
}
