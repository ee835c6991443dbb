/* Channels-last (NHWC) activations on the device: BatchNorm's per-channel sums and the
 * pools on [rows, c] arrays (rows = n*h*w, the channel fastest), the layout a conv with
 * K_CUDA_MM_XNHWC / YNHWC reads and writes (cuDNN's channels_last). The elementwise
 * parts need no kernels of their own: BN's normalize / input grad (fused ReLU and add
 * too) are k_cuda_bn_*_t with n = rows and hw = 1 (their channel is (i / hw) % c), the
 * add and ReLU are elementwise. x / y of element type xt / yt as k_cuda.h's _t forms.
 * Bits: the pools and the global average equal the NCHW kernels' on the permuted
 * tensors (the same scans); BN's sums are in another (fixed) order: to rounding. */
#ifndef DDPRT_K_CUDA_NHWC_H
#define DDPRT_K_CUDA_NHWC_H
#include "kernels/cuda/k_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scratch bytes of the two BN sums (16-byte aligned ws): the strips' partial sums. */
size_t k_cuda_bn_nhwc_workspace(size_t rows, int c);
/* mean and (biased) variance over the rows, as k_cuda_bn_stats (two passes, double). */
int k_cuda_bn_stats_nhwc(size_t rows, int c, const void *x, int xt, float *mean, float *var, void *ws,
                         port_stream s);
/* dbeta = sum dy, dgamma = sum dy * xhat; relu: dy masked where gamma * xhat + beta <= 0
 * (k_cuda_bn_relu_bwd_sums_t's fused ReLU; gamma, beta NULL: 1, 0). */
int k_cuda_bn_bwd_sums_nhwc(size_t rows, int c, const void *x, int xt, const float *mean, const float *invstd,
                            const float *gamma, const float *beta, int relu, const float *dy, float *dgamma,
                            float *dbeta, void *ws, port_stream s);
/* max pool with padding: x [n, h, w, c] -> y [n, p, q, c]; idx the window's winner as
 * h * w offsets (the NCHW kernel's). Backward into dx [n, h, w, c], fp32. */
int k_cuda_maxpool2d_nhwc_fwd(int n, int c, int h, int w, int ks, int st, int pad, const void *x, int xt, void *y,
                              int yt, int32_t *idx, port_stream s);
int k_cuda_maxpool2d_nhwc_bwd(int n, int c, int h, int w, int ks, int st, int pad, const float *dy,
                              const int32_t *idx, float *dx, port_stream s);
/* global average pool: x [n, hw, c] -> y [n, c] (fp32, as the NCHW kernel's); dx [n, hw, c]. */
int k_cuda_global_avgpool_nhwc_fwd(int n, int c, int hw, const void *x, int xt, float *y, port_stream s);
int k_cuda_global_avgpool_nhwc_bwd(int n, int c, int hw, const float *dy, float *dx, port_stream s);
/* The explicit conversions at the layout's edges: y[n, hw, c] = x[n, c, hw] and back, of
 * one element type t (fp32 or 16-bit: moved, not rounded). */
int k_cuda_nchw_to_nhwc(int n, int c, int hw, const void *x, void *y, int t, port_stream s);
int k_cuda_nhwc_to_nchw(int n, int c, int hw, const void *x, void *y, int t, port_stream s);

/* conv's permutes into its NHWC copies (x, w or dy: k_cuda_conv.cu's chan_last) since
 * start-up, over all threads: with channels-last activations and the weight block a conv
 * makes none. */
unsigned long k_cuda_conv2d_chan_last_calls(void);
/* conv's backward without an input gradient (dx NULL: a stem conv on the data), or'd
 * into its mm: k_cuda_conv2d_workspace_mm then leaves out what only the input gradient
 * uses (dy's 16-bit copy where C % 8 != 0, the weights' C x RSK copy, its split-K), and
 * k_cuda_conv2d_bwd_mm refuses a dx with it. ResNet's 7x7 stem (c = 3, k = 64) at 224:
 * dy's copy was the largest workspace of the net. */
enum { K_CUDA_MM_NODX = 512 };

#ifdef __cplusplus
}
#endif
#endif
