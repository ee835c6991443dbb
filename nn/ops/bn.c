/* batchnorm2d (PyTorch BatchNorm2d): training normalises with the batch statistics
 * (biased variance) and updates running_mean / running_var (unbiased) with `momentum`
 * and num_batches_tracked; evaluation uses the running statistics. The saved state
 * between forward and backward is the mean and 1/sqrt(var + eps) per channel. */
#include "nn/ops/op_def.h"
#include <math.h>
#include <stdint.h>

typedef struct bn_attr { float eps, momentum; } bn_attr;
NN_ATTR_ACCESS(bn_attr)
/* PyTorch's defaults. */
static const nn_attr bn_attrs[] = {NN_FLOAT(bn_attr, eps, "eps", 1e-5), NN_FLOAT(bn_attr, momentum, "momentum", 0.1),
                                   {NULL}};
extern const nn_op nn_op_batchnorm2d;

static int bn_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    bn_attr a = bn_attr_of(n);
    if (!(a.eps > 0) || !(a.momentum >= 0 && a.momentum <= 1))
        NN_BAD("eps %g must be > 0 and momentum %g in [0, 1]", (double)a.eps, (double)a.momentum);
    nn_shape x = nn_in(g, n, 0)->out;
    n->out = x;
    int c = x.c, one = 1;
    nn_param_add(g, n, "weight", 1, &c, NN_INIT_ONES, 0, 1);
    nn_param_add(g, n, "bias", 1, &c, NN_INIT_ZEROS, 0, 1);
    nn_buf_add(g, n, "running_mean", RT_F32, 1, &c, NN_INIT_ZEROS);
    nn_buf_add(g, n, "running_var", RT_F32, 1, &c, NN_INIT_ONES);
    nn_buf_add(g, n, "num_batches_tracked", RT_I64, 0, &one, NN_INIT_ZEROS);
    /* mean, invstd; the device op also keeps the batch variance apart (bn_fwd_cuda). */
    n->aux_fixed = 3 * (size_t)c * sizeof(float);
    return 0;
}

/* SyncBatchNorm forward: the per-rank mean and biased variance become global ones
 * through a sum of (count, count*mean, count*(var + mean^2)) in double; returns the
 * global count. */
static double bn_sync_stats(nn_graph *g, int c, double m, float *mean, float *var, void *ws)
{
    double *s = ws;
    for (int k = 0; k < c; k++) {
        s[k] = m * mean[k];
        s[c + k] = m * ((double)var[k] + (double)mean[k] * mean[k]);
    }
    s[2 * c] = m;
    g->sync_sum(g->sync_ctx, s, 2 * c + 1);
    double M = s[2 * c];
    for (int k = 0; k < c; k++) {
        double mu = s[k] / M, v = s[c + k] / M - mu * mu;
        mean[k] = (float)mu;
        var[k] = (float)(v > 0 ? v : 0);
    }
    return M;
}

static void bn_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int c = n->out.c, hw = n->out.h * n->out.w;
    bn_attr a = bn_attr_of(n);
    float *mean = n->aux, *invstd = mean + c, eps = a.eps, mom = a.momentum;
    float *rm = nn_buf_data(g, n->b0), *rv = nn_buf_data(g, n->b0 + 1);
    if (r->recompute) {
        /* backward re-running the forward: the saved statistics, no update */
    } else if (r->train) {
        k_bn_stats(r->n, c, hw, nn_x(g, n, 0), mean, invstd);
        double m = (double)r->n * hw;
        if (g->sync_sum) m = bn_sync_stats(g, c, m, mean, invstd, r->ws);
        double unbias = m > 1 ? m / (m - 1) : 1.0;
        if (g->bn_stats) { /* ghost BN: the statistics wait for the tree (nn_bn_update) */
            double *s = g->bn_stats + g->bn_pos;
            g->bn_pos += 2 * c;
            for (int k = 0; k < c; k++) {
                s[k] = mean[k];
                s[c + k] = invstd[k] * unbias;
                invstd[k] = 1.0f / sqrtf(invstd[k] + eps);
            }
        } else for (int k = 0; k < c; k++) {
            rm[k] = (1 - mom) * rm[k] + mom * mean[k];
            rv[k] = (float)((1 - mom) * rv[k] + mom * invstd[k] * unbias);
            invstd[k] = 1.0f / sqrtf(invstd[k] + eps);
        }
        if (!g->bn_stats) ++*(int64_t *)nn_buf_data(g, n->b0 + 2);
    } else {
        for (int k = 0; k < c; k++) {
            mean[k] = rm[k];
            invstd[k] = 1.0f / sqrtf(rv[k] + eps);
        }
    }
    if (n->fused_into) return; /* the ReLU after it (or after the add) applies it in its pass (relu.c) */
    k_bn_fwd(r->n, c, hw, nn_x(g, n, 0), mean, invstd, nn_pw(g, n, 0), nn_pw(g, n, 1), n->y);
}

int nn_bn_stats_len(const nn_graph *g)
{
    int len = 0;
    for (int i = 1; i < g->nn; i++)
        if (g->nodes[i].op == &nn_op_batchnorm2d && g->nodes[i].storage == i && !g->nodes[i].folded) len += 2 * g->nodes[i].out.c;
    return len;
}

void nn_bn_update(nn_graph *g, const double *stats, double scale)
{
    for (int i = 1; i < g->nn; i++) {
        nn_node *n = &g->nodes[i];
        if (n->op != &nn_op_batchnorm2d || n->storage != i || n->folded) continue;
        int c = n->out.c;
        float mom = bn_attr_of(n).momentum, *rm = nn_buf_data(g, n->b0), *rv = nn_buf_data(g, n->b0 + 1);
        for (int k = 0; k < c; k++) { /* the forward's update, with the shards' average */
            rm[k] = (1 - mom) * rm[k] + mom * (float)(stats[k] * scale);
            rv[k] = (float)((1 - mom) * rv[k] + mom * (stats[c + k] * scale));
        }
        ++*(int64_t *)nn_buf_data(g, n->b0 + 2);
        stats += 2 * c;
    }
}

static void bn_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int c = n->out.c, hw = n->out.h * n->out.w;
    const float *x = nn_x(g, n, 0), *mean = n->aux, *invstd = mean + c, *gm = nn_pw(g, n, 0), *bt = nn_pw(g, n, 1);
    float *dg = nn_pg(g, n, 0), *db = nn_pg(g, n, 1), *dx = nn_dx(g, n, 0);
    /* Fused with the ReLU right after it: that ReLU's dy, masked here (its own backward
     * is empty). Fused through an add: the add's gradient, as unfused. */
    int rl = n->fused_into && g->nodes[n->fused_into].fuse_from == (int)(n - g->nodes);
    const float *dy = rl ? g->nodes[n->fused_into].dy : n->dy;
    if (rl) k_bn_relu_bwd_sums(r->n, c, hw, x, mean, invstd, gm, bt, dy, dg, db);
    else k_bn_bwd_sums(r->n, c, hw, x, mean, invstd, dy, dg, db);
    if (!dx) return;
    if (!g->sync_sum) {
        if (rl) k_bn_relu_bwd_dx(r->n, c, hw, x, mean, invstd, gm, bt, dg, db, (double)r->n * hw, dy, dx);
        else k_bn_bwd_dx(r->n, c, hw, x, mean, invstd, gm, dg, db, (double)r->n * hw, dy, dx);
        return;
    }
    /* SyncBatchNorm: dx needs the sums over every rank's batch; the parameter
     * gradients stay this rank's (DDP averages them). */
    double *s = r->ws;
    float *f = (float *)(s + 2 * c + 1);
    for (int k = 0; k < c; k++) { s[k] = dg[k]; s[c + k] = db[k]; }
    s[2 * c] = (double)r->n * hw;
    g->sync_sum(g->sync_ctx, s, 2 * c + 1);
    for (int k = 0; k < 2 * c; k++) f[k] = (float)s[k];
    if (rl) k_bn_relu_bwd_dx(r->n, c, hw, x, mean, invstd, gm, bt, f, f + c, s[2 * c], dy, dx);
    else k_bn_bwd_dx(r->n, c, hw, x, mean, invstd, gm, f, f + c, s[2 * c], dy, dx);
}

static size_t bn_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    (void)g;
    (void)max_batch;
    return (size_t)(4 * n->out.c + 2) * sizeof(double);
}

#if DDPRT_CUDA
/* aux holds mean, invstd and the batch variance (bn_finish reads the variance while it
 * writes invstd, so they cannot share floats); the running statistics and
 * num_batches_tracked are updated on the device. */
/* SyncBatchNorm on the device: the c-float device vectors a and b come to the host
 * (g->sync_host, after its 2c + 1 doubles of sums), and back once summed over the ranks
 * (the host waits for the device here: the sums are the step's barrier, as on the CPU). */
static int bn_sync_down(nn_graph *g, int c, const float *a, const float *b, port_stream s, float **ha)
{
    *ha = (float *)(g->sync_host + 2 * c + 1);
    return port_memcpy_d2h(*ha, a, c * sizeof(float), s, "SyncBatchNorm sums") ||
           port_memcpy_d2h(*ha + c, b, c * sizeof(float), s, "SyncBatchNorm sums") ||
           port_stream_sync(s, "SyncBatchNorm");
}

static int bn_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    int c = n->out.c, hw = n->out.h * n->out.w;
    bn_attr a = bn_attr_of(n);
    float *mean = n->aux, *invstd = mean + c, *var = mean + 2 * c;
    float *rm = nn_buf_data(g, n->b0), *rv = nn_buf_data(g, n->b0 + 1);
    port_stream s = r->stream;
    const float *m = mean;
    /* channels last: the elementwise kernels on [n*hw, c] (hw = 1), the sums' own */
    const int nh = n->nhwc, en = nh ? r->n * hw : r->n, ehw = nh ? 1 : hw;
    if (r->train) {
        double cnt = (double)r->n * hw;
        if (nh ? k_cuda_bn_stats_nhwc((size_t)r->n * hw, c, nn_x(g, n, 0), nn_cuda_xt(g, n, 0), mean, var, r->ws, s)
               : k_cuda_bn_stats_t(r->n, c, hw, nn_x(g, n, 0), nn_cuda_xt(g, n, 0), mean, var, s))
            return -1;
        if (g->sync_sum) { /* the CPU's bn_sync_stats on host copies: the global mean and variance */
            float *h;
            if (bn_sync_down(g, c, mean, var, s, &h)) return -1;
            cnt = bn_sync_stats(g, c, cnt, h, h + c, g->sync_host);
            if (port_memcpy_h2d(mean, h, c * sizeof(float), s, "SyncBatchNorm mean") ||
                port_memcpy_h2d(var, h + c, c * sizeof(float), s, "SyncBatchNorm variance"))
                return -1;
        }
        if (k_cuda_bn_finish(c, mean, var, a.eps, a.momentum, cnt, invstd, rm, rv, s) ||
            k_cuda_add_i64(nn_buf_data(g, n->b0 + 2), 1, s))
            return -1;
    } else {
        if (k_cuda_bn_finish(c, rm, rv, a.eps, 0, 0, invstd, NULL, NULL, s)) return -1;
        m = rm;
        /* fused: the ReLU's pass reads the mean from aux, as in training */
        if (n->fused_into && port_memcpy_d2d(mean, rm, c * sizeof(float), s, "BatchNorm running mean")) return -1;
    }
    if (n->fused_into) return 0; /* the ReLU after it (or after the add) applies it in its pass (relu.c) */
    return k_cuda_bn_fwd_t(en, c, ehw, nn_x(g, n, 0), nn_cuda_xt(g, n, 0), m, invstd, nn_pw(g, n, 0), nn_pw(g, n, 1),
                           n->y, nn_cuda_yt(g, n), s);
}

static int bn_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    int c = n->out.c, hw = n->out.h * n->out.w;
    const float *x = nn_x(g, n, 0), *mean = n->aux, *invstd = mean + c;
    float *dg = nn_pg(g, n, 0), *db = nn_pg(g, n, 1), *dx = nn_dx(g, n, 0);
    int xt = nn_cuda_xt(g, n, 0);
    /* Fused with the ReLU right after it: that ReLU's dy, masked here (bn_bwd's rule). */
    int rl = n->fused_into && g->nodes[n->fused_into].fuse_from == (int)(n - g->nodes);
    const float *dy = rl ? g->nodes[n->fused_into].dy : n->dy, *gm = nn_pw(g, n, 0), *bt = nn_pw(g, n, 1);
    const int nh = n->nhwc, en = nh ? r->n * hw : r->n, ehw = nh ? 1 : hw; /* as bn_fwd_cuda */
    if (nh ? k_cuda_bn_bwd_sums_nhwc((size_t)r->n * hw, c, x, xt, mean, invstd, rl ? gm : NULL, rl ? bt : NULL, rl,
                                     dy, dg, db, r->ws, r->stream)
           : rl ? k_cuda_bn_relu_bwd_sums_t(r->n, c, hw, x, xt, mean, invstd, gm, bt, dy, dg, db, r->stream)
                : k_cuda_bn_bwd_sums_t(r->n, c, hw, x, xt, mean, invstd, dy, dg, db, r->stream))
        return -1;
    if (!dx) return 0;
    if (!g->sync_sum)
        return rl ? k_cuda_bn_relu_bwd_dx_t(en, c, ehw, x, xt, mean, invstd, gm, bt, dg, db, (double)r->n * hw, dy, dx,
                                            r->stream)
                  : k_cuda_bn_bwd_dx_t(en, c, ehw, x, xt, mean, invstd, gm, dg, db, (double)r->n * hw, dy, dx,
                                       r->stream);
    /* as bn_bwd: dx from every rank's sums (in the device workspace), dgamma and dbeta
     * stay this rank's */
    double *sum = g->sync_host;
    float *h, *f = r->ws;
    if (bn_sync_down(g, c, dg, db, r->stream, &h)) return -1;
    for (int k = 0; k < 2 * c; k++) sum[k] = h[k];
    sum[2 * c] = (double)r->n * hw;
    g->sync_sum(g->sync_ctx, sum, 2 * c + 1);
    for (int k = 0; k < 2 * c; k++) h[k] = (float)sum[k];
    if (port_memcpy_h2d(f, h, 2 * c * sizeof(float), r->stream, "SyncBatchNorm gradient sums")) return -1;
    return rl ? k_cuda_bn_relu_bwd_dx_t(en, c, ehw, x, xt, mean, invstd, gm, bt, f, f + c, sum[2 * c], dy, dx, r->stream)
              : k_cuda_bn_bwd_dx_t(en, c, ehw, x, xt, mean, invstd, gm, f, f + c, sum[2 * c], dy, dx, r->stream);
}

/* the global dgamma and dbeta of SyncBatchNorm's backward; channels last, the sums'
 * strips (k_cuda_bn_nhwc_workspace: the largest over the batch sizes) */
static size_t bn_ws_cuda(const nn_graph *g, const nn_node *n, int max_batch)
{
    (void)g;
    size_t w = 2 * (size_t)n->out.c * sizeof(float), hw = (size_t)n->out.h * n->out.w;
    for (int b = 1; b <= max_batch && n->nhwc; b++) {
        size_t e = k_cuda_bn_nhwc_workspace((size_t)b * hw, n->out.c);
        if (e > w) w = e;
    }
    return w;
}
#endif

const nn_op nn_op_batchnorm2d = {
    .kind = "batchnorm2d", .alias = "batchnorm",
    .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE | NN_RECT_MASK_SOURCE | NN_FUSES_RELU | NN_IN16 | NN_OUT16,
    .attrs = bn_attrs,
    .attr_size = sizeof(bn_attr), .infer = bn_infer, .workspace = bn_ws, .fwd = bn_fwd, .bwd = bn_bwd,
    NN_CUDA_ONLY(.fwd_cuda = bn_fwd_cuda, .bwd_cuda = bn_bwd_cuda, .workspace_cuda = bn_ws_cuda,
                 .nhwc_in = nn_nhwc_follow_in, .nhwc_out = nn_nhwc_follow_out)};

int nn_batchnorm(nn_graph *g, const char *name, int x)
{
    bn_attr a = {1e-5f, 0.1f}; /* PyTorch's defaults */
    return nn_add(g, &nn_op_batchnorm2d, name, &x, 1, &a, sizeof a);
}
