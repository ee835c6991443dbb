/* maxpool2d (ia: kernel, stride, padding), adaptive average pool to 1x1, and max over
 * time (TextCNN: [c, 1, len] -> [c]). The max pools save their argmax. */
#include "nn/ops/ops.h"
#include <stdint.h>

static int maxpool_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    int k = n->ia[0], st = n->ia[1] ? n->ia[1] : n->ia[0], pad = n->ia[2];
    n->ia[1] = st;
    if (k <= 0 || pad < 0 || 2 * pad > k) NN_BAD("bad kernel %d / padding %d (padding at most half the kernel)", k, pad);
    if (x.h + 2 * pad < k || x.w + 2 * pad < k) NN_BAD("kernel %d is larger than the padded input %dx%d", k, x.h, x.w);
    n->out = (nn_shape){x.c, (x.h + 2 * pad - k) / st + 1, (x.w + 2 * pad - k) / st + 1, 0};
    n->aux_per_sample = nn_shape_numel(n->out) * sizeof(int32_t);
    return 0;
}

static void maxpool_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    if (n->ia[2] == 0 && x.h % n->ia[0] == 0 && x.w % n->ia[0] == 0 && n->ia[1] == n->ia[0])
        k_maxpool2d_fwd(r->n, x.c, x.h, x.w, n->ia[0], n->ia[1], nn_x(g, n, 0), n->y, n->aux);
    else
        k_maxpool2d_pad_fwd(r->n, x.c, x.h, x.w, n->ia[0], n->ia[1], n->ia[2], nn_x(g, n, 0), n->y, n->aux);
}

static void maxpool_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    nn_shape x = nn_in(g, n, 0)->out;
    float *dx = nn_dx(g, n, 0);
    if (!dx) return;
    if (n->ia[2] == 0 && x.h % n->ia[0] == 0 && x.w % n->ia[0] == 0 && n->ia[1] == n->ia[0])
        k_maxpool2d_bwd(r->n, x.c, x.h, x.w, n->ia[0], n->ia[1], n->dy, n->aux, dx);
    else
        k_maxpool2d_pad_bwd(r->n, x.c, x.h, x.w, n->ia[0], n->ia[1], n->ia[2], n->dy, n->aux, dx);
}

const nn_op nn_op_maxpool2d = {"maxpool2d", 0, maxpool_infer, NULL, maxpool_fwd, maxpool_bwd,
                                 NN_CUDA(nn_cu_maxpool_fwd, nn_cu_maxpool_bwd, NULL)};

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

const nn_op nn_op_avgpool1x1 = {"avgpool1x1", 0, avg_infer, NULL, avg_fwd, avg_bwd,
                                  NN_CUDA(nn_cu_avg_fwd, nn_cu_avg_bwd, NULL)};

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

const nn_op nn_op_max_time = {"max_time", 0, maxt_infer, NULL, maxt_fwd, maxt_bwd,
                                NN_CUDA(nn_cu_maxt_fwd, nn_cu_maxt_bwd, NULL)};
