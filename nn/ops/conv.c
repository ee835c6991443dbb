/* conv2d (any stride and padding, optional bias) and conv1d (the same kernel on a
 * 1 x len plane with 1 x size taps; PyTorch Conv1d's [out, in, size] weight), with
 * their device halves. The planned k_conv_shape is kept after the attributes. */
#include "nn/ops/op_def.h"

typedef struct conv_attr {
    int filters, size, stride, pad, bias, init; /* init: NN_INIT_KAIMING_UNIFORM or _NORMAL_OUT */
    k_conv_shape sh;                            /* derived by infer (n = max_batch) */
} conv_attr;
NN_ATTR_ACCESS(conv_attr)

/* "init": the index is the NN_INIT_* value. */
_Static_assert(NN_INIT_KAIMING_UNIFORM == 0 && NN_INIT_KAIMING_NORMAL_OUT == 1, "init choices");
static const nn_attr conv2d_attrs[] = {
    NN_INT(conv_attr, filters, "filters", NN_ATTR_REQUIRED), NN_INT(conv_attr, size, "size", NN_ATTR_REQUIRED),
    NN_INT(conv_attr, stride, "stride", 1), NN_INT(conv_attr, pad, "pad", 0), NN_BOOL(conv_attr, bias, "bias", 1),
    NN_CHOICE(conv_attr, init, "init", 0, "uniform|kaiming"), {NULL}};
static const nn_attr conv1d_attrs[] = {
    NN_INT(conv_attr, filters, "filters", NN_ATTR_REQUIRED), NN_INT(conv_attr, size, "size", NN_ATTR_REQUIRED),
    NN_BOOL(conv_attr, bias, "bias", 1), NN_CHOICE(conv_attr, init, "init", 0, "uniform|kaiming"), {NULL}};
extern const nn_op nn_op_conv1d;
extern const nn_op nn_op_conv2d;

static int conv_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    conv_attr a = conv_attr_of(n);
    int is1d = n->op == &nn_op_conv1d, kh = is1d ? 1 : a.size, kw = a.size, K = a.filters;
    if (is1d) a.stride = 1, a.pad = 0;
    if (K <= 0 || kw <= 0 || a.stride <= 0 || a.pad < 0)
        NN_BAD("bad attributes (out %d, kernel %dx%d, stride %d, pad %d)", K, kh, kw, a.stride, a.pad);
    if (is1d && x.h != 1) NN_BAD("conv1d needs a [channels, length] input, got %dx%dx%d", x.c, x.h, x.w);
    a.sh = (k_conv_shape){.n = g->max_batch, .c = x.c, .h = x.h, .w = x.w, .k = K, .r = kh, .s = kw,
                          .stride = a.stride, .pad = a.pad};
    if (x.h + 2 * a.pad < kh || x.w + 2 * a.pad < kw)
        NN_BAD("kernel %dx%d is larger than the padded input %dx%d", kh, kw, x.h + 2 * a.pad, x.w + 2 * a.pad);
    /* A pad that makes the output huge is named here, not as an arena of terabytes. */
    long long oh = ((long long)x.h + 2 * a.pad - kh) / a.stride + 1, ow = ((long long)x.w + 2 * a.pad - kw) / a.stride + 1;
    if (a.pad && (oh > 65536 || ow > 65536 || oh * ow * K > (1LL << 31)))
        NN_BAD("pad=%d makes a %dx%lldx%lld output (at most 65536 a side and 2^31 values)", a.pad, K, oh, ow);
    k_conv_shape_init(&a.sh);
    conv_attr_set(n, &a);
    n->out = (nn_shape){K, a.sh.p, a.sh.q, 0};
    int fan_in = x.c * kh * kw, init = a.init;
    int fan = init == NN_INIT_KAIMING_NORMAL_OUT ? K * kh * kw : fan_in;
    if (is1d) {
        int ws[3] = {K, x.c, kw};
        nn_param_add(g, n, "weight", 3, ws, init, fan, 0);
    } else {
        int ws[4] = {K, x.c, kh, kw};
        nn_param_add(g, n, "weight", 4, ws, init, fan, 0);
    }
    if (a.bias) nn_param_add(g, n, "bias", 1, &K, NN_INIT_KAIMING_UNIFORM, fan_in, 1);
    return 0;
}

static long conv_macs(const nn_node *n)
{
    k_conv_shape sh = conv_attr_of(n).sh;
    return (long)sh.c * sh.r * sh.s;
}

/* The planned shape for a batch of nb samples. */
static k_conv_shape shape(const nn_node *n, int nb)
{
    k_conv_shape sh = conv_attr_of(n).sh;
    sh.n = nb;
    return sh;
}
static int has_bias(const nn_node *n) { return conv_attr_of(n).bias; }

static size_t conv_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    k_conv_shape sh = shape(n, max_batch);
    size_t w = k_conv2d_workspace(&sh);
    if (sh.p == 1) { /* -> rectifier -> max over len (nn/plan.c): the fused forward, sparse backward */
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
    k_conv_shape sh = shape(n, r->n);
    const float *b = has_bias(n) ? nn_pw(g, n, 1) : NULL;
    if (n->maxt_from) { /* -> rectifier -> max over len: straight to the max's output and argmax */
        nn_node *m = &g->nodes[n->maxt_from];
        k_conv2d_fwd_maxt(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), b, m->y, m->aux, r->ws);
        return;
    }
    if (g->amp == NN_AMP_BF16) k_conv2d_fwd_bf16(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), b, n->y, r->ws);
    else k_conv2d_fwd(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), b, n->y, r->ws);
}

static void conv_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv_shape sh = shape(n, r->n);
    float *db = has_bias(n) ? nn_pg(g, n, 1) : NULL;
    if (n->maxt_from) { /* -> rectifier -> max over len: from the max's gradient and argmax */
        const nn_node *m = &g->nodes[n->maxt_from];
        k_conv2d_bwd_maxt(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), m->dy, m->y, m->aux, nn_dx(g, n, 0), nn_pg(g, n, 0),
                          db, r->ws);
        return;
    }
    if (g->amp == NN_AMP_BF16)
        k_conv2d_bwd_bf16(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0), db, r->ws);
    else
        k_conv2d_bwd(&sh, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0), db, r->ws);
}

#if DDPRT_CUDA
/* Split-K scratch is not monotonic in the batch: the largest over every batch size. */
static size_t conv_w16_elems_cuda(const nn_graph *g, const nn_node *n);
static int conv_mm(const nn_graph *g, const nn_node *n);
static size_t conv_ws_cuda(const nn_graph *g, const nn_node *n, int max_batch)
{
    size_t need = 0;
    /* bf16 / f16: the NHWC copies too, but not the weights' where the node gets its block
     * (nn/graph_cuda.c makes one wherever w16_elems_cuda is not 0; n->w16 is not set yet),
     * nor x's where it is read channels last as it is: the run's flags (the plan has set
     * y16 and nhwc before it sizes the workspaces) */
    int mm = conv_mm(g, n) | (g->amp != NN_AMP_NONE && conv_w16_elems_cuda(g, n) ? K_CUDA_MM_W16P : 0);
    for (int b = 1; b <= max_batch; b++) {
        k_conv_shape sh = shape(n, b);
        size_t w = k_cuda_conv2d_workspace_mm(mm, &sh);
        if (w > need) need = w;
    }
    return need;
}

/* The weights once per update in the layouts the NHWC products read (k_cuda_conv2d_w16_prep):
 * the calls then permute x and dy only. */
static size_t conv_w16_elems_cuda(const nn_graph *g, const nn_node *n)
{
    k_conv_shape sh = shape(n, 1);
    return k_cuda_conv2d_w16_elems(nn_cuda_mm(g), &sh);
}

static int conv_w16_prep_cuda(nn_graph *g, nn_node *n, port_stream s)
{
    k_conv_shape sh = shape(n, 1);
    return k_cuda_conv2d_w16_prep(nn_cuda_mm(g), &sh, nn_pw(g, n, 0), n->w16, s);
}

/* conv's 16-bit weights: its own block where the device graph made one, else the plain copy. */
static const uint16_t *conv_w16(const nn_graph *g, const nn_node *n, int *mm)
{
    if (n->w16) *mm |= K_CUDA_MM_W16P;
    return n->w16 ? n->w16 : nn_pw16(g, n, 0);
}

/* --channels-last: x / dx NHWC where C allows (the products read it as their NHWC copy),
 * y / dy where K does (conv2d only; conv1d's rows stay as they are). */
static int conv_nhwc_in(const nn_graph *g, const nn_node *n)
{
    (void)g;
    return n->op == &nn_op_conv2d && conv_attr_of(n).sh.c % 8 == 0;
}
static int conv_nhwc_out(const nn_graph *g, const nn_node *n)
{
    (void)g;
    return n->op == &nn_op_conv2d && conv_attr_of(n).sh.k % 8 == 0;
}
/* NODX: no input needing a gradient (the stem on the data; nn_dx NULL) */
static int conv_mm(const nn_graph *g, const nn_node *n)
{
    return nn_cuda_mm_io(g, n) | (nn_in(g, n, 0)->nhwc ? K_CUDA_MM_XNHWC : 0) | (n->nhwc ? K_CUDA_MM_YNHWC : 0) |
           (nn_in(g, n, 0)->needs_grad ? 0 : K_CUDA_MM_NODX);
}

static int conv_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv_shape sh = shape(n, r->n);
    int mm = conv_mm(g, n);
    const uint16_t *w16 = conv_w16(g, n, &mm);
    return k_cuda_conv2d_fwd_mm(mm, &sh, nn_x(g, n, 0), nn_pw(g, n, 0), w16, has_bias(n) ? nn_pw(g, n, 1) : NULL,
                                n->y, r->ws, r->stream);
}

static int conv_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv_shape sh = shape(n, r->n);
    int mm = conv_mm(g, n);
    const uint16_t *w16 = conv_w16(g, n, &mm);
    return k_cuda_conv2d_bwd_mm(mm, &sh, nn_x(g, n, 0), nn_pw(g, n, 0), w16, n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                                has_bias(n) ? nn_pg(g, n, 1) : NULL, r->ws, r->stream);
}
#endif

const nn_op nn_op_conv2d = {
    .kind = "conv2d", .flags = NN_BWD_INPUT | NN_FUSES_RECT_MAX | NN_IN16 | NN_OUT16, .attrs = conv2d_attrs,
    .attr_size = sizeof(conv_attr), .macs = conv_macs, .infer = conv_infer, .workspace = conv_ws,
    .fwd = conv_fwd, .bwd = conv_bwd,
    NN_CUDA_ONLY(.fwd_cuda = conv_fwd_cuda, .bwd_cuda = conv_bwd_cuda, .workspace_cuda = conv_ws_cuda,
                 .w16_elems_cuda = conv_w16_elems_cuda, .w16_prep_cuda = conv_w16_prep_cuda,
                 .nhwc_in = conv_nhwc_in, .nhwc_out = conv_nhwc_out)};
const nn_op nn_op_conv1d = {
    .kind = "conv1d", .flags = NN_BWD_INPUT | NN_FUSES_RECT_MAX | NN_IN16 | NN_OUT16, .attrs = conv1d_attrs,
    .attr_size = sizeof(conv_attr), .macs = conv_macs, .infer = conv_infer, .workspace = conv_ws,
    .fwd = conv_fwd, .bwd = conv_bwd,
    NN_CUDA_ONLY(.fwd_cuda = conv_fwd_cuda, .bwd_cuda = conv_bwd_cuda, .workspace_cuda = conv_ws_cuda,
                 .w16_elems_cuda = conv_w16_elems_cuda, .w16_prep_cuda = conv_w16_prep_cuda)};

int nn_conv2d(nn_graph *g, const char *name, int x, int out_c, int k, int stride, int pad, int bias)
{
    conv_attr a = {.filters = out_c, .size = k, .stride = stride, .pad = pad, .bias = bias};
    return nn_add(g, &nn_op_conv2d, name, &x, 1, &a, sizeof a);
}

int nn_conv1d(nn_graph *g, const char *name, int x, int out_c, int k)
{
    conv_attr a = {.filters = out_c, .size = k, .stride = 1, .bias = 1};
    return nn_add(g, &nn_op_conv1d, name, &x, 1, &a, sizeof a);
}
