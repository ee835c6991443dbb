/* k_pool.c's 3x3 stride-2 pad-1 max pool (ResNet's stem), one template per ISA level
 * (rt/isa_each.h). A whole plane per call, edges included, in vectors of KVF_W outputs.
 * Exact comparisons and sums only: the scalar loops' bits on every level.
 *
 * Forward: the scan "v > m or v is NaN, in row-major order" keeps the last NaN, else
 * the first maximum, so it may be cut into pieces: each of the window's rows is
 * scanned on its own (columns 2j-1, 2j, 2j+1 from even/odd lane shuffles of two
 * plain loads), then the three row winners are scanned top to bottom. A padded cell
 * never wins: the left one is forced to lose to the cell after it, the right one
 * never replaces. Indices grow in scan order, so the index follows the same picks.
 * Backward: each dx row is written once, whole (no zeroing pass, no scatter): column
 * 2j gets window j's dy where its idx points there, column 2j+1 windows j then j+1,
 * window rows top to bottom: the scatter's order of additions onto +0 (adding +0 for
 * a window that does not point there changes no sum that starts at +0). */
#include "kernels/cpu/k_kv.h"
#include <string.h>

#define KP(x) ISA_FN(x)
#define KP_PF 3 /* output rows ahead: measured 2-3 best (2..8 tried), resnet18's stem */

/* Even/odd lanes of a pair of vectors (lane t of the result: output P[t]; AVX2's
 * shuffle stays within 128-bit halves, so its outputs come out in the order P and
 * are put back in order once, when stored) and the order P itself; k_kv.h's
 * KVF_ILO / KVF_IHI interleave two vectors (e0 o0 e1 o1 ...: low and high halves). */
#if KVF_W == 4
#define KP_EV {0, 2, 4, 6}
#define KP_OD {1, 3, 5, 7}
#define KP_P {0, 1, 2, 3}
#define KP_ID {0, 1, 2, 3}
#elif KVF_W == 8
#define KP_EV {0, 2, 8, 10, 4, 6, 12, 14}
#define KP_OD {1, 3, 9, 11, 5, 7, 13, 15}
#define KP_P {0, 1, 4, 5, 2, 3, 6, 7}
#define KP_ID {0, 1, 2, 3, 4, 5, 6, 7}
#else
#define KP_EV {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}
#define KP_OD {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}
#define KP_P {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
#define KP_ID KP_P
#endif

/* (m, a) <- (v, av) where v wins (v > m or v is NaN; or forced in `on`, never in
 * `off`): the level's compare and blend instructions, or their definition. */
static inline __attribute__((always_inline)) ISA_TARGET void
KP(kp_pick)(kvf *m, kvi *a, kvf v, kvi av, int edge, kvi on, kvi off)
{
#if ISA_X86 && ISA_VB == 64
    __mmask16 k = _mm512_cmp_ps_mask((__m512)v, (__m512)*m, _CMP_GT_OQ) |
                  _mm512_cmp_ps_mask((__m512)v, (__m512)v, _CMP_UNORD_Q);
    if (edge)
        k = (k | _mm512_test_epi32_mask((__m512i)on, (__m512i)on)) & ~_mm512_test_epi32_mask((__m512i)off, (__m512i)off);
    *m = (kvf)_mm512_mask_mov_ps((__m512)*m, k, (__m512)v);
    *a = (kvi)_mm512_mask_mov_epi32((__m512i)*a, k, (__m512i)av);
#else
    kvi k = (v > *m) | (v != v);
    if (edge) k = (k | on) & ~off;
#if ISA_X86 && ISA_VB == 32
    *m = (kvf)_mm256_blendv_ps((__m256)*m, (__m256)v, (__m256)k);
    *a = (kvi)_mm256_blendv_ps((__m256)*a, (__m256)av, (__m256)k);
#else
    *m = (kvf)(((kvi)v & k) | ((kvi)*m & ~k));
    *a = (av & k) | (*a & ~k);
#endif
#endif
}

/* Where no cell is NaN the rule is "v > m" alone: maxps(v, m) is then the winner's
 * value (v > m ? v : m), and as indices grow in scan order the index is a max too
 * (AVX2: of the candidates' indices masked by v > m). `on`: lanes where v is forced
 * to win (the left padded cell before it). A block with a NaN is done again by
 * kp_pick. KP_NAN collects "some lane saw a NaN" (bits on AVX-512). */
#if ISA_X86 && ISA_VB == 64
typedef unsigned KP(kp_nan);
#define KP_UNORD(a, b) ((unsigned)_mm512_cmp_ps_mask((__m512)(a), (__m512)(b), _CMP_UNORD_Q))
#define KP_ANY(n) ((n) != 0)
#elif ISA_X86
typedef kvi KP(kp_nan);
#if ISA_VB == 32
#define KP_UNORD(a, b) ((kvi)_mm256_cmp_ps((__m256)(a), (__m256)(b), _CMP_UNORD_Q))
#define KP_ANY(n) (_mm256_movemask_ps((__m256)(n)) != 0)
#else
#define KP_UNORD(a, b) ((kvi)_mm_cmpunord_ps((__m128)(a), (__m128)(b)))
#define KP_ANY(n) (_mm_movemask_ps((__m128)(n)) != 0)
#endif
#else
typedef kvi KP(kp_nan);
#define KP_UNORD(a, b) ((kvi)((a) != (a)) | (kvi)((b) != (b)))
static inline int KP(kp_any)(kvi n)
{
    int r = 0;
    for (int k = 0; k < KVF_W; k++) r |= n[k];
    return r != 0;
}
#define KP_ANY(n) KP(kp_any)(n)
#endif

static inline __attribute__((always_inline)) ISA_TARGET void
KP(kp_fast)(kvf *m, kvi *a, kvf v, kvi av, int edge, kvi on)
{
#if ISA_X86 && ISA_VB == 64
    __mmask16 k = _mm512_cmp_ps_mask((__m512)v, (__m512)*m, _CMP_GT_OQ);
    if (edge) k |= _mm512_test_epi32_mask((__m512i)on, (__m512i)on);
    *a = (kvi)_mm512_mask_mov_epi32((__m512i)*a, k, (__m512i)av);
    *m = (kvf)_mm512_max_ps((__m512)v, (__m512)*m);
#else
    kvi k = v > *m;
    if (edge) k |= on;
#if ISA_X86 && ISA_VB == 32
    *a = (kvi)_mm256_max_epi32((__m256i)*a, (__m256i)(k & av));
    *m = (kvf)_mm256_max_ps((__m256)v, (__m256)*m);
#else
    *a = (av & k) | (*a & ~k);
    *m = (kvf)(((kvi)v & k) | ((kvi)*m & ~k));
#endif
#endif
}

/* One input row's scan of the windows at outputs [o, o+KVF_W) (lane order P): the
 * floats b[0..2*KVF_W] (columns 2o-1 .. 2o+2*KVF_W-1) read from b, or, where they
 * leave [xbeg, xend), from a copy (those columns are padding: forced out). fast:
 * kp_fast's picks, the padded cells -inf (never above m; the left one forced out). */
static inline __attribute__((always_inline)) ISA_TARGET void
KP(kp_row)(const float *b, const float *xbeg, const float *xend, kvi col, int edge, int fast,
           kvi lpad, kvi rpad, kvf *m, kvi *a, KP(kp_nan) *nan)
{
    float t[2 * KVF_W + 1];
    if (edge && ((uintptr_t)b < (uintptr_t)xbeg || (uintptr_t)(b + 2 * KVF_W + 1) > (uintptr_t)xend)) {
        for (int k = 0; k < 2 * KVF_W + 1; k++)
            t[k] = (uintptr_t)(b + k) >= (uintptr_t)xbeg && (uintptr_t)(b + k) < (uintptr_t)xend ? b[k] : 0.0f;
        b = t;
    }
    const kvi ev = KP_EV, od = KP_OD;
    kvf l0 = kvf_ld(b), l1 = kvf_ld(b + KVF_W), l2 = kvf_ld(b + 1), l3 = kvf_ld(b + 1 + KVF_W);
    kvf cl = __builtin_shuffle(l0, l1, ev), cm = __builtin_shuffle(l0, l1, od), cr = __builtin_shuffle(l2, l3, od);
    kvi zero = {0};
    if (fast) {
        if (edge) {
            kvi ninf = zero + (int32_t)0xff800000; /* -inf's bits */
            cl = (kvf)((ninf & lpad) | ((kvi)cl & ~lpad));
            cr = (kvf)((ninf & rpad) | ((kvi)cr & ~rpad));
        }
        *nan |= KP_UNORD(cl, cm) | KP_UNORD(cr, cr);
        *m = cl;
        *a = col;
        KP(kp_fast)(m, a, cm, col + 1, edge, lpad);
        KP(kp_fast)(m, a, cr, col + 2, 0, zero);
        return;
    }
    *m = cl; /* column 2j-1 */
    *a = col;
    KP(kp_pick)(m, a, cm, col + 1, edge, lpad, zero); /* 2j */
    KP(kp_pick)(m, a, cr, col + 2, edge, zero, rpad); /* 2j+1 */
}

/* Window (m, a) of outputs [o, o+KVF_W) of output row oh, lane order P. */
static inline __attribute__((always_inline)) ISA_TARGET void
KP(kp_win)(const float *x, int h, int w, int oh, int o, int edge, int fast, const float *xbeg,
           const float *xend, kvf *m, kvi *a, KP(kp_nan) *nan)
{
    const kvi P = KP_P;
    kvi col = 2 * (o + P) - 1, lpad = {0}, rpad = {0}, zero = {0};
    if (edge) {
        lpad = col < 0;
        rpad = col + 2 >= w;
    }
    int r0 = 2 * oh - 1 < 0 ? 0 : 2 * oh - 1, r1 = 2 * oh + 1 < h ? 2 * oh + 1 : h - 1;
    kvf v;
    kvi av;
    KP(kp_row)(x + (long)r0 * w + 2 * o - 1, xbeg, xend, col + r0 * w, edge, fast, lpad, rpad, m, a, nan);
    for (int r = r0 + 1; r <= r1; r++) {
        KP(kp_row)(x + (long)r * w + 2 * o - 1, xbeg, xend, col + r * w, edge, fast, lpad, rpad, &v, &av, nan);
        if (fast) KP(kp_fast)(m, a, v, av, 0, zero);
        else KP(kp_pick)(m, a, v, av, 0, zero, zero);
    }
}

/* kp_win with kp_pick: the blocks with a NaN. */
__attribute__((noinline)) ISA_TARGET static void KP(kp_win_nan)(const float *x, int h, int w, int oh, int o,
                                                                const float *xbeg, const float *xend,
                                                                kvf *m, kvi *a)
{
    KP(kp_nan) nan = {0};
    KP(kp_win)(x, h, w, oh, o, 1, 0, xbeg, xend, m, a, &nan);
}

/* Outputs [o, o+KVF_W) of output row oh; n of them stored (KVF_W: all). */
static inline __attribute__((always_inline)) ISA_TARGET void
KP(kp_fwd_block)(const float *x, int h, int w, int oh, int o, int n, int edge, const float *xbeg,
                 const float *xend, float *y, int32_t *idx)
{
    const kvi P = KP_P;
    kvf m;
    kvi a;
    KP(kp_nan) nan = {0};
    KP(kp_win)(x, h, w, oh, o, edge, 1, xbeg, xend, &m, &a, &nan);
    if (KP_ANY(nan)) KP(kp_win_nan)(x, h, w, oh, o, xbeg, xend, &m, &a);
    m = __builtin_shuffle(m, P);
    a = __builtin_shuffle(a, P);
    if (n == KVF_W) {
        memcpy(y + o, &m, ISA_VB);
        memcpy(idx + o, &a, ISA_VB);
    } else {
        for (int k = 0; k < n; k++) {
            y[o + k] = m[k];
            idx[o + k] = a[k];
        }
    }
}

/* One plane [h, w] -> [p, q] (p = (h-1)/2+1, q = (w-1)/2+1); [xbeg, xend): the
 * memory that may be read (the whole input: rows are read one float either side). */
ISA_TARGET static void KP(pool3s2p1_fwd_plane)(const float *x, int h, int w, const float *xbeg, const float *xend,
                                               float *y, int32_t *idx)
{
    int p = (h - 1) / 2 + 1, q = (w - 1) / 2 + 1;
    /* Interior blocks read columns 2o-1 .. 2o+2*KVF_W-1 inside the row. The last block
     * ends at output q-1 (overlapping the one before: the same values again). */
    int last = q >= KVF_W ? q - KVF_W : 0;
    for (int oh = 0; oh < p; oh++) {
        float *yr = y + (long)oh * q;
        int32_t *ir = idx + (long)oh * q;
        int o;
        /* The rows KP_PF output rows ahead (in the next plane near the end): the
         * hardware's prefetch alone left the stem's 100 MB pool at ~65 % of the copy. */
        uintptr_t pf = (uintptr_t)(x + (long)(2 * oh + 2 * KP_PF + 1) * w);
        if (pf + 8 * (uintptr_t)w <= (uintptr_t)xend)
            for (uintptr_t c = 0; c < 8 * (uintptr_t)w; c += 64) __builtin_prefetch((const void *)(pf + c));
        KP(kp_fwd_block)(x, h, w, oh, 0, q < KVF_W ? q : KVF_W, 1, xbeg, xend, yr, ir);
        for (o = KVF_W; o < last && 2 * o + 2 * KVF_W <= w; o += KVF_W)
            KP(kp_fwd_block)(x, h, w, oh, o, KVF_W, 0, xbeg, xend, yr, ir);
        for (; o < q; o += KVF_W) {
            int oo = o > last ? last : o;
            KP(kp_fwd_block)(x, h, w, oh, oo, q - oo < KVF_W ? q - oo : KVF_W, 1, xbeg, xend, yr, ir);
        }
    }
}

/* Window row oh's contributions to input row r at columns 2j, 2j+1 (j = o + lane):
 * dy/idx of windows j (d0, i0) and j+1 (d1, i1). */
static inline __attribute__((always_inline)) ISA_TARGET void
KP(kp_bwd_add)(kvf d0, kvi i0, kvf d1, kvi i1, kvi ce, kvf *ae, kvf *ao)
{
    *ae = *ae + (kvf)((kvi)d0 & (i0 == ce));
    *ao = *ao + (kvf)((kvi)d0 & (i0 == ce + 1));
    *ao = *ao + (kvf)((kvi)d1 & (i1 == ce + 1));
}

/* dx row r, columns [2o, 2o+2*KVF_W) cut at w. tail: the block ends at window q-1,
 * so window j+1's values are window j's shifted by a lane, the last none (0, -1). */
static inline __attribute__((always_inline)) ISA_TARGET void
KP(kp_bwd_block)(const float *dy, const int32_t *idx, int p, int q, int w, int r, int o, int tail, float *dxr)
{
    const kvi lane = KP_ID, ilo = KVF_ILO, ihi = KVF_IHI, sh = lane + 1, none = lane * 0 - 1;
    const kvf fz = {0};
    kvf ae = {0}, ao = {0};
    kvi ce = r * w + 2 * (o + lane);
    int k0 = r / 2, k1 = (r + 1) / 2 < p ? (r + 1) / 2 : p - 1; /* 2k-1 <= r <= 2k+1 */
    for (int k = k0; k <= k1; k++) {
        const float *dr = dy + (long)k * q + o;
        const int32_t *ir = idx + (long)k * q + o;
        kvf d0 = kvf_ld(dr), d1;
        kvi i0 = kvi_ld(ir), i1;
        if (tail) {
            d1 = __builtin_shuffle(d0, fz, sh);
            i1 = __builtin_shuffle(i0, none, sh);
        } else {
            d1 = kvf_ld(dr + 1);
            i1 = kvi_ld(ir + 1);
        }
        KP(kp_bwd_add)(d0, i0, d1, i1, ce, &ae, &ao);
    }
    kvf lo = __builtin_shuffle(ae, ao, ilo), hi = __builtin_shuffle(ae, ao, ihi);
    float *d = dxr + 2 * o;
    int n = w - 2 * o; /* columns left in the row */
    if (n >= 2 * KVF_W) {
        memcpy(d, &lo, ISA_VB);
        memcpy(d + KVF_W, &hi, ISA_VB);
    } else {
        float t[2 * KVF_W];
        memcpy(t, &lo, ISA_VB);
        memcpy(t + KVF_W, &hi, ISA_VB);
        memcpy(d, t, sizeof(float) * n);
    }
}

/* dx of one plane from dy/idx [p, q]; planes with q < KVF_W are left to the caller
 * (returns 0). */
ISA_TARGET static int KP(pool3s2p1_bwd_plane)(const float *dy, const int32_t *idx, int h, int w, float *dx)
{
    int p = (h - 1) / 2 + 1, q = (w - 1) / 2 + 1;
    if (q < KVF_W) return 0;
    for (int r = 0; r < h; r++) {
        float *dxr = dx + (long)r * w;
        /* dx row r+2 fetched for writing ahead (prefetchw): the stores' line fills
         * overlap; 9.3 -> ~10.5-11 GB/s on resnet18's stem (2, 4, 8 rows alike). */
        if (r + 2 < h)
            for (long c = 0; c < 4L * w; c += 64) __builtin_prefetch((char *)(dxr + 2L * w) + c, 1);
        int o = 0;
        for (; o + KVF_W < q; o += KVF_W) KP(kp_bwd_block)(dy, idx, p, q, w, r, o, 0, dxr);
        if (o < q) KP(kp_bwd_block)(dy, idx, p, q, w, r, q - KVF_W, 1, dxr);
    }
    return 1;
}

#undef KP
#undef KP_PF
#undef KP_EV
#undef KP_OD
#undef KP_P
#undef KP_ID
#undef KP_UNORD
#undef KP_ANY
#include "kernels/cpu/k_kv_undef.h"
