/* Naive references of k.h's layer-graph ops, written from k.h's definitions alone (not
 * from kernels/cpu): the device suite (test/gpu, on a GPU and on the SIMT executor)
 * compares the CUDA twins with them. Sums in double; integer and gather/scatter ops in
 * the order k.h states, so those compare bit for bit. */
#ifndef T_REF_GRAPH_H
#define T_REF_GRAPH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline void ref_maxpool_pad_fwd(int n, int c, int h, int w, int ks, int st, int pad, const float *x,
                                       float *y, int32_t *idx)
{
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    for (long pl = 0; pl < (long)n * c; pl++)
        for (int oh = 0; oh < p; oh++)
            for (int ow = 0; ow < q; ow++) {
                float m = -INFINITY;
                int32_t a = -1;
                for (int r = 0; r < ks; r++)
                    for (int s = 0; s < ks; s++) {
                        int ih = oh * st - pad + r, iw = ow * st - pad + s;
                        if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue; /* padding never wins */
                        float v = x[pl * h * w + ih * w + iw];
                        if (a < 0 || v > m || isnan(v)) { m = v; a = ih * w + iw; }
                    }
                y[(pl * p + oh) * q + ow] = m;
                idx[(pl * p + oh) * q + ow] = a;
            }
}

/* A scatter in window order (the CUDA kernel gathers). */
static inline void ref_maxpool_pad_bwd(int n, int c, int h, int w, int ks, int st, int pad, const float *dy,
                                       const int32_t *idx, float *dx)
{
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    memset(dx, 0, sizeof(float) * n * c * h * w);
    for (long pl = 0; pl < (long)n * c; pl++)
        for (int o = 0; o < p * q; o++) dx[pl * h * w + idx[pl * p * q + o]] += dy[pl * p * q + o];
}

static inline void ref_bn_stats(int n, int c, int hw, const float *x, float *mean, float *var)
{
    for (int ch = 0; ch < c; ch++) {
        double s = 0, q = 0, m = (double)n * hw;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < hw; k++) s += x[((long)i * c + ch) * hw + k];
        s /= m;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < hw; k++) {
                double d = x[((long)i * c + ch) * hw + k] - s;
                q += d * d;
            }
        mean[ch] = (float)s;
        var[ch] = (float)(q / m);
    }
}

static inline void ref_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                              const float *gamma, const float *beta, float *y)
{
    for (long i = 0; i < (long)n * c * hw; i++) {
        int ch = (int)(i / hw % c);
        y[i] = (float)(((double)x[i] - mean[ch]) * invstd[ch] * (gamma ? gamma[ch] : 1.0) + (beta ? beta[ch] : 0.0));
    }
}

static inline void ref_bn_bwd_sums(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                                   const float *dy, float *dgamma, float *dbeta)
{
    for (int ch = 0; ch < c; ch++) {
        double a = 0, b = 0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < hw; k++) {
                long e = ((long)i * c + ch) * hw + k;
                a += dy[e];
                b += (double)dy[e] * (((double)x[e] - mean[ch]) * invstd[ch]);
            }
        dbeta[ch] = (float)a;
        dgamma[ch] = (float)b;
    }
}

static inline void ref_bn_bwd_dx(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                                 const float *gamma, const float *dgamma, const float *dbeta, double m,
                                 const float *dy, float *dx)
{
    for (long i = 0; i < (long)n * c * hw; i++) {
        int ch = (int)(i / hw % c);
        double xh = ((double)x[i] - mean[ch]) * invstd[ch];
        dx[i] = (float)((gamma ? gamma[ch] : 1.0) * invstd[ch] * (dy[i] - dbeta[ch] / m - xh * dgamma[ch] / m));
    }
}

static inline void ref_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y)
{
    for (long pl = 0; pl < (long)n * c; pl++) {
        double s = 0;
        for (int k = 0; k < hw; k++) s += x[pl * hw + k];
        y[pl] = (float)(s / hw);
    }
}

static inline void ref_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    for (long i = 0; i < (long)n * c * hw; i++) dx[i] = (float)((double)dy[i / hw] / hw);
}

static inline void ref_embedding_fwd(int n, int len, int dim, const int32_t *ids, const float *table, float *y)
{
    for (int i = 0; i < n; i++)
        for (int d = 0; d < dim; d++)
            for (int t = 0; t < len; t++) y[((long)i * dim + d) * len + t] = table[(long)ids[i * len + t] * dim + d];
}

/* Zero, then every token adds into its row in token order (k.h's definition). */
static inline void ref_embedding_bwd(int n, int len, int dim, int vocab, const int32_t *ids, const float *dy,
                                     float *dtable)
{
    memset(dtable, 0, sizeof(float) * vocab * dim);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < len; t++)
            for (int d = 0; d < dim; d++)
                dtable[(long)ids[i * len + t] * dim + d] += dy[((long)i * dim + d) * len + t];
}

static inline void ref_max_time_fwd(int n, int c, int len, const float *x, float *y, int32_t *idx)
{
    for (long r = 0; r < (long)n * c; r++) {
        int a = 0;
        for (int t = 1; t < len; t++) {
            float v = x[r * len + t];
            if (v > x[r * len + a] || isnan(v)) a = t;
        }
        y[r] = x[r * len + a];
        idx[r] = a;
    }
}

static inline void ref_max_time_bwd(int n, int c, int len, const float *dy, const int32_t *idx, float *dx)
{
    for (long i = 0; i < (long)n * c * len; i++) dx[i] = idx[i / len] == i % len ? dy[i / len] : 0.0f;
}
#endif
