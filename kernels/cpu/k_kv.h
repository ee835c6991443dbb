/* The vector helpers of the kernel templates (every kernels/cpu/..._simd.h), one set per
 * ISA level of rt/isa_each.h: a template includes this at its top and k_kv_undef.h at
 * its end (one template per translation unit; one that includes another includes
 * them once).
 *   kv, KV_W          the vector type and its floats: __m512 16, __m256 8, __m128 4
 *                     (generic on x86-64: SSE2), float 1 (generic elsewhere)
 *   kv_zero() kv_load(p) kv_store(p,v) kv_set1(x) kv_fma(a,b,c) = a*b+c (generic:
 *   a multiply then an add) kv_add kv_sub kv_mul kv_max kv_hsum(v)
 *   kv_loadn(p,n) / kv_storen(p,v,n)   the first n < KV_W lanes (the rest 0 / untouched)
 *   kv_load_lanes(p,lo,hi)             lanes [lo, hi) loaded, the rest 0
 *   kv_lmask, kv_lmask_make(lo,hi), kv_load_lmask(p,m)   the same with the mask made once
 *   kv_gtz_select(y,d)                 y > 0 ? d : 0 per lane
 *   kv_mask_u8(m,sc)                   m[i] != 0 ? sc : 0 per lane (bytes)
 *   kv_copy8(d,s)                      8 floats, one 256-bit load/store where there is one
 *   KT_INL                             an always-inlined helper of the level
 * and, for templates written with GCC's vector extensions (operators on whole vectors,
 * every level ISA_VB bytes, also where kv is a float):
 *   kvf, kvi, kvu, KVF_W               float / int32 / uint32 vectors and their lanes
 *   kvf_ld(p) kvf_st(p,v) kvi_ld(p)    unaligned loads and stores
 *   kvf_set1(x)                        x in every lane
 *   kvf_sel(m,p,q)                     lanes of p where the int mask m is set, else q
 *   KVF_EV KVF_OD                      __builtin_shuffle indices: even / odd lanes of a pair
 *   KVF_ILO KVF_IHI                    the interleaving of two vectors: low / high halves */
#include <stdint.h>
#include <string.h>
#define KT_INL static inline __attribute__((always_inline)) ISA_TARGET

#define KVF_W (ISA_VB / 4)
typedef float ISA_FN(kvf_t) __attribute__((vector_size(ISA_VB)));
typedef int32_t ISA_FN(kvi_t) __attribute__((vector_size(ISA_VB)));
typedef uint32_t ISA_FN(kvu_t) __attribute__((vector_size(ISA_VB)));
#define kvf ISA_FN(kvf_t)
#define kvi ISA_FN(kvi_t)
#define kvu ISA_FN(kvu_t)
static inline ISA_TARGET kvf ISA_FN(kvf_ld_)(const float *p)
{
    kvf v;
    memcpy(&v, p, ISA_VB);
    return v;
}
static inline ISA_TARGET void ISA_FN(kvf_st_)(float *p, kvf v) { memcpy(p, &v, ISA_VB); }
static inline ISA_TARGET kvi ISA_FN(kvi_ld_)(const int32_t *p)
{
    kvi v;
    memcpy(&v, p, ISA_VB);
    return v;
}
#define kvf_ld(p) ISA_FN(kvf_ld_)(p)
#define kvf_st(p, v) ISA_FN(kvf_st_)(p, v)
#define kvi_ld(p) ISA_FN(kvi_ld_)(p)
#define kvf_set1(x) ((kvf){0} + (x))
#define kvf_sel(m, p, q) ((kvf)((((kvi)(p)) & (m)) | (((kvi)(q)) & ~(m))))
#if KVF_W == 4
#define KVF_EV {0, 2, 4, 6}
#define KVF_OD {1, 3, 5, 7}
#define KVF_ILO {0, 4, 1, 5}
#define KVF_IHI {2, 6, 3, 7}
#elif KVF_W == 8
#define KVF_EV {0, 2, 4, 6, 8, 10, 12, 14}
#define KVF_OD {1, 3, 5, 7, 9, 11, 13, 15}
#define KVF_ILO {0, 8, 1, 9, 2, 10, 3, 11}
#define KVF_IHI {4, 12, 5, 13, 6, 14, 7, 15}
#else
#define KVF_EV {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}
#define KVF_OD {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}
#define KVF_ILO {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}
#define KVF_IHI {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}
#endif

#if ISA_X86 && ISA_VB == 64
#define KV_W 16
#define kv __m512
#define kv_zero() _mm512_setzero_ps()
#define kv_load(p) _mm512_loadu_ps(p)
#define kv_store(p, v) _mm512_storeu_ps(p, v)
#define kv_set1(x) _mm512_set1_ps(x)
#define kv_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define kv_add(a, b) _mm512_add_ps(a, b)
#define kv_sub(a, b) _mm512_sub_ps(a, b)
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
#define kv_lmask __mmask16
#define kv_lmask_make(lo, hi) ((__mmask16)(((1u << (hi)) - 1) & ~((1u << (lo)) - 1)))
#define kv_load_lmask(p, m) _mm512_maskz_loadu_ps(m, p)
#define kv_mask_u8(m, sc) _mm512_maskz_mov_ps(                                         \
    _mm512_test_epi32_mask(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(m))), \
                           _mm512_set1_epi32(0xff)), sc)

#elif ISA_X86 && ISA_VB == 32
#define KV_W 8
#define kv __m256
#define kv_zero() _mm256_setzero_ps()
#define kv_load(p) _mm256_loadu_ps(p)
#define kv_store(p, v) _mm256_storeu_ps(p, v)
#define kv_set1(x) _mm256_set1_ps(x)
#define kv_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define kv_add(a, b) _mm256_add_ps(a, b)
#define kv_sub(a, b) _mm256_sub_ps(a, b)
#define kv_mul(a, b) _mm256_mul_ps(a, b)
#define kv_max(a, b) _mm256_max_ps(a, b)
KT_INL float ISA_FN(kv_hsum_)(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
/* Lanes [lo, hi) set. */
KT_INL __m256i ISA_FN(kv_lanes_)(int lo, int hi)
{
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), i),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
}
#define kv_hsum(v) ISA_FN(kv_hsum_)(v)
#define kv_loadn(p, n) _mm256_maskload_ps(p, ISA_FN(kv_lanes_)(0, n))
#define kv_storen(p, v, n) _mm256_maskstore_ps(p, ISA_FN(kv_lanes_)(0, n), v)
#define kv_load_lanes(p, lo, hi) _mm256_maskload_ps(p, ISA_FN(kv_lanes_)(lo, hi))
#define kv_copy8(d, s) _mm256_storeu_ps(d, _mm256_loadu_ps(s))
#define kv_lmask __m256i
#define kv_lmask_make(lo, hi) ISA_FN(kv_lanes_)(lo, hi)
#define kv_load_lmask(p, m) _mm256_maskload_ps(p, m)
#define kv_gtz_select(y, d) _mm256_and_ps(_mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GT_OQ), d)
#define kv_mask_u8(m, sc) _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(                \
    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(m))), _mm256_setzero_si256())), sc)

#elif ISA_X86 /* generic on x86-64: SSE2, no FMA */
#define KV_W 4
#define kv __m128
#define kv_zero() _mm_setzero_ps()
#define kv_load(p) _mm_loadu_ps(p)
#define kv_store(p, v) _mm_storeu_ps(p, v)
#define kv_set1(x) _mm_set1_ps(x)
#define kv_fma(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#define kv_add(a, b) _mm_add_ps(a, b)
#define kv_sub(a, b) _mm_sub_ps(a, b)
#define kv_mul(a, b) _mm_mul_ps(a, b)
#define kv_max(a, b) _mm_max_ps(a, b)
static inline float ISA_FN(kv_hsum_)(__m128 v)
{
    __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
static inline __m128 ISA_FN(kv_load_lanes_)(const float *p, int lo, int hi)
{
    float t[4] = {0, 0, 0, 0};
    for (int i = lo; i < hi; i++) t[i] = p[i];
    return _mm_loadu_ps(t);
}
static inline void ISA_FN(kv_storen_)(float *p, __m128 v, int n)
{
    float t[4];
    _mm_storeu_ps(t, v);
    for (int i = 0; i < n; i++) p[i] = t[i];
}
static inline __m128 ISA_FN(kv_mask_u8_)(const uint8_t *m, __m128 sc)
{
    __m128i b = _mm_setr_epi32(m[0], m[1], m[2], m[3]);
    return _mm_and_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(b, _mm_setzero_si128())), sc);
}
#define kv_hsum(v) ISA_FN(kv_hsum_)(v)
#define kv_loadn(p, n) ISA_FN(kv_load_lanes_)(p, 0, n)
#define kv_storen(p, v, n) ISA_FN(kv_storen_)(p, v, n)
#define kv_load_lanes(p, lo, hi) ISA_FN(kv_load_lanes_)(p, lo, hi)
#define kv_gtz_select(y, d) _mm_and_ps(_mm_cmpgt_ps(y, _mm_setzero_ps()), d)
#define kv_mask_u8(m, sc) ISA_FN(kv_mask_u8_)(m, sc)

#else /* generic elsewhere: one-lane "vectors" */
#define KV_W 1
#define kv float
#define kv_zero() 0.0f
#define kv_load(p) (*(p))
#define kv_store(p, v) (*(p) = (v))
#define kv_set1(x) (x)
#define kv_fma(a, b, c) ((a) * (b) + (c))
#define kv_add(a, b) ((a) + (b))
#define kv_sub(a, b) ((a) - (b))
#define kv_mul(a, b) ((a) * (b))
#define kv_max(a, b) ((a) > (b) ? (a) : (b))
#define kv_hsum(v) (v)
#define kv_loadn(p, n) ((n) > 0 ? *(p) : 0.0f)
#define kv_storen(p, v, n) do { if ((n) > 0) *(p) = (v); } while (0)
#define kv_gtz_select(y, d) ((y) > 0.0f ? (d) : 0.0f)
#define kv_mask_u8(m, sc) (*(m) ? (sc) : 0.0f)
#define kv_load_lanes(p, lo, hi) ((lo) < (hi) ? *(p) : 0.0f)
#endif

#if !ISA_X86 || ISA_VB == 16 /* no mask registers: the lane range itself */
typedef struct { int lo, hi; } ISA_FN(kv_lmask_);
static inline ISA_FN(kv_lmask_) ISA_FN(kv_lmask_make_)(int lo, int hi)
{
    ISA_FN(kv_lmask_) m = {lo, hi};
    return m;
}
#define kv_lmask ISA_FN(kv_lmask_)
#define kv_lmask_make(lo, hi) ISA_FN(kv_lmask_make_)(lo, hi)
#define kv_load_lmask(p, m) kv_load_lanes(p, (m).lo, (m).hi)
#define kv_copy8(d, s) do { float *d_ = (d); const float *s_ = (s); for (int i_ = 0; i_ < 8; i_++) d_[i_] = s_[i_]; } while (0)
#endif
