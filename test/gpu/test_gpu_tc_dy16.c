/* linear's and Conv1D's backward on the 16-bit copy of dy (k_dy16 in
 * kernels/cuda/k_cuda_tc_gemm.cuh): with bf16 / f16 products and a 16-byte aligned
 * workspace, dy is rounded once into the workspace and both products (dX, dW) copy it by
 * cp.async; with the workspace 4 bytes off (refused) they gather and round fp32 dy in
 * registers as before. The same rounding (to nearest even) and the same k order: not one
 * bit may differ, in dx, dw or db. Shapes: rows of `out` in 8s (the copy) and not (out =
 * 17: never a copy), split-K weight grads (n = 300), fp32 and 16-bit x, with and without
 * w16; then the 128-tile products on wgmma. */
#include "test/gpu/g.h"

static int bwd(int hf, int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
               const float *dy, float *dx, float *dw, float *db, void *ws)
{
    return hf ? k_cuda_conv1d_hf_bwd_mm(mm, n, in, out, x, w, w16, dy, dx, dw, db, ws, NULL)
              : k_cuda_linear_bwd_mm(mm, n, in, out, x, w, w16, dy, dx, dw, db, ws, NULL);
}

/* v: bit 0 w16, bit 1 a 16-bit x; the copy (aligned ws) against the gathers (ws + 4). */
static void dy16_case(int t, int hf, int n, int in, int out)
{
    size_t nx = (size_t)n * in, nw = (size_t)in * out, ny = (size_t)n * out, cnt[3] = {nx, nw, (size_t)out};
    float *hx = g_rand(nx, 171), *hw = g_rand(nw, 172), *hdy = g_rand(ny, 174);
    float *x = g_up(hx, nx * 4), *w = g_up(hw, nw * 4), *dy = g_up(hdy, ny * 4);
    uint16_t *w16 = g_dev16(t, w, nw), *x16 = g_dev16(t, x, nx);
    size_t wsb = hf ? k_cuda_conv1d_hf_workspace_mm(t, n, in, out) : k_cuda_linear_workspace_mm(t, n, in, out);
    char *ws = g_dev(wsb + 64);
    float *o[2][3];
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3; i++) o[c][i] = g_dev(cnt[i] * 4);
    static const char *const nm[] = {"dx", "dw", "db"};
    for (int v = 0; v < 4; v++) {
        int mm = t | (v & 2 ? K_CUDA_MM_X16 : 0);
        const float *xv = v & 2 ? (const float *)x16 : x;
        const uint16_t *wv = v & 1 ? w16 : NULL;
        for (int c = 0; c < 2; c++)
            g_need(bwd(hf, mm, n, in, out, xv, w, wv, dy, o[c][0], o[c][1], o[c][2], c ? ws + 4 : ws) == 0,
                   hf ? "conv1d_hf bwd" : "linear bwd");
        for (int i = 0; i < 3; i++)
            CHECKF(g_ndiff_dev(o[0][i], o[1][i], cnt[i]) == 0,
                   "%s %s n=%d in=%d out=%d (%s x, %s): %s on the 16-bit dy differs from the gathered", g_tn(t),
                   hf ? "conv1d_hf" : "linear", n, in, out, v & 2 ? "16-bit" : "fp32", v & 1 ? "w16" : "no w16",
                   nm[i]);
    }
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3; i++) port_dev_free(o[c][i]);
    port_dev_free(x), port_dev_free(w), port_dev_free(dy), port_dev_free(w16), port_dev_free(x16);
    port_dev_free(ws);
    free(hx), free(hw), free(hdy);
}

TEST(gpu_tc_dy16_bitwise_equal_gathered)
{
    g_init();
    static const int lins[][3] = {{7, 40, 64}, {300, 48, 24}, {5, 33, 17}, {66, 72, 136}};
    for (int t = K_CUDA_MM_BF16; t <= K_CUDA_MM_F16; t++)
        for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++)
            for (int hf = 0; hf < 2; hf++) dy16_case(t, hf, lins[i][0], lins[i][1], lins[i][2]);
}

/* The 128-tile products on wgmma: on the copy, dX is wg_gemm (dy k-contiguous, w16
 * M/N-contiguous) and dW wg_gemm on two M/N-contiguous arrays; gathered, wgg_gemm. */
TEST(gpu_tc_dy16_bitwise_equal_on_wgmma)
{
    if (!g_sm90()) return;
    g_wgmma_on();
    dy16_case(K_CUDA_MM_BF16, 0, 136, 72, 136);
    dy16_case(K_CUDA_MM_F16, 1, 130, 136, 128);
    g_wgmma_off();
}

#if DDPRT_SIMT
/* Which way dy went, counted: fp32 x and no w16, so dy is the only operand that can be
 * copied: on the aligned workspace both products copy it (dX: [n x out] k-contiguous;
 * dW: [out x n] M-contiguous), 4 bytes off not one copy; out = 20 never. */
TEST(gpu_tc_dy16_products_issue_cp_async)
{
    g_init();
    enum { N = 6, IN = 40 };
    size_t big = 4096;
    float *h = g_rand(big, 181), *a = g_up(h, big * 4), *c = g_dev(big * 4), *e = g_dev(big * 4);
    char *ws = g_dev(k_cuda_linear_workspace(N, IN, 24) + 64);
    for (int out = 24; out >= 20; out -= 4)
        for (int hf = 0; hf < 2; hf++)
            for (int off = 0; off <= 4; off += 4) {
                unsigned long long c0 = g_cp_count();
                g_need(bwd(hf, K_CUDA_MM_BF16, N, IN, out, a, a, NULL, a, c, e, NULL, ws + off) == 0, "bwd");
                unsigned long long got = g_cp_count() - c0;
                unsigned long long want = off || out % 8 ? 0
                                          : hf ? g_cp_expect(N, IN, out) + g_cp_expect(IN, out, N)
                                               : g_cp_expect(N, IN, out) + g_cp_expect(out, IN, N);
                CHECKF(got == want, "%s bwd out=%d, workspace %s: %llu cp.async, expected %llu",
                       hf ? "conv1d_hf" : "linear", out, off ? "4 bytes off" : "aligned", got, want);
            }
    port_dev_free(a), port_dev_free(c), port_dev_free(e), port_dev_free(ws);
    free(h);
}
#endif
