/* Causal self-attention, flash-attention style (kernels/k_tfm.h).
 *
 * Forward, per (batch, head, tile of BR query rows): key tiles of BC rows stream through
 * an online softmax. S = Q K^T (the key tile transposed once so the GEMM runs in its
 * NN form), each row keeps its running max m and sum l, rescales its output row when
 * m grows, and adds P V. At the end y = out / l and lse = m + log l is kept: O(b t h)
 * floats instead of the b h t^2 probabilities.
 *
 * Backward, per (batch, head): for each key tile j (K_j, V_j transposed once) and each
 * query tile i at or below the diagonal, P is recomputed from lse, then
 *   dV_j += P^T dO_i,  dP = dO_i V_j^T,  dS = P (dP - D_i) / sqrt(hd),
 *   dK_j += dS^T Q_i,  dQ_i += dS K_j,   D_i = rowsum(dO_i * O_i).
 * One task owns a head's dQ, dK, dV, so every sum runs in one fixed order: the bits do
 * not depend on the thread count (FlashAttention-2 instead adds dQ atomically).
 * Tiles live on the stack (forward: Q's packed tile, at most (BR + 11) * K_ATTN_MAX_HD floats,
 * beside S and K^T: 155 KiB; backward: 2 BR*BC + 2 BC*K_ATTN_MAX_HD + BWD_DKEEP floats, 224 KiB). */
#include "kernels/k_tfm.h"
#include "kernels/k.h"
#include "kernels/cpu/k_amx.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tfm_int.h"
#include <math.h>
#include <string.h>

#define BR 64
#define BC 64
#define BWD_DKEEP 8192 /* rows whose D the backward keeps on the stack (32 KiB) */

typedef struct attn_job {
    const k_tfm_vt *vt;
    int b, t, h, hd, nq, amx;
    const float *qkv, *y, *lse_in, *dy;
    float *out, *lse, *dqkv;
} attn_job;

/* dst[k][j] = src[j*ld + k] for j < rows, k < hd (a key or value tile, transposed) */
static void transpose_tile(int rows, int hd, const float *src, long ld, float *dst)
{
    k_transpose_ld(rows, hd, src, ld, dst, BC); /* 8x8 in registers: the element loop's
                                                   stores 256 bytes apart were 7 % of it */
}

/* C (+)= A B of one pair of tiles: the fp32 GEMM, or (--amp bf16 where the CPU has AMX)
 * the AMX tiles on bf16-rounded operands with fp32 sums, 5-6x faster at 64 x 64 x 64. */
static void mm(const attn_job *jb, int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb,
               float *c, long ldc, int acc)
{
    if (jb->amx) k_amx_gemm(m, n, kk, a, ars, acs, b, ldb, 0, c, ldc, NULL, acc);
    else k_gemm_nn(m, n, kk, a, ars, acs, b, ldb, c, ldc, NULL, acc);
}

/* C = A R^T on AMX, R's rows (keys or values) read in place as B^T: no transposed tile */
static void mm_kt(int m, int n, int kk, const float *a, long lda, const float *r, long ldr, float *c, long ldc)
{
    k_amx_gemm(m, n, kk, a, lda, 1, r, ldr, 1, c, ldc, NULL, 0);
}

static void fwd_task(void *ctx, int task)
{
    const attn_job *jb = ctx;
    const int T = jb->t, hd = jb->hd, C = jb->h * hd;
    const long C3 = 3L * C;
    int qt = task % jb->nq, bh = task / jb->nq, hh = bh % jb->h, bb = bh / jb->h;
    int i0 = qt * BR, br = T - i0 < BR ? T - i0 : BR;
    const float *base = jb->qkv + (long)bb * T * C3 + (long)hh * hd;
    const float *q = base + (long)i0 * C3, *k = base + C, *v = base + 2 * C;
    float *o = jb->out + ((long)bb * T + i0) * C + (long)hh * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float s[BR * BC], kt[K_ATTN_MAX_HD * BC], m[BR], l[BR], corr[BR], qp[(BR + 11) * K_ATTN_MAX_HD];
    if (!jb->amx) k_gemm_pack_a(br, hd, q, C3, 1, qp); /* once for all key tiles (the bits of k_gemm_nn) */
    for (int r = 0; r < br; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    /* keys j <= i0 + br - 1 */
    for (int j0 = 0; j0 < i0 + br; j0 += BC) {
        int bc = i0 + br - j0 < BC ? i0 + br - j0 : BC;
        if (jb->amx) mm_kt(br, bc, hd, q, C3, k + (long)j0 * C3, C3, s, BC);
        else {
            transpose_tile(bc, hd, k + (long)j0 * C3, C3, kt);
            k_gemm_nn_packed(br, bc, hd, qp, kt, BC, NULL, s, BC, NULL, 0);
        }
        for (int r = 0; r < br; r++) {
            float *sr = s + r * BC;
            int nv = i0 + r - j0 + 1; /* keys allowed for this row */
            nv = nv > bc ? bc : nv;
            if (nv <= 0) { /* only with BC > BR: the row's keys ended in an earlier tile */
                memset(sr, 0, sizeof(float) * (size_t)bc);
                corr[r] = 1.0f;
                continue;
            }
            float mx = jb->vt->max(nv, sr) * scale, mn = mx > m[r] ? mx : m[r];
            float sum = jb->vt->exp_shift(nv, bc - nv, sr, scale, mn);
            corr[r] = j0 ? expf(m[r] - mn) : 1.0f;
            l[r] = l[r] * corr[r] + sum;
            m[r] = mn;
        }
        if (j0)
            for (int r = 0; r < br; r++)
                if (corr[r] != 1.0f) jb->vt->scale(hd, corr[r], o + (long)r * C);
        mm(jb, br, hd, bc, s, BC, 1, v + (long)j0 * C3, C3, o, C, j0 > 0);
    }
    float *lse = jb->lse + ((long)bh * T + i0);
    for (int r = 0; r < br; r++) {
        jb->vt->scale(hd, 1.0f / l[r], o + (long)r * C);
        lse[r] = m[r] + logf(l[r]);
    }
}

static void attn_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *lse, int amx)
{
    attn_job j = {.vt = k_tfm_vt_cur(), .b = b, .t = t, .h = h, .hd = hd, .qkv = qkv, .out = y, .lse = lse, .amx = amx};
    j.nq = (t + BR - 1) / BR;
    k_parallel_for(b * h * j.nq, fwd_task, &j);
}

void k_attention_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *lse)
{
    attn_fwd(b, t, h, hd, qkv, y, lse, 0);
}

void k_attention_fwd_bf16(int b, int t, int h, int hd, const float *qkv, float *y, float *lse)
{
    attn_fwd(b, t, h, hd, qkv, y, lse, k_amx_ok());
}

static void bwd_task(void *ctx, int bh)
{
    const attn_job *jb = ctx;
    const int T = jb->t, hd = jb->hd, C = jb->h * hd;
    const long C3 = 3L * C;
    int hh = bh % jb->h, bb = bh / jb->h;
    const long qoff = (long)bb * T * C3 + (long)hh * hd, ooff = (long)bb * T * C + (long)hh * hd;
    const float *q = jb->qkv + qoff, *k = q + C, *v = q + 2 * C;
    const float *o = jb->y + ooff, *dout = jb->dy + ooff, *lse = jb->lse_in + (long)bh * T;
    float *dq = jb->dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
    const float scale = 1.0f / sqrtf((float)hd);
    float p[BR * BC], dp[BR * BC], kt[K_ATTN_MAX_HD * BC], vt[K_ATTN_MAX_HD * BC], d[BR], dall[BWD_DKEEP];
    for (int i = 0; i < T; i++) memset(dq + (long)i * C3, 0, sizeof(float) * (size_t)hd);
    /* D_i depends on the query row only: once per row rather than once per key tile (a
     * twelfth of the backward at T 256); past BWD_DKEEP rows, once per tile as before */
    const int dkeep = T <= BWD_DKEEP;
    for (int i = 0; dkeep && i < T; i++) dall[i] = jb->vt->dot(hd, dout + (long)i * C, o + (long)i * C);
    for (int j0 = 0; j0 < T; j0 += BC) {
        int bc = T - j0 < BC ? T - j0 : BC;
        if (!jb->amx) { /* AMX packs K and V rows as B^T itself */
            transpose_tile(bc, hd, k + (long)j0 * C3, C3, kt);
            transpose_tile(bc, hd, v + (long)j0 * C3, C3, vt);
        }
        int first = 1;
        /* query tiles with a row at or after j0 */
        for (int i0 = j0 / BR * BR; i0 < T; i0 += BR) {
            int br = T - i0 < BR ? T - i0 : BR;
            if (jb->amx) mm_kt(br, bc, hd, q + (long)i0 * C3, C3, k + (long)j0 * C3, C3, p, BC);
            else mm(jb, br, bc, hd, q + (long)i0 * C3, C3, 1, kt, BC, p, BC, 0);
            for (int r = 0; r < br; r++) {
                int nv = i0 + r - j0 + 1;
                nv = nv > bc ? bc : nv < 0 ? 0 : nv;
                jb->vt->exp_shift(nv, bc - nv, p + r * BC, scale, lse[i0 + r]);
                d[r] = dkeep ? dall[i0 + r] : jb->vt->dot(hd, dout + (long)(i0 + r) * C, o + (long)(i0 + r) * C);
            }
            mm(jb, bc, hd, br, p, 1, BC, dout + (long)i0 * C, C, dv + (long)j0 * C3, C3, !first);
            if (jb->amx) mm_kt(br, bc, hd, dout + (long)i0 * C, C, v + (long)j0 * C3, C3, dp, BC);
            else mm(jb, br, bc, hd, dout + (long)i0 * C, C, 1, vt, BC, dp, BC, 0);
            for (int r = 0; r < br; r++) jb->vt->ds_row(bc, p + r * BC, dp + r * BC, d[r], scale);
            mm(jb, bc, hd, br, dp, 1, BC, q + (long)i0 * C3, C3, dk + (long)j0 * C3, C3, !first);
            mm(jb, br, hd, bc, dp, BC, 1, k + (long)j0 * C3, C3, dq + (long)i0 * C3, C3, 1);
            first = 0;
        }
    }
}

static void attn_bwd(int b, int t, int h, int hd, const float *qkv, const float *y, const float *lse,
                     const float *dy, float *dqkv, int amx)
{
    attn_job j = {.vt = k_tfm_vt_cur(), .b = b, .t = t, .h = h, .hd = hd, .qkv = qkv, .y = y,
                  .lse_in = lse, .dy = dy, .dqkv = dqkv, .amx = amx};
    k_parallel_for(b * h, bwd_task, &j);
}

void k_attention_bwd(int b, int t, int h, int hd, const float *qkv, const float *y,
                     const float *lse, const float *dy, float *dqkv)
{
    attn_bwd(b, t, h, hd, qkv, y, lse, dy, dqkv, 0);
}

void k_attention_bwd_bf16(int b, int t, int h, int hd, const float *qkv, const float *y, const float *lse,
                          const float *dy, float *dqkv)
{
    attn_bwd(b, t, h, hd, qkv, y, lse, dy, dqkv, k_amx_ok());
}
