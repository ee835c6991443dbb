/* GEMM and convolution helpers, dispatched once per call to the AVX-512, AVX2+FMA or
 * generic instantiation of k_gemm_simd.h, k_layout_simd.h and k_span_simd.h (k_gemm.c,
 * k_layout.c, k_span.c). All matrices are float32 with explicit
 * strides; none of these allocate: packed panels live on the stack (large NN GEMMs up to
 * 1.6 MiB on AVX-512, NT 608 KiB; callers' threads need glibc's default stack). */
#ifndef K_GEMM_H
#define K_GEMM_H
#include <stddef.h>
#include <stdint.h>

/* C[m x n] = (acc ? C : 0) + bias[i] + A[m x kk] B[kk x n].
 * A(i,k) = a[i*ars + k*acs] (so A^T is ars=1, acs=lda); B, C row-major. bias may be NULL. */
void k_gemm_nn(int m, int n, int kk, const float *a, long ars, long acs, const float *b,
               long ldb, float *c, long ldc, const float *bias, int acc);
/* The same with A packed once by k_gemm_pack_a into k_gemm_pack_floats(m, kk) floats
 * (for an A used many times, e.g. conv weights). The ISA must not change in between. */
size_t k_gemm_pack_floats(int m, int kk);
void k_gemm_pack_a(int m, int kk, const float *a, long ars, long acs, float *ap);
/* boff (optional): row k of B starts at b + boff[k] instead of b + k*ldb. */
void k_gemm_nn_packed(int m, int n, int kk, const float *ap, const float *b, long ldb,
                      const long *boff, float *c, long ldc, const float *bias, int acc);
/* C[i][j] (+)= sum over ng images g of sum_l A_g[i][l] B_g[boff[j] + l], with
 * A_g = a + g*a_img (rows lda apart) and B_g = b + g*b_img. */
void k_gemm_nt_off(int m, int n, int l, int ng, const float *a, long lda, long a_img,
                   const float *b, const long *boff, long b_img, float *c, long ldc, int acc);
/* The two above, also fetching [pf, pf + pfn bytes) into L2 a few lines per
 * micro-tile (a conv's next input, else cold when its layout is built; pure hints:
 * the results are the same). */
void k_gemm_nn_packed_pf(int m, int n, int kk, const float *ap, const float *b, long ldb,
                         const long *boff, float *c, long ldc, const float *bias, int acc,
                         const void *pf, long pfn);
void k_gemm_nt_off_pf(int m, int n, int l, int ng, const float *a, long lda, long a_img,
                      const float *b, const long *boff, long b_img, float *c, long ldc, int acc,
                      const void *pf, long pfn);
/* C[m x n] = (acc ? C : 0) + bias[j] + A[m x l] B[n x l]^T (dot-product form: both
 * operands contiguous along l). bias (per column) may be NULL. */
void k_gemm_nt(int m, int n, int l, const float *a, long lda, const float *b, long ldb,
               float *c, long ldc, const float *bias, int acc);
/* The same product as an NN GEMM with B^T packed into panels (large shapes; on the
 * stack: 608 KiB for AVX-512). Each C element is bias (or C) plus one FMA per k in k
 * order, whatever m, n or the ISA's blocking: callers may split rows or columns. */
void k_gemm_nt_pb(int m, int n, int l, const float *a, long lda, const float *b, long ldb,
                  float *c, long ldc, const float *bias, int acc);
/* Conv dW with the taps as rows: C[t][k] (+)= sum over ng images g and j < l of
 * B_g[boff[t] + j] * D_g[j][k], B_g = b + g*b_img, D_g = d + g*l*ldd (dy^T of image g:
 * l rows of n, ldd apart), C m x n (ldc). Per element: C (acc) or 0, then one FMA per
 * (g, j) in that order, however the ISA blocks it. */
void k_gemm_tb_off(int m, int n, int l, int ng, const float *b, const long *boff, long b_img, const float *d,
                   long ldd, float *c, long ldc, int acc);
/* The same, also fetching the two regions [pf[i], pf[i] + pfn[i] bytes) into L2 a few
 * lines per tile (pure hints; pf may be NULL). */
void k_gemm_tb_off_pf(int m, int n, int l, int ng, const float *b, const long *boff, long b_img, const float *d,
                      long ldd, float *c, long ldc, int acc, const void *const pf[2], const long pfn[2]);
/* dst[j*ldd + i] = src[i*lds + j] for i < rows, j < cols. */
void k_transpose_ld(int rows, int cols, const float *src, long lds, float *dst, long ldd);

/* Geometry of one image's im2col, shared by the helpers below. */
typedef struct k_im2col_geo { int c, h, w, r, s, stride, pad, p, q; } k_im2col_geo;
/* col[(c,r,s)][(p,q)] = x[c][p*st-pad+r][q*st-pad+s] (0 outside). */
void k_im2col(const k_im2col_geo *g, const float *x, float *col);
/* The transpose: colT[(p,q)][(c,r,s)]. */
void k_im2row(const k_im2col_geo *g, const float *x, float *colT);
/* dx = 0, then dx[c][ih][iw] += col[(c,r,s)][(p,q)]: the adjoint of k_im2col. */
void k_col2im(const k_im2col_geo *g, const float *col, float *dx);

/* Stride 1 only: the same result, summing each dx row in registers. col needs 16
 * floats of readable slack before it. */
void k_col2im_s1(const k_im2col_geo *g, const float *col, float *dx);
/* Stride 1: xs[c][s][h][0..q) = x[c][h-pad][s-pad+0..q) for h < hp (zero outside);
 * xs needs 16 floats of slack at its end. */
void k_shift_rows(const k_im2col_geo *g, long hp, const float *x, float *xs);
/* Stride 1, ng images interleaved by row: xs[c][s][h][t][0..q) (image t at x + t*xsz);
 * tap (c, r, s) of output column (p*ng + t)*q + col at ((c*S + s)*hp + r)*ng*q. xs
 * needs 16 floats of slack at its end. */
void k_shift_rows_ilv(const k_im2col_geo *g, long hp, int ng, const float *x, long xsz, float *xs);
/* Stride > 1 (k_conv_rows.c): xs[c][s][rp][u][0..q) = x[c][st*u+rp-pad][st*q+s-pad] for
 * rp < rpn = min(st, r) and u < hps = p + (r-1)/st (zero outside). */
void k_shift_rows_st(const k_im2col_geo *g, long hps, int rpn, const float *x, float *xs);

/* Elementwise loops that the compiler does not vectorise at -O2. */
void k_relu_span(size_t n, const float *x, float *y);
void k_relu_bwd_span(size_t n, const float *y, const float *dy, float *dx);
void k_relu_bwd_add_span(size_t n, const float *y, const float *dy, const float *a, float *dx);
void k_scale_mask_span(size_t n, float scale, const uint8_t *mask, const float *x, float *y);
void k_scale_span(size_t n, float scale, const float *x, float *y);
float k_sum_span(size_t n, const float *x);
void k_sgd_span(size_t n, float lr, float m, float damp, float wd, int nesterov, int first,
                float *p, const float *g, float *v);
/* BatchNorm's folded forms: y = (x + m)*a + b;  z = a*x + b*(y + ym) + c. */
void k_affine_span(size_t n, float m, float a, float b, const float *x, float *y);
void k_affine2_span(size_t n, float a, const float *x, float b, const float *y, float ym, float c,
                    float *z);
void k_add_span(size_t n, const float *a, const float *b, float *y);
/* The same followed by ReLU in one pass (nn/plan.c's BN/add -> ReLU fusion): each
 * element the bits of the two spans one after the other. affine2_relu masks x (dy)
 * where (y + ym)*ra + rb <= 0. */
void k_affine_relu_span(size_t n, float m, float a, float b, const float *x, float *y);
void k_affine2_relu_span(size_t n, float a, const float *x, float b, const float *y, float ym, float c, float ra,
                         float rb, float *z);
void k_add_relu_span(size_t n, const float *a, const float *b, float *y);
void k_affine_add_relu_span(size_t n, float m, float a, float b, const float *x, const float *s, float *y);
void k_fill_span(size_t n, float v, float *y);
/* y[0..n) += sum_j a[j] * x[j][0..n), j = 0..cnt in order. */
void k_axpy_rows(int cnt, const float *a, const float *const *x, size_t n, float *y);
#endif
