/* conv2d (any stride and padding, optional bias) and conv1d (the same kernel on a
 * 1 x len plane with 1 x k taps; PyTorch Conv1d's [out, in, k] weight).
 * ia: out_c, kh, kw, stride, pad, bias, is_1d, init (NN_INIT_*). */
#include "nn/ops/ops.h"

static int conv_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    int K = n->ia[0], kh = n->ia[1], kw = n->ia[2], st = n->ia[3], pad = n->ia[4];
    if (K <= 0 || kh <= 0 || kw <= 0 || st <= 0 || pad < 0) NN_BAD("bad attributes (out %d, kernel %dx%d, stride %d, pad %d)", K, kh, kw, st, pad);
    if (n->ia[6] && x.h != 1) NN_BAD("conv1d needs a [channels, length] input, got %dx%dx%d", x.c, x.h, x.w);
    n->conv = (k_conv_shape){.n = g->max_batch, .c = x.c, .h = x.h, .w = x.w, .k = K, .r = kh, .s = kw,
                             .stride = st, .pad = n->ia[6] ? 0 : pad};
    if (x.h + 2 * n->conv.pad < kh || x.w + 2 * n->conv.pad < kw)
        NN_BAD("kernel %dx%d is larger than the padded input %dx%d", kh, kw, x.h + 2 * pad, x.w + 2 * pad);
    k_conv_shape_init(&n->conv);
    n->out = (nn_shape){K, n->conv.p, n->conv.q, 0};
    int fan_in = x.c * kh * kw, init = n->ia[7];
    int fan = init == NN_INIT_KAIMING_NORMAL_OUT ? K * kh * kw : fan_in;
    if (n->ia[6]) {
        int ws[3] = {K, x.c, kw};
        nn_param_add(g, n, "weight", 3, ws, init, fan, 0);
    } else {
        int ws[4] = {K, x.c, kh, kw};
        nn_param_add(g, n, "weight", 4, ws, init, fan, 0);
    }
    if (n->ia[5]) nn_param_add(g, n, "bias", 1, &K, NN_INIT_KAIMING_UNIFORM, fan_in, 1);
    return 0;
}

static size_t conv_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    k_conv_shape sh = n->conv;
    sh.n = max_batch;
    size_t w = k_conv2d_workspace(&sh);
    if (sh.p == 1) { /* conv -> relu -> max_time (nn/plan.c): the fused forward, sparse backward */
        size_t wm = k_conv2d_maxt_workspace(&sh), wf = k_conv2d_fwd_maxt_workspace(&sh);
        if (wm > w) w = wm;
        if (wf > w) w = wf;
    }
    if (g->amp == NN_AMP_BF16) {
        size_t wb = k_conv2d_bf16_workspace(&sh);
        if (wb > w) w = wb;
    }
    return w;
}

static void conv_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv_shape sh = n->conv;
    sh.n = r->n;
    if (n->maxt_from) { /* -> relu -> max_time: straight to the max's output and argmax */
        nn_node *m = &g->nodes[n->maxt_from];
        k_conv2d_fwd_maxt(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->ia[5] ? nn_pw(g, n, 1) : NULL, m->y, m->aux, r->ws);
        return;
    }
    if (g->amp == NN_AMP_BF16)
        k_conv2d_fwd_bf16(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->ia[5] ? nn_pw(g, n, 1) : NULL, n->y, r->ws);
    else
        k_conv2d_fwd(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->ia[5] ? nn_pw(g, n, 1) : NULL, n->y, r->ws);
}

static void conv_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv_shape sh = n->conv;
    sh.n = r->n;
    if (n->maxt_from) { /* -> relu -> max_time: from the max's gradient and argmax */
        const nn_node *m = &g->nodes[n->maxt_from];
        k_conv2d_bwd_maxt(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), m->dy, m->y, m->aux, nn_dx(g, n, 0), nn_pg(g, n, 0),
                          n->ia[5] ? nn_pg(g, n, 1) : NULL, r->ws);
        return;
    }
    if (g->amp == NN_AMP_BF16)
        k_conv2d_bwd_bf16(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                          n->ia[5] ? nn_pg(g, n, 1) : NULL, r->ws);
    else
        k_conv2d_bwd(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                     n->ia[5] ? nn_pg(g, n, 1) : NULL, r->ws);
}

const nn_op nn_op_conv2d = {"conv2d", NN_BWD_INPUT, conv_infer, conv_ws, conv_fwd, conv_bwd,
                              NN_CUDA(nn_cu_conv_fwd, nn_cu_conv_bwd, nn_cu_conv_ws)};

/* linear: ia[0] = out features; the input must be a vector (flatten first, as
 * PyTorch's x.view(-1, n)). */
static int linear_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    if (x.h != 1 || x.w != 1) NN_BAD("needs a vector input (flatten first), got %dx%dx%d", x.c, x.h, x.w);
    int out = n->ia[0];
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
    if (g->amp == NN_AMP_BF16) {
        k_linear_fwd_bf16(r->n, nn_in(g, n, 0)->out.c, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1),
                          n->y, r->ws);
        return;
    }
    k_linear_fwd(r->n, nn_in(g, n, 0)->out.c, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1), n->y);
}

static void linear_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    if (g->amp == NN_AMP_BF16) {
        k_linear_bwd_bf16(r->n, nn_in(g, n, 0)->out.c, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy,
                          nn_dx(g, n, 0), nn_pg(g, n, 0), nn_pg(g, n, 1), r->ws);
        return;
    }
    k_linear_bwd(r->n, nn_in(g, n, 0)->out.c, n->out.c, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy, nn_dx(g, n, 0),
                 nn_pg(g, n, 0), nn_pg(g, n, 1));
}

const nn_op nn_op_linear = {"linear", NN_BWD_INPUT, linear_infer, linear_ws, linear_fwd, linear_bwd,
                              NN_CUDA(nn_cu_linear_fwd, nn_cu_linear_bwd, nn_cu_linear_ws)};
