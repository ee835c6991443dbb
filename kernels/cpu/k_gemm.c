/* Instantiates k_simd_tmpl.h for AVX-512, AVX2+FMA and a generic path (SSE2 on x86-64,
 * plain C elsewhere), and dispatches each call on k_isa_level(). The file itself is
 * compiled with the default flags; only the functions carry target attributes, so the
 * binary runs on any x86-64 and picks the best path at run time. */
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define K_X86 1
#include <immintrin.h>
#endif

/* ------------------------------------------------------------ AVX-512 */
#ifdef K_X86
#define KT(name) name##_avx512
#define KT_TARGET __attribute__((target("avx512f")))
#define KT_MR 12
#define KT_NV 2
#define KT_TM 4
#define KT_TN 6
#define KT_NT_55 1
#define KV_W 16
typedef __m512 kv_avx512;
#define kv kv_avx512
#define kv_zero() _mm512_setzero_ps()
#define kv_load(p) _mm512_loadu_ps(p)
#define kv_store(p, v) _mm512_storeu_ps(p, v)
#define kv_set1(x) _mm512_set1_ps(x)
#define kv_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define kv_add(a, b) _mm512_add_ps(a, b)
#define kv_mul(a, b) _mm512_mul_ps(a, b)
#define kv_max(a, b) _mm512_max_ps(a, b)
#define kv_hsum(v) _mm512_reduce_add_ps(v)
#define kv_loadn(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1), p)
#define kv_storen(p, v, n) _mm512_mask_storeu_ps(p, (__mmask16)((1u << (n)) - 1), v)
#define kv_gtz_select(y, d) \
    _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ), d)
#define kv_load_lanes(p, lo, hi) \
    _mm512_maskz_loadu_ps((__mmask16)(((1u << (hi)) - 1) & ~((1u << (lo)) - 1)), p)
/* 8 floats with one 256-bit load and store: for short rows, a 512-bit store that
 * overlaps the next row measured several times slower on Zen 4. */
#define kv_copy8(d, s) _mm256_storeu_ps(d, _mm256_loadu_ps(s))
typedef __mmask16 kv_lmask_avx512;
#define kv_lmask kv_lmask_avx512
#define kv_lmask_make(lo, hi) ((__mmask16)(((1u << (hi)) - 1) & ~((1u << (lo)) - 1)))
#define kv_load_lmask(p, m) _mm512_maskz_loadu_ps(m, p)
#define kv_mask_u8(m, sc) _mm512_maskz_mov_ps(                                         \
    _mm512_test_epi32_mask(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(m))), \
                           _mm512_set1_epi32(0xff)), sc)
#include "kernels/cpu/k_simd_tmpl.h"
#include "kernels/cpu/k_simd_undef.h"

/* ------------------------------------------------------------ AVX2 + FMA */
#define KT(name) name##_avx2
#define KT_TARGET __attribute__((target("avx2,fma")))
#define KT_MR 6
#define KT_NV 2
/* NT tile 4x3 (7 loads per 12 FMAs; 3x3 was 6 per 9, with more horizontal sums) */
#define KT_TM 4
#define KT_TN 3
#define KT_NT_BFIRST 1
#define KV_W 8
typedef __m256 kv_avx2;
#define kv kv_avx2
#define kv_zero() _mm256_setzero_ps()
#define kv_load(p) _mm256_loadu_ps(p)
#define kv_store(p, v) _mm256_storeu_ps(p, v)
#define kv_set1(x) _mm256_set1_ps(x)
#define kv_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define kv_add(a, b) _mm256_add_ps(a, b)
#define kv_mul(a, b) _mm256_mul_ps(a, b)
#define kv_max(a, b) _mm256_max_ps(a, b)
__attribute__((target("avx2,fma"))) static inline float kv_hsum_avx2(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
__attribute__((target("avx2,fma"))) static inline __m256i kv_lanes_avx2(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#define kv_hsum(v) kv_hsum_avx2(v)
#define kv_loadn(p, n) _mm256_maskload_ps(p, kv_lanes_avx2(n))
#define kv_storen(p, v, n) _mm256_maskstore_ps(p, kv_lanes_avx2(n), v)
__attribute__((target("avx2,fma"))) static inline __m256 kv_load_lanes_avx2(const float *p, int lo, int hi)
{
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), i),
                                    _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
    return _mm256_maskload_ps(p, m);
}
#define kv_load_lanes(p, lo, hi) kv_load_lanes_avx2(p, lo, hi)
__attribute__((target("avx2,fma"))) static inline __m256i kv_lmask_make_avx2(int lo, int hi)
{
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), i),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
}
#define kv_copy8(d, s) _mm256_storeu_ps(d, _mm256_loadu_ps(s))
typedef __m256i kv_lmask_avx2;
#define kv_lmask kv_lmask_avx2
#define kv_lmask_make(lo, hi) kv_lmask_make_avx2(lo, hi)
#define kv_load_lmask(p, m) _mm256_maskload_ps(p, m)
#define kv_gtz_select(y, d) _mm256_and_ps(_mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GT_OQ), d)
#define kv_mask_u8(m, sc) _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(                \
    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(m))), _mm256_setzero_si256())), sc)
#include "kernels/cpu/k_simd_tmpl.h"
#include "kernels/cpu/k_simd_undef.h"
#endif /* K_X86 */

/* ------------------------------------------------------------ generic */
#define KT(name) name##_generic
#define KT_TARGET
#define KT_MR 6
#define KT_NV 2
#define KT_TM 3
#define KT_TN 3
#if defined(__SSE2__)
#include <emmintrin.h>
#define KV_W 4
#define kv __m128
#define kv_zero() _mm_setzero_ps()
#define kv_load(p) _mm_loadu_ps(p)
#define kv_store(p, v) _mm_storeu_ps(p, v)
#define kv_set1(x) _mm_set1_ps(x)
#define kv_fma(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#define kv_add(a, b) _mm_add_ps(a, b)
#define kv_mul(a, b) _mm_mul_ps(a, b)
#define kv_max(a, b) _mm_max_ps(a, b)
static inline float kv_hsum(__m128 v)
{
    __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
static inline __m128 kv_loadn(const float *p, int n)
{
    float t[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i++) t[i] = p[i];
    return _mm_loadu_ps(t);
}
static inline void kv_storen(float *p, __m128 v, int n)
{
    float t[4];
    _mm_storeu_ps(t, v);
    for (int i = 0; i < n; i++) p[i] = t[i];
}
#define kv_gtz_select(y, d) _mm_and_ps(_mm_cmpgt_ps(y, _mm_setzero_ps()), d)
static inline __m128 kv_load_lanes(const float *p, int lo, int hi)
{
    float t[4] = {0, 0, 0, 0};
    for (int i = lo; i < hi; i++) t[i] = p[i];
    return _mm_loadu_ps(t);
}
typedef struct { int lo, hi; } kv_lmask;
static inline kv_lmask kv_lmask_make(int lo, int hi) { kv_lmask m = {lo, hi}; return m; }
#define kv_load_lmask(p, m) kv_load_lanes(p, (m).lo, (m).hi)
#define kv_copy8(d, s) do { float *d_ = (d); const float *s_ = (s); for (int i_ = 0; i_ < 8; i_++) d_[i_] = s_[i_]; } while (0)
static inline __m128 kv_mask_u8(const uint8_t *m, __m128 sc)
{
    __m128i b = _mm_setr_epi32(m[0], m[1], m[2], m[3]);
    return _mm_and_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(b, _mm_setzero_si128())), sc);
}
#else /* plain C: one-lane "vectors" */
#define KV_W 1
#define kv float
#define kv_zero() 0.0f
#define kv_load(p) (*(p))
#define kv_store(p, v) (*(p) = (v))
#define kv_set1(x) (x)
#define kv_fma(a, b, c) ((a) * (b) + (c))
#define kv_add(a, b) ((a) + (b))
#define kv_mul(a, b) ((a) * (b))
#define kv_max(a, b) ((a) > (b) ? (a) : (b))
#define kv_hsum(v) (v)
#define kv_loadn(p, n) ((n) > 0 ? *(p) : 0.0f)
#define kv_storen(p, v, n) do { if ((n) > 0) *(p) = (v); } while (0)
#define kv_gtz_select(y, d) ((y) > 0.0f ? (d) : 0.0f)
#define kv_mask_u8(m, sc) (*(m) ? (sc) : 0.0f)
#define kv_load_lanes(p, lo, hi) ((lo) < (hi) ? *(p) : 0.0f)
typedef struct { int lo, hi; } kv_lmask;
static inline kv_lmask kv_lmask_make(int lo, int hi) { kv_lmask m = {lo, hi}; return m; }
#define kv_load_lmask(p, m) kv_load_lanes(p, (m).lo, (m).hi)
#define kv_copy8(d, s) do { float *d_ = (d); const float *s_ = (s); for (int i_ = 0; i_ < 8; i_++) d_[i_] = s_[i_]; } while (0)
#endif
#include "kernels/cpu/k_simd_tmpl.h"

/* ------------------------------------------------------------ dispatch */
#ifdef K_X86
#define K_DISPATCH(fn, ...)                                                            \
    switch (k_isa_level()) {                                                           \
    case K_ISA_AVX512: fn##_avx512(__VA_ARGS__); break;                                \
    case K_ISA_AVX2: fn##_avx2(__VA_ARGS__); break;                                    \
    default: fn##_generic(__VA_ARGS__); break;                                         \
    }
#else
#define K_DISPATCH(fn, ...) fn##_generic(__VA_ARGS__)
#endif

/* kk == 0: the product is empty, C = acc ? C : bias. */
static int gemm_degenerate(int m, int n, int kk, float *c, long ldc, const float *bias, int acc)
{
    if (m <= 0 || n <= 0) return 1;
    if (kk > 0) return 0;
    if (!acc)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(long)i * ldc + j] = bias ? bias[i] : 0.0f;
    return 1;
}

void k_gemm_nn(int m, int n, int kk, const float *a, long ars, long acs, const float *b,
               long ldb, float *c, long ldc, const float *bias, int acc)
{
    if (gemm_degenerate(m, n, kk, c, ldc, bias, acc)) return;
    K_DISPATCH(gemm_nn, m, n, kk, a, ars, acs, b, ldb, c, ldc, bias, acc)
}

size_t k_gemm_pack_floats(int m, int kk) { return (size_t)(m + 11) * (size_t)(kk > 0 ? kk : 0); }

void k_gemm_pack_a(int m, int kk, const float *a, long ars, long acs, float *ap)
{
    if (m <= 0 || kk <= 0) return;
    K_DISPATCH(pack_a, m, kk, a, ars, acs, ap)
}

void k_gemm_nn_packed(int m, int n, int kk, const float *ap, const float *b, long ldb,
                      const long *boff, float *c, long ldc, const float *bias, int acc)
{
    if (gemm_degenerate(m, n, kk, c, ldc, bias, acc)) return;
    K_DISPATCH(gemm_nn_packed, m, n, kk, ap, b, ldb, boff, c, ldc, bias, acc)
}

void k_gemm_nt_off(int m, int n, int l, int ng, const float *a, long lda, long a_img,
                   const float *b, const long *boff, long b_img, float *c, long ldc, int acc)
{
    if (m <= 0 || n <= 0) return;
    K_DISPATCH(gemm_nt_off, m, n, l, ng, a, lda, a_img, b, boff, b_img, c, ldc, acc)
}

void k_col2im_s1(const k_im2col_geo *g, const float *col, float *dx) { K_DISPATCH(col2im_s1, g, col, dx) }

void k_shift_rows(const k_im2col_geo *g, long hp, const float *x, float *xs) { K_DISPATCH(shift_rows, g, hp, x, xs) }
void k_shift_rows_ilv(const k_im2col_geo *g, long hp, int ng, const float *x, long xsz, float *xs)
{
    K_DISPATCH(shift_rows_ilv, g, hp, ng, x, xsz, xs)
}

void k_gemm_nt(int m, int n, int l, const float *a, long lda, const float *b, long ldb,
               float *c, long ldc, const float *bias, int acc)
{
    if (m <= 0 || n <= 0) return;
    K_DISPATCH(gemm_nt, m, n, l, a, lda, b, ldb, c, ldc, bias, acc)
}

void k_im2col(const k_im2col_geo *g, const float *x, float *col) { K_DISPATCH(im2col, g, x, col) }
void k_im2row(const k_im2col_geo *g, const float *x, float *colT) { K_DISPATCH(im2row, g, x, colT) }
void k_col2im(const k_im2col_geo *g, const float *col, float *dx) { K_DISPATCH(col2im, g, col, dx) }
void k_relu_span(size_t n, const float *x, float *y) { K_DISPATCH(relu_span, n, x, y) }
void k_relu_bwd_span(size_t n, const float *y, const float *dy, float *dx)
{
    K_DISPATCH(relu_bwd_span, n, y, dy, dx)
}
void k_scale_mask_span(size_t n, float scale, const uint8_t *mask, const float *x, float *y)
{
    K_DISPATCH(scale_mask_span, n, scale, mask, x, y)
}
void k_scale_span(size_t n, float scale, const float *x, float *y) { K_DISPATCH(scale_span, n, scale, x, y) }

void k_sgd_span(size_t n, float lr, float m, float damp, float wd, int nesterov, int first,
                float *p, const float *g, float *v)
{
    K_DISPATCH(sgd_span, n, lr, m, damp, wd, nesterov, first, p, g, v)
}

void k_affine_span(size_t n, float m, float a, float b, const float *x, float *y)
{
    K_DISPATCH(affine_span, n, m, a, b, x, y)
}
void k_affine2_span(size_t n, float a, const float *x, float b, const float *y, float ym, float c,
                    float *z)
{
    K_DISPATCH(affine2_span, n, a, x, b, y, ym, c, z)
}
void k_add_span(size_t n, const float *a, const float *b, float *y) { K_DISPATCH(add_span, n, a, b, y) }
void k_fill_span(size_t n, float v, float *y) { K_DISPATCH(fill_span, n, v, y) }
void k_axpy_rows(int cnt, const float *a, const float *const *x, size_t n, float *y)
{
    K_DISPATCH(axpy_rows, cnt, a, x, n, y)
}

float k_sum_span(size_t n, const float *x)
{
#ifdef K_X86
    switch (k_isa_level()) {
    case K_ISA_AVX512: return sum_span_avx512(n, x);
    case K_ISA_AVX2: return sum_span_avx2(n, x);
    default: break;
    }
#endif
    return sum_span_generic(n, x);
}
