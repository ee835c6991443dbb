/* bf16 GEMM on AMX tiles (k_amx.h). Blocking: N super-blocks whose B (all of K, or K
 * chunks of up to AX_KMAX) is packed once into the vdpbf16ps GEMMs' 32-column panels
 * (k_bf16_simd.h: K pairs interleaved, which is tdpbf16ps's B layout, two 16-column tiles
 * side by side; at most AX_BP bf16 on the stack, as k_gemm_simd.h's gemm_nn_pb),
 * then for each 32-row block of A (packed row-major, K contiguous: the A tile layout)
 * every 32-column group of the super-block: 2 x 2 C tiles loaded from C (or zeroed),
 * 2 A + 2 B tiles per 32 K steps over the whole chunk, stored back to C once: C is
 * megabytes at GPT's shapes and going back to it every few hundred K steps made the
 * kernel memory-bound. Partial blocks go through a 32 x 32 scratch. Tiles are configured
 * on entry and released on exit, so a thread holds no tile state between calls. */
#include "kernels/cpu/k_amx.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_bf16_simd.h"
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define K_AMX 1
#endif

#ifdef K_AMX
#define AX_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vbmi2,amx-tile,amx-bf16")))
#define AX_KMAX 4096      /* K steps per chunk at most (the A block: 32 x K bf16, 256 KiB) */
#define AX_BP (576 * 1024) /* bf16 of packed B (1.1 MiB: stays in L2; GPT small's 1152 forward columns
                            * in one super-block: 2048x1152x384 1340 -> 1500-1570 GFLOP/s) */
#define AX_BP_K (384 * 1024) /* the B that K chunks are cut to (768 KiB: a dW's 16 x 16 transposed A
                              * packs ran 20 % slower with chunks as long as AX_BP allows) */
#define AX_KMIN 256       /* K steps per chunk at least where A's pack sets the chunks */
#define AX_KMAX3 2048     /* the same for bf16x3, whose packed K is two sections of the chunk */

int k_amx_ok(void)
{
    static int ok = -1; /* threads may race to the same answer: atomics keep TSan quiet */
    int v = __atomic_load_n(&ok, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    unsigned a, b, c, d;
    v = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1) && (b >> 16 & 1) && (c >> 6 & 1))
        v = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
    __atomic_store_n(&ok, v, __ATOMIC_RELAXED);
    return v;
}

typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } ax_cfg;

/* bf16x3's low part: what rounding v to h = bf16(v) left over (exact in fp32), 0 where h
 * is not finite (inf - inf would make a NaN of an infinite operand). */
AX_TARGET static inline __m512 resid_of(__m512 v, __m256i h)
{
    __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_maskz_sub_ps((__mmask16)~_mm512_fpclass_ps_mask(hf, 0x99 /* NaN, +-inf */), v, hf);
}

AX_TARGET static inline __m512 resid16(__m512 v) { return resid_of(v, (__m256i)_mm512_cvtneps_pbh(v)); }

/* 16 fp32 -> bf16 (round to nearest even), lanes past cnt read as 0; lo: the bf16 of
 * the residual instead (bf16x3's second part). */
AX_TARGET static inline __m256i cvt16(const float *x, int cnt, int lo)
{
    __m512 v = cnt >= 16 ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps((__mmask16)((1u << cnt) - 1), x);
    return (__m256i)_mm512_cvtneps_pbh(lo ? resid16(v) : v);
}

AX_TARGET static void pack_a_t(int mr, int i0, int k0, int kc, int kp, const float *a, long acs, int lo, long ld,
                               uint16_t *o);

/* A rows [i0, i0+32) x K [k0, k0+kc) into o[i*ld + k] (kp = kc rounded up to 32; rows past
 * m and K past kc zero); x3: bf16x3's low parts too, at o[i*ld + kp + k]. */
AX_TARGET static void pack_a(int m, int i0, int k0, int kc, int kp, const float *a, long ars, long acs, int x3,
                             long ld, uint16_t *o)
{
    int mr = m - i0 < 32 ? m - i0 : 32;
    if (acs == 1) { /* both parts from one load */
        for (int i = 0; i < 32; i++) {
            uint16_t *oi = o + (long)i * ld;
            if (i >= mr) {
                memset(oi, 0, 2 * (size_t)kp * (x3 ? 2 : 1));
                continue;
            }
            const float *ai = a + (long)(i0 + i) * ars + k0;
            for (int k = 0; k < kp; k += 16) {
                int cnt = kc - k < 0 ? 0 : kc - k > 16 ? 16 : kc - k;
                __m512 v = cnt >= 16 ? _mm512_loadu_ps(ai + k) : _mm512_maskz_loadu_ps((__mmask16)((1u << cnt) - 1), ai + k);
                __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
                _mm256_storeu_si256((__m256i *)(oi + k), h);
                if (x3) _mm256_storeu_si256((__m256i *)(oi + kp + k), (__m256i)_mm512_cvtneps_pbh(resid_of(v, h)));
            }
        }
        return;
    }
    for (int lo = 0; lo <= x3; lo++, o += kp)
        pack_a_t(mr, i0, k0, kc, kp, a, acs, lo, ld, o);
}

/* pack_a's ars == 1 form, one part (lo: the low parts) at a time. */
AX_TARGET static void pack_a_t(int mr, int i0, int k0, int kc, int kp, const float *a, long acs, int lo, long ld,
                               uint16_t *o)
{
    /* ars == 1: A(i, k) = a[i + k*acs] (dy^T of dW): the 16 rows of one k are contiguous.
     * Pairs (k, k+1) of 16 rows interleaved as for B, then 16 x 16 transposed (32-bit units)
     * so each row's 16 pairs are one 64-byte store (element stores 2*kp bytes apart
     * fell into one L1 set). */
    const __m512i idx = _mm512_loadu_si512((const void *)pair_idx);
    for (int h = 0; h < 2; h++) {
        int cnt = mr - 16 * h < 0 ? 0 : mr - 16 * h > 16 ? 16 : mr - 16 * h;
        for (int k = 0; k < kp; k += 32) {
            __m512i r[16];
            for (int p = 0; p < 16; p++) {
                const float *ak = a + (long)(k0 + k + 2 * p) * acs + i0 + 16 * h;
                __m256i e = cnt && k + 2 * p < kc ? cvt16(ak, cnt, lo) : _mm256_setzero_si256();
                __m256i f = cnt && k + 2 * p + 1 < kc ? cvt16(ak + acs, cnt, lo) : _mm256_setzero_si256();
                r[p] = _mm512_permutexvar_epi16(idx, _mm512_inserti64x4(_mm512_castsi256_si512(e), f, 1));
            }
            tr16(r);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512((void *)(o + (long)(16 * h + i) * ld + k), r[i]);
        }
    }
}

/* B rows K [k0, k0+kc) x columns [j0, j0+nc) as k_bf16_simd.h's 32-column panel (pair p's
 * 64 words: columns 0-15 then 16-31, each (k, k+1) interleaved): each half is one tile
 * read with a 128-byte stride. Zero past kc (to kp) and past nc. */
AX_TARGET static void pack_b(int k0, int kc, int kp, int j0, int nc, const float *b, long ldb, int bt, uint16_t *o)
{
    if (nc < 32) memset(o, 0, sizeof(uint16_t) * 32 * (size_t)kp);
    if (bt) pack_panel_t(kc, nc, b + (long)j0 * ldb + k0, ldb, o);
    else pack_panel(kc, nc, b + (long)k0 * ldb + j0, ldb, NULL, o);
    int p0 = (kc + 1) / 2;
    memset(o + (long)p0 * 64, 0, sizeof(uint16_t) * 64 * (size_t)(kp / 2 - p0));
}

/* bf16x3, B as [K][N]: both parts of a panel from one load of each row pair, the low
 * parts kp * 32 after the high ones (pack_b's layout for each). */
AX_TARGET static void pack_b_x3(int k0, int kc, int kp, int j0, int nc, const float *b, long ldb, uint16_t *o)
{
    const __m512i idx = _mm512_loadu_si512((const void *)pair_idx);
    __mmask16 m[2] = {(__mmask16)((1u << (nc > 16 ? 16 : nc)) - 1), (__mmask16)(nc > 16 ? (1u << (nc - 16)) - 1 : 0)};
    uint16_t *lo = o + (long)kp * 32;
    for (int p = 0; p < kp / 2; p++) {
        const float *r0 = b + (long)(k0 + 2 * p) * ldb + j0, *r1 = r0 + ldb;
        for (int v = 0; v < 2; v++) {
            __m512 x0 = 2 * p < kc ? _mm512_maskz_loadu_ps(m[v], r0 + 16 * v) : _mm512_setzero_ps();
            __m512 x1 = 2 * p + 1 < kc ? _mm512_maskz_loadu_ps(m[v], r1 + 16 * v) : _mm512_setzero_ps();
            __m256i h0 = (__m256i)_mm512_cvtneps_pbh(x0), h1 = (__m256i)_mm512_cvtneps_pbh(x1);
            __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
            __m512i lw = (__m512i)_mm512_cvtne2ps_pbh(resid_of(x1, h1), resid_of(x0, h0));
            _mm512_storeu_si512((void *)(o + (size_t)p * 64 + 32 * v), _mm512_permutexvar_epi16(idx, hi));
            _mm512_storeu_si512((void *)(lo + (size_t)p * 64 + 32 * v), _mm512_permutexvar_epi16(idx, lw));
        }
    }
}

/* bf16x3, B as [N][K] (bt): the residuals of B's block (nc rows of kc) into t, then packed
 * as pack_b packs B, so that the panel holds their bf16s. t: at least 32 * kc floats. */
AX_TARGET static void pack_b_lo(int k0, int kc, int kp, int j0, int nc, const float *b, long ldb, int bt, float *t,
                                uint16_t *o)
{
    int rows = bt ? nc : kc, cols = bt ? kc : nc;
    long ld = bt ? kc : 32;
    const float *s = bt ? b + (long)j0 * ldb + k0 : b + (long)k0 * ldb + j0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c += 16) {
            __mmask16 mk = (__mmask16)(cols - c >= 16 ? 0xffff : (1u << (cols - c)) - 1);
            _mm512_mask_storeu_ps(t + r * ld + c, mk, resid16(_mm512_maskz_loadu_ps(mk, s + r * ldb + c)));
        }
    pack_b(0, kc, kp, 0, nc, t, ld, bt, o);
}

/* One 32 x 32 block of C (mr x nc valid) over klen K steps: ah 32 rows lda apart, bh a
 * 32-column panel (pack_b) from the same K step, c at C(i0, j0). zero: the sums start at 0,
 * else at C; cbias: added after the sums (one rounding, as nn.Linear's addmm). x3 (al, bl:
 * the low parts): per 32 K steps A hi B lo, A hi B hi, A lo B hi: 8 tile loads for 12
 * products (the tiles come from L2 at these shapes, so the loads set the pace). */
AX_TARGET static void block(int mr, int nc, int klen, const uint16_t *ah, const uint16_t *al, long lda,
                            const uint16_t *bh, const uint16_t *bl, float *c, long ldc, const float *cbias, int zero)
{
    _Alignas(64) float s[32][32];
    int full = mr == 32 && nc == 32;
    float *cc = full ? c : &s[0][0];
    long ld = full ? ldc : 32;
    if (zero) {
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
    } else {
        if (!full)
            for (int i = 0; i < 32; i++)
                for (int j = 0; j < 32; j++) s[i][j] = i < mr && j < nc ? c[(long)i * ldc + j] : 0.0f;
        _tile_loadd(4, cc, ld * 4);
        _tile_loadd(5, cc + 16, ld * 4);
        _tile_loadd(6, cc + 16 * ld, ld * 4);
        _tile_loadd(7, cc + 16 * ld + 16, ld * 4);
    }
/* C tiles 4-7 (2 x 2) += A tiles 0, 1 times B tiles 2, 3 (immediate tile numbers) */
#define AX_DP4() do { _tile_dpbf16ps(4, 0, 2); _tile_dpbf16ps(5, 0, 3); _tile_dpbf16ps(6, 1, 2); _tile_dpbf16ps(7, 1, 3); } while (0)
    for (int k = 0; k < klen; k += 32) { /* x3 (al): A hi B lo, A hi B hi, A lo B hi */
        _tile_loadd(0, ah + k, lda * 2);
        _tile_loadd(1, ah + 16 * lda + k, lda * 2);
        if (al) {
            _tile_loadd(2, bl + (long)k * 32, 128);
            _tile_loadd(3, bl + (long)k * 32 + 32, 128);
            AX_DP4();
        }
        _tile_loadd(2, bh + (long)k * 32, 128);
        _tile_loadd(3, bh + (long)k * 32 + 32, 128);
        AX_DP4();
        if (al) {
            _tile_loadd(0, al + k, lda * 2);
            _tile_loadd(1, al + 16 * lda + k, lda * 2);
            AX_DP4();
        }
    }
#undef AX_DP4
    _tile_stored(4, cc, ld * 4);
    _tile_stored(5, cc + 16, ld * 4);
    _tile_stored(6, cc + 16 * ld, ld * 4);
    _tile_stored(7, cc + 16 * ld + 16, ld * 4);
    if (cbias) {
        __m512 b0 = _mm512_maskz_loadu_ps((__mmask16)(nc >= 16 ? 0xffff : (1u << nc) - 1), cbias);
        __m512 b1v = nc > 16 ? _mm512_maskz_loadu_ps((__mmask16)(nc >= 32 ? 0xffff : (1u << (nc - 16)) - 1), cbias + 16)
                             : _mm512_setzero_ps();
        for (int i = 0; i < mr; i++) {
            float *r = cc + (long)i * ld;
            _mm512_storeu_ps(r, _mm512_add_ps(_mm512_loadu_ps(r), b0));
            _mm512_storeu_ps(r + 16, _mm512_add_ps(_mm512_loadu_ps(r + 16), b1v));
        }
    }
    if (!full)
        for (int i = 0; i < mr; i++) memcpy(c + (long)i * ldc, s[i], sizeof(float) * (size_t)nc);
}

/* x3 (bf16x3, PyTorch's "high" float32 matmul precision): each operand is split into
 * hi = bf16(v) and lo = bf16(v - hi), packed as two K sections of the chunk, and C sums
 * A hi B lo + A hi B hi + A lo B hi (block): ~2^-16 relative per product (the dropped
 * lo lo and the residuals' rounding) instead of bf16's 2^-8. */
__attribute__((noinline)) AX_TARGET static void gemm(int m, int n, int kk, const float *a, long ars, long acs,
                                                     const float *b, long ldb, int bt, float *c, long ldc,
                                                     const float *cbias, int acc, int x3)
{
    _Alignas(64) uint16_t bp[AX_BP];
    _Alignas(64) uint16_t ap[32 * AX_KMAX];
    _Alignas(64) float bt_lo[32 * AX_KMAX3];
    int ns = x3 ? 2 : 1; /* K sections in the packed operands */
    ax_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
    /* K chunks cut so that one super-block holds all of N (down to AX_KMIN steps, in even
     * chunks), which packs A once instead of n / nc times, where that costs less than the
     * extra passes over C it brings: always when A's rows are strided (ars == 1: a dW's x^T,
     * packed through 16 x 16 transposes; GPT small's qkv dW packed A 6 times), and where C
     * is narrower than half of K (a pass over C, stored and reloaded, against one over A:
     * GPT's dx and fc2 forward, N 384 against K 1152 / 1536, packed A twice). */
    int kcap = x3 ? AX_KMAX3 : AX_KMAX, kmax = kcap, n32 = (n + 31) & ~31, even = x3;
    if ((ars == 1 && acs != 1) || (kk > AX_BP / ns / n32 && 2 * n < kk)) {
        int fit = AX_BP_K / ns / n32 / 32 * 32;
        kmax = fit < AX_KMIN ? AX_KMIN : fit < kcap ? fit : kcap;
        even = 1;
    }
    if (even) {
        int nk = (kk + kmax - 1) / kmax;
        kmax = ((kk + nk - 1) / nk + 31) & ~31; /* even chunks, still whole 32-step tiles */
    }
    for (int k0 = 0; k0 < kk; k0 += kmax) {
        int kc = kk - k0 < kmax ? kk - k0 : kmax, kp = (kc + 31) & ~31, kt = ns * kp, init = !acc && k0 == 0;
        int nc = AX_BP / kt / 32 * 32; /* super-block width: its B fits bp */
        for (int js = 0; js < n; js += nc) {
            int jn = n - js < nc ? n - js : nc;
            for (int j0 = 0; j0 < jn; j0 += 32) { /* a panel of kt*32 bf16 per 32 columns */
                int w = jn - j0 < 32 ? jn - j0 : 32;
                uint16_t *pj = bp + (long)j0 * kt;
                if (x3 && !bt) {
                    pack_b_x3(k0, kc, kp, js + j0, w, b, ldb, pj);
                    continue;
                }
                pack_b(k0, kc, kp, js + j0, w, b, ldb, bt, pj);
                if (x3) pack_b_lo(k0, kc, kp, js + j0, w, b, ldb, bt, bt_lo, pj + (long)kp * 32);
            }
            for (int i0 = 0; i0 < m; i0 += 32) {
                int mr = m - i0 < 32 ? m - i0 : 32;
                pack_a(m, i0, k0, kc, kp, a, ars, acs, x3, kt, ap);
                /* (K sub-blocks of 64-256 steps, to keep A's tiles in L1 across the panels,
                 * measured no faster: bf16 dW 20-30 % slower, bf16x3 within noise) */
                for (int j0 = 0; j0 < jn; j0 += 32) {
                    const uint16_t *pj = bp + (long)j0 * kt;
                    block(mr, jn - j0 < 32 ? jn - j0 : 32, kp, ap, x3 ? ap + kp : NULL, kt, pj,
                          x3 ? pj + (long)kp * 32 : NULL, c + (long)i0 * ldc + js + j0, ldc,
                          init && cbias ? cbias + js + j0 : NULL, init);
                }
            }
        }
    }
    _tile_release();
}

void k_amx_gemm(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt, float *c,
                long ldc, const float *cbias, int acc)
{
    if (m <= 0 || n <= 0) return;
    if (kk <= 0) k_bf16_gemm_blk(m, n, kk, NULL, b, ldb, bt, c, ldc, cbias, acc); /* C = bias or kept */
    else gemm(m, n, kk, a, ars, acs, b, ldb, bt, c, ldc, cbias, acc, 0);
}

void k_amx_gemm_x3(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt,
                   float *c, long ldc, const float *cbias, int acc)
{
    if (m <= 0 || n <= 0) return;
    if (kk <= 0) k_bf16_gemm_blk(m, n, kk, NULL, b, ldb, bt, c, ldc, cbias, acc);
    else gemm(m, n, kk, a, ars, acs, b, ldb, bt, c, ldc, cbias, acc, 1);
}
#else
int k_amx_ok(void) { return 0; }
void k_amx_gemm(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt, float *c,
                long ldc, const float *cbias, int acc)
{
    (void)m; (void)n; (void)kk; (void)a; (void)ars; (void)acs; (void)b; (void)ldb; (void)bt; (void)c; (void)ldc;
    (void)cbias; (void)acc;
}
void k_amx_gemm_x3(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt,
                   float *c, long ldc, const float *cbias, int acc)
{
    k_amx_gemm(m, n, kk, a, ars, acs, b, ldb, bt, c, ldc, cbias, acc);
}
#endif
