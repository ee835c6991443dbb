/* The GEMMs of k_gemm.h: k_gemm_simd.h instantiated per ISA level (rt/isa_each.h:
 * AVX-512, AVX2+FMA, generic = SSE2 on x86-64 or plain C elsewhere), each call
 * dispatched on k_isa_level(). The file is compiled with the default flags; only the
 * functions carry target attributes, so the binary runs on any x86-64. */
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tr8.h"

#define RT_ISA_TEMPLATE "kernels/cpu/k_gemm_simd.h"
#include "rt/isa_each.h"

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
    RT_ISA_CALL(k_isa_level(), gemm_nn, m, n, kk, a, ars, acs, b, ldb, c, ldc, bias, acc);
}

size_t k_gemm_pack_floats(int m, int kk) { return (size_t)(m + 11) * (size_t)(kk > 0 ? kk : 0); }

void k_gemm_pack_a(int m, int kk, const float *a, long ars, long acs, float *ap)
{
    if (m <= 0 || kk <= 0) return;
    RT_ISA_CALL(k_isa_level(), pack_a, m, kk, a, ars, acs, ap);
}

void k_gemm_nn_packed(int m, int n, int kk, const float *ap, const float *b, long ldb,
                      const long *boff, float *c, long ldc, const float *bias, int acc)
{
    k_gemm_nn_packed_pf(m, n, kk, ap, b, ldb, boff, c, ldc, bias, acc, NULL, 0);
}

void k_gemm_nn_packed_pf(int m, int n, int kk, const float *ap, const float *b, long ldb,
                         const long *boff, float *c, long ldc, const float *bias, int acc,
                         const void *pf, long pfn)
{
    if (gemm_degenerate(m, n, kk, c, ldc, bias, acc)) return;
    RT_ISA_CALL(k_isa_level(), gemm_nn_packed, m, n, kk, ap, b, ldb, boff, c, ldc, bias, acc, pf, pfn);
}

void k_gemm_nt_off(int m, int n, int l, int ng, const float *a, long lda, long a_img,
                   const float *b, const long *boff, long b_img, float *c, long ldc, int acc)
{
    k_gemm_nt_off_pf(m, n, l, ng, a, lda, a_img, b, boff, b_img, c, ldc, acc, NULL, 0);
}

void k_gemm_nt_off_pf(int m, int n, int l, int ng, const float *a, long lda, long a_img,
                      const float *b, const long *boff, long b_img, float *c, long ldc, int acc,
                      const void *pf, long pfn)
{
    if (m <= 0 || n <= 0) return;
    RT_ISA_CALL(k_isa_level(), gemm_nt_off, m, n, l, ng, a, lda, a_img, b, boff, b_img, c, ldc, acc, pf, pfn);
}

void k_gemm_nt(int m, int n, int l, const float *a, long lda, const float *b, long ldb,
               float *c, long ldc, const float *bias, int acc)
{
    if (m <= 0 || n <= 0) return;
    RT_ISA_CALL(k_isa_level(), gemm_nt, m, n, l, a, lda, b, ldb, c, ldc, bias, acc);
}

void k_gemm_nt_pb(int m, int n, int l, const float *a, long lda, const float *b, long ldb,
                  float *c, long ldc, const float *bias, int acc)
{
    if (m <= 0 || n <= 0) return;
    if (l <= 0) { /* empty product: C = acc ? C : bias[j] */
        if (!acc)
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) c[(long)i * ldc + j] = bias ? bias[j] : 0.0f;
        return;
    }
    RT_ISA_CALL(k_isa_level(), gemm_nt_pb, m, n, l, a, lda, b, ldb, c, ldc, bias, acc);
}

void k_gemm_tb_off(int m, int n, int l, int ng, const float *b, const long *boff, long b_img, const float *d,
                   long ldd, float *c, long ldc, int acc)
{
    k_gemm_tb_off_pf(m, n, l, ng, b, boff, b_img, d, ldd, c, ldc, acc, NULL, NULL);
}

void k_gemm_tb_off_pf(int m, int n, int l, int ng, const float *b, const long *boff, long b_img, const float *d,
                      long ldd, float *c, long ldc, int acc, const void *const pf[2], const long pfn[2])
{
    if (m <= 0 || n <= 0) return;
    if (l <= 0 || ng <= 0) {
        if (!acc)
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) c[(long)i * ldc + j] = 0.0f;
        return;
    }
    RT_ISA_CALL(k_isa_level(), gemm_tb_off, m, n, l, ng, b, boff, b_img, d, ldd, c, ldc, acc, pf, pfn);
}

void k_transpose_ld(int rows, int cols, const float *src, long lds, float *dst, long ldd)
{
    if (rows <= 0 || cols <= 0) return;
    RT_ISA_CALL(k_isa_level(), transpose, rows, cols, src, lds, dst, ldd);
}
