/* Max pooling (no padding, floor mode). PyTorch semantics: the first maximum in the
 * window wins ties (strict >), a NaN is always taken (so NaN propagates and the last
 * NaN in the window is the argmax), idx is the offset in the input plane.
 * Backward zeroes dx then adds dy at idx (windows may overlap when st < ks). */
#include "kernels/k.h"
#include "kernels/cpu/k_int.h"
#include <math.h>
#include <string.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define K_POOL_AVX512 1
#endif

typedef struct pool_job {
    int planes, h, w, ks, st, p, q, parts;
    const float *x, *dy;
    float *y, *dx;
    const int32_t *idx_in;
    int32_t *idx;
} pool_job;

#ifdef K_POOL_AVX512
/* 2x2/2 pooling of one output row, 16 outputs per step. Each input row is split into
 * even/odd columns; the pair maxima of row 0 and row 1 are then compared. That gives
 * the same winner as PyTorch's sequential scan (strict >, a NaN always taken). */
__attribute__((target("avx512f"))) static void pool2_row_avx512(const float *r0, const float *r1,
                                                                int q, int w, int32_t base,
                                                                float *y, int32_t *idx)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    const __m512i one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32(w);
    for (int o = 0; o < q; o += 16) {
        int n = q - o < 16 ? q - o : 16, n2 = 2 * n;
        __mmask16 mlo = (__mmask16)(n2 >= 16 ? 0xffff : (1u << n2) - 1);
        __mmask16 mhi = (__mmask16)(n2 >= 32 ? 0xffff : n2 > 16 ? (1u << (n2 - 16)) - 1 : 0);
        __m512 a0 = _mm512_maskz_loadu_ps(mlo, r0 + 2 * o), a1 = _mm512_maskz_loadu_ps(mhi, r0 + 2 * o + 16);
        __m512 b0 = _mm512_maskz_loadu_ps(mlo, r1 + 2 * o), b1 = _mm512_maskz_loadu_ps(mhi, r1 + 2 * o + 16);
        __m512 ae = _mm512_permutex2var_ps(a0, ev, a1), ao = _mm512_permutex2var_ps(a0, od, a1);
        __m512 be = _mm512_permutex2var_ps(b0, ev, b1), bo = _mm512_permutex2var_ps(b0, od, b1);
        __m512i i0 = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * o), ev);
        __mmask16 ka = _mm512_cmp_ps_mask(ao, ae, _CMP_GT_OQ) | _mm512_cmp_ps_mask(ao, ao, _CMP_UNORD_Q);
        __mmask16 kb = _mm512_cmp_ps_mask(bo, be, _CMP_GT_OQ) | _mm512_cmp_ps_mask(bo, bo, _CMP_UNORD_Q);
        __m512 h0 = _mm512_mask_mov_ps(ae, ka, ao), h1 = _mm512_mask_mov_ps(be, kb, bo);
        __m512i x0 = _mm512_mask_add_epi32(i0, ka, i0, one);
        __m512i i1 = _mm512_add_epi32(i0, wv);
        __m512i x1 = _mm512_mask_add_epi32(i1, kb, i1, one);
        __mmask16 k1 = _mm512_cmp_ps_mask(h1, h0, _CMP_GT_OQ) | _mm512_cmp_ps_mask(h1, h1, _CMP_UNORD_Q);
        __mmask16 mo = (__mmask16)((1u << n) - 1);
        _mm512_mask_storeu_ps(y + o, mo, _mm512_mask_mov_ps(h0, k1, h1));
        _mm512_mask_storeu_epi32(idx + o, mo, _mm512_mask_mov_epi32(x0, k1, x1));
    }
}

/* Backward of 2x2/2 for one output row: the two input rows are written whole (each
 * position gets dy where idx points at it, else 0), so no zeroing pass is needed. */
__attribute__((target("avx512f"))) static void pool2_bwd_row_avx512(const float *dy, const int32_t *idx,
                                                                    int q, int w, int32_t base,
                                                                    float *dx0, float *dx1)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    const __m512i one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32(w), w1 = _mm512_set1_epi32(w + 1);
    for (int o = 0; o < q; o += 16) {
        int n = q - o < 16 ? q - o : 16, n2 = 2 * n;
        __mmask16 mo = (__mmask16)((1u << n) - 1);
        __mmask16 mlo = (__mmask16)(n2 >= 16 ? 0xffff : (1u << n2) - 1);
        __mmask16 mhi = (__mmask16)(n2 >= 32 ? 0xffff : n2 > 16 ? (1u << (n2 - 16)) - 1 : 0);
        __m512 g = _mm512_maskz_loadu_ps(mo, dy + o);
        __m512i pos = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(mo, idx + o),
                                       _mm512_add_epi32(_mm512_set1_epi32(base + 2 * o), ev));
        __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(pos, _mm512_setzero_si512()), g);
        __m512 o0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(pos, one), g);
        __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(pos, wv), g);
        __m512 o1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(pos, w1), g);
        _mm512_mask_storeu_ps(dx0 + 2 * o, mlo, _mm512_permutex2var_ps(e0, lo, o0));
        _mm512_mask_storeu_ps(dx0 + 2 * o + 16, mhi, _mm512_permutex2var_ps(e0, hi, o0));
        _mm512_mask_storeu_ps(dx1 + 2 * o, mlo, _mm512_permutex2var_ps(e1, lo, o1));
        _mm512_mask_storeu_ps(dx1 + 2 * o + 16, mhi, _mm512_permutex2var_ps(e1, hi, o1));
    }
}
#endif

#ifdef K_POOL_AVX512
/* AVX2 twins of the two above, 8 outputs per step and a scalar tail (masked stores
 * are microcoded on AMD). Even/odd columns: a shuffle within 128-bit lanes, then a
 * cross-lane permute. The winner rule is the AVX-512 one (the scalar scan's). */
__attribute__((target("avx2"), always_inline)) static inline void deint_avx2(__m256 a, __m256 b, __m256 *ev, __m256 *od)
{
    *ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
    *od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
}

/* v wins over m: v > m, or v is NaN. */
__attribute__((target("avx2"), always_inline)) static inline __m256 wins_avx2(__m256 v, __m256 m)
{
    return _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* Returns the outputs done (a multiple of 8); the caller finishes the row. */
__attribute__((target("avx2"))) static int pool2_row_avx2(const float *r0, const float *r1, int q, int w,
                                                          int32_t base, float *y, int32_t *idx)
{
    const __m256i ev2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14), one = _mm256_set1_epi32(1);
    const __m256i wv = _mm256_set1_epi32(w);
    int o = 0;
    for (; o + 8 <= q; o += 8) {
        __m256 ae, ao, be, bo;
        deint_avx2(_mm256_loadu_ps(r0 + 2 * o), _mm256_loadu_ps(r0 + 2 * o + 8), &ae, &ao);
        deint_avx2(_mm256_loadu_ps(r1 + 2 * o), _mm256_loadu_ps(r1 + 2 * o + 8), &be, &bo);
        __m256i i0 = _mm256_add_epi32(_mm256_set1_epi32(base + 2 * o), ev2);
        __m256 ka = wins_avx2(ao, ae), kb = wins_avx2(bo, be);
        __m256 h0 = _mm256_blendv_ps(ae, ao, ka), h1 = _mm256_blendv_ps(be, bo, kb);
        __m256i x0 = _mm256_sub_epi32(i0, _mm256_castps_si256(ka)); /* mask lanes are -1: +1 */
        __m256i x1 = _mm256_sub_epi32(_mm256_add_epi32(i0, wv), _mm256_castps_si256(kb));
        __m256 k1 = wins_avx2(h1, h0);
        _mm256_storeu_ps(y + o, _mm256_blendv_ps(h0, h1, k1));
        _mm256_storeu_si256((__m256i *)(idx + o),
                            _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(x0), _mm256_castsi256_ps(x1), k1)));
    }
    (void)one;
    return o;
}

/* Backward of 2x2/2 over outputs [0, 8*floor(q/8)) of one row: both input rows'
 * covered columns written whole (dy where idx points, else 0). Returns the count. */
__attribute__((target("avx2"))) static int pool2_bwd_row_avx2(const float *dy, const int32_t *idx, int q, int w,
                                                              int32_t base, float *dx0, float *dx1)
{
    const __m256i ev2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14), one = _mm256_set1_epi32(1);
    const __m256i wv = _mm256_set1_epi32(w), w1 = _mm256_set1_epi32(w + 1);
    int o = 0;
    for (; o + 8 <= q; o += 8) {
        __m256 g = _mm256_loadu_ps(dy + o);
        __m256i pos = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(idx + o)),
                                       _mm256_add_epi32(_mm256_set1_epi32(base + 2 * o), ev2));
        __m256 e0 = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(pos, _mm256_setzero_si256())), g);
        __m256 o0 = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(pos, one)), g);
        __m256 e1 = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(pos, wv)), g);
        __m256 o1 = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(pos, w1)), g);
        /* interleave: lanes (e[0], o[0], e[1], o[1], ...) */
        __m256 l0 = _mm256_unpacklo_ps(e0, o0), h0 = _mm256_unpackhi_ps(e0, o0);
        __m256 l1 = _mm256_unpacklo_ps(e1, o1), h1 = _mm256_unpackhi_ps(e1, o1);
        _mm256_storeu_ps(dx0 + 2 * o, _mm256_permute2f128_ps(l0, h0, 0x20));
        _mm256_storeu_ps(dx0 + 2 * o + 8, _mm256_permute2f128_ps(l0, h0, 0x31));
        _mm256_storeu_ps(dx1 + 2 * o, _mm256_permute2f128_ps(l1, h1, 0x20));
        _mm256_storeu_ps(dx1 + 2 * o + 8, _mm256_permute2f128_ps(l1, h1, 0x31));
    }
    return o;
}
#endif

static void pool_fwd_plane(const pool_job *j, long pl)
{
    const float *x = j->x + pl * j->h * j->w;
    float *y = j->y + pl * j->p * j->q;
    int32_t *idx = j->idx + pl * j->p * j->q;
#ifdef K_POOL_AVX512
    if (j->ks == 2 && j->st == 2 && k_isa_level() == K_ISA_AVX512) {
        for (int oh = 0; oh < j->p; oh++)
            pool2_row_avx512(x + 2 * oh * j->w, x + (2 * oh + 1) * j->w, j->q, j->w, 2 * oh * j->w,
                             y + oh * j->q, idx + oh * j->q);
        return;
    }
#endif
    if (j->ks == 2 && j->st == 2) { /* LeNet's case, unrolled */
        for (int oh = 0; oh < j->p; oh++) {
            const float *r0 = x + 2 * oh * j->w, *r1 = r0 + j->w;
            int ow0 = 0;
#ifdef K_POOL_AVX512
            if (k_isa_level() == K_ISA_AVX2)
                ow0 = pool2_row_avx2(r0, r1, j->q, j->w, 2 * oh * j->w, y + oh * j->q, idx + oh * j->q);
#endif
            for (int ow = ow0; ow < j->q; ow++) {
                int c0 = 2 * ow;
                float m = r0[c0];
                int32_t a = 2 * oh * j->w + c0;
                if (r0[c0 + 1] > m || isnan(r0[c0 + 1])) { m = r0[c0 + 1]; a = 2 * oh * j->w + c0 + 1; }
                if (r1[c0] > m || isnan(r1[c0])) { m = r1[c0]; a = (2 * oh + 1) * j->w + c0; }
                if (r1[c0 + 1] > m || isnan(r1[c0 + 1])) { m = r1[c0 + 1]; a = (2 * oh + 1) * j->w + c0 + 1; }
                y[oh * j->q + ow] = m;
                idx[oh * j->q + ow] = a;
            }
        }
        return;
    }
    for (int oh = 0; oh < j->p; oh++)
        for (int ow = 0; ow < j->q; ow++) {
            int h0 = oh * j->st, w0 = ow * j->st;
            float m = -INFINITY;
            int32_t a = h0 * j->w + w0;
            for (int dh = 0; dh < j->ks; dh++)
                for (int dw = 0; dw < j->ks; dw++) {
                    int off = (h0 + dh) * j->w + w0 + dw;
                    float v = x[off];
                    if (v > m || isnan(v)) { m = v; a = off; } /* as PyTorch: the last NaN wins */
                }
            y[oh * j->q + ow] = m;
            idx[oh * j->q + ow] = a;
        }
}

static void pool_bwd_plane(const pool_job *j, long pl)
{
    float *dx = j->dx + pl * j->h * j->w;
    const float *dy = j->dy + pl * j->p * j->q;
    const int32_t *idx = j->idx_in + pl * j->p * j->q;
#ifdef K_POOL_AVX512
    /* Short rows (q < 8) pay more per call than they save: scatter instead. */
    if (j->ks == 2 && j->st == 2 && j->q >= 8 && k_isa_level() == K_ISA_AVX512) {
        for (int oh = 0; oh < j->p; oh++) {
            float *d0 = dx + 2 * oh * j->w, *d1 = d0 + j->w;
            pool2_bwd_row_avx512(dy + oh * j->q, idx + oh * j->q, j->q, j->w, 2 * oh * j->w, d0, d1);
            if (j->w & 1) d0[j->w - 1] = d1[j->w - 1] = 0.0f; /* the column no window covers */
        }
        if (j->h & 1) memset(dx + (j->h - 1) * j->w, 0, sizeof(float) * j->w);
        return;
    }
#endif
#ifdef K_POOL_AVX512
    if (j->ks == 2 && j->st == 2 && j->q >= 8 && k_isa_level() == K_ISA_AVX2) {
        for (int oh = 0; oh < j->p; oh++) {
            float *d0 = dx + 2 * oh * j->w, *d1 = d0 + j->w;
            int o = pool2_bwd_row_avx2(dy + oh * j->q, idx + oh * j->q, j->q, j->w, 2 * oh * j->w, d0, d1);
            for (int t = 2 * o; t < j->w; t++) d0[t] = d1[t] = 0.0f; /* the rest: scatter */
            for (; o < j->q; o++) dx[idx[oh * j->q + o]] += dy[oh * j->q + o];
        }
        if (j->h & 1) memset(dx + (j->h - 1) * j->w, 0, sizeof(float) * j->w);
        return;
    }
#endif
    memset(dx, 0, sizeof(float) * j->h * j->w);
    for (int o = 0; o < j->p * j->q; o++) dx[idx[o]] += dy[o];
}

static void pool_task_fwd(void *ctx, int task)
{
    const pool_job *j = ctx;
    long lo, hi;
    k_split(j->planes, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) pool_fwd_plane(j, pl);
}

static void pool_task_bwd(void *ctx, int task)
{
    const pool_job *j = ctx;
    long lo, hi;
    k_split(j->planes, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) pool_bwd_plane(j, pl);
}

static pool_job pool_setup(int n, int c, int h, int w, int ks, int st)
{
    pool_job j = {.planes = n * c, .h = h, .w = w, .ks = ks, .st = st};
    j.p = (h - ks) / st + 1;
    j.q = (w - ks) / st + 1;
    int t = k_threads();
    j.parts = (t > 1 && (long)j.planes * h * w >= K_PAR_MIN_ELEMS) ? t : 1;
    return j;
}

void k_maxpool2d_fwd(int n, int c, int h, int w, int ks, int st, const float *x, float *y,
                     int32_t *idx)
{
    pool_job j = pool_setup(n, c, h, w, ks, st);
    j.x = x; j.y = y; j.idx = idx;
    k_parallel_for(j.parts, pool_task_fwd, &j);
}

void k_maxpool2d_bwd(int n, int c, int h, int w, int ks, int st, const float *dy,
                     const int32_t *idx, float *dx)
{
    pool_job j = pool_setup(n, c, h, w, ks, st);
    j.dy = dy; j.idx_in = idx; j.dx = dx;
    k_parallel_for(j.parts, pool_task_bwd, &j);
}

/* ---- with padding (ResNet's stem: 3x3/2 pad 1). The window is clipped to the image
 * (PyTorch pads with -inf, so padded cells never win); the scan starts at the first
 * cell inside, which is also the argmax when every value is -inf. Like PyTorch it
 * needs pad <= ks/2, so that every window has a cell inside the image. */
typedef struct padpool_job {
    pool_job j;
    int pad;
} padpool_job;

/* 3x3 stride 2 pad 1, whole planes: k_pool_simd.h per ISA level (rt/isa_each.h). */
#define RT_ISA_TEMPLATE "kernels/cpu/k_pool_simd.h"
#include "rt/isa_each.h"

static int is_3s2p1(const padpool_job *pj) { return pj->j.ks == 3 && pj->j.st == 2 && pj->pad == 1; }

static void padpool_fwd_plane(const padpool_job *pj, long pl)
{
    const pool_job *j = &pj->j;
    const float *x = j->x + pl * j->h * j->w;
    float *y = j->y + pl * j->p * j->q;
    int32_t *idx = j->idx + pl * j->p * j->q;
    if (is_3s2p1(pj)) {
        const float *xend = j->x + (long)j->planes * j->h * j->w;
        RT_ISA_CALL(k_isa_level(), pool3s2p1_fwd_plane, x, j->h, j->w, j->x, xend, y, idx);
        return;
    }
    for (int oh = 0; oh < j->p; oh++) {
        int h0 = oh * j->st - pj->pad, h1 = h0 + j->ks;
        h0 = h0 < 0 ? 0 : h0;
        h1 = h1 > j->h ? j->h : h1;
        for (int ow = 0; ow < j->q; ow++) {
            int w0 = ow * j->st - pj->pad, w1 = w0 + j->ks;
            w0 = w0 < 0 ? 0 : w0;
            w1 = w1 > j->w ? j->w : w1;
            float m = -INFINITY;
            int32_t a = h0 * j->w + w0;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    float v = x[ih * j->w + iw];
                    if (v > m || isnan(v)) { m = v; a = ih * j->w + iw; }
                }
            y[oh * j->q + ow] = m;
            idx[oh * j->q + ow] = a;
        }
    }
}

static void padpool_task_fwd(void *ctx, int task)
{
    const padpool_job *pj = ctx;
    long lo, hi;
    k_split(pj->j.planes, pj->j.parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) padpool_fwd_plane(pj, pl);
}

static void padpool_task_bwd(void *ctx, int task)
{
    const padpool_job *pj = ctx;
    const pool_job *j = &pj->j;
    long lo, hi;
    k_split(j->planes, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) {
        float *dx = j->dx + pl * j->h * j->w;
        const float *dy = j->dy + pl * j->p * j->q;
        const int32_t *idx = j->idx_in + pl * j->p * j->q;
        if (is_3s2p1(pj) && RT_ISA_CALL(k_isa_level(), pool3s2p1_bwd_plane, dy, idx, j->h, j->w, dx)) continue;
        memset(dx, 0, sizeof(float) * j->h * j->w);
        for (int o = 0; o < j->p * j->q; o++) dx[idx[o]] += dy[o];
    }
}

static padpool_job padpool_setup(int n, int c, int h, int w, int ks, int st, int pad)
{
    padpool_job pj = {.j = pool_setup(n, c, h + 2 * pad, w + 2 * pad, ks, st), .pad = pad};
    pj.j.h = h; /* pool_setup sized the output on the padded plane */
    pj.j.w = w;
    return pj;
}

void k_maxpool2d_pad_fwd(int n, int c, int h, int w, int ks, int st, int pad, const float *x,
                         float *y, int32_t *idx)
{
    if (pad == 0) { k_maxpool2d_fwd(n, c, h, w, ks, st, x, y, idx); return; }
    padpool_job pj = padpool_setup(n, c, h, w, ks, st, pad);
    pj.j.x = x; pj.j.y = y; pj.j.idx = idx;
    k_parallel_for(pj.j.parts, padpool_task_fwd, &pj);
}

void k_maxpool2d_pad_bwd(int n, int c, int h, int w, int ks, int st, int pad, const float *dy,
                         const int32_t *idx, float *dx)
{
    if (pad == 0) { k_maxpool2d_bwd(n, c, h, w, ks, st, dy, idx, dx); return; }
    padpool_job pj = padpool_setup(n, c, h, w, ks, st, pad);
    pj.j.dy = dy; pj.j.idx_in = idx; pj.j.dx = dx;
    k_parallel_for(pj.j.parts, padpool_task_bwd, &pj);
}
