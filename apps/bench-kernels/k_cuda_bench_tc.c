/* ddprt-bench-kernels --device cuda, the tensor cores: the GEMM at 4096^3 (bf16, f16:
 * 16-bit arrays; TF32: linear's fp32 operands) against cuBLAS at the same precision
 * (cublasGemmEx, fp32 compute; TF32 math for the fp32 one: on sm_90 ours on wgmma,
 * TMA's wt_gemm where TMA is on, else wgtf_gemm, and mma.sync's tf_gemm beside it);
 * ResNet's 3x3 convs (and a
 * strided 3x3 and the 1x1 downsample) at bf16 as --amp bf16 trains them (16-bit
 * channels-last activations in and out, the weights' 16-bit block, fp32 gradients) against cuDNN on
 * bf16 channels-last tensors with the algorithm its heuristics pick (what PyTorch's
 * autocast + channels_last runs); GPT's attention at bf16 (FlashAttention-2 style, ours
 * only). Each row gives TFLOP/s and the % of the card's dense tensor-core peak where the
 * card is known. */
#include "apps/bench-kernels/k_cuda_bench.h"
#include "kernels/cuda/k_cuda.h"
#include "kernels/cuda/k_cuda_probe.h"
#include "rt/env.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double tc_peak_tflops(int mm)
{
    const char *d = port_cuda_device_desc();
    double p = strstr(d, "H200") ? 989.4 : strstr(d, "H100") ? (strstr(d, "PCIe") ? 756.0 : 989.4)
               : strstr(d, "A100") ? 312.0 : 0; /* bf16 / f16 dense; TF32 is half */
    return mm == K_CUDA_MM_TF32 ? p / 2 : p;
}

static void tc_row(const char *name, const char *shape, double us, double flop, double ref_us, int mm)
{
    double peak = tc_peak_tflops(mm), tf = us > 0 ? flop / us / 1e6 : 0;
    char pk[16] = "-";
    if (peak > 0 && us > 0) snprintf(pk, sizeof pk, "%.0f%%", 100 * tf / peak);
    kb_row(name, shape, us, flop, 0, ref_us);
    printf("%-18s %-34s %10s %16.1f TFLOP/s, %s of the dense tensor-core peak\n", "", "", "", tf, pk);
}

void kb_tc_row(const char *name, const char *shape, double us, double flop, double ref_us, int mm)
{
    tc_row(name, shape, us, flop, ref_us, mm);
}

/* ---- the GEMM */
typedef struct tc_ctx {
    k_tc_gemm g;
    int n;
    float *x, *w, *y;
    void *ws;
} tc_ctx;
static int tc_ours(void *c_) { tc_ctx *c = c_; return k_cuda_tc_gemm(&c->g, kb_S); }
/* cuBLAS on a k_tc_gemm's operands (bf16 / f16 in, fp32 compute and out): row-major C[m][n] = sum_k A(m, k)
 * B(n, k) is column-major C^T = op(B) op(A), op by each operand's major. */
int kb_tc_blas(const k_tc_gemm *g)
{
    float one = 1, zero = 0;
    int ty = g->type == K_CUDA_MM_BF16 ? 14 /* CUDA_R_16BF */ : 2 /* CUDA_R_16F */;
    return kb_ref.gemm_ex(kb_ref.h_blas, g->b_kfast ? 1 : 0, g->a_kfast ? 0 : 1, g->n, g->m, g->k, &one, g->b, ty,
                          g->ldb, g->a, ty, g->lda, &zero, g->c, 0 /* CUDA_R_32F */, g->ldc, 68 /* CUBLAS_COMPUTE_32F */,
                          -1)
               ? -1 : 0;
}
static int tc_blas(void *c_) { return kb_tc_blas(&((tc_ctx *)c_)->g); }
static int tf_ours(void *c_)
{
    tc_ctx *c = c_;
    return k_cuda_linear_fwd_mm(K_CUDA_MM_TF32, c->n, c->n, c->n, c->x, c->w, NULL, NULL, c->y, c->ws, kb_S);
}
static int tf_blas(void *c_)
{
    tc_ctx *c = c_;
    float one = 1, zero = 0;
    if (kb_ref.set_math_blas(kb_ref.h_blas, 3 /* CUBLAS_TF32_TENSOR_OP_MATH */)) return -1;
    int rc = kb_ref.sgemm(kb_ref.h_blas, 1, 0, c->n, c->n, c->n, &one, c->w, c->n, c->x, c->n, &zero, c->y, c->n);
    return kb_ref.set_math_blas(kb_ref.h_blas, 0) || rc ? -1 : 0;
}

static void bench_gemm(int wgmma, int M)
{
    tc_ctx c = {.n = M};
    size_t e = (size_t)M * M;
    void *a, *b;
    if (port_dev_malloc(&a, e * 2, "tc A") || port_dev_malloc(&b, e * 2, "tc B")) return;
    c.x = kb_dbuf(e), c.w = kb_dbuf(e), c.y = kb_dbuf(e);
    k_cuda_f32_to_bf16(e, c.x, a, kb_S), k_cuda_f32_to_bf16(e, c.w, b, kb_S);
    c.g = (k_tc_gemm){.type = K_CUDA_MM_BF16, .m = M, .n = M, .k = M, .a = a, .b = b, .lda = M, .ldb = M,
                      .a_kfast = 1, .b_kfast = 1, .c = c.y, .ldc = M};
    double flop = 2.0 * M * M * M;
    char shape[40], tf_shape[40];
    snprintf(shape, sizeof shape, "%d^3, fp32 accumulate", M);
    snprintf(tf_shape, sizeof tf_shape, "%d^3 (linear fwd)", M);
    int blas = kb_ref.gemm_ex != NULL, tma = wgmma && k_cuda_tma_on();
    tc_row(tma ? "gemm bf16 (TMA)" : wgmma ? "gemm bf16 (wgmma)" : "gemm bf16 (mma)", shape, kb_time_us(tc_ours, &c),
           flop, blas ? kb_time_us(tc_blas, &c) : -1, K_CUDA_MM_BF16);
    if (tma) { /* wg_gemm (cp.async) beside TMA's wt_gemm: the same product */
        char why[200];
        const char *was = rt_env_str(RT_ENV_TMA);
        char keep[16];
        snprintf(keep, sizeof keep, "%s", was ? was : "");
        setenv("DDPRT_TMA", "0", 1);
        k_cuda_tma_setup(why, sizeof why);
        tc_row("gemm bf16 (wgmma)", shape, kb_time_us(tc_ours, &c), flop, blas ? kb_time_us(tc_blas, &c) : -1,
               K_CUDA_MM_BF16);
        setenv("DDPRT_TMA", "1", 1);
        k_cuda_tma_setup(why, sizeof why);
        if (was) setenv("DDPRT_TMA", keep, 1);
        else unsetenv("DDPRT_TMA");
    }
    k_cuda_f32_to_f16(e, c.x, a, kb_S), k_cuda_f32_to_f16(e, c.w, b, kb_S);
    c.g.type = K_CUDA_MM_F16;
    tc_row(tma ? "gemm f16 (TMA)" : wgmma ? "gemm f16 (wgmma)" : "gemm f16 (mma)", shape, kb_time_us(tc_ours, &c), flop,
           blas ? kb_time_us(tc_blas, &c) : -1, K_CUDA_MM_F16);
    if (!port_dev_malloc(&c.ws, k_cuda_linear_workspace(M, M, M) + 256, "workspace")) {
        int tblas = kb_ref.sgemm && kb_ref.set_math_blas, wtf = wgmma && k_cuda_tf32_wgmma_on();
        if (wtf) /* TF32 on wgmma (TMA's wt_gemm where on, else wgtf_gemm), then mma.sync's tf_gemm beside it */
            tc_row(tma ? "gemm tf32 (TMA)" : "gemm tf32 (wgmma)", tf_shape, kb_time_us(tf_ours, &c), flop, tblas ? kb_time_us(tf_blas, &c) : -1,
                   K_CUDA_MM_TF32);
        int was = k_cuda_tf32_set_wgmma(0);
        tc_row("gemm tf32 (mma)", tf_shape, kb_time_us(tf_ours, &c), flop, tblas ? kb_time_us(tf_blas, &c) : -1,
               K_CUDA_MM_TF32);
        k_cuda_tf32_set_wgmma(was);
    }
    port_dev_free(a), port_dev_free(b), port_dev_free(c.x), port_dev_free(c.w), port_dev_free(c.y);
    port_dev_free(c.ws);
}

/* ---- the convolutions: ours as trained (under bf16 x, y and dy channels last, x and y
 * 16-bit, the weights' 16-bit block made once as an update makes it: nn/ops/conv.c's
 * flags), cuDNN channels-last */
typedef struct tcc_ctx {
    k_conv_shape sh;
    int mm;
    void *x16, *y16, *ref_ws, *blk;
    float *w, *b, *dy, *dx, *dw, *db, *y;
    uint16_t *w16, *dy16, *dx16, *dw16;
    void *ws, *xd, *yd, *wd, *cd;
    int algo[3];
    size_t ref_ws_bytes;
} tcc_ctx;

/* the trained flags (16-bit: NHWC x, y, dy, the weights' block) */
static int tcc_x16(const tcc_ctx *t)
{
    return t->mm == K_CUDA_MM_TF32 ? 0 : K_CUDA_MM_X16 | K_CUDA_MM_XNHWC | K_CUDA_MM_YNHWC | K_CUDA_MM_W16P;
}
static int tcc_fwd(void *p)
{
    tcc_ctx *t = p;
    int y16 = t->mm == K_CUDA_MM_TF32 ? 0 : K_CUDA_MM_Y16;
    return k_cuda_conv2d_fwd_mm(t->mm | tcc_x16(t) | y16, &t->sh, t->x16, t->w, t->blk, t->b,
                                y16 ? t->y16 : (void *)t->y, t->ws, kb_S);
}
static int tcc_bwd(void *p)
{
    tcc_ctx *t = p;
    return k_cuda_conv2d_bwd_mm(t->mm | tcc_x16(t), &t->sh, t->x16, t->w, t->blk, t->dy, t->dx, t->dw, t->db, t->ws,
                                kb_S);
}
static int dnn16_fwd(void *p)
{
    tcc_ctx *t = p;
    float one = 1, zero = 0;
    return kb_ref.fwd(kb_ref.h_dnn, &one, t->xd, t->x16, t->wd, t->w16, t->cd, t->algo[0], t->ref_ws,
                      t->ref_ws_bytes, &zero, t->yd, t->y16) ? -1 : 0;
}
static int dnn16_bwd(void *p) /* the input's gradient and the weights', as ours */
{
    tcc_ctx *t = p;
    float one = 1, zero = 0;
    return kb_ref.bwdd(kb_ref.h_dnn, &one, t->wd, t->w16, t->yd, t->dy16, t->cd, t->algo[1], t->ref_ws,
                       t->ref_ws_bytes, &zero, t->xd, t->dx16) ||
                   kb_ref.bwdf(kb_ref.h_dnn, &one, t->xd, t->x16, t->yd, t->dy16, t->cd, t->algo[2], t->ref_ws,
                               t->ref_ws_bytes, &zero, t->wd, t->dw16)
               ? -1 : 0;
}

/* cuDNN on bf16 NHWC tensors, fp32 compute, tensor-op math, the heuristics' first
 * algorithm for each pass (the _v7 queries' perf struct starts with the algorithm
 * and its status); 0 when every pass has one. */
static int dnn16_setup(tcc_ctx *t)
{
    enum { NHWC = 1, BF16 = 9, XCORR = 1, F32 = 0, TENSOR_OP = 1 };
    const k_conv_shape *s = &t->sh;
    fn_cudnn_algo q[3] = {kb_ref.fwd_algo, kb_ref.bwdd_algo, kb_ref.bwdf_algo};
    if (!kb_ref.fwd || !q[0] || !q[1] || !q[2] || !kb_ref.bwdd || !kb_ref.bwdd_ws || kb_ref.tensor(&t->xd) ||
        kb_ref.tensor(&t->yd) || kb_ref.filter(&t->wd) || kb_ref.conv(&t->cd) ||
        kb_ref.set_tensor(t->xd, NHWC, BF16, s->n, s->c, s->h, s->w) ||
        kb_ref.set_tensor(t->yd, NHWC, BF16, s->n, s->k, s->p, s->q) ||
        kb_ref.set_filter(t->wd, BF16, NHWC, s->k, s->c, s->r, s->s) ||
        kb_ref.set_conv(t->cd, s->pad, s->pad, s->stride, s->stride, 1, 1, XCORR, F32) ||
        kb_ref.set_math(t->cd, TENSOR_OP))
        return -1;
    void *a[3][4] = {{t->xd, t->wd, t->cd, t->yd}, {t->wd, t->yd, t->cd, t->xd}, {t->xd, t->yd, t->cd, t->wd}};
    fn_cudnn_ws wsq[3] = {kb_ref.fwd_ws, kb_ref.bwdd_ws, kb_ref.bwdf_ws};
    for (int i = 0; i < 3; i++) {
        int perf[16] = {0}, got = 0; /* one cudnnConvolution*AlgoPerf_t: 48 bytes */
        size_t b = 0;
        if (q[i](kb_ref.h_dnn, a[i][0], a[i][1], a[i][2], a[i][3], 1, &got, perf) || got < 1 || perf[1] ||
            wsq[i](kb_ref.h_dnn, a[i][0], a[i][1], a[i][2], a[i][3], perf[0], &b))
            return -1;
        t->algo[i] = perf[0];
        if (b > t->ref_ws_bytes) t->ref_ws_bytes = b;
    }
    return port_dev_malloc(&t->ref_ws, t->ref_ws_bytes + 256, "cuDNN workspace");
}

static void *d16(size_t n, const char *what)
{
    void *p;
    float *f = kb_dbuf(n);
    if (!f || port_dev_malloc(&p, n * 2 + 256, what)) return NULL;
    k_cuda_f32_to_bf16(n, f, p, kb_S);
    port_stream_sync(kb_S, what), port_dev_free(f);
    return p;
}

/* An r x r conv, stride st, padding r / 2 (ResNet's). */
static void bench_conv_tc(const char *name, int n, int ci, int h, int co, int r, int st, int mm)
{
    tcc_ctx t = {.sh = {.n = n, .c = ci, .h = h, .w = h, .k = co, .r = r, .s = r, .stride = st, .pad = r / 2},
                 .mm = mm};
    k_conv_shape_init(&t.sh);
    size_t nx = (size_t)n * ci * h * h, ny = (size_t)n * co * t.sh.p * t.sh.q, nw = (size_t)co * ci * r * r;
    int f32 = mm == K_CUDA_MM_TF32;
    t.x16 = f32 ? (void *)kb_dbuf(nx) : d16(nx, "x16");
    t.y16 = d16(ny, "y16"), t.w16 = d16(nw, "w16"), t.dy16 = d16(ny, "dy16"), t.dx16 = d16(nx, "dx16");
    t.dw16 = d16(nw, "dw16");
    t.w = kb_dbuf(nw), t.b = kb_dbuf(co), t.y = kb_dbuf(ny), t.dy = kb_dbuf(ny), t.dx = kb_dbuf(nx);
    t.dw = kb_dbuf(nw), t.db = kb_dbuf(co);
    const int mmx = mm | tcc_x16(&t);
    size_t nb = k_cuda_conv2d_w16_elems(mmx, &t.sh);
    if (port_dev_malloc(&t.ws, k_cuda_conv2d_workspace_mm(mmx, &t.sh) + 256, "workspace") ||
        (nb && (port_dev_malloc(&t.blk, nb * 2 + 256, "weight block") ||
                k_cuda_conv2d_w16_prep(mmx, &t.sh, t.w, t.blk, kb_S))))
        return;
    int have_ref = !f32 && dnn16_setup(&t) == 0;
    double flop = 2.0 * ny * ci * r * r;
    char shape[64], nm[40];
    snprintf(shape, sizeof shape, "n%d c%d %dx%d k%d %dx%d s%d p%d", n, ci, h, h, co, r, r, st, r / 2);
    snprintf(nm, sizeof nm, "%s fwd", name);
    tc_row(nm, shape, kb_time_us(tcc_fwd, &t), flop, have_ref ? kb_time_us(dnn16_fwd, &t) : -1, mm);
    snprintf(nm, sizeof nm, "%s bwd", name);
    tc_row(nm, shape, kb_time_us(tcc_bwd, &t), 2 * flop, have_ref ? kb_time_us(dnn16_bwd, &t) : -1, mm);
    void *all[] = {t.x16, t.y16, t.w16, t.dy16, t.dx16, t.dw16, t.w, t.b, t.y, t.dy, t.dx, t.dw, t.db, t.ws, t.ref_ws,
                   t.blk};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) port_dev_free(all[i]);
}

/* ---- attention at bf16, qkv and y in 16 bits as --amp bf16 stores them */
typedef struct att_ctx { int b, t, h, hd; void *qkv, *y; float *lse, *dy, *dq; void *ws; } att_ctx;
enum { ATT_MM = K_CUDA_MM_BF16 | K_CUDA_MM_X16 | K_CUDA_MM_Y16 };
static int att_f(void *p)
{
    att_ctx *c = p;
    return k_cuda_attention_fwd_mm(ATT_MM, c->b, c->t, c->h, c->hd, c->qkv, c->y, c->lse, kb_S);
}
static int att_b(void *p)
{
    att_ctx *c = p;
    return k_cuda_attention_bwd_mm(ATT_MM, c->b, c->t, c->h, c->hd, c->qkv, c->y, c->lse, c->dy, c->dq, c->ws, kb_S);
}

static void bench_attention_tc(int b, int t, int h, int hd)
{
    size_t nq = (size_t)b * t * 3 * h * hd, ny = (size_t)b * t * h * hd;
    att_ctx c = {.b = b, .t = t, .h = h, .hd = hd, .qkv = d16(nq, "qkv16"), .y = d16(ny, "y16"),
                 .lse = kb_dbuf((size_t)b * h * t), .dy = kb_dbuf(ny), .dq = kb_dbuf(nq)};
    if (port_dev_malloc(&c.ws, k_cuda_attention_workspace(b, t, h, hd) + 256, "workspace")) return;
    char shape[64];
    snprintf(shape, sizeof shape, "b%d t%d h%d hd%d causal", b, t, h, hd);
    double flop = 2.0 * 2 * b * h * ((double)t * (t + 1) / 2) * hd;
    if (att_f(&c)) return; /* lse for the backward */
    tc_row("attention bf16 fwd", shape, kb_time_us(att_f, &c), flop, -1, K_CUDA_MM_BF16);
    tc_row("attention bf16 bwd", shape, kb_time_us(att_b, &c), 2 * flop, -1, K_CUDA_MM_BF16);
    port_dev_free(c.qkv), port_dev_free(c.y), port_dev_free(c.lse), port_dev_free(c.dy), port_dev_free(c.dq);
    port_dev_free(c.ws);
}

void kb_tensor_cores(int wgmma, int smoke)
{
    if (smoke) { /* edge tiles everywhere */
        bench_gemm(wgmma, 200);
        kb_gemm_tiles(1);
        bench_conv_tc("conv bf16", 2, 24, 9, 40, 3, 1, K_CUDA_MM_BF16);
        bench_conv_tc("conv bf16", 2, 64, 9, 64, 3, 2, K_CUDA_MM_BF16); /* im2col where TMA is on */
        bench_conv_tc("conv tf32", 2, 24, 9, 40, 3, 1, K_CUDA_MM_TF32);
        bench_attention_tc(1, 70, 2, 64);
        return;
    }
    printf("# tensor cores (%s; reference: cuBLAS at the same precision, fp32 compute; cuDNN bf16 channels-last, "
           "its heuristics' algorithms)\n", wgmma ? "wgmma where a 128-tile product runs, else mma.sync" : "mma.sync");
    bench_gemm(wgmma, 4096);
    kb_gemm_tiles(0);
    bench_conv_tc("resnet 56x56 bf16", 32, 64, 56, 64, 3, 1, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 56>28 s2 bf16", 32, 64, 56, 128, 3, 2, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 1x1 s2 bf16", 32, 64, 56, 128, 1, 2, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 28x28 bf16", 32, 128, 28, 128, 3, 1, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 14x14 bf16", 32, 256, 14, 256, 3, 1, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 7x7 bf16", 32, 512, 7, 512, 3, 1, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 28x28 tf32", 32, 128, 28, 128, 3, 1, K_CUDA_MM_TF32);
    bench_attention_tc(8, 256, 6, 64);
    bench_attention_tc(8, 1024, 12, 64); /* GPT-2 124M at T 1024, batch 8 */
}
