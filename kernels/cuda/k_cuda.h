/* CUDA kernels: the device twins of kernels/k.h (same names with k_cuda_, same
 * layouts: f32 NCHW contiguous, PyTorch nn.Linear weights, same semantics), plus the
 * conversion and reduction kernels the staged allreduce and mixed precision use.
 * Plain C interface; the .cu files behind it are hand-written (no cuBLAS, no cuDNN).
 *
 * Every pointer is device memory unless said otherwise. Every call is asynchronous on
 * `s` and returns 0, or -1 after port_cuda_fail() recorded a line naming the kernel,
 * its shapes and CUDA's error. Errors that surface later (at a synchronisation) are
 * reported by the port and name the last kernel launched (k_cuda_last_kernel);
 * DDPRT_CUDA_SYNC=1 synchronises after every launch so they name the exact one.
 *
 * Determinism: no atomics on floats anywhere. Reductions (split-K GEMM, bias
 * gradients, loss sums) add in a fixed order that depends on the shapes only, never on
 * the GPU model, so a run repeats bit for bit. The RNG, dropout, relu, max pool, SGD,
 * init and the f16/bf16 conversions match the CPU kernels bit for bit; conv, linear
 * and softmax match them to rounding. */
#ifndef K_CUDA_H
#define K_CUDA_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/k.h"
#include "kernels/k_optim.h"
#include "ports/cuda/port_cuda.h"

/* Scratch bytes the conv / linear kernels need (split-K partial sums when the output
 * is too small to fill the GPU); 0 when none. Plan it once at start-up from the
 * largest shapes and pass it to every call (unlike k.h, linear forward takes one). */
size_t k_cuda_conv2d_workspace(const k_conv_shape *sh);
/* conv's at precision mm (K_CUDA_MM_*): with bf16 / f16 products it holds the 16-bit
 * NHWC copies of x, w, dy too (k_cuda_conv.cu; taken where channels are multiples of 8
 * and ws is 16-byte aligned); k_cuda_conv2d_workspace is the largest over precisions.
 * A NULL ws: no split-K and no copies (the gathers). mm with K_CUDA_MM_W16P: without the
 * weights' copy (the caller passes k_cuda_conv2d_w16_prep's block; the calls then refuse
 * W16P without a 16-byte aligned block). mm with K_CUDA_MM_XNHWC and X16: without x's
 * copy (x is read where it lies); the calls must then take the same flags. */
size_t k_cuda_conv2d_workspace_mm(int mm, const k_conv_shape *sh);
/* linear's (Conv1D's) at precision mm: with bf16 / f16 products the backward's 16-bit copy
 * of dy too (where out % 8 == 0); the plain forms are the largest over precisions. */
size_t k_cuda_linear_workspace(int n, int in, int out);
size_t k_cuda_linear_workspace_mm(int mm, int n, int in, int out);

int k_cuda_conv2d_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *y,
                      void *ws, port_stream s);
/* dx may be NULL (first layer). Overwrites dx, dw, db. */
int k_cuda_conv2d_bwd(const k_conv_shape *sh, const float *x, const float *w, const float *dy, float *dx,
                      float *dw, float *db, void *ws, port_stream s);

int k_cuda_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y,
                      void *ws, port_stream s);
int k_cuda_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                      float *dw, float *db, void *ws, port_stream s);

int k_cuda_relu_fwd(size_t n, const float *x, float *y, port_stream s);
int k_cuda_relu_bwd(size_t n, const float *y, const float *dy, float *dx, port_stream s);
int k_cuda_leaky_relu_fwd(size_t n, float slope, const float *x, float *y, port_stream s);
int k_cuda_leaky_relu_bwd(size_t n, float slope, const float *x, const float *dy, float *dx, port_stream s);
/* SiLU: k_silu_fwd/_bwd's device twins (kernels/k_math.h: the same bits); dx may be dy. */
int k_cuda_silu_fwd(size_t n, const float *x, float *y, port_stream s);
int k_cuda_silu_bwd(size_t n, const float *x, const float *dy, float *dx, port_stream s);

int k_cuda_maxpool2d_fwd(int n, int c, int h, int w, int ks, int st, const float *x, float *y, int32_t *idx,
                         port_stream s);
int k_cuda_maxpool2d_bwd(int n, int c, int h, int w, int ks, int st, const float *dy, const int32_t *idx,
                         float *dx, port_stream s);

int k_cuda_dropout_fwd(size_t n, float p, uint64_t seed, uint64_t offset, const float *x, float *y,
                       uint8_t *mask, port_stream s);
int k_cuda_dropout_bwd(size_t n, float p, const uint8_t *mask, const float *dy, float *dx, port_stream s);
int k_cuda_dropout2d_fwd(int n, int c, int hw, float p, uint64_t seed, uint64_t offset, const float *x,
                         float *y, uint8_t *mask, port_stream s);
int k_cuda_dropout2d_bwd(int n, int c, int hw, float p, const uint8_t *mask, const float *dy, float *dx,
                         port_stream s);

int k_cuda_log_softmax_fwd(int n, int classes, const float *x, float *y, port_stream s);
/* out[0] = sum over rows of -logp[i, label[i]], out[1] = rows whose argmax (first
 * max) is the label; rows with labels outside [0, classes) count nowhere. out is
 * device memory (2 doubles): copy it back when the loss is wanted. */
int k_cuda_nll_loss_sum(int n, int classes, const float *logp, const int32_t *labels, double *out,
                        port_stream s);
int k_cuda_log_softmax_nll_bwd(int n, int classes, const float *logp, const int32_t *labels, float scale,
                               float *dx, port_stream s);

/* The whole optimizer update in one pass over p, g, v (cfg is read on the host). */
int k_cuda_sgd_step(size_t n, const k_sgd_cfg *cfg, int first_step, float *p, const float *g, float *v,
                    port_stream s);
/* Adam / AdamW (kernels/k_optim.h's k_adam_step: each operation rounded on its own, the
 * same bits as every CPU path) over p, g, m, v. */
int k_cuda_adam_step(size_t n, const k_adam_cfg *cfg, float *p, const float *g, float *m, float *v, port_stream s);
/* *out (device) = sum of x[i]^2 in double, in a fixed order (the same bits every run;
 * the CPU's k_sumsq to rounding); ws: k_cuda_sumsq_workspace(n) bytes of device memory. */
size_t k_cuda_sumsq_workspace(size_t n);
int k_cuda_sumsq(size_t n, const float *x, double *out, void *ws, port_stream s);
int k_cuda_init_uniform(size_t n, float bound, uint64_t seed, uint64_t offset, float *out, port_stream s);
/* The RNG itself (tests): out[i] = k_rand_uniform(seed, offset + i). */
int k_cuda_rand_uniform(size_t n, uint64_t seed, uint64_t offset, float *out, port_stream s);

/* dst[i] = a[i] + b[i] for dt = rt_dtype RT_F32, RT_F16 or RT_BF16 (the values of
 * rt/tensor.h); 16-bit types add in f32 and round to nearest even, as the host
 * reduction (transport/tp_reduce.c) does, so staged and host results agree. */
int k_cuda_reduce_sum(void *dst, const void *a, const void *b, size_t n, int dt, port_stream s);
/* x[i] *= f (AVG after SUM), f32 only. */
int k_cuda_scale(size_t n, float f, float *x, port_stream s);
/* The precision of conv's and linear's products on the device: fp32 on the CUDA cores,
 * or the tensor cores (sm_80 and newer) with operands rounded to bf16 / f16 as the CPU's
 * --amp bf16 rounds them (x, w, dy; rt/half.h), or to tf32 (--matmul-precision high:
 * round to nearest, ties away, 10 mantissa bits), and fp32 accumulation. */
enum { K_CUDA_MM_FP32, K_CUDA_MM_BF16, K_CUDA_MM_F16, K_CUDA_MM_TF32 };
/* Activations the memory plan stores in 16 bits (nn/plan.c, --amp-activations 16): flags
 * or'd into conv's and linear's mm (bf16 / f16 only): X16 the input x, Y16 the output y are
 * arrays of that 16-bit type. Loads widen exactly (the products round their operands to that
 * type anyway: the same bits); stores round to nearest even. The other ops take the
 * element type of each activation (K_CUDA_ACT_F32, or K_CUDA_MM_BF16 / _F16) beside it. */
enum { K_CUDA_MM_X16 = 16, K_CUDA_MM_Y16 = 32, K_CUDA_MM_TYPE = 15 };
enum { K_CUDA_ACT_F32 = 0 };
/* conv's w16 is the block k_cuda_conv2d_w16_prep wrote (its 16-bit weights in the layouts
 * the products read), not w's plain 16-bit copy: or'd into conv's mm. */
enum { K_CUDA_MM_W16P = 64 };
/* conv's activations channels last (bf16 / f16 with a workspace, k_cuda_nhwc.h): XNHWC x
 * (then 16-bit, K_CUDA_MM_X16) and dx are [n, h, w, c]; YNHWC y and dy are [n, p, q, k].
 * The products read x / dy there instead of permuting them into the workspace (dy fp32
 * still takes its 16-bit copy, unpermuted). Needs C (XNHWC) / K (YNHWC) in multiples of 8. */
enum { K_CUDA_MM_XNHWC = 128, K_CUDA_MM_YNHWC = 256 };
/* Products of a 16-bit type (bf16 / f16) at precision mm: the tensor cores' 16-bit path. */
static inline int k_cuda_mm16(int mm)
{
    int t = mm & K_CUDA_MM_TYPE;
    return t == K_CUDA_MM_BF16 || t == K_CUDA_MM_F16;
}

/* The tensor-core GEMM on 16-bit arrays (kernels/cuda/k_cuda_tc_gemm.cu): mma.sync,
 * type K_CUDA_MM_BF16 or _F16, fp32 result C[m*ldc + n] = sum_k A(m,k) B(k,n) (+ bias[n],
 * then ReLU when relu). A(m,k) = a[m*lda + k] when a_kfast, else a[k*lda + m];
 * B(k,n) = b[n*ldb + k] when b_kfast, else b[k*ldb + n]. Any m, n, k >= 1. */
typedef struct {
    int type, m, n, k;
    const uint16_t *a, *b;
    int lda, ldb, a_kfast, b_kfast;
    float *c;
    int ldc, relu;
    const float *bias;
} k_tc_gemm;
int k_cuda_tc_gemm(const k_tc_gemm *g, port_stream s);
/* The same on wgmma (sm_90a: H100/H200; both operands k-contiguous, rows 16-byte
 * aligned); k_cuda_tc_gemm takes it on an sm_90 GPU when DDPRT_WGMMA=1. */
int k_cuda_tc_gemm_sm90(const k_tc_gemm *g, port_stream s);
/* wgmma for the tensor-core products (conv, linear, Conv1D, the 16-bit entry) on sm_90
 * GPUs: k_cuda_wgmma_setup decides once, at the device's start-up, by DDPRT_WGMMA (auto:
 * an sm_90 GPU, after a probe GEMM on both kernels agrees; 0: never; 1: an sm_90 GPU without
 * the probe, and the SIMT executor) and writes why in `why`; 1 when on, 0 off, -1 when the
 * probe failed (mma.sync then; why says how), -2 when a probe did not finish within
 * K_CUDA_PROBE_WAIT_S (a hung kernel: the device cannot go on, the caller ends the job;
 * why names the probe and the variable that turns it off). k_cuda_wgmma_on: the decision. */
int k_cuda_wgmma_setup(char *why, size_t len);
int k_cuda_wgmma_on(void);
/* The probe alone (tests): 1 when wgmma agrees with mma.sync, else -1 with why; leaves it off. */
int k_cuda_wgmma_probe(char *why, size_t len);
/* TMA for the wgmma products of two plain 16-bit arrays (k_cuda_tc_gemm's sm_90 path,
 * linear's forward on 16-bit x and w16; wt_gemm: cp.async.bulk.tensor and mbarriers in
 * place of wg_gemm's cp.async; unsplit products only), decided by k_cuda_wgmma_setup once wgmma is on (its why
 * goes on with "; TMA: ..."): DDPRT_TMA auto (an sm_90 GPU, after a probe GEMM on wt_gemm
 * agrees with wg_gemm), 0 never, 1 without the probe (and on the SIMT executor). Setup:
 * 1 on, 0 off, -1 probe failed (wg_gemm then), -2 the probe hung (as above). k_cuda_tma_on: the decision. The probe
 * alone (tests): 1 when wt_gemm agrees with wg_gemm, else -1; leaves the decision as it was. */
int k_cuda_tma_setup(char *why, size_t len);
int k_cuda_tma_on(void);
int k_cuda_tma_probe(char *why, size_t len);
/* wt_gemm's tile N forced to bn (64, 128 or 256; anything else: its rule, wt_tile_n) for
 * unsplit products; the previous setting. The kernel table's hook: the same sums at
 * every tile, timed side by side. */
int k_cuda_tma_set_tile(int bn);
/* The tile N the rule takes for an unsplit m x n product (nothing forced). */
int k_cuda_tma_rule_tile(int m, int n);
/* conv and linear at a precision (K_CUDA_MM_*); the plain forms above are fp32.
 * w16: NULL, or w rounded to mm's 16-bit type as the products round it (k_cuda_f32_to_bf16
 * / _f16: the device graph's copy, nn/graph_cuda.c; bf16 / f16 only). Where its rows are
 * 16-byte aligned the products copy it into shared memory by cp.async instead of reading,
 * rounding and storing w through registers: the same bits either way. conv's input
 * gradient takes it for 1x1 kernels (w^T's rows are then w's columns), the weight
 * gradients have no w operand; a 16-bit x (K_CUDA_MM_X16) is copied by cp.async too where
 * it is a plain matrix (linear, Conv1D). conv with bf16 / f16 products and a workspace of
 * k_cuda_conv2d_workspace_mm runs on 16-bit NHWC copies of x, w, dy made there instead
 * (channels in multiples of 8: C for the forward and weight grad, K for the input grad),
 * both operands by cp.async; w16 is then read only as k_cuda_conv2d_w16_prep's block
 * (K_CUDA_MM_W16P), else the call permutes w too. */
/* conv's weights once per update (the device graph's --amp cast, nn/graph_cuda.c) in the
 * layouts its bf16 / f16 products copy by cp.async: K x RSC (forward on NHWC copies) where
 * C % 8 == 0, else K x CRS as w is; then C x RSK (input grad on NHWC copies) where K % 8 ==
 * 0. Passed as w16 with K_CUDA_MM_W16P, so the calls permute x and dy only. _elems: the
 * block's 16-bit elements at precision mm (0: none for fp32 / tf32). */
size_t k_cuda_conv2d_w16_elems(int mm, const k_conv_shape *sh);
int k_cuda_conv2d_w16_prep(int mm, const k_conv_shape *sh, const float *w, uint16_t *w16, port_stream s);
int k_cuda_conv2d_fwd_mm(int mm, const k_conv_shape *sh, const float *x, const float *w, const uint16_t *w16,
                         const float *b, float *y, void *ws, port_stream s);
int k_cuda_conv2d_bwd_mm(int mm, const k_conv_shape *sh, const float *x, const float *w, const uint16_t *w16,
                         const float *dy, float *dx, float *dw, float *db, void *ws, port_stream s);
int k_cuda_linear_fwd_mm(int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
                         const float *b, float *y, void *ws, port_stream s);
int k_cuda_linear_bwd_mm(int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
                         const float *dy, float *dx, float *dw, float *db, void *ws, port_stream s);
int k_cuda_f32_to_f16(size_t n, const float *x, uint16_t *y, port_stream s);
int k_cuda_f16_to_f32(size_t n, const uint16_t *x, float *y, port_stream s);
int k_cuda_f32_to_bf16(size_t n, const float *x, uint16_t *y, port_stream s);
int k_cuda_bf16_to_f32(size_t n, const uint16_t *x, float *y, port_stream s);

/* ---- Layer-graph ops (k.h's last section), same semantics and argument order.
 * Bit for bit with the CPU: max pool with padding (fwd; bwd adds overlapping windows in
 * the CPU's window order), add, embedding (fwd, and bwd: each row's tokens added in
 * token order, no atomics), max over time. To rounding: batchnorm, global avgpool
 * (per-channel sums in double, fixed order). */
/* Returns -1 (port_cuda_fail) unless ks, st >= 1 and 0 <= pad <= ks/2 (PyTorch's
 * limit: beyond it a window can lie wholly in the padding). */
int k_cuda_maxpool2d_pad_fwd(int n, int c, int h, int w, int ks, int st, int pad, const float *x, float *y,
                             int32_t *idx, port_stream s);
int k_cuda_maxpool2d_pad_bwd(int n, int c, int h, int w, int ks, int st, int pad, const float *dy,
                             const int32_t *idx, float *dx, port_stream s);

/* One block of 1024 threads per channel (sums of n*hw values in double, a fixed tree). */
int k_cuda_bn_stats(int n, int c, int hw, const float *x, float *mean, float *var, port_stream s);
int k_cuda_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd, const float *gamma,
                  const float *beta, float *y, port_stream s);
int k_cuda_bn_bwd_sums(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                       const float *dy, float *dgamma, float *dbeta, port_stream s);
int k_cuda_bn_bwd_dx(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                     const float *gamma, const float *dgamma, const float *dbeta, double m, const float *dy,
                     float *dx, port_stream s);
/* No k.h twin (the CPU caller does this in a host loop); here so the statistics stay on
 * the device: invstd[i] = 1/sqrtf(var[i] + eps), and when running_mean and running_var
 * are not NULL (training), running = (1 - momentum) * running + momentum * batch, with
 * the unbiased variance var * count / (count - 1). Eval: var = the running variance,
 * running pointers NULL. */
int k_cuda_bn_finish(int c, const float *mean, const float *var, float eps, float momentum, double count,
                     float *invstd, float *running_mean, float *running_var, port_stream s);

int k_cuda_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y, port_stream s);
int k_cuda_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx, port_stream s);
int k_cuda_add(size_t n, const float *a, const float *b, float *y, port_stream s);
/* The same with activations of element type xt / yt (K_CUDA_ACT_F32, K_CUDA_MM_BF16 or
 * K_CUDA_MM_F16: the memory plan's 16-bit activations, k_cuda_common.cuh's k_act_ld /
 * k_act_st); gradients and statistics stay fp32. */
int k_cuda_bn_stats_t(int n, int c, int hw, const void *x, int xt, float *mean, float *var, port_stream s);
int k_cuda_bn_fwd_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                    const float *gamma, const float *beta, void *y, int yt, port_stream s);
int k_cuda_bn_bwd_sums_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                         const float *dy, float *dgamma, float *dbeta, port_stream s);
int k_cuda_bn_bwd_dx_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                       const float *gamma, const float *dgamma, const float *dbeta, double m, const float *dy,
                       float *dx, port_stream s);
int k_cuda_relu_fwd_t(size_t n, const void *x, int xt, void *y, int yt, port_stream s);
int k_cuda_relu_bwd_t(size_t n, const void *y, int yt, const float *dy, float *dx, port_stream s);
int k_cuda_add_t(size_t n, const void *a, int at, const void *b, int bt, void *y, int yt, port_stream s);
int k_cuda_maxpool2d_pad_fwd_t(int n, int c, int h, int w, int ks, int st, int pad, const void *x, int xt, void *y,
                               int yt, int32_t *idx, port_stream s);
int k_cuda_global_avgpool_fwd_t(int n, int c, int hw, const void *x, int xt, float *y, port_stream s);
/* BN or add -> ReLU in one pass (nn/plan.c's fusion, as the CPU's k_bn_relu_* / k_add_relu):
 * relu(BN(x) [+ add]) (add NULL: BN -> ReLU); BN's backward with the ReLU's dy masked where
 * BN(x) <= 0. The same bits as the ops apart. */
int k_cuda_bn_relu_fwd_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                         const float *gamma, const float *beta, const void *add, int at, void *y, int yt, port_stream s);
int k_cuda_bn_relu_bwd_sums_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                              const float *gamma, const float *beta, const float *dy, float *dgamma, float *dbeta,
                              port_stream s);
int k_cuda_bn_relu_bwd_dx_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                            const float *gamma, const float *beta, const float *dgamma, const float *dbeta, double m,
                            const float *dy, float *dx, port_stream s);
int k_cuda_add_relu_t(size_t n, const void *a, int at, const void *b, int bt, void *y, int yt, port_stream s);
int k_cuda_gelu_fwd_t(size_t n, const void *x, int xt, void *y, int yt, port_stream s);
int k_cuda_gelu_bwd_t(size_t n, const void *x, int xt, const float *dy, float *dx, port_stream s);
int k_cuda_layernorm_fwd_t(int n, int c, const float *x, const float *w, const float *b, float eps, void *y, int yt,
                           float *mean, float *rstd, port_stream s);
int k_cuda_embedding_fwd(int n, int len, int dim, const int32_t *ids, const float *table, float *y, port_stream s);
/* Zeroes dtable (vocab rows), then the first token using each row writes that row: one
 * block per token; O(tokens^2) id compares in all (parallel), independent of vocab. */
int k_cuda_embedding_bwd(int n, int len, int dim, int vocab, const int32_t *ids, const float *dy, float *dtable,
                         port_stream s);
int k_cuda_max_time_fwd(int n, int c, int len, const float *x, float *y, int32_t *idx, port_stream s);
int k_cuda_max_time_bwd(int n, int c, int len, const float *dy, const int32_t *idx, float *dx, port_stream s);

/* For the layer-graph executor (nn/ops/cuda.c), no k.h twin: dst[r*dst_stride + k] =
 * src[r*src_stride + k] for r < rows, k < len (channel concat, both directions);
 * log_softmax backward from its output y (the CPU op's formula, one thread per row);
 * *x += v on one int64 (BatchNorm's num_batches_tracked stays on the device). */
int k_cuda_copy_rows(int rows, size_t len, const float *src, size_t src_stride, float *dst, size_t dst_stride,
                     port_stream s);
int k_cuda_log_softmax_bwd(int n, int classes, const float *y, const float *dy, float *dx, port_stream s);
int k_cuda_add_i64(int64_t *x, int64_t v, port_stream s);

/* ---- Transformer ops (kernels/k_tfm.h's twins, kernels/cuda/k_cuda_tfm.cu), same
 * layouts and argument order. Bit for bit with the CPU: GELU (its exp written with
 * rounded operations), the embedding forward. To rounding: the rest (sums in another
 * order, the attention's exp and log from CUDA). No atomics: deterministic. */
int k_cuda_layernorm_fwd(int n, int c, const float *x, const float *w, const float *b, float eps, float *y,
                         float *mean, float *rstd, port_stream s);
/* dx may be dy; dw, db, dx NULL: not wanted. */
int k_cuda_layernorm_bwd(int n, int c, const float *x, const float *w, const float *mean, const float *rstd,
                         const float *dy, float *dx, float *dw, float *db, port_stream s);
int k_cuda_gelu_fwd(size_t n, const float *x, float *y, port_stream s);
int k_cuda_gelu_bwd(size_t n, const float *x, const float *dy, float *dx, port_stream s);
int k_cuda_tok_pos_embed_fwd(int b, int len, int c, const int32_t *ids, int ld, const float *wte, const float *wpe,
                             float *y, port_stream s);
/* dwpe[0, len) overwritten; dwte zeroed first unless acc, then each used row (+)= its
 * tokens' dy in token order (one block per token; the first token of each id compacts
 * the later matches 128 at a time). */
int k_cuda_tok_pos_embed_bwd(int b, int len, int c, int vocab, const int32_t *ids, int ld, const float *dy,
                             float *dwte, float *dwpe, int acc, port_stream s);
size_t k_cuda_conv1d_hf_workspace(int n, int in, int out);
size_t k_cuda_conv1d_hf_workspace_mm(int mm, int n, int in, int out);
int k_cuda_conv1d_hf_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y, void *ws,
                         port_stream s);
int k_cuda_conv1d_hf_bwd(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                         float *dw, float *db, void *ws, port_stream s);
/* At a precision (K_CUDA_MM_*), as conv and linear (w16 as theirs). */
int k_cuda_conv1d_hf_fwd_mm(int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
                            const float *b, float *y, void *ws, port_stream s);
int k_cuda_conv1d_hf_bwd_mm(int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
                            const float *dy, float *dx, float *dw, float *db, void *ws, port_stream s);
/* Causal attention with an online softmax: lse[b, h, t] kept, the probabilities
 * recomputed in backward (workspace: k_cuda_attention_workspace bytes: the tensor-core
 * backward's 16-bit copy of dy, then the row terms). Tiled (32-row tiles through shared
 * memory, a warp per 4 rows: k_cuda_attn.cu); heads above 64 pass through in 64-wide
 * chunks. */
size_t k_cuda_attention_workspace(int b, int t, int h, int hd);
int k_cuda_attention_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *lse, port_stream s);
int k_cuda_attention_bwd(int b, int t, int h, int hd, const float *qkv, const float *y, const float *lse,
                         const float *dy, float *dqkv, void *ws, port_stream s);
/* At a precision (K_CUDA_MM_*): bf16 and f16 on the tensor cores for heads up to
 * K_CUDA_ATTN_TC_MAX_HD (k_cuda_attn_tc.cu, FlashAttention-2 style: Q, K, V, P, dO and dS rounded
 * as the CPU's --amp bf16 rounds them, fp32 softmax and sums); fp32, tf32 and wider heads
 * take the fp32 kernels above. The same lse and workspace. */
#define K_CUDA_ATTN_TC_MAX_HD 128
/* mm may carry K_CUDA_MM_X16 (qkv) and _Y16 (y) where the tensor-core kernel runs (else refused). */
int k_cuda_attention_fwd_mm(int mm, int b, int t, int h, int hd, const float *qkv, float *y, float *lse,
                            port_stream s);
int k_cuda_attention_bwd_mm(int mm, int b, int t, int h, int hd, const float *qkv, const float *y, const float *lse,
                            const float *dy, float *dqkv, void *ws, port_stream s);
/* The tied classifier with softmax cross-entropy, a block of rows at a time (16 MiB of
 * logits at most): loss_rows[n] (may be NULL), and with dx / dw the gradients as
 * k_classifier_fwd_bwd. Nothing comes back to the host. */
size_t k_cuda_classifier_workspace(int n, int c, int v);
int k_cuda_classifier_fwd_bwd(int n, int c, int v, const float *x, const float *w, const int32_t *targets,
                              float scale, float *loss_rows, float *dx, float *dw, int acc_dw, void *ws, port_stream s);
/* Language-model windows: tg[s, t] = ids[s, t + 1] (windows of len + 1 ids), and
 * y[s] = the mean of x[s, 0..len) (summed in double, in order). */
int k_cuda_lm_targets(int b, int len, const int32_t *ids, int32_t *tg, port_stream s);
int k_cuda_row_means(int n, int len, const float *x, float *y, port_stream s);
/* out[0] = sum of x[0..n) in double, out[1] = 0 (nn_loss_cuda's layout for a graph
 * whose output is its loss per sample). */
int k_cuda_sum_loss(int n, const float *x, double *out, port_stream s);

/* CUDA IPC allreduce (transport/tp_ipc.c): dst[i] = src[0][i] op src[1][i] op ... in
 * that order (n operands, at most K_CUDA_IPC_MAX; src may be other processes' memory
 * mapped by IPC, dst may be one of them: each element is read before it is written);
 * dt 0 f32, 1 f16, 2 bf16 (halves in f32, rounded after every step, as the host);
 * op 0 sum, 1 prod, 2 min, 3 max; div > 1 divides the result (the average). */
#define K_CUDA_IPC_MAX 8
int k_cuda_ipc_reduce(int dt, const void *const *src, int n, void *dst, size_t count, int op, int div, port_stream s);

/* Name of the last kernel launched ("" before any): for errors found at a sync. */
const char *k_cuda_last_kernel(void);
/* Tests of the host's deadlines: a one-thread kernel on s that runs until the int at the
 * device address flag (zeroed by the caller) is set non-zero (a copy on another stream). */
int k_cuda_test_spin(int *flag, port_stream s);

#ifdef __cplusplus
}
#endif
#endif
