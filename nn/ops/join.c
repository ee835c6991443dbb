/* Ops that only sum, gather or reshape values: the residual add, concat along
 * channels, and flatten (a view when its input has no other reader). */
#include "nn/ops/op_def.h"

static int add_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
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
    if (n->fused_into) return; /* the ReLU after it adds and rectifies in one pass (relu.c) */
    k_add(nn_out_numel(n, r), nn_x(g, n, 0), nn_x(g, n, 1), n->y);
}

static void add_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    for (int i = 0; i < 2; i++) { /* an input's may be dy itself (NN_BWD_IDENTITY) */
        float *dx = nn_dx(g, n, i);
        if (dx && dx != n->dy) memcpy(dx, n->dy, nn_out_numel(n, r) * sizeof(float));
    }
}

#if DDPRT_CUDA
static int add_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    if (n->fused_into) return 0; /* the ReLU after it adds and rectifies in one pass (relu.c) */
    return k_cuda_add_t(nn_out_numel(n, r), nn_x(g, n, 0), nn_cuda_xt(g, n, 0), nn_x(g, n, 1), nn_cuda_xt(g, n, 1), n->y,
                        nn_cuda_yt(g, n), r->stream);
}

static int add_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    for (int i = 0; i < 2; i++) {
        float *dx = nn_dx(g, n, i);
        if (dx && dx != n->dy && port_memcpy_d2d(dx, n->dy, nn_out_numel(n, r) * sizeof(float), r->stream, "residual add gradient"))
            return -1;
    }
    return 0;
}
#endif

const nn_op nn_op_add = {.kind = "add", .flags = NN_RECOMPUTE | NN_FUSES_RELU | NN_BWD_IDENTITY | NN_IN16 | NN_OUT16 | NN_OUT16_ALL_IN,
                         .min_in = 2, .max_in = 2,
                         .infer = add_infer, .fwd = add_fwd, .bwd = add_bwd,
                         NN_CUDA_ONLY(.fwd_cuda = add_fwd_cuda, .bwd_cuda = add_bwd_cuda,
                                      .nhwc_in = nn_nhwc_follow_in, .nhwc_out = nn_nhwc_follow_out)};

int nn_add2(nn_graph *g, int a, int b)
{
    int in[] = {a, b};
    return nn_add(g, &nn_op_add, NULL, in, 2, NULL, 0);
}

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

#if DDPRT_CUDA
static int concat_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    size_t hw = (size_t)n->out.h * n->out.w, per = nn_shape_numel(n->out), off = 0;
    for (int i = 0; i < n->nin; i++) {
        size_t part = (size_t)nn_in(g, n, i)->out.c * hw;
        if (k_cuda_copy_rows(r->n, part, nn_x(g, n, i), part, n->y + off, per, r->stream)) return -1;
        off += part;
    }
    return 0;
}

static int concat_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    size_t hw = (size_t)n->out.h * n->out.w, per = nn_shape_numel(n->out), off = 0;
    for (int i = 0; i < n->nin; i++) {
        size_t part = (size_t)nn_in(g, n, i)->out.c * hw;
        float *dx = nn_dx(g, n, i);
        if (dx && k_cuda_copy_rows(r->n, part, n->dy + off, per, dx, part, r->stream)) return -1;
        off += part;
    }
    return 0;
}
#endif

const nn_op nn_op_concat = {.kind = "concat", .min_in = 1, .max_in = NN_MAX_IN, .infer = concat_infer,
                            .fwd = concat_fwd, .bwd = concat_bwd,
                            NN_CUDA_ONLY(.fwd_cuda = concat_fwd_cuda, .bwd_cuda = concat_bwd_cuda)};

int nn_concat(nn_graph *g, const int *xs, int n) { return nn_add(g, &nn_op_concat, NULL, xs, n, NULL, 0); }

static int flatten_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    n->out = (nn_shape){(int)nn_numel_in(g, n, 0), 1, 1, 0};
    return 0;
}

/* Only runs when the planner could not make it a view. */
static void flatten_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    memcpy(n->y, nn_x(g, n, 0), nn_out_numel(n, r) * sizeof(float));
}

static void flatten_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (dx) memcpy(dx, n->dy, nn_out_numel(n, r) * sizeof(float));
}

#if DDPRT_CUDA
static int flatten_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return port_memcpy_d2d(n->y, nn_x(g, n, 0), nn_out_numel(n, r) * sizeof(float), r->stream, "flatten");
}

static int flatten_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    return dx ? port_memcpy_d2d(dx, n->dy, nn_out_numel(n, r) * sizeof(float), r->stream, "flatten gradient") : 0;
}
#endif

const nn_op nn_op_flatten = {.kind = "flatten", .flags = NN_ALIAS, .infer = flatten_infer, .fwd = flatten_fwd,
                             .bwd = flatten_bwd, NN_CUDA_ONLY(.fwd_cuda = flatten_fwd_cuda, .bwd_cuda = flatten_bwd_cuda)};

int nn_flatten(nn_graph *g, int x) { return nn_add(g, &nn_op_flatten, NULL, &x, 1, NULL, 0); }
