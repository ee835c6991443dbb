/* Graph building: nodes, parameters, buffers, shape inference. Planning and carving
 * of the activations is nn/plan.c; running is nn/exec.c. */
#include "nn/graph.h"
#include "rt/log.h"
#include <stdio.h>
#include <string.h>

void nn_graph_begin(nn_graph *g, nn_node *nodes, nn_param *p, nn_buf *b, const char *model, nn_shape in,
                    int num_classes)
{
    memset(g, 0, sizeof *g);
    memset(nodes, 0, sizeof *nodes * NN_MAX_NODES);
    g->nodes = nodes;
    g->p = p;
    g->b = b;
    g->model = model;
    g->num_classes = num_classes;
    nn_node *x = &g->nodes[g->nn++];
    x->op = nn_op_find("input");
    snprintf(x->name, sizeof x->name, "input");
    x->out = in;
}

int nn_add(nn_graph *g, const char *kind, const char *name, const int *in, int nin, const int *ia, int nia,
           const float *fa, int nfa)
{
    const nn_op *op = nn_op_find(kind);
    if (!op) rt_fatal("model %s: unknown op '%s'", g->model, kind);
    if (g->nn >= NN_MAX_NODES) rt_fatal("model %s: more than %d nodes", g->model, NN_MAX_NODES);
    if (nin > NN_MAX_IN || nia > 8 || nfa > 2) rt_fatal("model %s: too many inputs/attributes for %s", g->model, kind);
    nn_node *n = &g->nodes[g->nn];
    memset(n, 0, sizeof *n);
    n->op = op;
    snprintf(n->name, sizeof n->name, "%s", name ? name : "");
    for (int i = 0; i < nin; i++) {
        if (in[i] < 0 || in[i] >= g->nn) rt_fatal("model %s: node %s takes node %d, not built yet", g->model, kind, in[i]);
        n->in[i] = in[i];
    }
    n->nin = nin;
    for (int i = 0; i < nia; i++) n->ia[i] = ia[i];
    for (int i = 0; i < nfa; i++) n->fa[i] = fa[i];
    /* Shapes are inferred as the graph grows, so builders can read them (a block's
     * input width); the first error is kept and reported by nn_graph_finish. */
    int id = g->nn++;
    if (!g->err[0] && n->op->infer(g, n, g->err, sizeof g->err)) {
        if (!g->err[0]) snprintf(g->err, sizeof g->err, "model %s: node %d (%s) failed", g->model, id, kind);
    }
    if (g->err[0]) n->out = (nn_shape){1, 1, 1, 0}; /* keeps later nodes' inference harmless */
    n->rng_offset = g->rng_total;
    g->rng_total += (uint64_t)n->rng_per_sample;
    return id;
}

int nn_conv2d(nn_graph *g, const char *name, int x, int out_c, int k, int stride, int pad, int bias)
{
    int ia[] = {out_c, k, k, stride, pad, bias, 0};
    return nn_add(g, "conv2d", name, &x, 1, ia, 7, NULL, 0);
}

int nn_conv1d(nn_graph *g, const char *name, int x, int out_c, int k)
{
    int ia[] = {out_c, 1, k, 1, 0, 1, 1};
    return nn_add(g, "conv2d", name, &x, 1, ia, 7, NULL, 0);
}

int nn_linear(nn_graph *g, const char *name, int x, int out) { return nn_add(g, "linear", name, &x, 1, &out, 1, NULL, 0); }

int nn_batchnorm(nn_graph *g, const char *name, int x)
{
    float fa[] = {1e-5f, 0.1f}; /* eps, momentum: PyTorch's defaults */
    return nn_add(g, "batchnorm2d", name, &x, 1, NULL, 0, fa, 2);
}

int nn_relu(nn_graph *g, int x) { return nn_add(g, "relu", NULL, &x, 1, NULL, 0, NULL, 0); }

int nn_maxpool(nn_graph *g, int x, int k, int stride, int pad)
{
    int ia[] = {k, stride, pad};
    return nn_add(g, "maxpool2d", NULL, &x, 1, ia, 3, NULL, 0);
}

int nn_avgpool_1x1(nn_graph *g, int x) { return nn_add(g, "avgpool1x1", NULL, &x, 1, NULL, 0, NULL, 0); }

int nn_add2(nn_graph *g, int a, int b)
{
    int in[] = {a, b};
    return nn_add(g, "add", NULL, in, 2, NULL, 0, NULL, 0);
}

int nn_flatten(nn_graph *g, int x) { return nn_add(g, "flatten", NULL, &x, 1, NULL, 0, NULL, 0); }

int nn_dropout(nn_graph *g, int x, float p, int two_d)
{
    return nn_add(g, "dropout", NULL, &x, 1, &two_d, 1, &p, 1);
}

int nn_embedding(nn_graph *g, const char *name, int x, int vocab, int dim)
{
    int ia[] = {vocab, dim};
    return nn_add(g, "embedding", name, &x, 1, ia, 2, NULL, 0);
}

int nn_max_time(nn_graph *g, int x) { return nn_add(g, "max_time", NULL, &x, 1, NULL, 0, NULL, 0); }
int nn_concat(nn_graph *g, const int *xs, int n) { return nn_add(g, "concat", NULL, xs, n, NULL, 0, NULL, 0); }
int nn_log_softmax(nn_graph *g, int x) { return nn_add(g, "log_softmax", NULL, &x, 1, NULL, 0, NULL, 0); }

static void full_name(char *out, const nn_node *n, const char *suffix)
{
    size_t a = strlen(n->name), b = strlen(suffix);
    if (a + b + 2 > NN_NAME) rt_fatal("tensor name %s.%s is longer than %d characters", n->name, suffix, NN_NAME - 1);
    memcpy(out, n->name, a);
    if (a) out[a++] = '.';
    memcpy(out + a, suffix, b + 1);
}

int nn_param_add(nn_graph *g, nn_node *n, const char *suffix, int ndim, const int *shape, int init, int fan,
                 int no_decay)
{
    if (g->np >= NN_MAX_PARAMS) rt_fatal("model %s: more than %d parameters", g->model, NN_MAX_PARAMS);
    nn_param *p = &g->p[g->np];
    memset(p, 0, sizeof *p);
    full_name(p->name, n, suffix);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    p->init = init;
    p->fan = fan;
    p->no_decay = no_decay;
    p->node = (int)(n - g->nodes);
    if (!n->np) n->p0 = g->np;
    n->np++;
    return g->np++;
}

int nn_buf_add(nn_graph *g, nn_node *n, const char *suffix, rt_dtype dt, int ndim, const int *shape, int init)
{
    if (g->nb >= NN_MAX_BUFS) rt_fatal("model %s: more than %d buffers", g->model, NN_MAX_BUFS);
    nn_buf *b = &g->b[g->nb];
    memset(b, 0, sizeof *b);
    full_name(b->name, n, suffix);
    b->dtype = dt;
    b->ndim = ndim;
    b->numel = 1;
    for (int i = 0; i < ndim; i++) {
        b->shape[i] = shape[i];
        b->numel *= (size_t)shape[i];
    }
    b->init = init;
    if (!n->nb) n->b0 = g->nb;
    n->nb++;
    return g->nb++;
}

const nn_param *nn_param_find(const nn_graph *g, const char *name)
{
    for (int i = 0; i < g->np; i++)
        if (!strcmp(g->p[i].name, name)) return &g->p[i];
    return NULL;
}

int nn_graph_finish(nn_graph *g, rt_arena *a, int max_batch, char *err, size_t errlen)
{
    g->max_batch = max_batch;
    if (g->err[0]) {
        snprintf(err, errlen, "%s", g->err);
        return -1;
    }
    /* LeNet's streams used 100 counters per sample and step; keep that spacing so the
     * built-in LeNet draws the same masks as before the graph existed. */
    g->rng_stride = g->rng_total > 100 ? g->rng_total : 100;
    g->out = g->nn - 1;
    g->out_is_logp = !strcmp(g->nodes[g->out].op->kind, "log_softmax");
    nn_shape o = g->nodes[g->out].out;
    if (g->num_classes < 0 || g->lm) { /* a bare graph (the op tests), or a language model: its own loss */
    } else if (o.h != 1 || o.w != 1 || o.tokens) {
        snprintf(err, errlen, "model %s: the output must be a vector of class scores, got %dx%dx%d", g->model, o.c,
                 o.h, o.w);
        return -1;
    }
    else if (g->num_classes == 0) g->num_classes = o.c;
    else if (o.c != g->num_classes) {
        snprintf(err, errlen, "model %s: the output has %d classes, the data has %d", g->model, o.c,
                 g->num_classes);
        return -1;
    }
    /* Parameters: one flat block, each 16-float aligned (aligned kernel and bucket slices). */
    g->nparams = 0;
    for (int i = 0; i < g->np; i++) {
        g->p[i].offset = g->nparams;
        g->nparams += (g->p[i].numel + 15) & ~(size_t)15;
    }
    g->buf_bytes = 0;
    for (int i = 0; i < g->nb; i++) {
        g->b[i].offset = g->buf_bytes;
        g->buf_bytes += (g->b[i].numel * rt_dtype_size(g->b[i].dtype) + 63) & ~(size_t)63;
    }
    return nn_graph_carve(g, a, err, errlen);
}

int nn_graph_carve(nn_graph *g, rt_arena *a, char *err, size_t errlen)
{
    g->params = rt_arena_alloc(a, g->nparams * sizeof(float), RT_MEM_PARAMS, "parameters");
    if (!g->grads_alloc) {
        g->grads = rt_arena_alloc(a, g->nparams * sizeof(float), RT_MEM_GRADS, "gradients");
    } else if (!a->planning && !(g->grads = g->grads_alloc(g->grads_ctx, g->nparams * sizeof(float)))) {
        snprintf(err, errlen, "out of memory for %zu bytes of gradients", g->nparams * sizeof(float));
        return -1;
    }
    g->bufs = g->buf_bytes ? rt_arena_alloc(a, g->buf_bytes, RT_MEM_PARAMS, "buffers") : NULL;
    return nn_plan(g, a, err, errlen);
}

void nn_graph_summary(const nn_graph *g, int verbose)
{
    printf("model %s: %d nodes, %d parameter tensors (%zu floats), %d buffers, output %d classes\n", g->model,
           g->nn, g->np, g->nparams, g->nb, g->num_classes);
    if (!verbose) return;
    for (int i = 0; i < g->nn; i++) {
        const nn_node *n = &g->nodes[i];
        printf("  %3d %-12s %-24s -> %dx%dx%d", i, n->op->kind, n->name, n->out.c, n->out.h, n->out.w);
        for (int k = 0; k < n->nin; k++) printf("%s%d", k ? "," : "  <- ", n->in[k]);
        printf("\n");
    }
}
