/* The NT GEMMs of k_gemm_simd.h's template (included from it, once per ISA level, with
 * its tile macros in force): NT as packed NN (B^T packed into NN panels), the NT
 * micro-kernels, and NT over image groups with B rows at offsets (conv dW), row-chunked
 * for long rows. No header guard. */
/* ---------------------------------------------------------------- NT as packed NN.
 * pack_b for B^T: B is n x l (rows ldb apart, contiguous along l, e.g. nn.Linear's
 * weight), and the panel wants bp[(j/cw)*kc*cw + k*cw + j%cw] = B[j][k] for k < kc,
 * j < n; 8x8 transposes where the ISA has them (pure data movement: the bits of the
 * scalar copy). Lanes past n in the last panel are written with zeros or not at all.
 * The rows being moved prefetch the next 8 (up to n + nmore: B's rows past the block). */
ISA_TARGET static void ISA_FN(pack_bt)(int kc, int n, int nmore, const float *b, long ldb, float *bp)
{
    const int cw = KT_NV * KV_W;
    int k8 = 0;
    (void)nmore;
#if ISA_X86 && ISA_VB >= 32 && defined(K_TR8)
    k8 = kc & ~7;
    for (int j = 0; j < n; j += 8) {
        int nr = n - j < 8 ? n - j : 8;
        float *o = bp + (long)(j / cw) * kc * cw + j % cw;
        /* the next 8 rows' short streams (kc floats each) fetched while these move */
        int np = n + nmore - j - 8 < 8 ? n + nmore - j - 8 : 8;
        for (int k = 0; k < k8; k += 8) {
            __m256 v[8];
            if ((k & 15) == 0)
                for (int i = 0; i < np; i++) _mm_prefetch((const char *)(b + (long)(j + 8 + i) * ldb + k), _MM_HINT_T0);
            if (nr == 8)
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_ps(b + (long)(j + i) * ldb + k);
            else
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    v[i] = i < nr ? _mm256_loadu_ps(b + (long)(j + i) * ldb + k) : _mm256_setzero_ps();
            k_tr8(v);
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) _mm256_storeu_ps(o + (long)(k + q) * cw, v[q]);
        }
    }
#endif
    if (k8 < kc)
        for (int j = 0; j < n; j++) {
            float *o = bp + (long)(j / cw) * kc * cw + j % cw;
            for (int k = k8; k < kc; k++) o[(long)k * cw] = b[(long)j * ldb + k];
        }
}

/* C[m x n] = (acc ? C : bias[j] or 0) + A[m x l] B[n x l]^T as gemm_nn_pb: K chunks of
 * KT_KC, N super-blocks of KT_NC columns with B^T packed once (pack_bt), row groups with
 * A packed (acs == 1), the NN micro-kernel. Per element: C = bias (or C), then one FMA
 * per k in k order (C stored and reloaded exactly between K chunks): the bits do not
 * depend on m, on the blocking or on which rows or columns a caller's task holds. The
 * column bias is written into C before the first chunk (the micro-kernel's bias is
 * per row). Buffers on the stack as gemm_nn_pb. */
#define KT_TRB 96 /* rows of A packed at once (>= KT_GB*KT_MR) */
__attribute__((noinline)) ISA_TARGET static void ISA_FN(gemm_nt_pb)(int m, int n, int l, const float *a,
                                                               long lda, const float *b, long ldb,
                                                               float *c, long ldc, const float *bias, int acc)
{
    _Alignas(64) float ap[KT_TRB * KT_KC];
    _Alignas(64) float bp[KT_KC * KT_NC];
    const int cw = KT_NV * KV_W;
    int nmb = (m + KT_MR - 1) / KT_MR, ngr = (nmb + KT_GB - 1) / KT_GB;
    if (nmb * KT_MR <= KT_TRB) {
        /* Up to KT_TRB rows: A packed once per K chunk, and each B^T panel (kc x cw,
         * in L1) packed just before every row block reads it. */
        for (int k0 = 0; k0 < l; k0 += KT_KC) {
            int kc = l - k0 < KT_KC ? l - k0 : KT_KC;
            ISA_FN(pack_group)(m, nmb, 0, nmb, k0, kc, a, lda, 1, ap);
            for (int j0 = 0; j0 < n; j0 += cw) {
                int nc = n - j0 < cw ? n - j0 : cw;
                ISA_FN(pack_bt)(kc, nc, n - j0 - nc, b + (long)j0 * ldb + k0, ldb, bp);
                if (k0 == 0 && !acc)
                    for (int i = 0; i < m; i++)
                        for (int j = j0; j < j0 + nc; j++) c[(long)i * ldc + j] = bias ? bias[j] : 0.0f;
                for (int ib = 0; ib < nmb; ib++) {
                    int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
                    ISA_FN(ukr_nn_any)(mr, nc, kc, ap + (long)ib * kc * KT_MR, bp, cw, NULL, c + (long)i0 * ldc + j0,
                                   ldc, NULL, 1);
                }
            }
        }
        return;
    }
    for (int k0 = 0; k0 < l; k0 += KT_KC) {
        int kc = l - k0 < KT_KC ? l - k0 : KT_KC;
        for (int js = 0; js < n; js += KT_NC) {
            int jn = n - js < KT_NC ? n - js : KT_NC;
            ISA_FN(pack_bt)(kc, jn, 0, b + (long)js * ldb + k0, ldb, bp);
            for (int gi = 0; gi < ngr; gi++) {
                int g0 = KT_GSERP(gi, ngr, js / KT_NC), g1 = nmb - g0 < KT_GB ? nmb : g0 + KT_GB;
                int r0 = (int)((long)g0 * m / nmb), r1 = (int)((long)g1 * m / nmb);
                ISA_FN(pack_group)(m, nmb, g0, g1, k0, kc, a, lda, 1, ap);
                if (k0 == 0 && !acc)
                    for (int i = r0; i < r1; i++)
                        for (int j = js; j < js + jn; j++) c[(long)i * ldc + j] = bias ? bias[j] : 0.0f;
                for (int jb = js; jb < js + jn; jb += KT_NB) {
                    int je = js + jn - jb < KT_NB ? js + jn : jb + KT_NB;
                    for (int ib = g0; ib < g1; ib++) {
                        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
                        const float *apk = ap + (long)(ib - g0) * kc * KT_MR;
                        for (int j0 = jb; j0 < je; j0 += cw)
                            ISA_FN(ukr_nn_any)(mr, je - j0 < cw ? je - j0 : cw, kc, apk, bp + (long)(j0 - js) * kc,
                                           cw, NULL, c + (long)i0 * ldc + j0, ldc, NULL, 1);
                    }
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- GEMM, NT form.
 * Micro-kernel: mr x nr dot products of length l, vector accumulators, one horizontal
 * sum each at the end. */
KT_INL void ISA_FN(ukr_nt)(const int mr, const int nr, int l, const float *a, long lda,
                       const float *b, long ldb, float *c, long ldc, const float *bias, int acc)
{
    kv s[4][6];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) s[i][j] = kv_zero();
    int x = 0;
    for (; x + KV_W <= l; x += KV_W) {
#ifdef KT_NT_BFIRST
        kv bv[6];
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) bv[j] = kv_load(b + j * ldb + x);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            kv av = kv_load(a + i * lda + x);
#pragma GCC unroll 6
            for (int j = 0; j < nr; j++) s[i][j] = kv_fma(av, bv[j], s[i][j]);
        }
#else
        kv av[4];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) av[i] = kv_load(a + i * lda + x);
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) {
            kv bv = kv_load(b + j * ldb + x);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) s[i][j] = kv_fma(av[i], bv, s[i][j]);
        }
#endif
    }
    if (x < l) {
        int t = l - x;
        kv av[4];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) av[i] = kv_loadn(a + i * lda + x, t);
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) {
            kv bv = kv_loadn(b + j * ldb + x, t);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) s[i][j] = kv_fma(av[i], bv, s[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) {
            float v = kv_hsum(s[i][j]);
            if (bias) v += bias[j];
            c[i * ldc + j] = acc ? c[i * ldc + j] + v : v;
        }
}

#define KT_NT_CASE(M, N) case M * 8 + N: ISA_FN(ukr_nt)(M, N, l, ai, lda, bj, ldb, cij, ldc, bs, acc); break;
#define KT_NT_ROW(M) KT_NT_CASE(M, 1) KT_NT_CASE(M, 2) KT_NT_CASE(M, 3) KT_NT_CASE(M, 4) \
    KT_NT_CASE(M, 5) KT_NT_CASE(M, 6)

ISA_TARGET static void ISA_FN(gemm_nt)(int m, int n, int l, const float *a, long lda,
                                  const float *b, long ldb, float *c, long ldc,
                                  const float *bias, int acc)
{
    int nmb = (m + KT_TM - 1) / KT_TM, nnb = (n + KT_TN - 1) / KT_TN;
    for (int ib = 0; ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        for (int jb = 0; jb < nnb; jb++) {
            int j0 = (int)((long)jb * n / nnb), nr = (int)((long)(jb + 1) * n / nnb) - j0;
            const float *ai = a + (long)i0 * lda, *bj = b + (long)j0 * ldb;
            float *cij = c + (long)i0 * ldc + j0;
            const float *bs = bias ? bias + j0 : NULL;
            switch (mr * 8 + nr) {
                KT_NT_ROW(1) KT_NT_ROW(2) KT_NT_ROW(3)
#if KT_TM > 3
                KT_NT_ROW(4)
#endif
            default: break;
            }
        }
    }
}


/* NT over a group of images with B rows at offsets (conv dW on the "wide" layout):
 * C[i][j] (+)= sum_g sum_l A[g][i][l] * B[g][boff[j] + l]; A[g] = a + g*a_img (rows
 * lda apart), B[g] = b + g*b_img. Vector sums stay in registers across the group. */
KT_INL void ISA_FN(ukr_nt_off)(const int mr, const int nr, int l, int ng, const float *a, long lda,
                           long a_img, const float *b, const long *boff, long b_img, float *c,
                           long ldc, int acc)
{
    kv s[5][6];
    const float *bp[6];
#pragma GCC unroll 5
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) s[i][j] = kv_zero();
    for (int g = 0; g < ng; g++, a += a_img, b += b_img) {
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) bp[j] = b + boff[j];
        int x = 0;
        for (; x + KV_W <= l; x += KV_W) {
#ifdef KT_NT_BFIRST
            kv bv[6];
#pragma GCC unroll 6
            for (int j = 0; j < nr; j++) bv[j] = kv_load(bp[j] + x);
#pragma GCC unroll 5
            for (int i = 0; i < mr; i++) {
                kv av = kv_load(a + i * lda + x);
#pragma GCC unroll 6
                for (int j = 0; j < nr; j++) s[i][j] = kv_fma(av, bv[j], s[i][j]);
            }
#else
            kv av[5];
#pragma GCC unroll 5
            for (int i = 0; i < mr; i++) av[i] = kv_load(a + i * lda + x);
#pragma GCC unroll 6
            for (int j = 0; j < nr; j++) {
                kv bv = kv_load(bp[j] + x);
#pragma GCC unroll 5
                for (int i = 0; i < mr; i++) s[i][j] = kv_fma(av[i], bv, s[i][j]);
            }
#endif
        }
        if (x < l) {
            int t = l - x;
            kv av[5];
#pragma GCC unroll 5
            for (int i = 0; i < mr; i++) av[i] = kv_loadn(a + i * lda + x, t);
#pragma GCC unroll 6
            for (int j = 0; j < nr; j++) {
                kv bv = kv_loadn(bp[j] + x, t);
#pragma GCC unroll 5
                for (int i = 0; i < mr; i++) s[i][j] = kv_fma(av[i], bv, s[i][j]);
            }
        }
    }
#pragma GCC unroll 5
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) {
            float v = kv_hsum(s[i][j]);
            c[i * ldc + j] = acc ? c[i * ldc + j] + v : v;
        }
}

#if ISA_X86 && ISA_VB >= 32
/* ukr_nt_off over columns [x0, x1) of one image (the tail, if any, only where x1 = l),
 * its vector sums kept in st (mr*nr vectors) between calls: loaded unless `first`,
 * summed horizontally into C if `last`, else stored back. The same FMAs per lane in the
 * same order as one ukr_nt_off call over the whole row (its sums stored and reloaded
 * exactly): gemm_nt_off_chunked's l-blocking changes no bit. */
KT_INL void ISA_FN(ukr_nt_off_ch)(const int mr, const int nr, int x0, int x1, int l, const float *a, long lda,
                              const float *b, const long *boff, float *c, long ldc, int acc, float *st,
                              int first, int last)
{
    kv s[KT_TM][KT_TN];
    const float *bp[KT_TN];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) s[i][j] = first ? kv_zero() : kv_load(st + (i * KT_TN + j) * KV_W);
#pragma GCC unroll 6
    for (int j = 0; j < nr; j++) bp[j] = b + boff[j];
    int x = x0;
    for (; x + KV_W <= x1; x += KV_W) {
        kv bv[KT_TN];
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) bv[j] = kv_load(bp[j] + x);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            kv av = kv_load(a + i * lda + x);
#pragma GCC unroll 6
            for (int j = 0; j < nr; j++) s[i][j] = kv_fma(av, bv[j], s[i][j]);
        }
    }
    if (x < x1 && x1 == l) {
        int t = l - x;
        kv av[KT_TM];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) av[i] = kv_loadn(a + i * lda + x, t);
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) {
            kv bv = kv_loadn(bp[j] + x, t);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) s[i][j] = kv_fma(av[i], bv, s[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) {
            if (!last) {
                kv_store(st + (i * KT_TN + j) * KV_W, s[i][j]);
                continue;
            }
            float v = kv_hsum(s[i][j]);
            c[i * ldc + j] = acc ? c[i * ldc + j] + v : v;
        }
}

/* Long rows (the ResNet stem's dW: 12544 columns an image, 64 dy rows = 3.2 MB and 147
 * tap rows): gemm_nt_off's tiles each stream their whole rows from L3. Here the
 * columns go in chunks of KT_NTL: per chunk, a tile's A rows (4 x 4 KiB) stay in L1
 * while its row block passes every B tile, and the chunk's B rows stay in L2; the
 * tiles' vector sums wait in st between chunks. One image at a time (ng images: the
 * chunks of image 0, then of image 1, ...: the lanes' FMA order of ukr_nt_off).
 * Measured (AVX2, Sapphire Rapids, batch 32): stem dW 96-100 -> 86-87 ms; chunks of
 * 512 the same, 256 no gain (the sums' traffic). */
#define KT_NTL 1024
#define KT_NTL_MIN 2048                          /* columns an image from which it pays */
#define KT_NTL_ST (256L << 10) /* sums' floats (1 MiB of stack): AVX2 2730 tiles, AVX-512 682 */
__attribute__((noinline)) ISA_TARGET static void ISA_FN(gemm_nt_off_ch)(int m, int n, int l, int ng, const float *a,
                                                                   long lda, long a_img, const float *b,
                                                                   const long *boff, long b_img, float *c, long ldc,
                                                                   int acc, const void *pf, long pfn)
{
    _Alignas(64) float st[KT_NTL_ST];
    int nmb = (m + KT_TM - 1) / KT_TM, nnb = (n + KT_TN - 1) / KT_TN, nch = (l + KT_NTL - 1) / KT_NTL;
    long visits = (long)nmb * nnb * nch * ng;
    int per = pfn > 0 ? (int)((pfn / 64 + visits) / visits) : 0;
    for (int g = 0; g < ng; g++, a += a_img, b += b_img)
        for (int x0 = 0; x0 < l; x0 += KT_NTL) {
            int x1 = l - x0 < KT_NTL ? l : x0 + KT_NTL, first = g == 0 && x0 == 0, last = g == ng - 1 && x1 == l;
            for (int ib = 0; ib < nmb; ib++) {
                int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
                for (int jb = 0; jb < nnb; jb++) {
                    int j0 = (int)((long)jb * n / nnb), nr = (int)((long)(jb + 1) * n / nnb) - j0;
                    const float *ai = a + (long)i0 * lda;
                    const long *bo = boff + j0;
                    float *cij = c + (long)i0 * ldc + j0, *sij = st + ((long)ib * nnb + jb) * KT_TM * KT_TN * KV_W;
                    KT_PF_STEP(per);
                    switch (mr * 8 + nr) {
#define KT_NTC_CASE(M, N) case M * 8 + N: \
    ISA_FN(ukr_nt_off_ch)(M, N, x0, x1, l, ai, lda, b, bo, cij, ldc, acc, sij, first, last); break;
                        KT_NTC_CASE(1, 1) KT_NTC_CASE(1, 2) KT_NTC_CASE(1, 3) KT_NTC_CASE(2, 1) KT_NTC_CASE(2, 2)
                        KT_NTC_CASE(2, 3) KT_NTC_CASE(3, 1) KT_NTC_CASE(3, 2) KT_NTC_CASE(3, 3) KT_NTC_CASE(4, 1)
                        KT_NTC_CASE(4, 2) KT_NTC_CASE(4, 3)
#if KT_TN > 3
                        KT_NTC_CASE(1, 4) KT_NTC_CASE(1, 5) KT_NTC_CASE(1, 6) KT_NTC_CASE(2, 4) KT_NTC_CASE(2, 5)
                        KT_NTC_CASE(2, 6) KT_NTC_CASE(3, 4) KT_NTC_CASE(3, 5) KT_NTC_CASE(3, 6) KT_NTC_CASE(4, 4)
                        KT_NTC_CASE(4, 5) KT_NTC_CASE(4, 6)
#endif
#undef KT_NTC_CASE
                    default: break;
                    }
                }
            }
        }
}
#endif

#define KT_NTO_CASE(M, N) case M * 8 + N: \
    ISA_FN(ukr_nt_off)(M, N, l, ng, ai, lda, a_img, b, bo, b_img, cij, ldc, acc); break;
#define KT_NTO_ROW(M) KT_NTO_CASE(M, 1) KT_NTO_CASE(M, 2) KT_NTO_CASE(M, 3) KT_NTO_CASE(M, 4) \
    KT_NTO_CASE(M, 5) KT_NTO_CASE(M, 6)

ISA_TARGET static void ISA_FN(gemm_nt_off)(int m, int n, int l, int ng, const float *a, long lda,
                                      long a_img, const float *b, const long *boff,
                                      long b_img, float *c, long ldc, int acc, const void *pf,
                                      long pfn)
{
    int nmb = (m + KT_TM - 1) / KT_TM, nnb = (n + KT_TN - 1) / KT_TN;
#if ISA_X86 && ISA_VB >= 32
    if (l >= KT_NTL_MIN && (long)nmb * nnb * KT_TM * KT_TN * KV_W <= KT_NTL_ST) {
        ISA_FN(gemm_nt_off_ch)(m, n, l, ng, a, lda, a_img, b, boff, b_img, c, ldc, acc, pf, pfn);
        return;
    }
#endif
#ifdef KT_NT_55
    /* A 5x5 tile instead of 4x6 when it loads less per step (sum of tile rows). */
    int m5 = (m + 4) / 5, n5 = (n + 4) / 5;
    if ((long)n5 * m + (long)m5 * n < (long)nnb * m + (long)nmb * n) { nmb = m5; nnb = n5; }
#endif
    long tiles = (long)nmb * nnb;
    int per = pfn > 0 ? (int)((pfn / 64 + tiles) / tiles) : 0; /* lines per tile, as gemm_nn_packed */
    for (int ib = 0; ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        for (int jb = 0; jb < nnb; jb++) {
            int j0 = (int)((long)jb * n / nnb), nr = (int)((long)(jb + 1) * n / nnb) - j0;
            const float *ai = a + (long)i0 * lda;
            const long *bo = boff + j0;
            float *cij = c + (long)i0 * ldc + j0;
            KT_PF_STEP(per);
            switch (mr * 8 + nr) {
                KT_NTO_ROW(1) KT_NTO_ROW(2) KT_NTO_ROW(3)
#if KT_TM > 3
                KT_NTO_ROW(4)
#endif
#ifdef KT_NT_55
                KT_NTO_CASE(5, 1) KT_NTO_CASE(5, 2) KT_NTO_CASE(5, 3) KT_NTO_CASE(5, 4) KT_NTO_CASE(5, 5)
#endif
            default: break;
            }
        }
    }
}


#include "kernels/cpu/k_kv_undef.h"
