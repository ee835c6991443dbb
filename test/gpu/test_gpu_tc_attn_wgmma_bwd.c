/* The attention's wgmma backward (k_cuda_attn_wgb.cuh: fw_bwd_dkv, fw_bwd_dq, sm_90a; taken
 * with wgmma on where a 16-bit qkv of the products' type and the 16-bit copy of dO both go
 * by cp.async, heads 33..128) against the mma.sync kernels (fa_bwd_dkv, fa_bwd_dq, wgmma
 * off) and the CPU's kernels, on one forward's y and lse (mma.sync's).
 *  - On the executor dq, dk, dv must be fa_bwd's bit for bit: P, dP and dS are the same
 *    k16 sums and fp32 expressions, and dV, dK, dQ add the same exact k16 sums in the same
 *    order (one rounding a step on both units). On a GPU the units' internal sums may round
 *    otherwise (a dS or P that rounds the other way moves a gradient by one 16-bit step of
 *    one term): there each of dq, dk, dv within 2^-7 (bf16) / 2^-10 (f16) of its largest
 *    magnitude.
 *  - Against the CPU (bf16: k_attention_bwd_bf16; f16: the fp32 kernels on the f16 values)
 *    at test_gpu_tc_attn.c's end-to-end bound.
 *  - The executor counts the wgmma ops by transpose flag (simt_wgmma_count): per pair of a
 *    key tile and a query tile at or after it (each kernel visits every pair once),
 *    2 HD / 16 K-major ops (S and dP) in each kernel, and 8 (dV, dK) + 4 (dQ) with the
 *    B operand N-major, those with A (P^T, dS^T, dS) in registers (simt_wgmma_rs_count);
 *    none where the head (32 and under), hd % 8 (dO not copied) or an
 *    fp32 qkv keep fa_bwd.
 * Heads 64 (GPT-2's), 128 and 48 (zero-filled columns of a 64 tile), t 200 and 40 (one
 * partial tile), b * h > 1. */
#include "test/gpu/g.h"
#include "kernels/k_tfm.h"

#if G_SIMT
unsigned long long simt_wgmma_count(int ta, int tb); /* test/simt/simt_tc.cc */
unsigned long long simt_wgmma_rs_count(void);
/* tb 0 / 1: ops by imm-trans-b (imm-trans-a 0); 2: ops with A in registers */
static unsigned long long ops(int tb)
{
    g_need(port_stream_sync(NULL, "wgmma count") == 0, "sync");
    return tb == 2 ? simt_wgmma_rs_count() : simt_wgmma_count(0, tb);
}
#else
static unsigned long long ops(int tb) { return (void)tb, 0; }
#endif

/* max over the rows' part (0 q, 1 k, 2 v) of |a - b| / max |b| */
static double rel_part(const float *a, const float *b, size_t rows, int C, int part)
{
    double e = 0, m = 0;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < C; c++) {
            size_t i = r * 3 * C + (size_t)part * C + c;
            e = fmax(e, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)b[i]));
        }
    return m > 0 ? e / m : e;
}

/* One case: qkv 16-bit (x16, by cp.async) or fp32; wgmma: the wgmma kernels must run (their
 * ops counted), else fa_bwd with wgmma on too. */
static void bw_case(int t, int b, int T, int h, int hd, int x16, int wgmma)
{
    g_init();
    const int C = h * hd, f16 = t == K_CUDA_MM_F16;
    const size_t nq = (size_t)b * T * 3 * C, ny = (size_t)b * T * C, nl = (size_t)b * h * T;
    float *f = g_rand(nq, 81 + T + hd), *dy = g_rand(ny, 82 + T + hd);
    uint16_t *q16 = malloc(nq * 2);
    for (size_t i = 0; i < nq; i++) q16[i] = g_to16(t, 2.0f * f[i]), f[i] = g_from16(t, q16[i]);
    void *gq = x16 ? g_up(q16, nq * 2) : g_up(f, nq * 4);
    float *gdy = g_up(dy, ny * 4), *y = g_dev(ny * 4), *l = g_dev(nl * 4), *d0 = g_dev(nq * 4), *d1 = g_dev(nq * 4);
    void *ws = g_dev(k_cuda_attention_workspace(b, T, h, hd) + 64);
    const int mm = t | (x16 ? K_CUDA_MM_X16 : 0);
    const char *tn = g_tn(t);

    g_wgmma_off();
    g_need(k_cuda_attention_fwd_mm(mm, b, T, h, hd, gq, y, l, NULL) == 0, "attention fwd");
    g_need(k_cuda_attention_bwd_mm(mm, b, T, h, hd, gq, y, l, gdy, d0, ws, NULL) == 0, "attention bwd (mma.sync)");
    g_wgmma_on();
    unsigned long long s0 = ops(0), p0 = ops(1), a0 = ops(2);
    g_need(k_cuda_attention_bwd_mm(mm, b, T, h, hd, gq, y, l, gdy, d1, ws, NULL) == 0, "attention bwd (wgmma)");
    unsigned long long s1 = ops(0), p1 = ops(1), a1 = ops(2);
    g_wgmma_off();
    if (G_SIMT) {
        unsigned long long nt = (unsigned long long)(T + 63) / 64, HD = hd <= 64 ? 64 : 128;
        unsigned long long pairs = (unsigned long long)b * h * nt * (nt + 1) / 2;
        unsigned long long es = wgmma ? pairs * 4 * HD / 16 : 0, ep = wgmma ? pairs * 12 : 0;
        CHECKF(s1 - s0 == es && p1 - p0 == ep, "%s t=%d h=%d hd=%d x16 %d: %llu K-major ops (expected %llu), %llu "
               "N-major ops (expected %llu)", tn, T, h, hd, x16, s1 - s0, es, p1 - p0, ep);
        CHECKF(a1 - a0 == p1 - p0, "%s t=%d hd=%d: %llu of %llu N-major ops with A in registers", tn, T, hd, a1 - a0,
               p1 - p0);
    }
    float *r0 = g_result(d0, nq), *r1 = g_result(d1, nq), *ry = g_result(y, ny), *rl = g_result(l, nl);
    if (G_SIMT || !wgmma) {
        size_t nd = g_ndiff(r1, r0, nq, 4);
        CHECKF(nd == 0, "%s b=%d t=%d h=%d hd=%d x16 %d: dqkv %zu of %zu differ from fa_bwd's", tn, b, T, h, hd, x16,
               nd, nq);
    } else {
        for (int part = 0; part < 3; part++) {
            double e = rel_part(r1, r0, (size_t)b * T, C, part);
            CHECKF(e <= (f16 ? 0x1p-10 : 0x1p-7), "%s b=%d t=%d h=%d hd=%d: d%c %.3g from fa_bwd's", tn, b, T, h, hd,
                   "qkv"[part], e);
        }
    }
    /* the CPU: the rounded operands (f is q16 widened), its own forward */
    float *cy = malloc(ny * 4), *cl = malloc(nl * 4), *cd = malloc(nq * 4), *rdy = malloc(ny * 4);
    for (size_t i = 0; i < ny; i++) rdy[i] = g_from16(t, g_to16(t, dy[i]));
    if (f16) {
        k_attention_fwd(b, T, h, hd, f, cy, cl);
        k_attention_bwd(b, T, h, hd, f, cy, cl, rdy, cd);
    } else {
        k_attention_fwd_bf16(b, T, h, hd, f, cy, cl);
        k_attention_bwd_bf16(b, T, h, hd, f, cy, cl, dy, cd);
    }
    double bound = f16 ? 0x1p-9 : 0x1p-6;
    for (int part = 0; part < 3; part++) {
        double e = rel_part(r1, cd, (size_t)b * T, C, part);
        CHECKF(e < bound, "%s b=%d t=%d h=%d hd=%d against the CPU: rel err d%c %.3g (bound %.3g)", tn, b, T, h, hd,
               "qkv"[part], e, bound);
    }
    port_dev_free(gq), port_dev_free(gdy), port_dev_free(y), port_dev_free(l), port_dev_free(d0), port_dev_free(d1);
    port_dev_free(ws);
    free(f), free(dy), free(q16), free(r0), free(r1), free(ry), free(rl), free(cy), free(cl), free(cd), free(rdy);
}

TEST(gpu_tc_attention_wgmma_bwd_bf16)
{
    if (!g_sm90()) return;
    bw_case(K_CUDA_MM_BF16, 2, 200, 2, 64, 1, 1);
    bw_case(K_CUDA_MM_BF16, 1, 40, 2, 128, 1, 1);
    bw_case(K_CUDA_MM_BF16, 1, 70, 1, 48, 1, 1); /* zero-filled columns of a 64 tile */
}

TEST(gpu_tc_attention_wgmma_bwd_f16)
{
    if (!g_sm90()) return;
    bw_case(K_CUDA_MM_F16, 1, 200, 2, 128, 1, 1);
    bw_case(K_CUDA_MM_F16, 2, 40, 1, 64, 1, 1);
}

/* fa_bwd with wgmma on: heads of 32 and under (a 32 tile), hd % 8 != 0 (dO stays fp32, qkv
 * read and rounded), fp32 qkv (read and rounded). */
TEST(gpu_tc_attention_wgmma_bwd_falls_back)
{
    if (!g_sm90()) return;
    bw_case(K_CUDA_MM_BF16, 1, 70, 2, 32, 1, 0);
    bw_case(K_CUDA_MM_BF16, 1, 70, 1, 44, 1, 0);
    bw_case(K_CUDA_MM_F16, 1, 70, 1, 64, 0, 0);
}
