/* The ops' device halves (nn_op.fwd_cuda / bwd_cuda / workspace_cuda): each calls the
 * kernels/cuda twin of the kernel its CPU half calls, with the device graph's pointers,
 * on r->stream, in the same order and with the same RNG counters, so the CPU executor
 * is the reference. Built only with the CUDA port (the tables hold NULLs otherwise). */
#include "nn/ops/ops.h"
#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"

#define OK(call) do { if (call) return -1; } while (0)
static size_t per(const nn_node *n) { return nn_shape_numel(n->out); }
static size_t fbytes(const nn_node *n, int b) { return (size_t)b * per(n) * sizeof(float); }

int nn_cu_nop(nn_graph *g, nn_node *n, const nn_run *r) { (void)g; (void)n; (void)r; return 0; }

/* conv2d / conv1d: split-K scratch is not monotonic in the batch, so the largest over
 * every batch size the plan allows. */
size_t nn_cu_conv_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    (void)g;
    size_t need = 0;
    for (int b = 1; b <= max_batch; b++) {
        k_conv_shape sh = n->conv;
        sh.n = b;
        size_t w = k_cuda_conv2d_workspace(&sh);
        if (w > need) need = w;
    }
    return need;
}

int nn_cu_conv_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv_shape sh = n->conv;
    sh.n = r->n;
    return k_cuda_conv2d_fwd(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->ia[5] ? nn_pw(g, n, 1) : NULL, n->y, r->ws,
                             r->stream);
}

int nn_cu_conv_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv_shape sh = n->conv;
    sh.n = r->n;
    return k_cuda_conv2d_bwd(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                             n->ia[5] ? nn_pg(g, n, 1) : NULL, r->ws, r->stream);
}

size_t nn_cu_linear_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    size_t need = 0;
    for (int b = 1; b <= max_batch; b++) {
        size_t w = k_cuda_linear_workspace(b, nn_in(g, n, 0)->out.c, n->out.c);
        if (w > need) need = w;
    }
    return need;
}

int nn_cu_linear_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_linear_fwd(r->n, nn_in(g, n, 0)->out.c, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1),
                             n->y, r->ws, r->stream);
}

int nn_cu_linear_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_linear_bwd(r->n, nn_in(g, n, 0)->out.c, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy,
                             nn_dx(g, n, 0), nn_pg(g, n, 0), nn_pg(g, n, 1), r->ws, r->stream);
}

/* batchnorm2d: aux holds mean, invstd and the batch variance (bn_finish reads the
 * variance while it writes invstd, so they cannot share floats); the running
 * statistics and num_batches_tracked are updated on the device. */
int nn_cu_bn_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int c = n->out.c, hw = n->out.h * n->out.w;
    float *mean = n->aux, *invstd = mean + c, *var = mean + 2 * c;
    float *rm = nn_buf_data(g, n->b0), *rv = nn_buf_data(g, n->b0 + 1);
    port_stream s = r->stream;
    const float *m = mean;
    if (r->train) {
        OK(k_cuda_bn_stats(r->n, c, hw, nn_x(g, n, 0), mean, var, s));
        OK(k_cuda_bn_finish(c, mean, var, n->fa[0], n->fa[1], (double)r->n * hw, invstd, rm, rv, s));
        OK(k_cuda_add_i64(nn_buf_data(g, n->b0 + 2), 1, s));
    } else {
        OK(k_cuda_bn_finish(c, rm, rv, n->fa[0], 0, 0, invstd, NULL, NULL, s));
        m = rm;
    }
    return k_cuda_bn_fwd(r->n, c, hw, nn_x(g, n, 0), m, invstd, nn_pw(g, n, 0), nn_pw(g, n, 1), n->y, s);
}

int nn_cu_bn_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int c = n->out.c, hw = n->out.h * n->out.w;
    const float *x = nn_x(g, n, 0), *mean = n->aux, *invstd = mean + c;
    float *dg = nn_pg(g, n, 0), *db = nn_pg(g, n, 1), *dx = nn_dx(g, n, 0);
    OK(k_cuda_bn_bwd_sums(r->n, c, hw, x, mean, invstd, n->dy, dg, db, r->stream));
    if (dx)
        OK(k_cuda_bn_bwd_dx(r->n, c, hw, x, mean, invstd, nn_pw(g, n, 0), dg, db, (double)r->n * hw, n->dy, dx,
                            r->stream));
    return 0;
}

int nn_cu_relu_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_relu_fwd((size_t)r->n * per(n), nn_x(g, n, 0), n->y, r->stream);
}

int nn_cu_relu_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_relu_bwd((size_t)r->n * per(n), n->y, n->dy, dx, r->stream) : 0;
}

/* The no-padding kernel where the CPU op uses it (same windows either way). */
static int pool_plain(const nn_graph *g, const nn_node *n)
{
    nn_shape x = nn_in(g, n, 0)->out;
    return n->ia[2] == 0 && x.h % n->ia[0] == 0 && x.w % n->ia[0] == 0 && n->ia[1] == n->ia[0];
}

int nn_cu_maxpool_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    if (pool_plain(g, n))
        return k_cuda_maxpool2d_fwd(r->n, x.c, x.h, x.w, n->ia[0], n->ia[1], nn_x(g, n, 0), n->y, n->aux, r->stream);
    return k_cuda_maxpool2d_pad_fwd(r->n, x.c, x.h, x.w, n->ia[0], n->ia[1], n->ia[2], nn_x(g, n, 0), n->y, n->aux,
                                    r->stream);
}

int nn_cu_maxpool_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    float *dx = nn_dx(g, n, 0);
    if (!dx) return 0;
    if (pool_plain(g, n))
        return k_cuda_maxpool2d_bwd(r->n, x.c, x.h, x.w, n->ia[0], n->ia[1], n->dy, n->aux, dx, r->stream);
    return k_cuda_maxpool2d_pad_bwd(r->n, x.c, x.h, x.w, n->ia[0], n->ia[1], n->ia[2], n->dy, n->aux, dx,
                                    r->stream);
}

int nn_cu_avg_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    return k_cuda_global_avgpool_fwd(r->n, x.c, x.h * x.w, nn_x(g, n, 0), n->y, r->stream);
}

int nn_cu_avg_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_global_avgpool_bwd(r->n, x.c, x.h * x.w, n->dy, dx, r->stream) : 0;
}

int nn_cu_maxt_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    return k_cuda_max_time_fwd(r->n, x.c, x.w, nn_x(g, n, 0), n->y, n->aux, r->stream);
}

int nn_cu_maxt_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_max_time_bwd(r->n, x.c, x.w, n->dy, n->aux, dx, r->stream) : 0;
}

int nn_cu_add_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_add((size_t)r->n * per(n), nn_x(g, n, 0), nn_x(g, n, 1), n->y, r->stream);
}

int nn_cu_add_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    for (int i = 0; i < 2; i++) {
        float *dx = nn_dx(g, n, i);
        if (dx) OK(port_memcpy_d2d(dx, n->dy, fbytes(n, r->n), r->stream, "residual add gradient"));
    }
    return 0;
}

/* flatten runs only when the planner could not make it a view. */
int nn_cu_copy_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    return port_memcpy_d2d(n->y, nn_x(g, n, 0), fbytes(n, r->n), r->stream, "flatten");
}

int nn_cu_copy_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    return dx ? port_memcpy_d2d(dx, n->dy, fbytes(n, r->n), r->stream, "flatten gradient") : 0;
}

/* dropout: the CPU op's counter range (nn/ops/elementwise.c), so the masks are the CPU's. */
int nn_cu_dropout_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const float *x = nn_x(g, n, 0);
    if (!r->train) return port_memcpy_d2d(n->y, x, fbytes(n, r->n), r->stream, "dropout (eval)");
    uint64_t B = (uint64_t)g->max_batch, ctr = r->step * B * g->rng_stride + B * n->rng_offset;
    if (n->ia[0])
        return k_cuda_dropout2d_fwd(r->n, n->out.c, n->out.h * n->out.w, n->fa[0], r->seed, ctr, x, n->y, n->aux,
                                    r->stream);
    return k_cuda_dropout_fwd((size_t)r->n * per(n), n->fa[0], r->seed, ctr, x, n->y, n->aux, r->stream);
}

int nn_cu_dropout_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (!dx) return 0;
    if (n->ia[0]) return k_cuda_dropout2d_bwd(r->n, n->out.c, n->out.h * n->out.w, n->fa[0], n->aux, n->dy, dx, r->stream);
    return k_cuda_dropout_bwd((size_t)r->n * per(n), n->fa[0], n->aux, n->dy, dx, r->stream);
}

int nn_cu_concat_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    size_t hw = (size_t)n->out.h * n->out.w, off = 0;
    for (int i = 0; i < n->nin; i++) {
        size_t part = (size_t)nn_in(g, n, i)->out.c * hw;
        OK(k_cuda_copy_rows(r->n, part, nn_x(g, n, i), part, n->y + off, per(n), r->stream));
        off += part;
    }
    return 0;
}

int nn_cu_concat_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    size_t hw = (size_t)n->out.h * n->out.w, off = 0;
    for (int i = 0; i < n->nin; i++) {
        size_t part = (size_t)nn_in(g, n, i)->out.c * hw;
        float *dx = nn_dx(g, n, i);
        if (dx) OK(k_cuda_copy_rows(r->n, part, n->dy + off, per(n), dx, part, r->stream));
        off += part;
    }
    return 0;
}

int nn_cu_emb_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_embedding_fwd(r->n, n->out.w, n->out.c, (const int32_t *)nn_x(g, n, 0), nn_pw(g, n, 0), n->y,
                                r->stream);
}

int nn_cu_emb_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_embedding_bwd(r->n, n->out.w, n->out.c, n->ia[0], (const int32_t *)nn_x(g, n, 0), n->dy,
                                nn_pg(g, n, 0), r->stream);
}

int nn_cu_lsm_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_log_softmax_fwd(r->n, n->out.c, nn_x(g, n, 0), n->y, r->stream);
}

int nn_cu_lsm_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_log_softmax_bwd(r->n, n->out.c, n->y, n->dy, dx, r->stream) : 0;
}
#endif
