/* The tensor-core attention's cp.async path (k_cuda_attn_tc.cu): a 16-bit qkv of the
 * kernel's type (--amp-activations 16) whose rows are 16-byte aligned, with hd % 8 == 0,
 * is copied into shared memory by cp.async, zero-filled past t and hd, into the same
 * tiles as the fp32 path, which reads and rounds. Rounding a 16-bit value to its own type
 * is the identity, so y (rounded to 16 bits), lse and dqkv must be the fp32-io kernel's
 * on the widened values bit for bit: odd t (partial tiles, the causal mask), heads 16
 * and 24 (zero columns of a 32 tile), 32 and 64 (two buffers), 128 (one).
 * On the executor the copies are counted (simt_cp_async_count): every tile of the
 * 16-bit path, Q, K and V, exactly as the kernels' tiling streams them, and none on the
 * fp32 path or where the 16-bit rows cannot go by cp.async (hd % 8 != 0, a base 8 bytes
 * off 16-byte alignment): those read and round, with the same bits. dO (fp32) is rounded
 * once into the workspace and copied as backward's Q tiles are, on either path, where
 * hd % 8 == 0 and the workspace is 16-byte aligned; else read and rounded, with the same
 * bits (gpu_tc_attention_bwd_dy16_bits_match_read_and_round). */
#include "test/gpu/g.h"
#include "rt/half.h"

#if G_SIMT
unsigned long long simt_cp_async_count(void); /* test/simt/simt_tc.cc */
/* after the launches before it have run (they are asynchronous) */
static unsigned long long copies(void)
{
    g_need(port_stream_sync(NULL, "count") == 0, "sync");
    return simt_cp_async_count();
}
#else
static unsigned long long copies(void) { return 0; }
#endif

static uint16_t to16(int t, float f) { return t == K_CUDA_MM_BF16 ? rt_f32_to_bf16(f) : rt_f32_to_f16(f); }
static float from16(int t, uint16_t h) { return t == K_CUDA_MM_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h); }

static size_t cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* The 16-byte copies of the forward (fwd) and backward (else) kernels for one (sequence,
 * head): 64-row tiles, heads padded to 32, 64 or 128 columns (8 a copy); backward's inner
 * tiles 32 rows at 128. */
static size_t expected(int fwd, int t, int hd)
{
    size_t T = (size_t)t, pad = hd <= 32 ? 32 : hd <= 64 ? 64 : 128, cpr = pad / 8, in = pad >= 128 ? 32 : 64, nt = cdiv(T, 64), n = 0;
    for (size_t i = 0; i < nt; i++) {
        size_t keys = T < 64 * i + 64 ? T : 64 * i + 64; /* the causal mask's last key + 1 */
        if (fwd) n += 64 * cpr + 2 * 64 * cpr * (i + 1);         /* Q; K, V of key tiles 0..i */
        else n += 2 * 64 * cpr + in * cpr * cdiv(T - 64 * i, in) /* dK, dV: K, V; Q from key tile i on */
                  + 64 * cpr + 2 * in * cpr * cdiv(keys, in);    /* dQ: Q; K, V up to query tile i */
    }
    return n;
}

/* backward's copies of dO for one (sequence, head): as its Q tiles (dK, dV's from each
 * key tile on; dQ's one a query tile) */
static size_t expected_do(int t, int hd)
{
    size_t T = (size_t)t, pad = hd <= 32 ? 32 : hd <= 64 ? 64 : 128, cpr = pad / 8, in = pad >= 128 ? 32 : 64, n = 0;
    for (size_t i = 0; i < cdiv(T, 64); i++) n += in * cpr * cdiv(T - 64 * i, in) + 64 * cpr;
    return n;
}

/* off: bytes the 16-bit qkv lies past a 16-byte aligned address (0 or 8). */
static void io_case(int t, int b, int T, int h, int hd, int off)
{
    g_init();
    const int C = h * hd;
    const size_t nq = (size_t)b * T * 3 * C, ny = (size_t)b * T * C, nl = (size_t)b * h * T;
    float *f = g_rand(nq, 91 + T + hd), *dy = g_rand(ny, 92 + hd);
    uint16_t *q16 = malloc(nq * 2), *hy = malloc(ny * 2);
    for (size_t i = 0; i < nq; i++) q16[i] = to16(t, 2.0f * f[i]), f[i] = from16(t, q16[i]);
    char *g16 = g_dev(nq * 2 + 16);
    g_need(port_memcpy_h2d(g16 + off, q16, nq * 2, NULL, "upload") == 0 && port_stream_sync(NULL, "upload") == 0,
           "upload");
    const float *x16 = (const float *)(g16 + off);
    float *x32 = g_up(f, nq * 4), *gdy = g_up(dy, ny * 4), *y32 = g_dev(ny * 4), *l32 = g_dev(nl * 4);
    float *l16 = g_dev(nl * 4), *d32 = g_dev(nq * 4), *d16 = g_dev(nq * 4), *yw = g_dev(ny * 4);
    void *y16 = g_dev(ny * 2), *ws = g_dev(k_cuda_attention_workspace(b, T, h, hd) + 16);
    const int io = t | K_CUDA_MM_X16 | K_CUDA_MM_Y16, vec = hd % 8 == 0 && off == 0;
    const char *tn = t == K_CUDA_MM_BF16 ? "bf16" : "f16";

    unsigned long long c0 = copies();
    g_need(k_cuda_attention_fwd_mm(t, b, T, h, hd, x32, y32, l32, NULL) == 0, "attention fwd (fp32 io)");
    unsigned long long c1 = copies();
    g_need(k_cuda_attention_fwd_mm(io, b, T, h, hd, x16, y16, l16, NULL) == 0, "attention fwd (16-bit io)");
    unsigned long long c2 = copies();
    /* backward from the same y (the 16-bit one, widened) and lse on both sides */
    g_down(hy, y16, ny * 2);
    float *fy = malloc(ny * 4);
    for (size_t i = 0; i < ny; i++) fy[i] = from16(t, hy[i]);
    g_need(port_memcpy_h2d(yw, fy, ny * 4, NULL, "upload") == 0 && port_stream_sync(NULL, "upload") == 0, "upload");
    g_need(k_cuda_attention_bwd_mm(t, b, T, h, hd, x32, yw, l32, gdy, d32, ws, NULL) == 0, "attention bwd (fp32 io)");
    unsigned long long c3 = copies();
    g_need(k_cuda_attention_bwd_mm(io, b, T, h, hd, x16, y16, l32, gdy, d16, ws, NULL) == 0,
           "attention bwd (16-bit io)");
    unsigned long long c4 = copies();

    float *r32 = g_result(y32, ny);
    size_t bad = 0;
    for (size_t i = 0; i < ny; i++) bad += hy[i] != to16(t, r32[i]);
    CHECKF(bad == 0, "%s t=%d h=%d hd=%d off=%d: y: %zu of %zu differ from the fp32-io kernel's rounded", tn, T, h, hd,
           off, bad, ny);
    CHECKF(g_ndiff(g_result(l16, nl), g_result(l32, nl), nl, 4) == 0, "%s t=%d hd=%d off=%d: lse differs", tn, T, hd,
           off);
    size_t nd = g_ndiff(g_result(d16, nq), g_result(d32, nq), nq, 4);
    CHECKF(nd == 0, "%s t=%d h=%d hd=%d off=%d: dqkv: %zu of %zu differ", tn, T, h, hd, off, nd, nq);
    if (G_SIMT) {
        unsigned long long eg = hd % 8 == 0 ? (unsigned long long)b * h * expected_do(T, hd) : 0,
                           ef = vec ? (unsigned long long)b * h * expected(1, T, hd) : 0,
                           eb = (vec ? (unsigned long long)b * h * expected(0, T, hd) : 0) + eg;
        CHECKF(c1 == c0 && c3 - c2 == eg, "%s t=%d hd=%d: the fp32-io kernels issued %llu + %llu cp.async (expected 0 "
               "+ %llu: dO)", tn, T, hd, c1 - c0, c3 - c2, eg);
        CHECKF(c2 - c1 == ef && c4 - c3 == eb, "%s t=%d h=%d hd=%d off=%d: cp.async forward %llu (expected %llu), "
               "backward %llu (expected %llu)", tn, T, h, hd, off, c2 - c1, ef, c4 - c3, eb);
    }
    free(f), free(dy), free(q16), free(hy), free(fy), free(r32);
    port_dev_free(g16), port_dev_free(x32), port_dev_free(gdy), port_dev_free(y32), port_dev_free(l32);
    port_dev_free(l16), port_dev_free(d32), port_dev_free(d16), port_dev_free(yw), port_dev_free(y16);
    port_dev_free(ws);
}

/* Heads 16, 24 (padded to 32: a zero-filled chunk past hd), 32, 64 on two buffers, 128 on one:
 * the cp.async kernels (a template argument) of both types at every head tile. */
TEST(gpu_tc_attention_cp_async_bits_match_fp32_io)
{
    io_case(K_CUDA_MM_BF16, 1, 70, 2, 16, 0);
    io_case(K_CUDA_MM_BF16, 2, 17, 1, 24, 0);
    io_case(K_CUDA_MM_BF16, 1, 130, 1, 64, 0);
    io_case(K_CUDA_MM_BF16, 1, 70, 1, 128, 0);
    io_case(K_CUDA_MM_F16, 1, 130, 2, 32, 0);
    io_case(K_CUDA_MM_F16, 1, 70, 1, 64, 0);
    io_case(K_CUDA_MM_F16, 1, 70, 1, 128, 0);
}

/* No cp.async where the rows cannot be copied 16 bytes at a time (the read-and-round
 * kernels, as for fp32 qkv); the same bits. Heads 12 (a 32 tile), 64 off alignment, 100 (a
 * 128 tile). */
TEST(gpu_tc_attention_cp_async_falls_back_to_loads)
{
    io_case(K_CUDA_MM_BF16, 1, 70, 1, 12, 0);
    io_case(K_CUDA_MM_F16, 1, 70, 1, 64, 8);
    io_case(K_CUDA_MM_BF16, 1, 70, 1, 100, 0);
}

/* dO by its 16-bit copy in the workspace (cp.async) against read and rounded by the
 * kernels (the workspace 8 bytes off 16-byte alignment): dqkv bit for bit, fp32 and 16-bit
 * qkv, heads 64 and 128 (two buffers, one), t 130; the copies counted on the executor. */
TEST(gpu_tc_attention_bwd_dy16_bits_match_read_and_round)
{
    g_init();
    static const int cs[][3] = {{K_CUDA_MM_BF16, 64, 0}, {K_CUDA_MM_F16, 64, 1}, {K_CUDA_MM_BF16, 128, 1}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int t = cs[c][0], hd = cs[c][1], x16 = cs[c][2], b = 2, T = 130, h = 2, C = h * hd;
        const size_t nq = (size_t)b * T * 3 * C, ny = (size_t)b * T * C, nl = (size_t)b * h * T;
        float *f = g_rand(nq, 61 + hd), *dy = g_rand(ny, 62 + hd);
        uint16_t *q16 = malloc(nq * 2);
        for (size_t i = 0; i < nq; i++) q16[i] = to16(t, 2.0f * f[i]), f[i] = from16(t, q16[i]);
        const void *gq = x16 ? g_up(q16, nq * 2) : g_up(f, nq * 4);
        const int mm = t | (x16 ? K_CUDA_MM_X16 : 0);
        float *gdy = g_up(dy, ny * 4), *y = g_dev(ny * 4), *l = g_dev(nl * 4), *d0 = g_dev(nq * 4), *d1 = g_dev(nq * 4);
        char *ws = g_dev(k_cuda_attention_workspace(b, T, h, hd) + 16);
        g_need(k_cuda_attention_fwd_mm(mm, b, T, h, hd, gq, y, l, NULL) == 0, "attention fwd");
        unsigned long long c0 = copies();
        g_need(k_cuda_attention_bwd_mm(mm, b, T, h, hd, gq, y, l, gdy, d0, ws, NULL) == 0, "attention bwd (copy)");
        unsigned long long c1 = copies();
        g_need(k_cuda_attention_bwd_mm(mm, b, T, h, hd, gq, y, l, gdy, d1, ws + 8, NULL) == 0, "attention bwd (read)");
        unsigned long long c2 = copies();
        size_t nd = g_ndiff_dev(d0, d1, nq);
        CHECKF(nd == 0, "%s hd=%d x16 %d: dqkv: %zu of %zu differ", t == K_CUDA_MM_BF16 ? "bf16" : "f16", hd, x16, nd,
               nq);
        if (G_SIMT) {
            unsigned long long eg = (unsigned long long)b * h * expected_do(T, hd),
                               eq = x16 ? (unsigned long long)b * h * expected(0, T, hd) : 0;
            CHECKF(c1 - c0 == eq + eg && c2 - c1 == 0, "hd=%d x16 %d: cp.async %llu (expected %llu), misaligned "
                   "workspace %llu (expected 0)", hd, x16, c1 - c0, eq + eg, c2 - c1);
        }
        free(f), free(dy), free(q16);
        port_dev_free((void *)gq), port_dev_free(gdy), port_dev_free(y), port_dev_free(l), port_dev_free(d0);
        port_dev_free(d1), port_dev_free(ws);
    }
}
