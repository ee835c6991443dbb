/* conv1d_hf (Hugging Face's Conv1D, GPT-2's linear layers): y[rows, out] = x[rows, in]
 * w[in, out] + b, the weight stored [in, out] (transposed against nn.Linear) so GPT-2
 * checkpoints load as they are. Weight N(0, init_std), bias 0. Rows are everything
 * but the last axis (T tokens of a sample). bf16 operands under --amp bf16. */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"

typedef struct c1_attr { int out; float init_std; int in; /* set by infer */ } c1_attr;
NN_ATTR_ACCESS(c1_attr)
static const nn_attr c1_attrs[] = {NN_INT(c1_attr, out, "out", NN_ATTR_REQUIRED),
                                   NN_FLOAT(c1_attr, init_std, "init_std", 0.02), {NULL}};

static int c1_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    c1_attr a = c1_attr_of(n);
    if (a.out <= 0) NN_BAD("bad width %d", a.out);
    if (!(a.init_std > 0)) NN_BAD("init_std=%g must be above 0", (double)a.init_std);
    n->out = (nn_shape){x.c, x.h, a.out, 0};
    a.in = x.w;
    c1_attr_set(n, &a);
    int ws[2] = {x.w, a.out};
    int w = nn_param_add(g, n, "weight", 2, ws, NN_INIT_NORMAL, 0, 0);
    nn_param_add(g, n, "bias", 1, &a.out, NN_INIT_ZEROS, 0, 1);
    if (w >= 0) g->p[w].init_std = a.init_std;
    return 0;
}

/* multiply-adds per output element (--recompute-macs): the input width */
static long c1_macs(const nn_node *n) { return c1_attr_of(n).in; }

static int c1_rows(const nn_node *n, const nn_run *r) { return r->n * n->out.c * n->out.h; }

static void c1_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    if (g->amp == NN_AMP_BF16) {
        k_conv1d_hf_fwd_bf16(c1_rows(n, r), nn_in(g, n, 0)->out.w, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0),
                             nn_pw(g, n, 1), n->y, r->ws);
        return;
    }
    k_conv1d_hf_fwd(c1_rows(n, r), nn_in(g, n, 0)->out.w, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1),
                    n->y);
}

static void c1_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    if (g->amp == NN_AMP_BF16) {
        k_conv1d_hf_bwd_bf16(c1_rows(n, r), nn_in(g, n, 0)->out.w, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy,
                             nn_dx(g, n, 0), nn_pg(g, n, 0), nn_pg(g, n, 1), r->ws);
        return;
    }
    k_conv1d_hf_bwd(c1_rows(n, r), nn_in(g, n, 0)->out.w, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy,
                    nn_dx(g, n, 0), nn_pg(g, n, 0), nn_pg(g, n, 1), r->ws);
}

static size_t c1_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    if (g->amp == NN_AMP_BF16)
        return k_conv1d_hf_bf16_workspace(max_batch * n->out.c * n->out.h, nn_in(g, n, 0)->out.w, n->out.w);
    return k_conv1d_hf_workspace(nn_in(g, n, 0)->out.w, n->out.w);
}


#if DDPRT_CUDA
static int c1_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_conv1d_hf_fwd_mm(nn_cuda_mm_io(g, n), c1_rows(n, r), nn_in(g, n, 0)->out.w, n->out.w, nn_x(g, n, 0),
                                   nn_pw(g, n, 0), nn_pw16(g, n, 0), nn_pw(g, n, 1), n->y, r->ws, r->stream);
}

static int c1_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_conv1d_hf_bwd_mm(nn_cuda_mm_io(g, n), c1_rows(n, r), nn_in(g, n, 0)->out.w, n->out.w, nn_x(g, n, 0),
                                   nn_pw(g, n, 0), nn_pw16(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                                   nn_pg(g, n, 1), r->ws, r->stream);
}

/* split-K scratch (and the backward's 16-bit dy) for every batch up to max_batch (the split count
 * depends on the rows) */
static size_t c1_ws_cuda(const nn_graph *g, const nn_node *n, int max_batch)
{
    size_t m = 0;
    for (int b = 1; b <= max_batch; b++) {
        size_t w = k_cuda_conv1d_hf_workspace_mm(nn_cuda_mm(g), b * n->out.c * n->out.h, nn_in(g, n, 0)->out.w,
                                                 n->out.w);
        m = w > m ? w : m;
    }
    return m;
}
#endif

const nn_op nn_op_conv1d_hf = {
    .kind = "conv1d_hf", .flags = NN_BWD_INPUT | NN_IN16 | NN_OUT16, .attrs = c1_attrs, .attr_size = sizeof(c1_attr),
    .macs = c1_macs, .infer = c1_infer, .workspace = c1_ws, .fwd = c1_fwd, .bwd = c1_bwd,
    NN_CUDA_ONLY(.fwd_cuda = c1_fwd_cuda, .bwd_cuda = c1_bwd_cuda, .workspace_cuda = c1_ws_cuda)};

int nn_conv1d_hf(nn_graph *g, const char *name, int x, int out, float init_std)
{
    c1_attr a = {out, init_std, 0};
    return nn_add(g, &nn_op_conv1d_hf, name, &x, 1, &a, sizeof a);
}
