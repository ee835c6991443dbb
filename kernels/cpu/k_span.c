/* The elementwise spans of k_gemm.h (ReLU, dropout scaling, sums, SGD, BatchNorm's
 * folded forms, add, fill, axpy): k_span_simd.h per ISA level (rt/isa_each.h), each
 * call dispatched on k_isa_level(). */
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"

#define RT_ISA_TEMPLATE "kernels/cpu/k_span_simd.h"
#include "rt/isa_each.h"

#define K_SPAN(fn, ...) RT_ISA_CALL(k_isa_level(), fn, __VA_ARGS__)

void k_relu_span(size_t n, const float *x, float *y) { K_SPAN(relu_span, n, x, y); }
void k_relu_bwd_span(size_t n, const float *y, const float *dy, float *dx) { K_SPAN(relu_bwd_span, n, y, dy, dx); }
void k_relu_bwd_add_span(size_t n, const float *y, const float *dy, const float *a, float *dx)
{
    K_SPAN(relu_bwd_add_span, n, y, dy, a, dx);
}
void k_scale_mask_span(size_t n, float scale, const uint8_t *mask, const float *x, float *y)
{
    K_SPAN(scale_mask_span, n, scale, mask, x, y);
}
void k_scale_span(size_t n, float scale, const float *x, float *y) { K_SPAN(scale_span, n, scale, x, y); }
float k_sum_span(size_t n, const float *x) { return K_SPAN(sum_span, n, x); }

void k_sgd_span(size_t n, float lr, float m, float damp, float wd, int nesterov, int first,
                float *p, const float *g, float *v)
{
    K_SPAN(sgd_span, n, lr, m, damp, wd, nesterov, first, p, g, v);
}

void k_affine_span(size_t n, float m, float a, float b, const float *x, float *y)
{
    K_SPAN(affine_span, n, m, a, b, x, y);
}
void k_affine2_span(size_t n, float a, const float *x, float b, const float *y, float ym, float c,
                    float *z)
{
    K_SPAN(affine2_span, n, a, x, b, y, ym, c, z);
}
void k_affine_relu_span(size_t n, float m, float a, float b, const float *x, float *y)
{
    K_SPAN(affine_relu_span, n, m, a, b, x, y);
}
void k_affine2_relu_span(size_t n, float a, const float *x, float b, const float *y, float ym, float c, float ra,
                         float rb, float *z)
{
    K_SPAN(affine2_relu_span, n, a, x, b, y, ym, c, ra, rb, z);
}
void k_affine_add_relu_span(size_t n, float m, float a, float b, const float *x, const float *s, float *y)
{
    K_SPAN(affine_add_relu_span, n, m, a, b, x, s, y);
}
void k_add_relu_span(size_t n, const float *a, const float *b, float *y) { K_SPAN(add_relu_span, n, a, b, y); }
void k_add_span(size_t n, const float *a, const float *b, float *y) { K_SPAN(add_span, n, a, b, y); }
void k_fill_span(size_t n, float v, float *y) { K_SPAN(fill_span, n, v, y); }
void k_axpy_rows(int cnt, const float *a, const float *const *x, size_t n, float *y)
{
    K_SPAN(axpy_rows, cnt, a, x, n, y);
}
