/* bf16 building blocks for the mixed-precision (--amp bf16) conv and linear kernels.
 * Internal to kernels/cpu. The native GEMMs (vdpbf16ps, fp32 accumulation) may only
 * be called when k_isa_bf16(); the portable path rounds operands with
 * k_bf16_round_span and runs the fp32 kernels.
 *
 * NN form: A packed by k_bf16_pack_a into row blocks of K_BF16_MR rows, K in pairs:
 *   ap[((ib * kp + p) * MR + i) * 2 + h] = bf16(A(i0 + i, 2p + h)), kp = ceil(kk/2),
 * B read as fp32 rows (row k at b + boff[k], or b + k*ldb) and converted, 32 columns
 * at a time, into a pair-interleaved panel (the caller's scratch,
 * k_bf16_panel_elems(kk) uint16). */
#ifndef K_BF16_H
#define K_BF16_H
#include <stddef.h>
#include <stdint.h>

#define K_BF16_MR 12

void k_bf16_round_span(size_t n, const float *x, float *y); /* y = (float)bf16(x) */
void k_bf16_from_f32_span(size_t n, const float *x, uint16_t *y);
/* For native GEMM operands: as k_bf16_from_f32_span but subnormals may flush to zero
 * (vdpbf16ps ignores them). */
void k_bf16_operand_span(size_t n, const float *x, uint16_t *y);
size_t k_bf16_pack_a_elems(int m, int kk);
void k_bf16_pack_a(int m, int kk, const float *a, long ars, long acs, uint16_t *ap);
/* Row blocks [b0, b1) of the same (callers' tasks pack disjoint blocks). */
void k_bf16_pack_a_blocks(int m, int kk, const float *a, long ars, long acs, int b0, int b1, uint16_t *ap);
size_t k_bf16_panel_elems(int kk);
/* Cache-blocked NN form (k_bf16_gemm.c; native only): C[m x n] = (acc ? C : cbias[j]
 * or 0) + A B, A packed by k_bf16_pack_a (whole K), B fp32 kk x n read as
 * B(k, j) = b[k*ldb + j], or with bt b[j*ldb + k] (nn.Linear's weight as W^T). Each C
 * element one fp32 sum in k order: the bits do not depend on n or on where a caller's
 * column split falls. Uses 512 KiB of stack. */
void k_bf16_gemm_blk(int m, int n, int kk, const uint16_t *ap, const float *b, long ldb, int bt, float *c, long ldc,
                     const float *cbias, int acc);
/* C[m x n] = (cbias[j] or 0) + A B on the above, A(i, k) = a[i*ars + k*acs] packed
 * into pa (k_bf16_pack_a_elems(m, kk)) first; threads split the packing by row blocks
 * and the product by 32-column units (k_linear_bf16.c). Native only. */
void k_bf16_matmul(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt,
                   float *c, long ldc, const float *cbias, uint16_t *pa);
/* fp32 products at "high" precision (k_set_matmul_precision): 1 when this m x n x kk
 * product runs as k_f32_matmul_x3 (AMX present, every dimension >= 32). */
int k_f32_matmul_x3_ok(int m, int n, int kk);
/* C[m x n] = (cbias[j] or 0) + A B as k_bf16_matmul's operands, in bf16x3 on AMX tiles
 * (k_amx_gemm_x3), threads over 32-column units: bits independent of the thread count. */
void k_f32_matmul_x3(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt,
                     float *c, long ldc, const float *cbias);
/* C[m x n] = (acc ? C : 0) + bias[i] + A B (bias per row, may be NULL). */
void k_bf16_gemm_nn(int m, int n, int kk, const uint16_t *ap, const float *b, long ldb,
                    const long *boff, float *c, long ldc, const float *bias, int acc,
                    uint16_t *panel);
/* Stride-1 "padded width" layout (k_conv_bf16.c): the image zero-padded to hp x wp
 * in bf16, then pair images whose element i holds two taps' values for extended
 * output i (= p*wp + q): horizontal (in[i], in[i+1]) and vertical (in[i], in[i+dv]).
 * k_bf16_pad_image zeroes `slack` elements after the last plane. */
void k_bf16_pad_image(int c, int h, int w, int pad, int hp, int wp, const float *x, uint16_t *out, long slack);
/* The same layouts through precomputed 32-element windows (native path only): window t
 * of the output gets the next popcount(mask) source elements (from src on) at its set
 * bits and zeros elsewhere (vpexpandw), one full store per window, no per-row code. */
typedef struct k_bf16_win { uint32_t mask; int32_t src; } k_bf16_win;
/* Windows over `total` (a multiple of 32) output elements: c planes of hp*wp, the
 * compact [c][h][w] source placed at row `top`, column `left` of each. Returns their count. */
long k_bf16_pad_table(int c, int h, int w, int top, int left, long hp, long wp, long total, k_bf16_win *tab);
/* out[0, 32*nwin) from x (nx floats: reads never pass x + nx). */
void k_bf16_pad_expand(const k_bf16_win *tab, long nwin, const float *x, long nx, uint16_t *out);
/* The inverse for fp32 results (k_bf16_gemm_pairs): 16-column windows of one extended
 * row of n32 (row p at p*wp, q valid columns); src = the count of valid columns before
 * the window. */
long k_bf16_compact_table(int rows, int q, long wp, long n32, k_bf16_win *tab);
/* Row p of src (q floats) to dst + p*wp in bf16, zeros to the end of each row. */
void k_bf16_scatter_rows(int rows, int q, long wp, const float *src, uint16_t *dst);
/* dst[k][p][0..q) = src[k*ld + p*wp + 0..q) for k < m, p < rows (the inverse). */
void k_bf16_compact(int m, int rows, int q, long wp, long ld, const float *src, float *dst);
/* pr[0, n): horizontal pairs; pr[n, 2n) vertical ones when dv > 0. Reads in up to
 * n + 16 + max(1, dv). */
void k_bf16_pairs(long n, long dv, const uint16_t *in, uint32_t *pr);
/* A packed with pair p = columns (ta[p], tb[p]) of A (tb < 0: a zero weight). */
void k_bf16_pack_a_pairs(int m, int npairs, const float *a, long ars, long acs, const int *ta, const int *tb,
                         uint16_t *ap);
/* C[m x n32] = bias + A B with B's pair row p at b + boff[p] (n32 a multiple of 32,
 * whole 32-column stores). With wc (k_bf16_compact_table windows), row i's valid
 * columns go compacted to c + i*ldc instead (ldc = rows*q). Native only. */
void k_bf16_gemm_pairs(int m, int n32, int npairs, const uint16_t *ap, const uint32_t *b, const long *boff, float *c,
                       long ldc, const float *bias, const k_bf16_win *wc);
/* C[i][j] = (acc ? C : 0) + bias[j] + sum over ng images g of
 * sum_l A_g[i][l] B_g[j][l], A_g row i at a + g*a_img + i*lda, B_g row j at
 * b + g*b_img + (boff ? boff[j] : j*ldb); both bf16 (dot products along l). */
void k_bf16_gemm_nt(int m, int n, int l, int ng, const uint16_t *a, long lda, long a_img,
                    const uint16_t *b, const long *boff, long ldb, long b_img, float *c, long ldc,
                    const float *bias, int acc);
#endif
