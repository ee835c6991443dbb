/* Compute kernels (CPU). Float32, NCHW, contiguous. No kernel allocates: scratch
 * comes from the caller's workspace (sized by the *_workspace functions at start-up).
 * Backward kernels overwrite (do not accumulate into) dx, dw, db; a NULL dx means
 * "not needed" (the first layer). CUDA twins live in kernels/cuda with the same names
 * prefixed k_cuda_. */
#ifndef K_H
#define K_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/k_settings.h"

/* Threads used by the kernels (a pool created once; 1 = run on the caller). Work is
 * split so that every output is summed in the same order whatever the thread count:
 * results are bitwise identical for any n. */
void k_set_threads(int n);
int k_threads(void);
/* Which SIMD path the runtime dispatch picked: "avx512bf16" (avx512 plus vdpbf16ps for
 * the bf16 kernels), "avx512", "avx2" or "generic". The best the CPU supports, unless
 * DDPRT_ISA=generic|avx2|avx512|avx512bf16 asks for a lower one. */
const char *k_isa(void);
/* Switches the path (tests, benchmarks): NULL = the best supported. Returns -1 (and
 * changes nothing) for an unknown name or one this CPU lacks. Not thread-safe with
 * kernels running. */
int k_set_isa(const char *name);
/* The fp32 CPU 3x3 stride-1 pad-1 convs' algorithm: "auto" (Winograd F(2x2,3x3) where
 * measured faster on this ISA path), "direct", "winograd" (F(2x2,3x3) on every such conv),
 * "winograd4" (F(4x4,3x3) forward and dX on 14x14+ planes with 64+ channels, else
 * F(2x2,3x3)); NULL: DDPRT_CONV's (read at
 * the next conv). -1 (nothing changed) for another name. Not thread-safe with kernels
 * running. The workspace sizes do not depend on it. */
int k_conv_set_algo(const char *name);
/* The machine's limits on the path in use, for benchmark tables (k_probe.c): one
 * core's FMA peak in GFLOP/s and its copy bandwidth (read + written bytes per second,
 * GB/s) between two buffers of `bytes` each, both by the calling thread's CPU time. */
double k_probe_fma_gflops(void);
/* The same with vdpbf16ps (bf16 pairs, fp32 sums); 0 without AVX512-BF16. */
double k_probe_bf16_gflops(void);
/* --amp bf16's linear layers and convs on AVX512-BF16: "dpbf16" (vdpbf16ps GEMMs), "fma"
 * (bf16-rounded operands through the fp32 kernels), "amx" (the linear layers on AMX
 * tiles where the CPU has them; convs as fma), "auto" (amx where there, else fma on
 * Intel, else dpbf16); NULL: DDPRT_BF16_GEMM's. -1 (nothing changed) for another name.
 * Not thread-safe with kernels running; workspace sizes do not depend on it. */
int k_bf16_set_gemm(const char *name);
/* 1: the linear layers run the native bf16 GEMMs now (vdpbf16ps or AMX: AVX512-BF16 path
 * and the choice above), 0: bf16-rounded operands through the fp32 GEMMs. */
int k_bf16_linear_dot(void);
/* The same for the convs (vdpbf16ps kernels or rounded operands through the fp32 ones). */
int k_bf16_conv_dot(void);
/* fp32 linear layers' matmul precision, as PyTorch's
 * torch.set_float32_matmul_precision: "highest" (NULL too: fp32 FMAs, the default) or
 * "high" (each operand split into two bf16 parts, three products summed in fp32 on Intel
 * AMX tiles: ~2^-16 relative per product, about 2x the fp32 GEMMs at GPT's shapes; where
 * the CPU has no AMX, as highest). -1 for another name. Not thread-safe with kernels
 * running. */
int k_set_matmul_precision(const char *name);
/* 1 when "high" is set and this CPU runs it (AMX). */
int k_f32_matmul_high(void);
double k_probe_copy_gbps(size_t bytes);

typedef struct k_conv_shape {
    int n, c, h, w;     /* input */
    int k, r, s;        /* output channels, kernel height/width */
    int stride, pad;
    int p, q;           /* output height/width; filled by k_conv_shape_init */
} k_conv_shape;
void k_conv_shape_init(k_conv_shape *sh);
/* Bytes of scratch for fwd and bwd of this shape, and of any batch <= sh->n; it does
 * not depend on the thread count and keeps nothing between calls, so one buffer of
 * the largest size can serve every conv layer. */
size_t k_conv2d_workspace(const k_conv_shape *sh);
/* x[n,c,h,w] * w[k,c,r,s] + b[k] -> y[n,k,p,q] */
void k_conv2d_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b,
                  float *y, void *ws);
void k_conv2d_bwd(const k_conv_shape *sh, const float *x, const float *w, const float *dy,
                  float *dx, float *dw, float *db, void *ws);
/* Which parts of this conv k_conv2d_fwd / _bwd run now as Winograd (benchmarks' tables):
 * 1 forward, 2 dX, 4 dW, 8: the forward and dX as F(4x4,3x3) (else F(2x2,3x3)), 16: they
 * run channels-last (k_conv_winoc.c); 0: all direct. */
int k_conv2d_winograd_parts(const k_conv_shape *sh);

/* Mixed precision (--amp bf16): the same convolution and linear with bf16 operands
 * (x, w, dy rounded to nearest even: rt/half.h's rt_f32_to_bf16) and fp32 accumulation; inputs, outputs, bias and
 * gradients stay fp32 in memory. vdpbf16ps where the CPU has it (k_isa()
 * "avx512bf16"), else rounded operands through the fp32 kernels. Results are
 * independent of the thread count; the two paths differ only in fp32 summation order
 * (and vdpbf16ps flushing subnormal operands).
 * The workspace covers both paths (the ISA may be switched between calls). */
size_t k_conv2d_bf16_workspace(const k_conv_shape *sh);
void k_conv2d_fwd_bf16(const k_conv_shape *sh, const float *x, const float *w, const float *b,
                       float *y, void *ws);
void k_conv2d_bwd_bf16(const k_conv_shape *sh, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db, void *ws);
size_t k_linear_bf16_workspace(int n, int in, int out);
void k_linear_fwd_bf16(int n, int in, int out, const float *x, const float *w, const float *b, float *y,
                       void *ws);
void k_linear_bwd_bf16(int n, int in, int out, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db, void *ws);

/* y[n,out] = x[n,in] @ w[out,in]^T + b[out] (PyTorch nn.Linear layout) */
void k_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y);
void k_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                  float *dx, float *dw, float *db);

void k_relu_fwd(size_t n, const float *x, float *y);
/* dx = dy where y > 0 (y is the relu output) */
void k_relu_bwd(size_t n, const float *y, const float *dy, float *dx);
/* k_add(dy, a) then k_relu_bwd in one pass (the same bits); dx may be dy. */
void k_relu_bwd_add(size_t n, const float *y, const float *dy, const float *a, float *dx);
/* Leaky relu: y = x > 0 ? x : slope * x; dx = x > 0 ? dy : slope * dy (from the
 * input x, so any slope works). dx may be dy. */
void k_leaky_relu_fwd(size_t n, float slope, const float *x, float *y);
void k_leaky_relu_bwd(size_t n, float slope, const float *x, const float *dy, float *dx);

/* Max pool, kernel ks, stride st, no padding; idx records the argmax (offset in the
 * input plane) for backward. */
void k_maxpool2d_fwd(int n, int c, int h, int w, int ks, int st, const float *x, float *y,
                     int32_t *idx);
void k_maxpool2d_bwd(int n, int c, int h, int w, int ks, int st, const float *dy,
                     const int32_t *idx, float *dx);

/* Counter-based RNG: uniform in [0,1) from (seed, counter); the same on CPU and GPU
 * and independent of threading. Definition (splitmix64, mix = its finaliser):
 * key = mix(seed ^ 0x6A09E667F3BCC909); z = mix(key + (counter+1)*0x9E3779B97F4A7C15);
 * u = (z >> 40) * 2^-24. Dropout keeps an element when u >= p. */
float k_rand_uniform(uint64_t seed, uint64_t counter);
/* Dropout with probability p, survivors scaled by 1/(1-p); mask[i] = 1 when kept.
 * Element i uses counter offset + i. */
void k_dropout_fwd(size_t n, float p, uint64_t seed, uint64_t offset, const float *x,
                   float *y, uint8_t *mask);
void k_dropout_bwd(size_t n, float p, const uint8_t *mask, const float *dy, float *dx);
/* Dropout2d: whole channels (n*c planes of hw elements); mask has n*c entries and
 * plane j uses counter offset + j. */
void k_dropout2d_fwd(int n, int c, int hw, float p, uint64_t seed, uint64_t offset,
                     const float *x, float *y, uint8_t *mask);
void k_dropout2d_bwd(int n, int c, int hw, float p, const uint8_t *mask, const float *dy,
                     float *dx);

/* Numerically stable log_softmax over rows of length classes. */
void k_log_softmax_fwd(int n, int classes, const float *x, float *y);
/* Sum over rows of -logp[i, label[i]] (the caller divides for the mean); also sets
 * *correct (when not NULL) to the number of rows whose argmax (first max) equals the
 * label. Rows with a label outside [0, classes) (ignore_index) count nowhere and get
 * a zero gradient below. */
double k_nll_loss_sum(int n, int classes, const float *logp, const int32_t *labels, long *correct);
/* Gradient of mean NLL(log_softmax(x)) w.r.t. x: scale * (softmax - onehot), where
 * scale = 1/n_total. */
void k_log_softmax_nll_bwd(int n, int classes, const float *logp, const int32_t *labels,
                           float scale, float *dx);
/* Cross-entropy on logits (F.cross_entropy, reduction "sum"): log_softmax into logp,
 * then the NLL sum; its gradient is k_log_softmax_nll_bwd on that logp. */
double k_cross_entropy_fwd(int n, int classes, const float *logits, const int32_t *labels, float *logp,
                           long *correct);

/* SGD with momentum, PyTorch semantics: g' = g + wd*p; v = m*v + (1-dampening)*g'
 * (v = g' on the first step); p -= lr * (nesterov ? g' + m*v : v). Each product and
 * sum is rounded on its own (no fused multiply-add), on every ISA and on the GPU
 * (k_cuda_sgd_step): the same bits everywhere. */
typedef struct k_sgd_cfg { float lr, momentum, dampening, weight_decay; int nesterov; } k_sgd_cfg;
void k_sgd_step(size_t n, const k_sgd_cfg *cfg, int first_step, float *p, const float *g, float *v);

/* Kaiming-uniform (a = sqrt 5) as PyTorch's Conv2d/Linear reset_parameters:
 * weight ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (gain*sqrt(3/fan_in) with that a),
 * bias ~ U(-1/sqrt(fan_in), +). Uses k_rand_uniform(seed, offset + i). */
void k_init_uniform(size_t n, float bound, uint64_t seed, uint64_t offset, float *out);
/* ---- Layer-graph ops (ResNet, TextCNN). Same conventions: no allocation, backward
 * overwrites its outputs, results independent of the thread count. ---- */

/* Max pool with padding (padded cells never win, as PyTorch's -inf padding):
 * output p = (h + 2*pad - ks)/st + 1 (q likewise); idx = argmax offset in the input
 * plane. k_maxpool2d_fwd/bwd are the pad = 0 case. */
void k_maxpool2d_pad_fwd(int n, int c, int h, int w, int ks, int st, int pad, const float *x,
                         float *y, int32_t *idx);
void k_maxpool2d_pad_bwd(int n, int c, int h, int w, int ks, int st, int pad, const float *dy,
                         const int32_t *idx, float *dx);

/* BatchNorm2d over x[n,c,hw], split so SyncBatchNorm can reduce the per-channel sums
 * across ranks between the steps.
 *   k_bn_stats: per-channel mean and biased variance of x (double accumulation).
 *   k_bn_fwd:   y = (x - mean) * invstd * gamma + beta  (invstd = 1/sqrt(var + eps),
 *               computed by the caller); gamma/beta NULL = 1/0.
 *   k_bn_bwd_sums: dbeta[c] = sum dy, dxhat_sum[c] = sum dy * xhat (= dgamma).
 *   k_bn_bwd_dx: dx = gamma*invstd * (dy - dbeta/m - xhat*dgamma/m), m = the count the
 *               statistics were taken over (n*hw, or the global count under SyncBN).
 * Running statistics are the caller's (momentum update with the unbiased variance). */
void k_bn_stats(int n, int c, int hw, const float *x, float *mean, float *var);
void k_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
              const float *gamma, const float *beta, float *y);
void k_bn_bwd_sums(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                   const float *dy, float *dgamma, float *dbeta);
void k_bn_bwd_dx(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                 const float *gamma, const float *dgamma, const float *dbeta, double m,
                 const float *dy, float *dx);
/* ReLU's backward after a BatchNorm whose output was not kept: dx = dy where
 * k_bn_fwd(x) > 0, else 0, the BN output re-made span by span (the same bits as
 * k_bn_fwd's). dx may be dy. */
void k_bn_relu_bwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                   const float *gamma, const float *beta, const float *dy, float *dx);
/* BatchNorm then ReLU as one (nn/plan.c's fusion; the very bits of the two apart):
 * k_bn_relu_fwd writes relu(k_bn_fwd(x)) without making the BN output; _bwd_sums and
 * _bwd_dx are k_bn_bwd_sums / k_bn_bwd_dx of ReLU's gradient dy masked where the BN
 * output is <= 0 (re-made from x, as k_bn_relu_bwd), without storing the masked dy.
 * dx may be dy. */
void k_bn_relu_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                   const float *gamma, const float *beta, float *y);
/* relu(k_bn_fwd(x) + s): BN, the residual add (BN's output first) and ReLU in one pass. */
void k_bn_add_relu_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                       const float *gamma, const float *beta, const float *s, float *y);
void k_bn_relu_bwd_sums(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                        const float *gamma, const float *beta, const float *dy, float *dgamma, float *dbeta);
void k_bn_relu_bwd_dx(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                      const float *gamma, const float *beta, const float *dgamma, const float *dbeta, double m,
                      const float *dy, float *dx);

/* Adaptive average pool to 1x1: y[n,c] = mean of x[n,c,hw]; backward spreads dy/hw. */
void k_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y);
void k_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx);

/* y = a + b (residual add); y may alias a or b. */
void k_add(size_t n, const float *a, const float *b, float *y);
/* y = max(0, a + b): k_add then k_relu_fwd in one pass (the same bits); y may alias. */
void k_add_relu(size_t n, const float *a, const float *b, float *y);

/* Embedding, channels-first output for conv1d: y[i, d, t] = table[ids[i*len + t], d]
 * (y is [n, dim, len]). Backward: dtable is zeroed, then each used row accumulates its
 * gradient (in token order: deterministic). Ids outside [0, vocab) are a caller bug. */
void k_embedding_fwd(int n, int len, int dim, const int32_t *ids, const float *table, float *y);
void k_embedding_bwd(int n, int len, int dim, int vocab, const int32_t *ids, const float *dy,
                     float *dtable);
/* The same accumulation onto dtable as it is (a caller that knows it zero: the same bits
 * as k_embedding_bwd without writing every row). */
void k_embedding_bwd_add(int n, int len, int dim, int vocab, const int32_t *ids, const float *dy,
                         float *dtable);

/* Max over time: y[n,c] = max_t x[n,c,t], idx[n,c] = its t (first max). */
void k_max_time_fwd(int n, int c, int len, const float *x, float *y, int32_t *idx);
void k_max_time_bwd(int n, int c, int len, const float *dy, const int32_t *idx, float *dx);
/* k_max_time_fwd of relu(x) (k_relu_fwd's) without making relu(x): the same y and idx. */
void k_max_time_relu_fwd(int n, int c, int len, const float *x, float *y, int32_t *idx);
/* Backward of conv2d -> relu -> max over time for a conv whose output has one row
 * (sh->p == 1, conv1d): from the max's gradient gy[n,k], its output ym[n,k] (the relu's
 * mask: only ym > 0 passes) and argmax idx[n,k], the conv's dw, db (NULL: no bias) and
 * dx (NULL: not needed), with n*k*c*r*s multiply-adds instead of the dense q times
 * that. Equal to the dense chain up to summation order. Workspace: the bytes below
 * (0 when p != 1: not applicable). */
/* Its forward half: k_max_time_relu_fwd of k_conv2d_fwd's output (p == 1) without
 * writing that output (the same bits); ym, idx are [n, k]. */
size_t k_conv2d_fwd_maxt_workspace(const k_conv_shape *sh);
void k_conv2d_fwd_maxt(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *ym,
                       int32_t *idx, void *ws);
size_t k_conv2d_maxt_workspace(const k_conv_shape *sh);
void k_conv2d_bwd_maxt(const k_conv_shape *sh, const float *x, const float *w, const float *gy,
                       const float *ym, const int32_t *idx, float *dx, float *dw, float *db, void *ws);
/* Index of the first element that is NaN or infinite, or -1 when all are finite. */
long k_first_nonfinite(size_t n, const float *x);
#endif
