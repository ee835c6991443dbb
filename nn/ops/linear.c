/* linear (nn.Linear): y = x w^T + b; the input must be a vector (flatten first, as
 * PyTorch's x.view(-1, n)). bf16 operands under --amp bf16. */
#include "nn/ops/op_def.h"

typedef struct linear_attr { int out; } linear_attr;
NN_ATTR_ACCESS(linear_attr)
static const nn_attr linear_attrs[] = {NN_INT(linear_attr, out, "out", NN_ATTR_REQUIRED), {NULL}};

static int linear_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    if (x.h != 1 || x.w != 1) NN_BAD("needs a vector input (flatten first), got %dx%dx%d", x.c, x.h, x.w);
    int out = linear_attr_of(n).out;
    if (out <= 0) NN_BAD("bad output size %d", out);
    n->out = (nn_shape){out, 1, 1, 0};
    int ws[2] = {out, x.c};
    nn_param_add(g, n, "weight", 2, ws, NN_INIT_KAIMING_UNIFORM, x.c, 0);
    nn_param_add(g, n, "bias", 1, &out, NN_INIT_KAIMING_UNIFORM, x.c, 1);
    return 0;
}

static size_t linear_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    if (g->amp != NN_AMP_BF16) return 0;
    return k_linear_bf16_workspace(max_batch, nn_in(g, n, 0)->out.c, n->out.c);
}

static void linear_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int in = nn_in(g, n, 0)->out.c;
    if (g->amp == NN_AMP_BF16)
        k_linear_fwd_bf16(r->n, in, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1), n->y, r->ws);
    else
        k_linear_fwd(r->n, in, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1), n->y);
}

static void linear_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int in = nn_in(g, n, 0)->out.c;
    if (g->amp == NN_AMP_BF16)
        k_linear_bwd_bf16(r->n, in, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                          nn_pg(g, n, 1), r->ws);
    else
        k_linear_bwd(r->n, in, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                     nn_pg(g, n, 1));
}

#if DDPRT_CUDA
static size_t linear_ws_cuda(const nn_graph *g, const nn_node *n, int max_batch)
{
    size_t need = 0;
    for (int b = 1; b <= max_batch; b++) {
        size_t w = k_cuda_linear_workspace_mm(nn_cuda_mm(g), b, nn_in(g, n, 0)->out.c, n->out.c);
        if (w > need) need = w;
    }
    return need;
}

static int linear_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_linear_fwd_mm(nn_cuda_mm_io(g, n), r->n, nn_in(g, n, 0)->out.c, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0),
                                nn_pw16(g, n, 0), nn_pw(g, n, 1), n->y, r->ws, r->stream);
}

static int linear_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_linear_bwd_mm(nn_cuda_mm_io(g, n), r->n, nn_in(g, n, 0)->out.c, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0),
                                nn_pw16(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0), nn_pg(g, n, 1), r->ws, r->stream);
}
#endif

const nn_op nn_op_linear = {
    .kind = "linear", .flags = NN_BWD_INPUT | NN_IN16 | NN_OUT16, .attrs = linear_attrs, .attr_size = sizeof(linear_attr),
    .infer = linear_infer, .workspace = linear_ws, .fwd = linear_fwd, .bwd = linear_bwd,
    NN_CUDA_ONLY(.fwd_cuda = linear_fwd_cuda, .bwd_cuda = linear_bwd_cuda, .workspace_cuda = linear_ws_cuda)};

int nn_linear(nn_graph *g, const char *name, int x, int out)
{
    linear_attr a = {out};
    return nn_add(g, &nn_op_linear, name, &x, 1, &a, sizeof a);
}
