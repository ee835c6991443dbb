/* The tied classifier with softmax cross-entropy fused (kernels/k_tfm.h).
 *
 * Rows are taken a block of nr at a time (nr x v logits in the workspace, about 16 MiB
 * at most, never n x v). Per block:
 *   1. L = X_r W^T, vocabulary chunks in parallel (the NT GEMM: both along c);
 *   2. per row: max, exp in place, the sum in double, lse, the loss; with gradients
 *      L becomes scale * (softmax - onehot);
 *   3. dW (+)= L^T X_r, vocabulary chunks in parallel (each chunk sums the row blocks
 *      in order);
 *   4. dX_r = L W, column blocks in parallel.
 * Three passes of n*v*c multiply-adds, as an unfused logits + softmax + cross-entropy
 * needs. Every sum has one owner and a fixed order: the same bits for any thread count. */
#include "kernels/k_tfm.h"
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tfm_int.h"
#include <math.h>
#include <string.h>

#define CL_BUDGET (1L << 22) /* floats of logits per row block */
#define VC 256               /* vocabulary chunk */
#define CB 64                /* column block of dX */

static int block_rows(int n, int v)
{
    long r = CL_BUDGET / (v > 0 ? v : 1);
    r = r < 16 ? 16 : r / 16 * 16;
    return (int)(n < r ? n : r);
}

/* The row block's losses (doubles) after its logits, at a multiple of 64 bytes: an odd
 * rows x vocabulary left them misaligned (UBSan, test kernels_classifier_fused). */
static size_t loss_offset(int nr, int v) { return ((size_t)nr * (size_t)v * sizeof(float) + 63) & ~(size_t)63; }

size_t k_classifier_workspace(int n, int c, int v)
{
    (void)c;
    int nr = block_rows(n > 0 ? n : 1, v);
    return loss_offset(nr, v) + (size_t)nr * sizeof(double) + 64;
}

typedef struct cl_job {
    const k_tfm_vt *vt;
    int c, v, nr, grads, acc;
    float scale;
    const float *x, *w;
    const int32_t *tgt;
    float *l, *dx, *dw;
    double *loss;
} cl_job;

static void logits_task(void *ctx, int task)
{
    const cl_job *j = ctx;
    int v0 = task * VC, vc = j->v - v0 < VC ? j->v - v0 : VC;
    k_gemm_nt(j->nr, vc, j->c, j->x, j->c, j->w + (long)v0 * j->c, j->c, j->l + v0, j->v, NULL, 0);
}

static void softmax_task(void *ctx, int r)
{
    const cl_job *j = ctx;
    float *lr = j->l + (long)r * j->v;
    int32_t t = j->tgt[r];
    if (t < 0 || t >= j->v) {
        j->loss[r] = 0.0;
        if (j->grads) memset(lr, 0, sizeof(float) * (size_t)j->v);
        return;
    }
    float lt = lr[t], mx = j->vt->max(j->v, lr);
    double sum = j->vt->exp_sumd(j->v, lr, mx);
    j->loss[r] = (double)mx + log(sum) - (double)lt;
    if (j->grads) {
        j->vt->scale(j->v, (float)(j->scale / sum), lr);
        lr[t] -= j->scale;
    }
}

static void dw_task(void *ctx, int task)
{
    const cl_job *j = ctx;
    int v0 = task * VC, vc = j->v - v0 < VC ? j->v - v0 : VC;
    k_gemm_nn(vc, j->c, j->nr, j->l + v0, 1, j->v, j->x, j->c, j->dw + (long)v0 * j->c, j->c, NULL, j->acc);
}

static void dx_task(void *ctx, int task)
{
    const cl_job *j = ctx;
    int c0 = task * CB, nc = j->c - c0 < CB ? j->c - c0 : CB;
    k_gemm_nn(j->nr, nc, j->v, j->l, j->v, 1, j->w + c0, j->c, j->dx + c0, j->c, NULL, 0);
}

double k_classifier_fwd_bwd(int n, int c, int v, const float *x, const float *w,
                            const int32_t *targets, float scale, float *loss_rows, float *dx,
                            float *dw, int acc_dw, void *ws)
{
    int nrmax = block_rows(n > 0 ? n : 1, v);
    cl_job j = {.vt = k_tfm_vt_cur(), .c = c, .v = v, .w = w, .scale = scale,
                .grads = dx != NULL || dw != NULL, .l = ws};
    j.loss = (double *)(void *)((char *)ws + loss_offset(nrmax, v));
    int nvc = (v + VC - 1) / VC, ncb = (c + CB - 1) / CB;
    double total = 0.0;
    for (int r0 = 0; r0 < n; r0 += nrmax) {
        j.nr = n - r0 < nrmax ? n - r0 : nrmax;
        j.x = x + (long)r0 * c;
        j.tgt = targets + r0;
        k_parallel_for(nvc, logits_task, &j);
        k_parallel_for(j.nr, softmax_task, &j);
        for (int r = 0; r < j.nr; r++) {
            total += j.loss[r];
            if (loss_rows) loss_rows[r0 + r] = (float)j.loss[r];
        }
        if (dw) {
            j.dw = dw;
            j.acc = acc_dw || r0 > 0;
            k_parallel_for(nvc, dw_task, &j);
        }
        if (dx) {
            j.dx = dx + (long)r0 * c;
            k_parallel_for(ncb, dx_task, &j);
        }
    }
    return total;
}
