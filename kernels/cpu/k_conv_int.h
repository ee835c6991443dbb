/* k_conv.c's internals shared with k_conv_bwd.c (the broadcast-tap dW and the phase
 * dX): the shape's choices and scratch regions, and one call's job. Internal to
 * kernels/cpu. */
#ifndef K_CONV_INT_H
#define K_CONV_INT_H
#include "kernels/cpu/k_conv_drv.h"
#include <stddef.h>

#define K_CONV_GROUP 8 /* images whose dW sums share one set of registers */
#define K_SLACK 16     /* floats of slack around the column buffer (masked loads) */

static inline size_t k_round64(size_t b) { return (b + 63) & ~(size_t)63; }

/* The driver's geometry plus this kernel's choices and scratch regions. */
typedef struct k_conv_dims {
    k_conv_geo g;
    int group;                /* images per dW pass */
    int dw_nn;                /* dW as NN GEMM on im2row columns ... */
    int nn_group;             /* ... of this many images at once */
    int ilv;                  /* stride 1, group > 1: the interleaved layout may be used */
    int ph, ph_ng;            /* stride 2: dX as 4 phase convs (k_conv_dx_ph), ph_ng images a group */
    int ph_nt[4];             /* taps per phase (a, b) = (row, column) parity of dX */
    long r_ph, r_wph, r_wtmp; /* its phase outputs (slot); packed and unpacked phase weights */
    long r_col, r_xs, r_dw, r_db, r_tmp, r_dyg, r_offi, r_dyt, r_dwt, slot; /* slot region offsets (bytes) */
    long r_pack, r_off, r_off2, r_wt, end; /* shared regions after the slots (bytes) */
} k_conv_dims;

typedef struct k_conv_job {
    const k_conv_shape *sh;
    k_conv_dims d;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    float *ym;     /* k_conv2d_fwd_maxt: relu(max over q) per image and filter ... */
    int32_t *idx;  /* ... and its argmax; y is then one image's scratch per slot */
    char *ws;
    const float *wpack;
    const long *boff, *boff2;
    const float *wph[4]; /* k_conv_dx_ph: the phases' packed weights */
} k_conv_job;

/* Bytes of images [i, i + ng) of a batch-major tensor (sz floats an image) clipped to
 * the batch: what a GEMM fetches for the next step (k_gemm_nn_packed_pf). The layouts'
 * builders otherwise wait on these cold reads (x was last touched a whole batch ago). */
static inline long k_next_bytes(const k_conv_shape *sh, long i, int ng, long sz)
{
    long e = i + ng < sh->n ? i + ng : sh->n;
    return e > i ? (e - i) * sz * (long)sizeof(float) : 0;
}

/* k_conv_bwd.c: dW with the taps broadcast (a k_conv_slots dw_pass over a whole slot)
 * and where it runs; the stride-2 dX as 4 phase convs (dx_n), its weights' packing
 * (once per call) and where it runs. */
void k_conv_dw_tb(void *ctx, char *base, long i0, int ng, float *dwp, int acc);
int k_conv_tb_use(const k_conv_job *j);
void k_conv_ph_pack(k_conv_job *j, char *ws);
void k_conv_dx_ph(void *ctx, char *base, long i0, int ng);
int k_conv_ph_use(const k_conv_job *j);
#endif
