/* The backward forms of k_conv.c beside its NT dW and column-matrix dX:
 *   dW with the taps broadcast (k_gemm_tb_off) against dy^T's rows, and
 *   stride-2 dX as 4 phase convs of dy (no column matrix, no col2im). */
#include "kernels/cpu/k_conv_int.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"

/* dW for images [i0, i0+ng) (the whole slot: j->d.group images at a time) with the
 * taps broadcast (k_gemm_tb_off): each group's xs and dy^T, the sums in dW^T [crs x K],
 * transposed into dwp at the end. Per dW element one FMA chain over the slot's images
 * and columns in order (the NT form's per-lane sums and horizontal adds: other bits).
 * Measured on AVX2 where the NT tiles ran at 64-68 % of the FMA peak (see
 * k_conv_tb_use). */
void k_conv_dw_tb(void *ctx, char *base, long i0, int ng, float *dwp, int acc)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs), *dyt = (float *)(base + j->d.r_dyt), *dwt = (float *)(base + j->d.r_dwt);
    k_im2col_geo g = k_conv_im2col(sh);
    for (long i = i0; i < i0 + ng; i += j->d.group) {
        int n = i0 + ng - i < j->d.group ? (int)(i0 + ng - i) : j->d.group;
        for (int t = 0; t < n; t++) {
            k_conv_rows(&g, d, j->x + (i + t) * d->xsz, xs + t * d->xssz);
            k_transpose_ld(sh->k, (int)d->pq, j->dy + (i + t) * d->ysz, d->pq, dyt + t * d->ysz, sh->k);
        }
        long e = i + n, nn = i0 + ng - e < j->d.group ? i0 + ng - e : j->d.group; /* the next group, in this slot */
        const void *pf[2] = {j->x + e * d->xsz, j->dy + e * d->ysz};
        long pfn[2] = {(long)sizeof(float) * nn * d->xsz, (long)sizeof(float) * nn * d->ysz};
        k_gemm_tb_off_pf((int)d->crs, sh->k, (int)d->pq, n, xs, j->boff, d->xssz, dyt, sh->k, dwt, sh->k, i > i0, pf,
                         pfn);
    }
    if (!acc) k_transpose_ld((int)d->crs, sh->k, dwt, sh->k, dwp, d->crs);
    else
        for (int k = 0; k < sh->k; k++)
            for (long t = 0; t < d->crs; t++) dwp[k * d->crs + t] += dwt[t * sh->k + k];
}

/* The broadcast-tap dW (k_conv_dw_tb) where there are 32 taps or more and the filters
 * fill whole tiles (2 vectors: 16 on AVX2, 32 on AVX-512). dy's transpose costs as much
 * as 1/crs of the FMAs, and a few taps fill few tiles (ResNet-20's stem, 9 taps: 2x
 * slower; its 1x1 stride-2 projection with 16 taps: 5-8 % slower); a part tile
 * computes its masked lanes all the same (LeNet's conv2, 20 filters on AVX2: bwd 25 %
 * slower; ResNet-20's layer1, 16 filters on AVX-512: 30 %). Measured faster, batch 128,
 * Sapphire Rapids: AVX2 ResNet-20's 3x3 and 1x1 s2 (32+ taps) dW 5-20 %; AVX-512
 * layer2/layer3 bwd 13-27 %, but ResNet-18's 1x1 64 -> 128 18 % slower (12-row tiles
 * of 12 tap pointers; AVX-512 only up to 64 filters). */
int k_conv_tb_use(const k_conv_job *j)
{
    int lvl = k_isa_level(), k = j->sh->k;
    /* Many filters make dy^T's chunks short (256 filters: 16 columns between C's loads
     * and stores: ResNet-18's layer3.0 3x3 s2 bwd 8 % slower); long rows are
     * gemm_nt_off's column-chunked case (ResNet-18's stem: 12544 columns, tb 42 %
     * slower). */
    if (j->d.dw_nn || j->d.g.crs < 32 || k > 128 || j->d.g.pq >= 2048) return 0;
    return lvl == K_ISA_AVX2 ? k % 16 == 0 : lvl >= K_ISA_AVX512 && k % 32 == 0 && k <= 64;
}

/* ---- stride-2 dX as 4 phase convs (d.ph): phase ph = (a, b) holds dx rows 2u + a,
 * columns 2v + b. Its taps (k, r, s) in this order, each at dy row u + dr, column
 * v + ds (|dr|, |ds| <= 1). */
static int ph_taps(const k_conv_shape *sh, int ph, int *dr, int *ds, int *rr, int *ss)
{
    int n = 0;
    for (int r = 0; r < sh->r; r++)
        for (int t = 0; t < sh->s; t++)
            if ((ph / 2 + sh->pad - r) % 2 == 0 && (ph % 2 + sh->pad - t) % 2 == 0) {
                dr[n] = (ph / 2 + sh->pad - r) / 2, ds[n] = (ph % 2 + sh->pad - t) / 2;
                rr[n] = r, ss[n++] = t;
            }
    return n;
}

/* The phases' A: wt[c][(k, tap)] = w[k][c][r][s], packed per phase. */
void k_conv_ph_pack(k_conv_job *j, char *ws)
{
    const k_conv_shape *sh = j->sh;
    float *wt = (float *)(ws + j->d.r_wtmp), *wp = (float *)(ws + j->d.r_wph);
    int dr[9], ds[9], rr[9], ss[9];
    for (int ph = 0; ph < 4; ph++) {
        int nt = ph_taps(sh, ph, dr, ds, rr, ss);
        j->wph[ph] = wp;
        if (!nt) continue;
        long kk = (long)sh->k * nt;
        for (int c = 0; c < sh->c; c++)
            for (int k = 0; k < sh->k; k++)
                for (int t = 0; t < nt; t++)
                    wt[c * kk + k * nt + t] = j->w[(((long)k * sh->c + c) * sh->r + rr[t]) * sh->s + ss[t]];
        k_gemm_pack_a(sh->c, (int)kk, wt, kk, 1, wp);
        wp += k_round64(sizeof(float) * k_gemm_pack_floats(sh->c, (int)kk)) / sizeof(float);
    }
}

/* o[2v] = e[v], o[2v + 1] = f[v] for v < q (NULL: zeros). */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static void interleave2_avx2(float *o, const float *e, const float *f, int q)
{
    int v = 0;
    for (; v + 8 <= q; v += 8) {
        __m256 a = e ? _mm256_loadu_ps(e + v) : _mm256_setzero_ps(), b = f ? _mm256_loadu_ps(f + v) : _mm256_setzero_ps();
        __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
        _mm256_storeu_ps(o + 2 * v, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(o + 2 * v + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    if (v < q) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        int t = q - v;
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(t), lane);
        __m256 a = e ? _mm256_maskload_ps(e + v, m) : _mm256_setzero_ps();
        __m256 b = f ? _mm256_maskload_ps(f + v, m) : _mm256_setzero_ps();
        __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
        _mm256_maskstore_ps(o + 2 * v, _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * t), lane),
                            _mm256_permute2f128_ps(lo, hi, 0x20));
        if (t > 4)
            _mm256_maskstore_ps(o + 2 * v + 8, _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * t - 8), lane),
                                _mm256_permute2f128_ps(lo, hi, 0x31));
    }
}
#define K_CONV_IL2 1
#endif

/* dX of images [i0, i0+ng): dy's shifted rows (ng images interleaved by row), one GEMM
 * per phase into o[ph][c][(u*ng + t)*Q + v], then every dx element from its phase. No
 * column matrix and no col2im (which read 9 columns per dx element). */
void k_conv_dx_ph(void *ctx, char *base, long i0, int ng)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs), *o = (float *)(base + j->d.r_ph);
    long *off = (long *)(base + j->d.r_offi), hp = sh->p + 2, n = (long)sh->p * ng * sh->q, row = (long)ng * sh->q;
    int dr[9], ds[9], rr[9], ss[9];
    if (sh->r == 3) {
        k_im2col_geo gd = {sh->k, sh->p, sh->q, 3, 3, 1, 1, sh->p, sh->q};
        if (ng == 1) k_shift_rows(&gd, hp, j->dy + i0 * d->ysz, xs);
        else k_shift_rows_ilv(&gd, hp, ng, j->dy + i0 * d->ysz, d->ysz, xs);
    }
    for (int ph = 0; ph < 4; ph++) {
        int nt = ph_taps(sh, ph, dr, ds, rr, ss);
        float *oph = o + ph * sh->c * n;
        if (!nt) continue;
        if (sh->r == 1) { /* 1x1 pad 0: phase (0, 0) reads dy itself (ng == 1) */
            k_gemm_nn_packed(sh->c, (int)n, sh->k, j->wph[ph], j->dy + i0 * d->ysz, d->pq, NULL, oph, n, NULL, 0);
            continue;
        }
        for (int k = 0; k < sh->k; k++)
            for (int t = 0; t < nt; t++) off[k * nt + t] = (((long)k * 3 + ds[t] + 1) * hp + dr[t] + 1) * row;
        k_gemm_nn_packed(sh->c, (int)n, sh->k * nt, j->wph[ph], xs, 0, off, oph, n, NULL, 0);
    }
    for (int t = 0; t < ng; t++)
        for (int c = 0; c < sh->c; c++)
            for (int a = 0; a < 2; a++) {
                const float *e = j->d.ph_nt[2 * a] ? o + ((long)(2 * a) * sh->c + c) * n + t * sh->q : NULL;
                const float *f = j->d.ph_nt[2 * a + 1] ? o + ((long)(2 * a + 1) * sh->c + c) * n + t * sh->q : NULL;
                float *dxr = j->dx + (i0 + t) * d->xsz + ((long)c * sh->h + a) * sh->w;
                for (int u = 0; u < sh->p; u++, dxr += 2 * sh->w) {
                    long at = (long)u * row;
#ifdef K_CONV_IL2
                    interleave2_avx2(dxr, e ? e + at : NULL, f ? f + at : NULL, sh->q); /* k_conv_ph_use: AVX2 */
                    continue;
#endif
                    for (int v = 0; v < sh->q; v++) {
                        dxr[2 * v] = e ? e[at + v] : 0.0f;
                        dxr[2 * v + 1] = f ? f[at + v] : 0.0f;
                    }
                }
            }
}

/* The phase dX on AVX2, measured against the column matrix and col2im (ResNet-20,
 * batch 128, Sapphire Rapids, bwd = dW + dX): 3x3 14x14 -> 7x7 6218 -> 5746 us, 28x28
 * -> 14x14 6576 -> 6295; 1x1 28x28 -> 14x14 1303 -> 1229, but 1x1 14x14 -> 7x7 (dX
 * alone) 15 % slower (d.ph: the 1x1 ones only with 8+ output columns); ResNet-18
 * (batch 32): 64 -> 128 filters 86.4 -> 82.4 ms, but 256 and 512 filters 4-9 % slower
 * (dy's rows past L2: d.ph only up to 128 filters). */
int k_conv_ph_use(const k_conv_job *j) { return j->d.ph && k_isa_level() == K_ISA_AVX2; }

