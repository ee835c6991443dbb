/* relu, residual add, flatten (a view when its input has no other reader), dropout /
 * dropout2d, concat along channels, log_softmax. */
#include "nn/ops/ops.h"
#include <math.h>
#include <string.h>

static int same_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    n->out = nn_in(g, n, 0)->out;
    return 0;
}

static void relu_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_relu_fwd((size_t)r->n * nn_shape_numel(n->out), nn_x(g, n, 0), n->y);
}

static void relu_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (!dx) return;
    if (n->mask_from_bn) { /* the planner dropped both outputs: the mask from BN's input */
        const nn_node *b = nn_in(g, n, 0);
        const float *mean = b->aux;
        k_bn_relu_bwd(r->n, n->out.c, n->out.h * n->out.w, nn_x(g, b, 0), mean, mean + n->out.c, nn_pw(g, b, 0),
                      nn_pw(g, b, 1), n->dy, dx);
        return;
    }
    k_relu_bwd((size_t)r->n * nn_shape_numel(n->out), n->y, n->dy, dx);
}

const nn_op nn_op_relu = {"relu", NN_BWD_OUTPUT | NN_RECOMPUTE | NN_FWD_INPLACE | NN_BWD_INPLACE, same_infer, NULL, relu_fwd, relu_bwd,
                            NN_CUDA(nn_cu_relu_fwd, nn_cu_relu_bwd, NULL)};

static int add_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    if (n->nin != 2) NN_BAD("takes 2 inputs, got %d", n->nin);
    NN_NEED_FLOAT(0);
    NN_NEED_FLOAT(1);
    nn_shape a = nn_in(g, n, 0)->out, b = nn_in(g, n, 1)->out;
    if (a.c != b.c || a.h != b.h || a.w != b.w)
        NN_BAD("shapes differ: %dx%dx%d and %dx%dx%d", a.c, a.h, a.w, b.c, b.h, b.w);
    n->out = a;
    return 0;
}

static void add_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_add((size_t)r->n * nn_shape_numel(n->out), nn_x(g, n, 0), nn_x(g, n, 1), n->y);
}

static void add_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    size_t bytes = (size_t)r->n * nn_shape_numel(n->out) * sizeof(float);
    for (int i = 0; i < 2; i++) {
        float *dx = nn_dx(g, n, i);
        if (dx) memcpy(dx, n->dy, bytes);
    }
}

const nn_op nn_op_add = {"add", NN_RECOMPUTE, add_infer, NULL, add_fwd, add_bwd, NN_CUDA(nn_cu_add_fwd, nn_cu_add_bwd, NULL)};

static int flatten_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    n->out = (nn_shape){(int)nn_numel_in(g, n, 0), 1, 1, 0};
    return 0;
}

/* Only runs when the planner could not make it a view. */
static void flatten_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    memcpy(n->y, nn_x(g, n, 0), (size_t)r->n * nn_shape_numel(n->out) * sizeof(float));
}

static void flatten_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (dx) memcpy(dx, n->dy, (size_t)r->n * nn_shape_numel(n->out) * sizeof(float));
}

const nn_op nn_op_flatten = {"flatten", NN_ALIAS, flatten_infer, NULL, flatten_fwd, flatten_bwd,
                               NN_CUDA(nn_cu_copy_fwd, nn_cu_copy_bwd, NULL)};

/* dropout: ia[0] = 1 for dropout2d (whole channels), fa[0] = p. Each node draws from
 * its own counter range: step * max_batch * stride + max_batch * rng_offset. */
static int dropout_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    if (!(n->fa[0] >= 0 && n->fa[0] < 1)) NN_BAD("probability %g is outside [0, 1)", (double)n->fa[0]);
    n->out = nn_in(g, n, 0)->out;
    size_t per = n->ia[0] ? (size_t)n->out.c : nn_shape_numel(n->out);
    n->rng_per_sample = (int)per;
    n->aux_per_sample = per;
    return 0;
}

static uint64_t dropout_ctr(const nn_graph *g, const nn_node *n, const nn_run *r)
{
    uint64_t B = (uint64_t)g->max_batch;
    return r->step * B * g->rng_stride + B * n->rng_offset;
}

static void dropout_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const float *x = nn_x(g, n, 0);
    size_t numel = nn_shape_numel(n->out);
    if (!r->train) {
        memcpy(n->y, x, (size_t)r->n * numel * sizeof(float));
        return;
    }
    if (n->ia[0])
        k_dropout2d_fwd(r->n, n->out.c, n->out.h * n->out.w, n->fa[0], r->seed, dropout_ctr(g, n, r), x, n->y, n->aux);
    else
        k_dropout_fwd((size_t)r->n * numel, n->fa[0], r->seed, dropout_ctr(g, n, r), x, n->y, n->aux);
}

static void dropout_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (!dx) return;
    if (n->ia[0]) k_dropout2d_bwd(r->n, n->out.c, n->out.h * n->out.w, n->fa[0], n->aux, n->dy, dx);
    else k_dropout_bwd((size_t)r->n * nn_shape_numel(n->out), n->fa[0], n->aux, n->dy, dx);
}

const nn_op nn_op_dropout = {"dropout", 0, dropout_infer, NULL, dropout_fwd, dropout_bwd,
                               NN_CUDA(nn_cu_dropout_fwd, nn_cu_dropout_bwd, NULL)};

/* concat along channels of inputs with equal height and width. */
static int concat_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    nn_shape o = nn_in(g, n, 0)->out;
    o.c = 0;
    for (int i = 0; i < n->nin; i++) {
        NN_NEED_FLOAT(i);
        nn_shape s = nn_in(g, n, i)->out;
        if (s.h != o.h || s.w != o.w) NN_BAD("input %d is %dx%d, input 0 is %dx%d", i, s.h, s.w, o.h, o.w);
        o.c += s.c;
    }
    n->out = o;
    return 0;
}

static void concat_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    size_t hw = (size_t)n->out.h * n->out.w, per = nn_shape_numel(n->out), off = 0;
    for (int i = 0; i < n->nin; i++) {
        size_t part = (size_t)nn_in(g, n, i)->out.c * hw;
        const float *x = nn_x(g, n, i);
        for (int s = 0; s < r->n; s++) memcpy(n->y + s * per + off, x + s * part, part * sizeof(float));
        off += part;
    }
}

static void concat_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    size_t hw = (size_t)n->out.h * n->out.w, per = nn_shape_numel(n->out), off = 0;
    for (int i = 0; i < n->nin; i++) {
        size_t part = (size_t)nn_in(g, n, i)->out.c * hw;
        float *dx = nn_dx(g, n, i);
        if (dx)
            for (int s = 0; s < r->n; s++) memcpy(dx + s * part, n->dy + s * per + off, part * sizeof(float));
        off += part;
    }
}

const nn_op nn_op_concat = {"concat", 0, concat_infer, NULL, concat_fwd, concat_bwd,
                              NN_CUDA(nn_cu_concat_fwd, nn_cu_concat_bwd, NULL)};

static int lsm_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    if (x.h != 1 || x.w != 1) NN_BAD("needs a vector input, got %dx%dx%d", x.c, x.h, x.w);
    n->out = x;
    return 0;
}

static void lsm_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_log_softmax_fwd(r->n, n->out.c, nn_x(g, n, 0), n->y);
}

/* Only used when a log_softmax is not the output (there the loss fuses it). */
static void lsm_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    int c = n->out.c;
    if (!dx) return;
    for (int s = 0; s < r->n; s++) {
        const float *y = n->y + (size_t)s * c, *dy = n->dy + (size_t)s * c;
        double sum = 0;
        for (int k = 0; k < c; k++) sum += dy[k];
        for (int k = 0; k < c; k++) dx[(size_t)s * c + k] = dy[k] - expf(y[k]) * (float)sum;
    }
}

const nn_op nn_op_log_softmax = {"log_softmax", NN_BWD_OUTPUT, lsm_infer, NULL, lsm_fwd, lsm_bwd,
                                   NN_CUDA(nn_cu_lsm_fwd, nn_cu_lsm_bwd, NULL)};
