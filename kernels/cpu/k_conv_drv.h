/* The conv driver shared by k_conv.c (fp32) and k_conv_bf16.c (bf16 operands): the
 * geometry of the shifted-row layout (k_conv.c's header comment), its builders and tap
 * offsets, the flipped weights of the dX conv, and the slot drivers.
 *
 * Slots: a batch is cut into up to K_CONV_SLOTS slots of consecutive images (the
 * count depends on the shape only). Each slot owns its scratch and, backward, a
 * partial dW/db (slot 0 writes the caller's dw/db directly); the partials are added
 * in slot order at the end, so results are bitwise the same for any thread count.
 * A kernel describes one image's (or one image group's) work through callbacks;
 * the driver does the cutting, the empty-slot zeroing, the db sums and the
 * reduction. Internal to kernels/cpu. */
#ifndef K_CONV_DRV_H
#define K_CONV_DRV_H
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"

#define K_CONV_SLOTS 8

/* What both kernels derive from a shape (sizes in elements). */
typedef struct k_conv_geo {
    long crs, pq, xsz, ysz; /* taps per output, outputs per plane, per-image sizes */
    int s1;                 /* stride 1 with <= 32 tap columns: dX through col2im_s1 */
    int rpn;                /* tap-row phases in xs: min(r, stride) */
    long hp, xssz;          /* rows per xs plane, elements of one image's xs */
    /* "Same" convs (stride 1, square kernel, pad = (r-1)/2, >= 16 input channels):
     * dX = conv(dy padded by r-1-pad, W flipped and transposed), the fast forward
     * path again, with no column matrix or col2im. Smaller pads would pay for the
     * zero border (LeNet's pad-0 conv2: 2.25x the work, measured 2x slower); fewer
     * channels leave that GEMM's rows mostly empty (1 channel: 5x slower). */
    int dxc;
    long dhp, dxssz;        /* the dX conv's rows per plane and xs elements */
    int slots;              /* min(n, K_CONV_SLOTS); a kernel may lower it */
} k_conv_geo;

k_conv_geo k_conv_geo_of(const k_conv_shape *sh);
/* The im2col geometry of the conv (x -> y) and of the dX conv (dy -> dx). */
k_im2col_geo k_conv_im2col(const k_conv_shape *sh);
k_im2col_geo k_conv_dx_im2col(const k_conv_shape *sh);
/* One image's xs (stride 1: k_shift_rows; else the phase-split k_shift_rows_st). */
void k_conv_rows(const k_im2col_geo *g, const k_conv_geo *d, const float *x, float *xs);
/* off[crs]: tap (c, r, s) starts at row r / st of plane (c, s, r % st) of xs. */
void k_conv_tap_offsets(const k_conv_shape *sh, const k_conv_geo *d, long *off);
/* off[k*r*s]: tap (k, r, s) of the dX conv, row r of dy's shifted plane (k, s). */
void k_conv_dx_offsets(const k_conv_shape *sh, const k_conv_geo *d, long *off);
/* wt[c][(k, r, s)] = w[k][c][R-1-r][S-1-s]: the A of the dX conv. */
void k_conv_flip_weights(const k_conv_shape *sh, const float *w, float *wt);

/* A kernel's per-slot work. `base` is the slot's scratch (ws + slot * slot_bytes). */
typedef struct k_conv_slots {
    const k_conv_shape *sh;
    int slots;
    char *ws;
    long slot_bytes, r_dw, r_db; /* the slot's stride and its partials' offsets in it */
    int group;                   /* images per dW pass */
    long ysz, pq;
    const float *dy;             /* bwd: for the db sums */
    float *dw, *db;              /* bwd: the outputs (NULL: not wanted) */
    void *job;
    /* fwd: image i; or, with fwd_n, images [i, i+ng) for groups of ng_fwd. */
    void (*fwd)(void *job, int slot, char *base, long i);
    void (*fwd_n)(void *job, int slot, char *base, long i, int ng);
    int ng_fwd, ng_dx;
    /* bwd, first: images [i, i+ng) into the partial dwp (acc: add to it); NULL: none. */
    void (*dw_pass)(void *job, char *base, long i, int ng, float *dwp, int acc);
    /* bwd, then per image (after its db sums): dX of image i; NULL: none. Or, with
     * dx_n, per group of ng_dx images (after their db sums). */
    void (*dx)(void *job, char *base, long i);
    void (*dx_n)(void *job, char *base, long i, int ng);
} k_conv_slots;

void k_conv_slots_fwd(const k_conv_slots *s);
void k_conv_slots_bwd(const k_conv_slots *s);
#endif
