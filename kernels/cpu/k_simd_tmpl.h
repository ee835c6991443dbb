/* SIMD template: included by k_gemm.c once per ISA with these macros defined:
 *   KT(name)    -> name_<isa>         KT_TARGET   function attribute (target(...))
 *   kv, KV_W    vector type / width   KT_MR, KT_NV   NN micro-tile: KT_MR rows x KT_NV vectors
 *   KT_TM, KT_TN   NT micro-tile (rows of A x rows of B); KT_NT_55: also 5x5 tiles;
 *   KT_NT_BFIRST: the tile's B rows held in registers and A streamed (16 registers:
 *   4x3 needs 12 sums + 3 B + 1 A; A first would need 17)
 *   kv_zero(), kv_load(p), kv_store(p,v), kv_set1(x), kv_fma(a,b,c) = a*b+c, kv_add,
 *   kv_mul, kv_max, kv_hsum(v), kv_loadn(p,n) (n < KV_W lanes, rest 0), kv_storen(p,v,n)
 * No header guard: it is meant to be included several times. */

#define KT_INL static inline __attribute__((always_inline)) KT_TARGET

/* ---------------------------------------------------------------- GEMM, NN form.
 * Micro-kernel: C[mr x nc] for nc <= KT_NV*KV_W columns, over kk steps, reading a
 * packed A panel ap[k*KT_MR + i]. `full` = all KT_NV vectors complete (no masks). */
KT_INL void KT(ukr_nn)(const int mr, const int full, int nc, int kk, const float *ap,
                       const float *b, long ldb, const long *boff, float *c, long ldc,
                       const float *bias, int acc)
{
    const float *b0 = b;
    kv s[12][2];
    int cnt[2];
#pragma GCC unroll 2
    for (int v = 0; v < KT_NV; v++) {
        int r = nc - v * KV_W;
        cnt[v] = r < 0 ? 0 : r > KV_W ? KV_W : r;
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
#pragma GCC unroll 2
        for (int v = 0; v < KT_NV; v++) {
            float *cp = c + i * ldc + v * KV_W;
            if (acc) s[i][v] = full ? kv_load(cp) : kv_loadn(cp, cnt[v]);
            else s[i][v] = bias ? kv_set1(bias[i]) : kv_zero();
        }
    }
    for (int k = 0; k < kk; k++) {
        kv bv[2];
        if (boff) b = b0 + boff[k]; /* row k of B at an arbitrary offset (conv taps) */
#pragma GCC unroll 2
        for (int v = 0; v < KT_NV; v++) bv[v] = full ? kv_load(b + v * KV_W) : kv_loadn(b + v * KV_W, cnt[v]);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            kv a = kv_set1(ap[i]);
#pragma GCC unroll 2
            for (int v = 0; v < KT_NV; v++) s[i][v] = kv_fma(a, bv[v], s[i][v]);
        }
        ap += KT_MR;
        b += ldb;
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
#pragma GCC unroll 2
        for (int v = 0; v < KT_NV; v++) {
            float *cp = c + i * ldc + v * KV_W;
            if (full) kv_store(cp, s[i][v]);
            else if (cnt[v]) kv_storen(cp, s[i][v], cnt[v]);
        }
    }
}

#define KT_NN_CASE(M)                                                                   \
    case M:                                                                             \
        if (full) KT(ukr_nn)(M, 1, nc, kk, ap, b, ldb, boff, c, ldc, bias, acc);        \
        else KT(ukr_nn)(M, 0, nc, kk, ap, b, ldb, boff, c, ldc, bias, acc);             \
        break;

KT_TARGET static void KT(ukr_nn_any)(int mr, int nc, int kk, const float *ap, const float *b,
                                     long ldb, const long *boff, float *c, long ldc,
                                     const float *bias, int acc)
{
    int full = nc == KT_NV * KV_W;
    switch (mr) {
    KT_NN_CASE(1) KT_NN_CASE(2) KT_NN_CASE(3) KT_NN_CASE(4) KT_NN_CASE(5) KT_NN_CASE(6)
#if KT_MR > 6
    KT_NN_CASE(7) KT_NN_CASE(8) KT_NN_CASE(9) KT_NN_CASE(10) KT_NN_CASE(11) KT_NN_CASE(12)
#endif
    default: break;
    }
}

/* Packed A: for each row block ib (rows split evenly into ceil(m/KT_MR) blocks), the
 * whole K as kk x KT_MR floats: ap[(ib*kk + k)*KT_MR + i]. Callers that reuse A (conv
 * weights, once per call) pack once; k_gemm_nn packs chunks of K on the stack. */
KT_TARGET static void KT(pack_a)(int m, int kk, const float *a, long ars, long acs, float *ap)
{
    int nmb = (m + KT_MR - 1) / KT_MR;
    for (int ib = 0; ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        float *o = ap + (long)ib * kk * KT_MR;
        for (int k = 0; k < kk; k++)
            for (int i = 0; i < KT_MR; i++)
                o[(long)k * KT_MR + i] = i < mr ? a[(long)(i0 + i) * ars + (long)k * acs] : 0.0f;
    }
}

/* Cache blocking around the micro-kernel (BLIS's loops): B (for convs, the shifted
 * rows read through tap offsets) in blocks of KT_KB rows x KT_NB columns that stay in
 * L2 while every row block of A passes over them; each A panel slice (KT_KB x KT_MR)
 * stays in L1 across the block's column tiles. Without it, a B larger than L2
 * (ResNet-18's 56x56 convs: 2.5 MB per image) streamed from L3 once per row block.
 * Every C element still sees the same FMAs in the same k order (C is stored and
 * reloaded exactly between k blocks): the bits do not depend on the blocking. */
#define KT_KB 256
#define KT_NB 128
KT_TARGET static void KT(gemm_nn_packed)(int m, int n, int kk, const float *ap, const float *b,
                                         long ldb, const long *boff, float *c, long ldc,
                                         const float *bias, int acc)
{
    const int cw = KT_NV * KV_W;
    int nmb = (m + KT_MR - 1) / KT_MR;
    for (int k0 = 0; k0 < kk; k0 += KT_KB) {
        int kc = kk - k0 < KT_KB ? kk - k0 : KT_KB, acc_k = acc || k0 > 0;
        const float *bias_k = k0 > 0 ? NULL : bias, *bk = boff ? b : b + (long)k0 * ldb;
        const long *ok = boff ? boff + k0 : NULL;
        for (int jb = 0; jb < n; jb += KT_NB) {
            int je = n - jb < KT_NB ? n : jb + KT_NB;
            for (int ib = 0; ib < nmb; ib++) {
                int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
                const float *apk = ap + ((long)ib * kk + k0) * KT_MR;
                for (int j0 = jb; j0 < je; j0 += cw) {
                    int nc = je - j0 < cw ? je - j0 : cw;
                    KT(ukr_nn_any)(mr, nc, kc, apk, bk + j0, ldb, ok, c + (long)i0 * ldc + j0, ldc,
                                   bias_k ? bias_k + i0 : NULL, acc_k);
                }
            }
        }
    }
}

/* K is cut into chunks of KT_KC so the packed A panel stays small (on the stack), and
 * N into blocks of KT_NB so the B chunk's block stays in L2 while every row block
 * passes over it (as gemm_nn_packed; A is packed again per block: kc x KT_MR floats,
 * 1/(2*KT_NB) of the work). Per element the same FMAs in the same order: the bits do
 * not depend on the blocking. */
#define KT_KC 256
KT_TARGET static void KT(gemm_nn)(int m, int n, int kk, const float *a, long ars, long acs,
                                  const float *b, long ldb, float *c, long ldc,
                                  const float *bias, int acc)
{
    float ap[KT_KC * KT_MR];
    const int cw = KT_NV * KV_W;
    int nmb = (m + KT_MR - 1) / KT_MR;
    for (int k0 = 0; k0 < kk; k0 += KT_KC) {
        int kc = kk - k0 < KT_KC ? kk - k0 : KT_KC;
        int acc_k = acc || k0 > 0;
        const float *bias_k = k0 > 0 ? NULL : bias;
        for (int jb = 0; jb < n; jb += KT_NB) {
            int je = n - jb < KT_NB ? n : jb + KT_NB;
            for (int ib = 0; ib < nmb; ib++) {
                /* Even row blocks: 20 rows -> 10+10 rather than 12+8. */
                int i0 = (int)((long)ib * m / nmb), i1 = (int)((long)(ib + 1) * m / nmb);
                int mr = i1 - i0;
                for (int k = 0; k < kc; k++)
                    for (int i = 0; i < mr; i++)
                        ap[k * KT_MR + i] = a[(long)(i0 + i) * ars + (long)(k0 + k) * acs];
                for (int j0 = jb; j0 < je; j0 += cw) {
                    int nc = je - j0 < cw ? je - j0 : cw;
                    KT(ukr_nn_any)(mr, nc, kc, ap, b + (long)k0 * ldb + j0, ldb, NULL,
                                   c + (long)i0 * ldc + j0, ldc, bias_k ? bias_k + i0 : NULL, acc_k);
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- GEMM, NT form.
 * Micro-kernel: mr x nr dot products of length l, vector accumulators, one horizontal
 * sum each at the end. */
KT_INL void KT(ukr_nt)(const int mr, const int nr, int l, const float *a, long lda,
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

#define KT_NT_CASE(M, N) case M * 8 + N: KT(ukr_nt)(M, N, l, ai, lda, bj, ldb, cij, ldc, bs, acc); break;
#define KT_NT_ROW(M) KT_NT_CASE(M, 1) KT_NT_CASE(M, 2) KT_NT_CASE(M, 3) KT_NT_CASE(M, 4) \
    KT_NT_CASE(M, 5) KT_NT_CASE(M, 6)

KT_TARGET static void KT(gemm_nt)(int m, int n, int l, const float *a, long lda,
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

/* ---------------------------------------------------------------- im2col family.
 * Stride 1 (the common case) copies whole output rows with vector loads; other strides
 * fall back to scalar loops. */

/* dst[0..n) = src[0..n) */
KT_INL void KT(copy_row)(float *dst, const float *src, int n)
{
    int i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dst + i, kv_load(src + i));
    if (i < n) kv_storen(dst + i, kv_loadn(src + i, n - i), n - i);
}

/* dst[0..n) += src[0..n) */
KT_INL void KT(add_row)(float *dst, const float *src, int n)
{
    int i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dst + i, kv_add(kv_load(dst + i), kv_load(src + i)));
    if (i < n) kv_storen(dst + i, kv_add(kv_loadn(dst + i, n - i), kv_loadn(src + i, n - i)), n - i);
}

KT_TARGET static void KT(im2col)(const k_im2col_geo *g, const float *x, float *col)
{
    const int P = g->p, Q = g->q, H = g->h, W = g->w, st = g->stride, pad = g->pad;
    for (int c = 0; c < g->c; c++)
        for (int r = 0; r < g->r; r++)
            for (int s = 0; s < g->s; s++) {
                float *row = col + (((long)c * g->r + r) * g->s + s) * P * Q;
                const float *xc = x + (long)c * H * W;
                /* Output columns q whose input column q*st-pad+s is inside [0, W). */
                int qlo = 0, qhi = Q;
                while (qlo < Q && qlo * st - pad + s < 0) qlo++;
                while (qhi > qlo && (qhi - 1) * st - pad + s >= W) qhi--;
                for (int p = 0; p < P; p++) {
                    float *o = row + (long)p * Q;
                    int ih = p * st - pad + r;
                    if (ih < 0 || ih >= H) {
                        for (int q = 0; q < Q; q++) o[q] = 0.0f;
                        continue;
                    }
                    const float *xr = xc + (long)ih * W - pad + s;
                    for (int q = 0; q < qlo; q++) o[q] = 0.0f;
                    if (st == 1) KT(copy_row)(o + qlo, xr + qlo, qhi - qlo);
                    else for (int q = qlo; q < qhi; q++) o[q] = xr[q * st];
                    for (int q = qhi; q < Q; q++) o[q] = 0.0f;
                }
            }
}

KT_TARGET static void KT(im2row)(const k_im2col_geo *g, const float *x, float *colT)
{
    const int P = g->p, Q = g->q, H = g->h, W = g->w, R = g->r, S = g->s;
    const int st = g->stride, pad = g->pad;
    const long crs = (long)g->c * R * S;
    for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
            float *o = colT + ((long)p * Q + q) * crs;
            int iw0 = q * st - pad, ih0 = p * st - pad;
            int inside_w = iw0 >= 0 && iw0 + S <= W;
            for (int c = 0; c < g->c; c++)
                for (int r = 0; r < R; r++, o += S) {
                    int ih = ih0 + r;
                    if (ih < 0 || ih >= H) {
                        for (int s = 0; s < S; s++) o[s] = 0.0f;
                        continue;
                    }
                    const float *xr = x + ((long)c * H + ih) * W + iw0;
                    if (inside_w) KT(copy_row)(o, xr, S);
                    else for (int s = 0; s < S; s++) o[s] = iw0 + s >= 0 && iw0 + s < W ? xr[s] : 0.0f;
                }
        }
}

KT_TARGET static void KT(col2im)(const k_im2col_geo *g, const float *col, float *dx)
{
    const int P = g->p, Q = g->q, H = g->h, W = g->w, st = g->stride, pad = g->pad;
    for (long i = 0; i < (long)g->c * H * W; i++) dx[i] = 0.0f;
    for (int c = 0; c < g->c; c++)
        for (int r = 0; r < g->r; r++)
            for (int s = 0; s < g->s; s++) {
                const float *row = col + (((long)c * g->r + r) * g->s + s) * P * Q;
                float *dc = dx + (long)c * H * W;
                int qlo = 0, qhi = Q;
                while (qlo < Q && qlo * st - pad + s < 0) qlo++;
                while (qhi > qlo && (qhi - 1) * st - pad + s >= W) qhi--;
                for (int p = 0; p < P; p++) {
                    int ih = p * st - pad + r;
                    if (ih < 0 || ih >= H) continue;
                    float *dr = dc + (long)ih * W - pad + s;
                    const float *cr = row + (long)p * Q;
                    if (st == 1) KT(add_row)(dr + qlo, cr + qlo, qhi - qlo);
                    else for (int q = qlo; q < qhi; q++) dr[q * st] += cr[q];
                }
            }
}

/* ---------------------------------------------------------------- elementwise */
KT_TARGET static void KT(relu_span)(size_t n, const float *x, float *y)
{
    size_t i = 0;
    kv z = kv_zero();
    /* max(0, x) keeps NaN (the second operand is returned when unordered), like PyTorch. */
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_max(z, kv_load(x + i)));
    for (; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

KT_TARGET static void KT(relu_bwd_span)(size_t n, const float *y, const float *dy, float *dx)
{
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dx + i, kv_gtz_select(kv_load(y + i), kv_load(dy + i)));
    for (; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

KT_TARGET static void KT(scale_mask_span)(size_t n, float scale, const uint8_t *mask,
                                          const float *x, float *y)
{
    size_t i = 0;
    kv sc = kv_set1(scale);
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_mul(kv_mask_u8(mask + i, sc), kv_load(x + i)));
    for (; i < n; i++) y[i] = x[i] * (mask[i] ? scale : 0.0f);
}

KT_TARGET static void KT(scale_span)(size_t n, float scale, const float *x, float *y)
{
    size_t i = 0;
    kv sc = kv_set1(scale);
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_mul(kv_load(x + i), sc));
    for (; i < n; i++) y[i] = x[i] * scale;
}

/* Sum with KV_W (x4) independent lanes: far faster than one scalar chain, and the
 * order is fixed for a given ISA and n. */
KT_TARGET static float KT(sum_span)(size_t n, const float *x)
{
    kv s0 = kv_zero(), s1 = kv_zero(), s2 = kv_zero(), s3 = kv_zero();
    size_t i = 0;
    for (; i + 4 * KV_W <= n; i += 4 * KV_W) {
        s0 = kv_add(s0, kv_load(x + i));
        s1 = kv_add(s1, kv_load(x + i + KV_W));
        s2 = kv_add(s2, kv_load(x + i + 2 * KV_W));
        s3 = kv_add(s3, kv_load(x + i + 3 * KV_W));
    }
    for (; i + KV_W <= n; i += KV_W) s0 = kv_add(s0, kv_load(x + i));
    float t = kv_hsum(kv_add(kv_add(s0, s1), kv_add(s2, s3)));
    for (; i < n; i++) t += x[i];
    return t;
}

/* NT over a group of images with B rows at offsets (conv dW on the "wide" layout):
 * C[i][j] (+)= sum_g sum_l A[g][i][l] * B[g][boff[j] + l]; A[g] = a + g*a_img (rows
 * lda apart), B[g] = b + g*b_img. Vector sums stay in registers across the group. */
KT_INL void KT(ukr_nt_off)(const int mr, const int nr, int l, int ng, const float *a, long lda,
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

#define KT_NTO_CASE(M, N) case M * 8 + N: \
    KT(ukr_nt_off)(M, N, l, ng, ai, lda, a_img, b, bo, b_img, cij, ldc, acc); break;
#define KT_NTO_ROW(M) KT_NTO_CASE(M, 1) KT_NTO_CASE(M, 2) KT_NTO_CASE(M, 3) KT_NTO_CASE(M, 4) \
    KT_NTO_CASE(M, 5) KT_NTO_CASE(M, 6)

KT_TARGET static void KT(gemm_nt_off)(int m, int n, int l, int ng, const float *a, long lda,
                                      long a_img, const float *b, const long *boff,
                                      long b_img, float *c, long ldc, int acc)
{
    int nmb = (m + KT_TM - 1) / KT_TM, nnb = (n + KT_TN - 1) / KT_TN;
#ifdef KT_NT_55
    /* A 5x5 tile instead of 4x6 when it loads less per step (sum of tile rows). */
    int m5 = (m + 4) / 5, n5 = (n + 4) / 5;
    if ((long)n5 * m + (long)m5 * n < (long)nnb * m + (long)nmb * n) { nmb = m5; nnb = n5; }
#endif
    for (int ib = 0; ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        for (int jb = 0; jb < nnb; jb++) {
            int j0 = (int)((long)jb * n / nnb), nr = (int)((long)(jb + 1) * n / nnb) - j0;
            const float *ai = a + (long)i0 * lda;
            const long *bo = boff + j0;
            float *cij = c + (long)i0 * ldc + j0;
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

/* Stride-1 col2im without a read-modify-write chain: every dx row is summed in
 * registers over its (r, s) taps and stored once (so dx needs no zeroing). Lanes whose
 * tap falls outside the column matrix row are masked off. col needs KV_W floats of
 * slack before it (the masked loads start up to S-1 floats early). */
#define KT_C2I_MAXS 32
KT_TARGET static void KT(col2im_s1)(const k_im2col_geo *g, const float *col, float *dx)
{
    const int P = g->p, Q = g->q, H = g->h, W = g->w, R = g->r, S = g->s, pad = g->pad;
    const long PQ = (long)P * Q;
    kv_lmask msk[KT_C2I_MAXS];
    int sl[KT_C2I_MAXS], ns;
    for (int w0 = 0; w0 < W; w0 += KV_W) {
        int wn = W - w0 < KV_W ? W - w0 : KV_W;
        /* Lane masks per tap column s (lane t <-> q = w0 + t + pad - s, valid in
         * [0, Q) and t < wn), computed once per column chunk; taps with no valid
         * lane are dropped. */
        ns = 0;
        for (int s = 0; s < S && ns < KT_C2I_MAXS; s++) {
            int lo = s - pad - w0, hi = Q + s - pad - w0;
            lo = lo < 0 ? 0 : lo;
            hi = hi > wn ? wn : hi;
            if (lo >= hi) continue;
            msk[ns] = kv_lmask_make(lo, hi);
            sl[ns++] = s;
        }
        for (int c = 0; c < g->c; c++)
            for (int ih = 0; ih < H; ih += 2) {
                /* Two rows at a time: two independent add chains. */
                int two = ih + 1 < H;
                kv acc0 = kv_zero(), acc1 = kv_zero();
                for (int r = 0; r < R; r++) {
                    int p = ih + pad - r;
                    int ok0 = p >= 0 && p < P, ok1 = two && p + 1 >= 0 && p + 1 < P;
                    if (!ok0 && !ok1) continue;
                    const float *seg = col + ((long)(c * R + r) * S) * PQ + (long)p * Q + w0 + pad;
                    kv t0 = kv_zero(), t1 = kv_zero();
                    for (int u = 0; u < ns; u++) {
                        const float *sp = seg + sl[u] * PQ - sl[u];
                        if (ok0) t0 = kv_add(t0, kv_load_lmask(sp, msk[u]));
                        if (ok1) t1 = kv_add(t1, kv_load_lmask(sp + Q, msk[u]));
                    }
                    acc0 = kv_add(acc0, t0);
                    acc1 = kv_add(acc1, t1);
                }
                float *o = dx + ((long)c * H + ih) * W + w0;
                if (wn == KV_W) kv_store(o, acc0);
                else kv_storen(o, acc0, wn);
                if (!two) continue;
                if (wn == KV_W) kv_store(o + W, acc1);
                else kv_storen(o + W, acc1, wn);
            }
    }
}

/* The shifted-row layout for stride-1 convs: xs[c][s][h][0..q) = x[c][h-pad][s-pad ..]
 * for h in [0, hp), zero outside the image. Tap (c, r, s) of output j = p*q + col is
 * then xs[c][s] at row offset r*q + j: contiguous, so the GEMMs read it directly.
 * Whole vectors are stored (xs needs KV_W floats of slack at its end). */
/* dst[0..n) = src[0..n) / = 0, whole vectors; a ragged end as one vector ending
 * exactly at n (overlapping the previous one: the same values). */
KT_INL void KT(copy_span)(float *dst, const float *src, long n)
{
    long i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dst + i, kv_load(src + i));
    if (i < n) {
        if (n >= KV_W) kv_store(dst + n - KV_W, kv_load(src + n - KV_W));
        else for (; i < n; i++) dst[i] = src[i];
    }
}

KT_INL void KT(zero_span)(float *dst, long n)
{
    long i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dst + i, kv_zero());
    for (; i < n; i++) dst[i] = 0.0f;
}

KT_TARGET static void KT(shift_rows)(const k_im2col_geo *g, long hp, const float *x, float *xs)
{
    const int H = g->h, W = g->w, S = g->s, Q = g->q, pad = g->pad;
    const float *xend = x + (long)g->c * H * W;
    if (pad == 0) { /* no padding (LeNet): plain row copies in a tight loop */
        float *o = xs;
        for (int c = 0; c < g->c; c++)
            for (int s = 0; s < S; s++) {
                const float *src = x + (long)c * H * W + s;
                if (Q <= 8) { /* LeNet's conv2 */
                    for (int h = 0; h < H; h++, o += Q, src += W) {
                        if (src + 8 <= xend) kv_copy8(o, src);
                        else for (int t = 0; t < Q; t++) o[t] = src[t];
                    }
                    continue;
                }
                for (int h = 0; h < H; h++, o += Q, src += W) {
                    int t = 0;
                    for (; t + KV_W <= Q; t += KV_W) kv_store(o + t, kv_load(src + t));
                    if (t == Q) continue;
                    /* The tail: whole vectors while they stay inside x (lanes past Q
                     * land in the next row of xs, written after this one). */
                    if (Q - t <= 8 && src + t + 8 <= xend) kv_copy8(o + t, src + t);
                    else if (src + t + KV_W <= xend) kv_store(o + t, kv_load(src + t));
                    else for (; t < Q; t++) o[t] = src[t];
                }
            }
        return;
    }
    /* "Same" convs (Q == W: every xs plane is the channel's plane shifted by s - pad
     * elements): one contiguous copy per plane, then the |s - pad| columns per row
     * that came from the neighbouring row zeroed, and the pad rows. Row by row this
     * was 5x slower on 28-wide rows, a cost the 16 filters of ResNet-20's layer1 do
     * not amortise. */
    if (Q == W && hp == H + 2L * pad) {
        for (int c = 0; c < g->c; c++)
            for (int s = 0; s < S; s++) {
                float *o = xs + (long)(c * S + s) * hp * Q, *m = o + (long)pad * Q;
                int d = s - pad, a = d < 0 ? -d : 0, b = d > 0 ? d : 0;
                KT(copy_span)(m + a, x + (long)c * H * W + a + d, (long)H * W - a - b);
                KT(zero_span)(o, (long)pad * Q + a);
                KT(zero_span)(m + (long)H * W - b, (long)pad * Q + b);
                for (int h = 0; h < H; h++) {
                    for (int t = 0; t < a; t++) m[(long)h * Q + t] = 0.0f;
                    for (int t = Q - b; t < Q; t++) m[(long)h * Q + t] = 0.0f;
                }
            }
        return;
    }
    /* Padded: each row is its valid span [lo, hi) copied in whole vectors from lo, then
     * the zeros around it. Lanes a vector writes past hi are zeroed right after (in the
     * row) or land in a row written later (the loop runs in memory order) or in the
     * slack. Per-chunk lane masks here measured 3x slower on 28-wide rows. */
    for (int c = 0; c < g->c; c++)
        for (int s = 0; s < S; s++) {
            int lo = pad - s, hi = W + pad - s; /* valid output columns [lo, hi) */
            lo = lo < 0 ? 0 : lo;
            hi = hi > Q ? Q : hi;
            for (long h = 0; h < hp; h++) {
                float *o = xs + ((long)(c * S + s) * hp + h) * Q;
                long ih = h - pad;
                if (ih < 0 || ih >= H || lo >= hi) {
                    for (int t = 0; t < Q; t += KV_W) kv_store(o + t, kv_zero());
                    continue;
                }
                const float *src = x + ((long)c * H + ih) * W + s - pad;
                int t = lo;
                for (; t + KV_W <= hi; t += KV_W) kv_store(o + t, kv_load(src + t));
                if (t < hi) {
                    if (hi - t <= 8 && src + t + 8 <= xend) kv_copy8(o + t, src + t);
                    else if (src + t + KV_W <= xend) kv_store(o + t, kv_load(src + t));
                    else for (; t < hi; t++) o[t] = src[t];
                }
                for (t = 0; t < lo; t++) o[t] = 0.0f;
                for (t = hi; t < Q; t++) o[t] = 0.0f;
            }
        }
}

/* Stride 1, ng images interleaved by row: xs[c][s][h][t][0..q) = image t's
 * x[c][h-pad][s-pad ..] (zero outside), image t at x + t*xsz. Tap (c, r, s) of output
 * column (p*ng + t)*q + col is then xs at offset ((c*S + s)*hp + r)*ng*q: the ng
 * images' outputs form one wide GEMM (no per-image column tails on small planes).
 * Rows are written in memory order, so a whole-vector tail lands in the next row
 * (written later) or the slack (xs needs KV_W floats after ng*c*s*hp*q). */
KT_TARGET static void KT(shift_rows_ilv)(const k_im2col_geo *g, long hp, int ng, const float *x, long xsz, float *xs)
{
    const int H = g->h, W = g->w, S = g->s, Q = g->q, pad = g->pad;
    const float *xend = x + (long)ng * xsz;
    float *o = xs;
    for (int c = 0; c < g->c; c++)
        for (int s = 0; s < S; s++) {
            int lo = pad - s, hi = W + pad - s;
            lo = lo < 0 ? 0 : lo;
            hi = hi > Q ? Q : hi;
            const int n8 = (hi - lo + 7) / 8; /* 8-float copies covering [lo, hi) */
            for (long h = 0; h < hp; h++) {
                long ih = h - pad;
                const float *s0 = x + ((long)c * H + ih) * W + s - pad + lo;
                /* Short rows (the planes this layout is for): every image's span as
                 * whole 8-float copies, in order (each spills into the next segment,
                 * rewritten next), then the zeros around the spans. Per-row logic
                 * cost 3x the copies on 7-wide rows. */
                if (ih >= 0 && ih < H && lo < hi && Q <= 16 && s0 + (ng - 1) * xsz + 8 * n8 <= xend) {
                    for (int t = 0; t < ng; t++)
                        for (int v = 0; v < n8; v++) kv_copy8(o + t * Q + lo + 8 * v, s0 + t * xsz + 8 * v);
                    if (lo > 0 || hi < Q)
                        for (int t = 0; t < ng; t++) {
                            for (int u = 0; u < lo; u++) o[t * Q + u] = 0.0f;
                            for (int u = hi; u < Q; u++) o[t * Q + u] = 0.0f;
                        }
                    o += (long)ng * Q;
                    continue;
                }
                for (int t = 0; t < ng; t++, o += Q) {
                    if (ih < 0 || ih >= H || lo >= hi) {
                        for (int u = 0; u < Q; u += KV_W) kv_store(o + u, kv_zero());
                        continue;
                    }
                    const float *src = x + t * xsz + ((long)c * H + ih) * W + s - pad;
                    int u = lo;
                    for (; u + KV_W <= hi; u += KV_W) kv_store(o + u, kv_load(src + u));
                    if (u < hi) {
                        if (hi - u <= 8 && src + u + 8 <= xend) kv_copy8(o + u, src + u);
                        else if (src + u + KV_W <= xend) kv_store(o + u, kv_load(src + u));
                        else for (; u < hi; u++) o[u] = src[u];
                    }
                    for (u = 0; u < lo; u++) o[u] = 0.0f;
                    for (u = hi; u < Q; u++) o[u] = 0.0f;
                }
            }
        }
}

/* SGD (torch.optim.SGD): d = g + wd*p; v = first ? d : m*v + (1-damp)*d;
 * p -= lr * (nesterov ? d + m*v : v). m == 0: no buffer, p -= lr*d. Every product and
 * sum rounded on its own, no fused multiply-add: the same bits on every ISA, in the
 * scalar tail, and on the GPU (k_cuda_sgd_step's __fmul_rn/__fadd_rn). */
KT_TARGET static void KT(sgd_span)(size_t n, float lr, float m, float damp, float wd, int nesterov,
                                   int first, float *p, const float *g, float *v)
{
    kv nlr = kv_set1(-lr), vm = kv_set1(m), vd = kv_set1(1.0f - damp), vwd = kv_set1(wd);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) {
        kv pi = kv_load(p + i), d = kv_add(kv_mul(vwd, pi), kv_load(g + i)), step = d;
        if (m != 0.0f) {
            kv b = first ? d : kv_add(kv_mul(vm, kv_load(v + i)), kv_mul(vd, d));
            kv_store(v + i, b);
            step = nesterov ? kv_add(kv_mul(vm, b), d) : b;
        }
        kv_store(p + i, kv_add(kv_mul(nlr, step), pi));
    }
    for (; i < n; i++) {
        float d = g[i] + wd * p[i], step = d;
        if (m != 0.0f) {
            float b = first ? d : m * v[i] + (1.0f - damp) * d;
            v[i] = b;
            step = nesterov ? d + m * b : b;
        }
        p[i] -= lr * step;
    }
}

/* ---------------------------------------------------------------- layer-graph spans */
/* y = (x - m)*a + b: BatchNorm forward with its per-channel factors folded (the
 * subtraction first keeps precision when |mean| >> std). */
KT_TARGET static void KT(affine_span)(size_t n, float m, float a, float b, const float *x, float *y)
{
    kv vm = kv_set1(m), va = kv_set1(a), vb = kv_set1(b);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_fma(kv_add(kv_load(x + i), vm), va, vb));
    /* The tail through the same vector op, so an element's bits never depend on
     * where a span was cut. */
    if (i < n) kv_storen(y + i, kv_fma(kv_add(kv_loadn(x + i, (int)(n - i)), vm), va, vb), (int)(n - i));
}

/* z = a*x + b*(y + ym) + c: BatchNorm's dx with its per-channel coefficients folded. */
KT_TARGET static void KT(affine2_span)(size_t n, float a, const float *x, float b, const float *y,
                                       float ym, float c, float *z)
{
    kv va = kv_set1(a), vb = kv_set1(b), vc = kv_set1(c), vm = kv_set1(ym);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W)
        kv_store(z + i, kv_fma(va, kv_load(x + i), kv_fma(vb, kv_add(kv_load(y + i), vm), vc)));
    if (i < n) {
        int t = (int)(n - i);
        kv_storen(z + i, kv_fma(va, kv_loadn(x + i, t), kv_fma(vb, kv_add(kv_loadn(y + i, t), vm), vc)), t);
    }
}

/* y = a + b */
KT_TARGET static void KT(add_span)(size_t n, const float *a, const float *b, float *y)
{
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_add(kv_load(a + i), kv_load(b + i)));
    for (; i < n; i++) y[i] = a[i] + b[i];
}

/* y[0..n) += sum_j a[j] * x[j][0..n), j in order: y stays in registers over the j
 * loop (the sparse conv backward's gathered rows). Every element sees the same
 * sequence of operations whichever block handles it. */
KT_TARGET static void KT(axpy_rows)(int cnt, const float *a, const float *const *x, size_t n, float *y)
{
    size_t i = 0;
    for (; i + 4 * KV_W <= n; i += 4 * KV_W) {
        kv s0 = kv_load(y + i), s1 = kv_load(y + i + KV_W), s2 = kv_load(y + i + 2 * KV_W),
           s3 = kv_load(y + i + 3 * KV_W);
        for (int j = 0; j < cnt; j++) {
            kv aj = kv_set1(a[j]);
            const float *xj = x[j] + i;
            s0 = kv_fma(aj, kv_load(xj), s0);
            s1 = kv_fma(aj, kv_load(xj + KV_W), s1);
            s2 = kv_fma(aj, kv_load(xj + 2 * KV_W), s2);
            s3 = kv_fma(aj, kv_load(xj + 3 * KV_W), s3);
        }
        kv_store(y + i, s0);
        kv_store(y + i + KV_W, s1);
        kv_store(y + i + 2 * KV_W, s2);
        kv_store(y + i + 3 * KV_W, s3);
    }
    for (; i + KV_W <= n; i += KV_W) {
        kv s0 = kv_load(y + i);
        for (int j = 0; j < cnt; j++) s0 = kv_fma(kv_set1(a[j]), kv_load(x[j] + i), s0);
        kv_store(y + i, s0);
    }
    if (i < n) {
        int t = (int)(n - i);
        kv s0 = kv_loadn(y + i, t);
        for (int j = 0; j < cnt; j++) s0 = kv_fma(kv_set1(a[j]), kv_loadn(x[j] + i, t), s0);
        kv_storen(y + i, s0, t);
    }
}

/* y[0..n) = v */
KT_TARGET static void KT(fill_span)(size_t n, float v, float *y)
{
    kv vv = kv_set1(v);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, vv);
    for (; i < n; i++) y[i] = v;
}
