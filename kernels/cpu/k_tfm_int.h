/* Internal to the transformer kernels: the per-ISA row kernels of k_tfm_simd.h as one
 * table, picked by k_isa_level() (k_tfm_isa.c). */
#ifndef K_TFM_INT_H
#define K_TFM_INT_H
#include <stddef.h>

typedef struct k_tfm_vt {
    void (*gelu_fwd)(size_t n, const float *x, float *y);
    void (*gelu_bwd)(size_t n, const float *x, const float *dy, float *dx);
    void (*silu_fwd)(size_t n, const float *x, float *y);
    void (*silu_bwd)(size_t n, const float *x, const float *dy, float *dx);
    void (*ln_fwd_row)(int c, const float *x, const float *w, const float *b, float eps, float *y,
                       float *mean, float *rstd);
    void (*ln_bwd_row)(int c, const float *x, const float *w, float mean, float rstd, const float *dy,
                       float *dx);
    void (*ln_wb_acc)(int c, const float *x, const float *dy, float mean, float rstd, float *dw,
                      float *db);
    float (*max)(int n, const float *x);
    /* x = exp(scale x - shift) for n, zeros for nz after; returns the sum */
    float (*exp_shift)(int n, int nz, float *x, float scale, float shift);
    double (*exp_sumd)(int n, float *x, float shift);
    void (*ds_row)(int n, const float *p, float *dp, float d, float scale);
    float (*dot)(int n, const float *a, const float *b);
    void (*scale)(int n, float s, float *x);
    void (*add)(int n, const float *a, const float *b, float *y);
} k_tfm_vt;

const k_tfm_vt *k_tfm_vt_cur(void);
#endif
