/* The start-up probes of the sm_90a paths beyond the GEMMs (k_cuda_probe.cu), and the
 * switches they turn. Each probe: 1 when the path agrees with the one it replaces, else
 * -1 with why (a hang: port_cuda_timed_out() then); it leaves its switch as it was on
 * agreement, off otherwise. */
#ifndef DDPRT_K_CUDA_PROBE_H
#define DDPRT_K_CUDA_PROBE_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* The wgmma attention (fw_fwd, fw_bwd_dkv, fw_bwd_dq) where wgmma is on (1), or the mma.sync
 * kernels (0); the previous setting. */
int k_cuda_attention_set_wgmma(int on);
/* 1x1 convs' plain-array products (1) or the geometry loaders (0); the previous setting. */
int k_cuda_conv2d_set_1x1(int on);
/* 3x3 / strided convs (C % 64) on TMA's im2col mode (1) or the geometry loaders (0); the previous setting. */
int k_cuda_conv2d_set_im2col(int on);
/* The 128-tile TF32 products (--matmul-precision high) on wgmma (wgtf_gemm) where wgmma is
 * on (1), or mma.sync's tf_gemm (0); the previous setting. k_cuda_tf32_wgmma_on: the setting. */
int k_cuda_tf32_set_wgmma(int on);
int k_cuda_tf32_wgmma_on(void);
int k_cuda_attention_probe(char *why, size_t len);
int k_cuda_conv1x1_probe(char *why, size_t len);
int k_cuda_conv_im2col_probe(char *why, size_t len);
int k_cuda_tf32_wgmma_probe(char *why, size_t len);
/* All of them, after the GEMM probes with wgmma on: "; attention: ...; conv 1x1: ...; conv
 * im2col: ..." appended to why (what fits); -2 with why the hang's line when one did not
 * finish, else 1. */
int k_cuda_path_probes(char *why, size_t len);
#ifdef __cplusplus
}
#endif
#endif
