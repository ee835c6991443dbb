/* Winograd F(2x2, 3x3) convs (k_conv_wino.c), called from k_conv.c where
 * k_conv_wino_use() says so. Internal to kernels/cpu. */
#ifndef K_CONV_WINO_H
#define K_CONV_WINO_H
#include "kernels/k.h"
#include <stddef.h>

/* 3x3, stride 1, pad 1 (and >= 4 channels each way): the shapes it can run. */
int k_conv_wino_shape(const k_conv_shape *sh);
/* Whether this call runs it for one part of the conv: the shape, the ISA level and
 * k_conv_set_algo / DDPRT_CONV. */
enum { K_WINO_FWD, K_WINO_DX, K_WINO_DW };
int k_conv_wino_use(const k_conv_shape *sh, int part);
/* The forward's and dX's tile when they run it: 2 (F(2x2,3x3)) or 4 (F(4x4,3x3)). */
int k_conv_wino_tile(const k_conv_shape *sh);
/* Its workspace (0 for other shapes): a function of the shape only. */
size_t k_conv_wino_workspace(const k_conv_shape *sh);
void k_conv_wino_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *y, void *ws);
void k_conv_wino_bwd(const k_conv_shape *sh, const float *x, const float *w, const float *dy, float *dx, float *dw,
                     float *db, void *ws);
/* F(4x4)'s filter transform: u[xi*ux + k*uk + c*uc] = (G g G^T)[xi] for filter (k, c)
 * g at w + k*ks + c*cs (k < ko, c < ci), its taps flipped when `flip` (the dX conv's
 * W^T). Shared with the channels-last kernels (k_conv_winoc.c). */
void k_wino4_weights(int ko, int ci, const float *w, long ks, long cs, int flip, float *u, long ux, long uk, long uc);
/* dW's back-transform: dwp[k][c][3x3] (acc: +=) = G^T S[.][k][c] G for the (m + 2)^2
 * K x C matrices S[xi] at s + xi*K*C (m: 2 for F(2x2), 4 for F(4x4)). */
void k_wino_dw_out(int m, int K, int C, const float *s, float *dwp, int acc);
/* Channels-last F(4x4,3x3) for the forward and dX (k_conv_winoc.c): whether it runs
 * this shape's forward and dX (the shape, the ISA level, DDPRT_CONV), its workspace,
 * and the two convs. */
int k_conv_winoc_use(const k_conv_shape *sh);
int k_conv_winoc_fits(const k_conv_shape *sh);
size_t k_conv_winoc_workspace(const k_conv_shape *sh);
void k_conv_winoc_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *y, void *ws);
void k_conv_winoc_dx(const k_conv_shape *sh, const float *w, const float *dy, float *dx, void *ws);
/* And channels-last F(2x2,3x3) for dW (with db when wanted): where it runs. */
int k_conv_winoc_dw_use(const k_conv_shape *sh);
void k_conv_winoc_dw(const k_conv_shape *sh, const float *x, const float *dy, float *dw, float *db, void *ws);
#endif
