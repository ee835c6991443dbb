/* maxpool2d (size, stride, padding), adaptive average pool to 1x1, and max over time
 * (TextCNN: [c, 1, len] -> [c]), with their device halves. The max pools save their
 * argmax. */
#include "nn/ops/op_def.h"
#include <stdint.h>

typedef struct maxpool_attr { int size, stride, pad; } maxpool_attr;
NN_ATTR_ACCESS(maxpool_attr)
/* stride 0: the size (PyTorch's default), made explicit by infer. */
static const nn_attr maxpool_attrs[] = {NN_INT(maxpool_attr, size, "size", 2), NN_INT(maxpool_attr, stride, "stride", 0),
                                        NN_INT(maxpool_attr, pad, "pad", 0), {NULL}};

static int maxpool_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    maxpool_attr a = maxpool_attr_of(n);
    int k = a.size, pad = a.pad;
    if (!a.stride) a.stride = k;
    maxpool_attr_set(n, &a);
    if (k <= 0 || a.stride <= 0 || pad < 0 || 2 * pad > k)
        NN_BAD("bad kernel %d / stride %d / padding %d (padding at most half the kernel)", k, a.stride, pad);
    if (x.h + 2 * pad < k || x.w + 2 * pad < k) NN_BAD("kernel %d is larger than the padded input %dx%d", k, x.h, x.w);
    n->out = (nn_shape){x.c, (x.h + 2 * pad - k) / a.stride + 1, (x.w + 2 * pad - k) / a.stride + 1, 0};
    n->aux_per_sample = nn_shape_numel(n->out) * sizeof(int32_t);
    return 0;
}

/* The no-padding kernel where it applies (same windows either way). */
static int pool_plain(const nn_graph *g, const nn_node *n)
{
    nn_shape x = nn_in(g, n, 0)->out;
    maxpool_attr a = maxpool_attr_of(n);
    return a.pad == 0 && x.h % a.size == 0 && x.w % a.size == 0 && a.stride == a.size;
}

static void maxpool_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    maxpool_attr a = maxpool_attr_of(n);
    if (pool_plain(g, n)) k_maxpool2d_fwd(r->n, x.c, x.h, x.w, a.size, a.stride, nn_x(g, n, 0), n->y, n->aux);
    else k_maxpool2d_pad_fwd(r->n, x.c, x.h, x.w, a.size, a.stride, a.pad, nn_x(g, n, 0), n->y, n->aux);
}

static void maxpool_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    maxpool_attr a = maxpool_attr_of(n);
    float *dx = nn_dx(g, n, 0);
    if (!dx) return;
    if (pool_plain(g, n)) k_maxpool2d_bwd(r->n, x.c, x.h, x.w, a.size, a.stride, n->dy, n->aux, dx);
    else k_maxpool2d_pad_bwd(r->n, x.c, x.h, x.w, a.size, a.stride, a.pad, n->dy, n->aux, dx);
}

#if DDPRT_CUDA
static int maxpool_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    maxpool_attr a = maxpool_attr_of(n);
    /* without padding: the same kernel at pad 0 (the same windows and bits) */
    if (n->nhwc)
        return k_cuda_maxpool2d_nhwc_fwd(r->n, x.c, x.h, x.w, a.size, a.stride, pool_plain(g, n) ? 0 : a.pad,
                                         nn_x(g, n, 0), nn_cuda_xt(g, n, 0), n->y, nn_cuda_yt(g, n), n->aux, r->stream);
    return k_cuda_maxpool2d_pad_fwd_t(r->n, x.c, x.h, x.w, a.size, a.stride, pool_plain(g, n) ? 0 : a.pad, nn_x(g, n, 0),
                                      nn_cuda_xt(g, n, 0), n->y, nn_cuda_yt(g, n), n->aux, r->stream);
}

static int maxpool_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    maxpool_attr a = maxpool_attr_of(n);
    float *dx = nn_dx(g, n, 0);
    if (!dx) return 0;
    if (n->nhwc)
        return k_cuda_maxpool2d_nhwc_bwd(r->n, x.c, x.h, x.w, a.size, a.stride, pool_plain(g, n) ? 0 : a.pad, n->dy,
                                         n->aux, dx, r->stream);
    if (pool_plain(g, n))
        return k_cuda_maxpool2d_bwd(r->n, x.c, x.h, x.w, a.size, a.stride, n->dy, n->aux, dx, r->stream);
    return k_cuda_maxpool2d_pad_bwd(r->n, x.c, x.h, x.w, a.size, a.stride, a.pad, n->dy, n->aux, dx, r->stream);
}
#endif

const nn_op nn_op_maxpool2d = {
    .kind = "maxpool2d", .alias = "maxpool", .flags = NN_IN16 | NN_OUT16, .attrs = maxpool_attrs, .attr_size = sizeof(maxpool_attr),
    .infer = maxpool_infer, .fwd = maxpool_fwd, .bwd = maxpool_bwd,
    NN_CUDA_ONLY(.fwd_cuda = maxpool_fwd_cuda, .bwd_cuda = maxpool_bwd_cuda, .nhwc_in = nn_nhwc_follow_in,
                 .nhwc_out = nn_nhwc_follow_out)};

int nn_maxpool(nn_graph *g, int x, int k, int stride, int pad)
{
    maxpool_attr a = {k, stride, pad};
    return nn_add(g, &nn_op_maxpool2d, NULL, &x, 1, &a, sizeof a);
}

static int avg_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    n->out = (nn_shape){nn_in(g, n, 0)->out.c, 1, 1, 0};
    return 0;
}

static void avg_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    k_global_avgpool_fwd(r->n, x.c, x.h * x.w, nn_x(g, n, 0), n->y);
}

static void avg_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    float *dx = nn_dx(g, n, 0);
    if (dx) k_global_avgpool_bwd(r->n, x.c, x.h * x.w, n->dy, dx);
}

#if DDPRT_CUDA
static int avg_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    if (nn_in(g, n, 0)->nhwc) /* [n, c] out either way */
        return k_cuda_global_avgpool_nhwc_fwd(r->n, x.c, x.h * x.w, nn_x(g, n, 0), nn_cuda_xt(g, n, 0), n->y, r->stream);
    return k_cuda_global_avgpool_fwd_t(r->n, x.c, x.h * x.w, nn_x(g, n, 0), nn_cuda_xt(g, n, 0), n->y, r->stream);
}

static int avg_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    float *dx = nn_dx(g, n, 0);
    if (dx && nn_in(g, n, 0)->nhwc) return k_cuda_global_avgpool_nhwc_bwd(r->n, x.c, x.h * x.w, n->dy, dx, r->stream);
    return dx ? k_cuda_global_avgpool_bwd(r->n, x.c, x.h * x.w, n->dy, dx, r->stream) : 0;
}
static int avg_nhwc_in(const nn_graph *g, const nn_node *n)
{
    (void)g, (void)n;
    return 1;
}
#endif

const nn_op nn_op_avgpool1x1 = {.kind = "avgpool1x1", .alias = "avgpool", .flags = NN_IN16, .infer = avg_infer, .fwd = avg_fwd,
                                .bwd = avg_bwd, NN_CUDA_ONLY(.fwd_cuda = avg_fwd_cuda, .bwd_cuda = avg_bwd_cuda,
                                                             .nhwc_in = avg_nhwc_in)};

int nn_avgpool_1x1(nn_graph *g, int x) { return nn_add(g, &nn_op_avgpool1x1, NULL, &x, 1, NULL, 0); }

static int maxt_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    if (x.h != 1) NN_BAD("needs a [channels, length] input, got %dx%dx%d", x.c, x.h, x.w);
    n->out = (nn_shape){x.c, 1, 1, 0};
    n->aux_per_sample = (size_t)x.c * sizeof(int32_t);
    return 0;
}

static void maxt_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    k_max_time_fwd(r->n, x.c, x.w, nn_x(g, n, 0), n->y, n->aux);
}

static void maxt_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    float *dx = nn_dx(g, n, 0);
    if (dx) k_max_time_bwd(r->n, x.c, x.w, n->dy, n->aux, dx);
}

#if DDPRT_CUDA
static int maxt_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    return k_cuda_max_time_fwd(r->n, x.c, x.w, nn_x(g, n, 0), n->y, n->aux, r->stream);
}

static int maxt_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_max_time_bwd(r->n, x.c, x.w, n->dy, n->aux, dx, r->stream) : 0;
}
#endif

const nn_op nn_op_max_time = {.kind = "max_time", .flags = NN_MAX_OVER_LEN, .infer = maxt_infer, .fwd = maxt_fwd,
                              .bwd = maxt_bwd, NN_CUDA_ONLY(.fwd_cuda = maxt_fwd_cuda, .bwd_cuda = maxt_bwd_cuda)};

int nn_max_time(nn_graph *g, int x) { return nn_add(g, &nn_op_max_time, NULL, &x, 1, NULL, 0); }
