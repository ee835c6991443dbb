/* Causal self-attention with the probabilities stored (kernels/k_tfm.h): the
 * comparison point for k_attention_fwd/bwd's time and memory, as llm.c's
 * attention_forward keeps att[b, h, t, t]. Built from the same GEMMs and row kernels,
 * by blocks of 64 query rows, only the causal part of each row computed. */
#include "kernels/k_tfm.h"
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tfm_int.h"
#include <math.h>
#include <string.h>

#define BR 64
#define KB 64

typedef struct st_job {
    const k_tfm_vt *vt;
    int b, t, h, hd;
    const float *qkv, *att_in, *dy;
    float *y, *att, *dqkv;
} st_job;

/* out[r][j] = a_r . b_j for r < m, j < n (rows of a and b hd long): key blocks of KB
 * transposed into kt so the GEMM runs in its NN form. */
static void dot_rows(int m, int n, int hd, const float *a, long lda, const float *b, long ldb, float *out,
                     long ldo, float *kt)
{
    for (int j0 = 0; j0 < n; j0 += KB) {
        int nb = n - j0 < KB ? n - j0 : KB;
        for (int j = 0; j < nb; j++)
            for (int k = 0; k < hd; k++) kt[(long)k * KB + j] = b[(long)(j0 + j) * ldb + k];
        k_gemm_nn(m, nb, hd, a, lda, 1, kt, KB, out + j0, ldo, NULL, 0);
    }
}

static void st_fwd_task(void *ctx, int bh)
{
    const st_job *jb = ctx;
    const int T = jb->t, hd = jb->hd, C = jb->h * hd;
    const long C3 = 3L * C;
    int hh = bh % jb->h, bb = bh / jb->h;
    const float *q = jb->qkv + (long)bb * T * C3 + (long)hh * hd, *k = q + C, *v = q + 2 * C;
    float *o = jb->y + (long)bb * T * C + (long)hh * hd, *att = jb->att + (long)bh * T * T;
    const float scale = 1.0f / sqrtf((float)hd);
    float kt[K_ATTN_MAX_HD * KB];
    for (int i0 = 0; i0 < T; i0 += BR) {
        int br = T - i0 < BR ? T - i0 : BR, n = i0 + br;
        float *a = att + (long)i0 * T;
        dot_rows(br, n, hd, q + (long)i0 * C3, C3, k, C3, a, T, kt);
        for (int r = 0; r < br; r++) {
            float *ar = a + (long)r * T;
            int nv = i0 + r + 1;
            float mx = jb->vt->max(nv, ar) * scale;
            float sum = jb->vt->exp_shift(nv, T - nv, ar, scale, mx);
            jb->vt->scale(nv, 1.0f / sum, ar);
        }
        k_gemm_nn(br, hd, n, a, T, 1, v, C3, o + (long)i0 * C, C, NULL, 0);
    }
}

void k_attention_stored_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *att)
{
    st_job j = {.vt = k_tfm_vt_cur(), .b = b, .t = t, .h = h, .hd = hd, .qkv = qkv, .y = y, .att = att};
    k_parallel_for(b * h, st_fwd_task, &j);
}

static void st_bwd_task(void *ctx, int bh)
{
    const st_job *jb = ctx;
    const int T = jb->t, hd = jb->hd, C = jb->h * hd;
    const long C3 = 3L * C;
    int hh = bh % jb->h, bb = bh / jb->h;
    const long qoff = (long)bb * T * C3 + (long)hh * hd;
    const float *q = jb->qkv + qoff, *k = q + C, *v = q + 2 * C;
    const float *dout = jb->dy + (long)bb * T * C + (long)hh * hd, *att = jb->att_in + (long)bh * T * T;
    float *dq = jb->dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
    const float scale = 1.0f / sqrtf((float)hd);
    float kt[K_ATTN_MAX_HD * KB], ds[BR * K_ATTN_STORED_MAX_T];
    /* dV = P^T dO, by key blocks: only queries at or after the block can see it. */
    for (int j0 = 0; j0 < T; j0 += KB) {
        int nb = T - j0 < KB ? T - j0 : KB;
        k_gemm_nn(nb, hd, T - j0, att + (long)j0 * T + j0, 1, T, dout + (long)j0 * C, C,
                  dv + (long)j0 * C3, C3, NULL, 0);
    }
    for (int i = 0; i < T; i++) memset(dk + (long)i * C3, 0, sizeof(float) * (size_t)hd);
    for (int i0 = 0; i0 < T; i0 += BR) {
        int br = T - i0 < BR ? T - i0 : BR, n = i0 + br;
        const float *a = att + (long)i0 * T;
        dot_rows(br, n, hd, dout + (long)i0 * C, C, v, C3, ds, n, kt); /* dP */
        for (int r = 0; r < br; r++) {
            int nv = i0 + r + 1;
            float *dr = ds + (long)r * n;
            float d = jb->vt->dot(nv, a + (long)r * T, dr);
            jb->vt->ds_row(nv, a + (long)r * T, dr, d, scale);
            memset(dr + nv, 0, sizeof(float) * (size_t)(n - nv));
        }
        k_gemm_nn(br, hd, n, ds, n, 1, k, C3, dq + (long)i0 * C3, C3, NULL, 0);
        k_gemm_nn(n, hd, br, ds, 1, n, q + (long)i0 * C3, C3, dk, C3, NULL, 1);
    }
}

void k_attention_stored_bwd(int b, int t, int h, int hd, const float *qkv, const float *att,
                            const float *dy, float *dqkv)
{
    st_job j = {.vt = k_tfm_vt_cur(), .b = b, .t = t, .h = h, .hd = hd, .qkv = qkv, .att_in = att,
                .dy = dy, .dqkv = dqkv};
    k_parallel_for(b * h, st_bwd_task, &j);
}
