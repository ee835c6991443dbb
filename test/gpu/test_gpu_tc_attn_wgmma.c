/* The attention's wgmma forward (k_cuda_attn_wg.cuh: fw_fwd, sm_90a; taken with wgmma on
 * for a 16-bit qkv of the products' type by cp.async at heads 33..128) against the
 * mma.sync kernel (fa_fwd, wgmma off) and the CPU's kernels.
 *  - On the executor y and lse must be fa_fwd's bit for bit: both products add the same
 *    exact k16 sums in the same order (one rounding a step on both units) and share the
 *    softmax code. On a GPU the units' internal sums may round otherwise: there y within
 *    2^-7 (bf16) / 2^-10 (f16) of the largest |y|, lse within 2^-20 (1 + |lse|) per a
 *    product's fp32 noise (a P that rounds the other way moves y by one 16-bit step of one
 *    term).
 *  - Both against the CPU (bf16: k_attention_fwd_bf16; f16: the fp32 kernel on the f16
 *    values), at test_gpu_tc_attn.c's end-to-end bounds.
 *  - The executor counts the wgmma ops by transpose flag (simt_wgmma_count): per query tile
 *    i (i + 1 key tiles) HD / 16 K-major S = Q K^T ops and 4 P V ops with V N-major, those
 *    with P in registers (simt_wgmma_rs_count); none where the head (32 and under) or the
 *    loads (fp32 qkv) keep fa_fwd.
 * Heads 64 (GPT-2's) and 128, t 200 and 130 (partial and masked tiles), b * h > 1. */
#include "test/gpu/g.h"
#include "kernels/k_tfm.h"
#include "test/t_data.h"

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

static uint16_t to16(int t, float f) { return t == K_CUDA_MM_BF16 ? rt_f32_to_bf16(f) : rt_f32_to_f16(f); }
static float from16(int t, uint16_t h) { return t == K_CUDA_MM_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h); }

/* max |a - b| / max |b| (0 when b is all zero and a equals it) */
static double rel(const float *a, const float *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)b[i]));
    return m > 0 ? e / m : e;
}

/* One case: qkv 16-bit (x16, by cp.async) or fp32; wgmma: the wgmma kernel must run (its
 * ops counted), else fa_fwd with wgmma on too. */
static void fw_case(int t, int b, int T, int h, int hd, int x16, int wgmma)
{
    g_init();
    const int C = h * hd, f16 = t == K_CUDA_MM_F16;
    const size_t nq = (size_t)b * T * 3 * C, ny = (size_t)b * T * C, nl = (size_t)b * h * T;
    float *f = g_rand(nq, 71 + T + hd);
    uint16_t *q16 = malloc(nq * 2);
    for (size_t i = 0; i < nq; i++) q16[i] = to16(t, 2.0f * f[i]), f[i] = from16(t, q16[i]);
    void *gq = x16 ? g_up(q16, nq * 2) : g_up(f, nq * 4);
    float *y0 = g_dev(ny * 4), *l0 = g_dev(nl * 4), *y1 = g_dev(ny * 4), *l1 = g_dev(nl * 4);
    const int mm = t | (x16 ? K_CUDA_MM_X16 : 0);
    const char *tn = f16 ? "f16" : "bf16";

    g_wgmma_off();
    g_need(k_cuda_attention_fwd_mm(mm, b, T, h, hd, gq, y0, l0, NULL) == 0, "attention fwd (mma.sync)");
    g_wgmma_on();
    unsigned long long s0 = ops(0), p0 = ops(1), r0 = ops(2);
    g_need(k_cuda_attention_fwd_mm(mm, b, T, h, hd, gq, y1, l1, NULL) == 0, "attention fwd (wgmma)");
    unsigned long long s1 = ops(0), p1 = ops(1), r1 = ops(2);
    g_wgmma_off();
    if (G_SIMT) {
        unsigned long long tiles = 0, nt = (unsigned long long)(T + 63) / 64, HD = hd <= 64 ? 64 : 128;
        for (unsigned long long i = 0; i < nt; i++) tiles += (unsigned long long)b * h * (i + 1);
        CHECKF(s1 - s0 == (wgmma ? tiles * HD / 16 : 0) && p1 - p0 == (wgmma ? tiles * 4 : 0),
               "%s t=%d h=%d hd=%d x16 %d: %llu S ops (expected %llu), %llu P V ops (expected %llu)", tn, T, h, hd,
               x16, s1 - s0, wgmma ? tiles * HD / 16 : 0, p1 - p0, wgmma ? tiles * 4 : 0);
        CHECKF(r1 - r0 == p1 - p0, "%s t=%d hd=%d: %llu of %llu P V ops with P in registers", tn, T, hd, r1 - r0,
               p1 - p0);
    }
    float *ry0 = g_result(y0, ny), *rl0 = g_result(l0, nl), *ry1 = g_result(y1, ny), *rl1 = g_result(l1, nl);
    if (G_SIMT || !wgmma) {
        CHECKF(g_ndiff(ry1, ry0, ny, 4) == 0 && g_ndiff(rl1, rl0, nl, 4) == 0,
               "%s b=%d t=%d h=%d hd=%d x16 %d: y %zu, lse %zu of %zu, %zu differ from fa_fwd's", tn, b, T, h, hd, x16,
               g_ndiff(ry1, ry0, ny, 4), g_ndiff(rl1, rl0, nl, 4), ny, nl);
    } else {
        double ey = rel(ry1, ry0, ny), el = 0;
        for (size_t i = 0; i < nl; i++) el = fmax(el, fabs((double)rl1[i] - rl0[i]) / (1 + fabs((double)rl0[i])));
        CHECKF(ey <= (f16 ? 0x1p-10 : 0x1p-7) && el <= 0x1p-20, "%s b=%d t=%d h=%d hd=%d: y %.3g, lse %.3g from "
               "fa_fwd's", tn, b, T, h, hd, ey, el);
    }
    /* the CPU: the rounded operands (f is q16 widened) */
    float *cy = malloc(ny * 4), *cl = malloc(nl * 4);
    if (f16) k_attention_fwd(b, T, h, hd, f, cy, cl);
    else k_attention_fwd_bf16(b, T, h, hd, f, cy, cl);
    double bound = f16 ? 0x1p-9 : 0x1p-6, ey = rel(ry1, cy, ny), el = rel(rl1, cl, nl);
    CHECKF(ey < bound && el < bound, "%s b=%d t=%d h=%d hd=%d against the CPU: rel err y %.3g lse %.3g (bound %.3g)", tn,
           b, T, h, hd, ey, el, bound);
    port_dev_free(gq), port_dev_free(y0), port_dev_free(l0), port_dev_free(y1), port_dev_free(l1);
    free(f), free(q16), free(ry0), free(rl0), free(ry1), free(rl1), free(cy), free(cl);
}

TEST(gpu_tc_attention_wgmma_fwd_bf16)
{
    if (!g_sm90()) return;
    fw_case(K_CUDA_MM_BF16, 2, 200, 2, 64, 1, 1);
    fw_case(K_CUDA_MM_BF16, 1, 130, 2, 128, 1, 1);
    fw_case(K_CUDA_MM_BF16, 1, 70, 1, 48, 1, 1); /* zero-filled columns of a 64 tile */
}

TEST(gpu_tc_attention_wgmma_fwd_f16)
{
    if (!g_sm90()) return;
    fw_case(K_CUDA_MM_F16, 1, 200, 2, 64, 1, 1);
    fw_case(K_CUDA_MM_F16, 2, 70, 1, 128, 1, 1);
}

/* fa_fwd with wgmma on: heads of 32 and under (a 32 tile), fp32 qkv (read and rounded). */
TEST(gpu_tc_attention_wgmma_falls_back)
{
    if (!g_sm90()) return;
    fw_case(K_CUDA_MM_BF16, 1, 70, 2, 32, 1, 0);
    fw_case(K_CUDA_MM_BF16, 1, 70, 1, 64, 0, 0);
}

/* GPT-2's training path (--amp bf16, 16-bit activations: the attention's qkv by cp.async)
 * with heads of 64 over 70 positions, wgmma on (DDPRT_WGMMA=1: the GEMMs' wg_gemm and the
 * attention's fw_fwd, fw_bwd_dkv and fw_bwd_dq) against off. On the executor the loss lines
 * must be the same text (every product there the same bits on either unit) and the three
 * must have run (DDPRT_SIMT_TRACE lists the kernels launched); on a GPU within 5e-3. */
TEST(gpu_tc_attention_wgmma_gpt_training)
{
    if (!g_sm90()) return;
    char gpt[128], model[700], cmd[2000], out[2][16384];
    const char *dir = t_tmpdir("gpuwg");
    int n = snprintf(gpt, sizeof gpt, "[gpt] layers=2 dim=128 heads=2 ctx=80\n");
    t_write_file(dir, "gpt.cfg", gpt, (size_t)n, 0);
    snprintf(model, sizeof model, "--model-file %s/gpt.cfg --seq-len 70", dir);
    for (int on = 0; on < 2; on++) {
        snprintf(cmd, sizeof cmd, "DDPRT_WGMMA=%d DDPRT_SIMT_TRACE=%s/trace%d %s --device cuda %s --amp bf16 --data "
                 "synthetic --epochs 1 --max-steps 2 --log-interval 1 --batch-size 2 --no-eval --lr 3 2>&1", on, dir, on,
                 g_train(), model);
        CHECKF(g_run(cmd, out[on], sizeof out[on]) == 0, "%s", out[on]);
    }
    const char *a = strstr(out[0], "Loss: "), *b = strstr(out[1], "Loss: ");
    CHECKF(a && b, "no loss lines\n%s\n%s", out[0], out[1]);
    if (!a || !b) return;
    int steps = 0;
    for (; a && b; a = strstr(a + 1, "Loss: "), b = strstr(b + 1, "Loss: "), steps++) {
        double la = atof(a + 6), lb = atof(b + 6);
        if (G_SIMT) CHECKF(strncmp(a, b, 16) == 0, "step %d: loss %.16s (wgmma off) vs %.16s (on)", steps, a, b);
        else CHECKF(fabs(la - lb) <= 5e-3 * (1 + fabs(la)), "step %d: loss %.6f (wgmma off) vs %.6f (on)", steps, la, lb);
    }
    CHECKF(steps == 2, "%d loss lines", steps);
    if (G_SIMT) {
        char path[600], text[65536];
        for (int on = 0; on < 2; on++) {
            snprintf(path, sizeof path, "%s/trace%d", dir, on);
            FILE *f = fopen(path, "r");
            size_t k = f ? fread(text, 1, sizeof text - 1, f) : 0;
            if (f) fclose(f);
            text[k] = 0;
            static const char *const wk[] = {"fw_fwd<", "fw_bwd_dkv<", "fw_bwd_dq<"};
            for (int i = 0; i < 3; i++)
                CHECKF((strstr(text, wk[i]) != NULL) == on, "wgmma %s: %s> %s", on ? "on" : "off", wk[i],
                       on ? "never launched" : "launched");
        }
    }
}
