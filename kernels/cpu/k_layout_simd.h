/* k_layout.c's column and shifted-row builders of the convs, one template per ISA
 * level (rt/isa_each.h; vector ops: k_kv.h). */
#include "kernels/cpu/k_kv.h"

/* ---------------------------------------------------------------- im2col family.
 * Stride 1 (the common case) copies whole output rows with vector loads; other strides
 * fall back to scalar loops. */

/* dst[0..n) = src[0..n) */
KT_INL void ISA_FN(copy_row)(float *dst, const float *src, int n)
{
    int i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dst + i, kv_load(src + i));
    if (i < n) kv_storen(dst + i, kv_loadn(src + i, n - i), n - i);
}

/* dst[0..n) += src[0..n) */
KT_INL void ISA_FN(add_row)(float *dst, const float *src, int n)
{
    int i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dst + i, kv_add(kv_load(dst + i), kv_load(src + i)));
    if (i < n) kv_storen(dst + i, kv_add(kv_loadn(dst + i, n - i), kv_loadn(src + i, n - i)), n - i);
}

ISA_TARGET static void ISA_FN(im2col)(const k_im2col_geo *g, const float *x, float *col)
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
                    if (st == 1) ISA_FN(copy_row)(o + qlo, xr + qlo, qhi - qlo);
                    else for (int q = qlo; q < qhi; q++) o[q] = xr[q * st];
                    for (int q = qhi; q < Q; q++) o[q] = 0.0f;
                }
            }
}

ISA_TARGET static void ISA_FN(im2row)(const k_im2col_geo *g, const float *x, float *colT)
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
                    if (inside_w) ISA_FN(copy_row)(o, xr, S);
                    else for (int s = 0; s < S; s++) o[s] = iw0 + s >= 0 && iw0 + s < W ? xr[s] : 0.0f;
                }
        }
}

#define KT_C2I_MAXS 32
#if ISA_X86 && ISA_VB >= 32
/* Stride-2 col2im with each dx row summed in registers over its taps and stored once
 * (no zeroing, no read-modify-write; the scalar loop was ~14 % of a stride-2 conv's
 * backward). Tap column s writes the dx columns of one parity e = (s - pad) & 1 only:
 * iw = 2m + e takes q = m + (e + pad - s) / 2. So a row's even and odd columns are
 * summed apart (e, o: KV_W consecutive m each, every lane an output, every tap one
 * plain load of consecutive floats) and interleaved at the store. Per element the taps
 * are added in (r, s) order onto +0, as the scalar loop does (lanes a tap's masked
 * load leaves at +0 add +0, which leaves a sum that started at +0 unchanged): the
 * same bits. (Per-lane parity masks on one vector of outputs ran no faster than the
 * scalar loop: half of every load and add wasted, and 3x the instructions.) */
KT_INL void ISA_FN(c2i_store2)(float *o, kv e, kv d, int n)
{
#if ISA_VB == 64
    kv lo = _mm512_permutex2var_ps(e, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), d);
    kv hi = _mm512_permutex2var_ps(e, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), d);
#else
    kv a = _mm256_unpacklo_ps(e, d), b = _mm256_unpackhi_ps(e, d);
    kv lo = _mm256_permute2f128_ps(a, b, 0x20), hi = _mm256_permute2f128_ps(a, b, 0x31);
#endif
    if (n >= 2 * KV_W) {
        kv_store(o, lo);
        kv_store(o + KV_W, hi);
    } else if (n > KV_W) {
        kv_store(o, lo);
        kv_storen(o + KV_W, hi, n - KV_W);
    } else if (n == KV_W) kv_store(o, lo);
    else kv_storen(o, lo, n);
}

ISA_TARGET static void ISA_FN(col2im_s2)(const k_im2col_geo *g, const float *col, float *dx)
{
    const int P = g->p, Q = g->q, H = g->h, W = g->w, R = g->r, S = g->s, pad = g->pad;
    const long PQ = (long)P * Q;
    kv_lmask qm[KT_C2I_MAXS];
    int q0[KT_C2I_MAXS], se[KT_C2I_MAXS], so[KT_C2I_MAXS], ne = 0, no = 0;
    for (int s = 0; s < S; s++) {
        if ((s - pad) & 1) so[no++] = s;
        else se[ne++] = s;
    }
    for (int m0 = 0; 2 * m0 < W; m0 += KV_W) {
        int n = W - 2 * m0 < 2 * KV_W ? W - 2 * m0 : 2 * KV_W; /* dx columns of this chunk */
        /* Per tap column: the first q read and its lanes inside [0, Q) (masked loads:
         * nothing read outside the column row; lanes past n are never stored). */
        for (int s = 0; s < S; s++) {
            q0[s] = m0 + (((s - pad) & 1) + pad - s) / 2; /* exact: the numerator is even */
            int lo = -q0[s], hi = Q - q0[s];
            lo = lo < 0 ? 0 : lo;
            hi = hi > KV_W ? KV_W : hi;
            if (lo >= hi) lo = hi = 0;
            qm[s] = kv_lmask_make(lo, hi);
        }
        for (int c = 0; c < g->c; c++)
            for (int ih = 0; ih < H; ih++) {
                kv e = kv_zero(), d = kv_zero();
                for (int r = 0; r < R; r++) {
                    int p2 = ih + pad - r;
                    if (p2 < 0 || (p2 & 1) || p2 / 2 >= P) continue;
                    const float *row = col + (long)(c * R + r) * S * PQ + (long)(p2 / 2) * Q;
                    for (int u = 0; u < ne; u++) e = kv_add(e, kv_load_lmask(row + se[u] * PQ + q0[se[u]], qm[se[u]]));
                    for (int u = 0; u < no; u++) d = kv_add(d, kv_load_lmask(row + so[u] * PQ + q0[so[u]], qm[so[u]]));
                }
                ISA_FN(c2i_store2)(dx + ((long)c * H + ih) * W + 2 * m0, e, d, n);
            }
    }
}
#endif

ISA_TARGET static void ISA_FN(col2im)(const k_im2col_geo *g, const float *col, float *dx)
{
    const int P = g->p, Q = g->q, H = g->h, W = g->w, st = g->stride, pad = g->pad;
#if ISA_X86 && ISA_VB >= 32
    if (st == 2 && g->s <= KT_C2I_MAXS) {
        ISA_FN(col2im_s2)(g, col, dx);
        return;
    }
#endif
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
                    if (st == 1) ISA_FN(add_row)(dr + qlo, cr + qlo, qhi - qlo);
                    else for (int q = qlo; q < qhi; q++) dr[q * st] += cr[q];
                }
            }
}


/* Stride-1 col2im without a read-modify-write chain: every dx row is summed in
 * registers over its (r, s) taps and stored once (so dx needs no zeroing). Lanes whose
 * tap falls outside the column matrix row are masked off. col needs KV_W floats of
 * slack before it (the masked loads start up to S-1 floats early). */
ISA_TARGET static void ISA_FN(col2im_s1)(const k_im2col_geo *g, const float *col, float *dx)
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
KT_INL void ISA_FN(copy_span)(float *dst, const float *src, long n)
{
    /* One overlapping head vector, then stores on whole vectors of dst: a plane of xs
     * starts pad rows in (28 floats: 16 bytes off), and stores split over two cache
     * lines halved the copy's rate (measured ~40 -> ~50 GB/s into L2). */
    long i = (long)((0 - (uintptr_t)dst / sizeof(float)) & (KV_W - 1));
    if (i > 0 && n >= KV_W + i) kv_store(dst, kv_load(src));
    else i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dst + i, kv_load(src + i));
    if (i < n) {
        if (n >= KV_W) kv_store(dst + n - KV_W, kv_load(src + n - KV_W));
        else for (; i < n; i++) dst[i] = src[i];
    }
}

KT_INL void ISA_FN(zero_span)(float *dst, long n)
{
    long i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dst + i, kv_zero());
    if (i < n && n >= KV_W) kv_store(dst + n - KV_W, kv_zero()); /* not a memset call */
    else for (; i < n; i++) dst[i] = 0.0f;
}

ISA_TARGET static void ISA_FN(shift_rows)(const k_im2col_geo *g, long hp, const float *x, float *xs)
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
                ISA_FN(copy_span)(m + a, x + (long)c * H * W + a + d, (long)H * W - a - b);
                ISA_FN(zero_span)(o, (long)pad * Q + a);
                ISA_FN(zero_span)(m + (long)H * W - b, (long)pad * Q + b);
                /* column by column: per row, GCC made each 1-float loop a memset
                 * call, which cost more than the plane's copy on 14-wide rows */
                for (int t = 0; t < a; t++)
                    for (int h = 0; h < H; h++) m[(long)h * Q + t] = 0.0f;
                for (int t = Q - b; t < Q; t++)
                    for (int h = 0; h < H; h++) m[(long)h * Q + t] = 0.0f;
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
ISA_TARGET static void ISA_FN(shift_rows_ilv)(const k_im2col_geo *g, long hp, int ng, const float *x, long xsz, float *xs)
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
                    /* column by column (image inner): per image, GCC made the
                     * 1-float loops memset calls */
                    for (int u = 0; u < lo; u++)
                        for (int t = 0; t < ng; t++) o[t * Q + u] = 0.0f;
                    for (int u = hi; u < Q; u++)
                        for (int t = 0; t < ng; t++) o[t * Q + u] = 0.0f;
                    o += (long)ng * Q;
                    continue;
                }
                if (ih < 0 || ih >= H || lo >= hi) { /* a pad row of every image */
                    ISA_FN(zero_span)(o, (long)ng * Q);
                    o += (long)ng * Q;
                    continue;
                }
                for (int t = 0; t < ng; t++, o += Q) {
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


#include "kernels/cpu/k_kv_undef.h"
#undef KT_C2I_MAXS
