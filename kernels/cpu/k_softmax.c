/* log_softmax over rows, NLL loss and the fused backward of the pair. */
#include "kernels/k.h"
#include <math.h>

void k_log_softmax_fwd(int n, int classes, const float *x, float *y)
{
    for (long i = 0; i < n; i++) {
        const float *xr = x + i * classes;
        float *yr = y + i * classes;
        float m = -INFINITY;
        for (int j = 0; j < classes; j++) m = xr[j] > m ? xr[j] : m;
        /* Shift by the max so exp never overflows; sum in double. */
        double s = 0.0;
        for (int j = 0; j < classes; j++) s += exp((double)xr[j] - m);
        float lse = (float)(m + log(s));
        for (int j = 0; j < classes; j++) yr[j] = xr[j] - lse;
    }
}

/* Labels outside [0, classes) (e.g. PyTorch's ignore_index -100) add nothing. */
double k_nll_loss_sum(int n, int classes, const float *logp, const int32_t *labels, long *correct)
{
    double s = 0.0;
    long ok = 0;
    for (long i = 0; i < n; i++) {
        const float *r = logp + i * classes;
        int32_t l = labels[i];
        if (l < 0 || l >= classes) continue;
        s -= r[l];
        int am = 0;
        for (int j = 1; j < classes; j++)
            if (r[j] > r[am]) am = j;
        ok += am == l;
    }
    if (correct) *correct = ok;
    return s;
}

void k_log_softmax_nll_bwd(int n, int classes, const float *logp, const int32_t *labels,
                           float scale, float *dx)
{
    for (long i = 0; i < n; i++) {
        const float *r = logp + i * classes;
        float *d = dx + i * classes;
        int32_t l = labels[i];
        if (l < 0 || l >= classes) {
            for (int j = 0; j < classes; j++) d[j] = 0.0f;
            continue;
        }
        for (int j = 0; j < classes; j++) d[j] = scale * (expf(r[j]) - (j == l ? 1.0f : 0.0f));
    }
}

double k_cross_entropy_fwd(int n, int classes, const float *logits, const int32_t *labels, float *logp,
                           long *correct)
{
    k_log_softmax_fwd(n, classes, logits, logp);
    return k_nll_loss_sum(n, classes, logp, labels, correct);
}
