/* The conv layouts of k_gemm.h (im2col family, shifted rows): k_layout_simd.h per ISA
 * level (rt/isa_each.h), each call dispatched on k_isa_level(). */
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"

#define RT_ISA_TEMPLATE "kernels/cpu/k_layout_simd.h"
#include "rt/isa_each.h"

void k_im2col(const k_im2col_geo *g, const float *x, float *col) { RT_ISA_CALL(k_isa_level(), im2col, g, x, col); }
void k_im2row(const k_im2col_geo *g, const float *x, float *colT) { RT_ISA_CALL(k_isa_level(), im2row, g, x, colT); }
void k_col2im(const k_im2col_geo *g, const float *col, float *dx) { RT_ISA_CALL(k_isa_level(), col2im, g, col, dx); }
void k_col2im_s1(const k_im2col_geo *g, const float *col, float *dx)
{
    RT_ISA_CALL(k_isa_level(), col2im_s1, g, col, dx);
}
void k_shift_rows(const k_im2col_geo *g, long hp, const float *x, float *xs)
{
    RT_ISA_CALL(k_isa_level(), shift_rows, g, hp, x, xs);
}
void k_shift_rows_ilv(const k_im2col_geo *g, long hp, int ng, const float *x, long xsz, float *xs)
{
    RT_ISA_CALL(k_isa_level(), shift_rows_ilv, g, hp, ng, x, xsz, xs);
}
