/* Graph building: nodes, parameters, buffers, shape inference, the canonical
 * description. Layout, planning and carving are nn/plan_mem.c and nn/plan.c; running
 * is nn/exec.c. This file calls no op and no planner: it reaches an op only through
 * its descriptor (nn_op's function pointers and attribute table), and the ops (below
 * in nn/ops) call down into it to register parameters. */
#include "nn/graph.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Node 0, and the op tests' extra inputs: values the caller fills. */
static int input_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    (void)g; (void)n; (void)err; (void)errlen;
    return 0;
}
static void input_nop(nn_graph *g, nn_node *n, const nn_run *r) { (void)g; (void)n; (void)r; }
#if DDPRT_CUDA
static int input_nop_cuda(nn_graph *g, nn_node *n, const nn_run *r) { (void)g; (void)n; (void)r; return 0; }
#endif
const nn_op nn_op_input = {.kind = "input", .flags = NN_SOURCE, .infer = input_infer, .fwd = input_nop,
                           .bwd = input_nop,
#if DDPRT_CUDA
                           .fwd_cuda = input_nop_cuda, .bwd_cuda = input_nop_cuda
#endif
};

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
    x->op = &nn_op_input;
    snprintf(x->name, sizeof x->name, "input");
    x->out = in;
}

static void build_error(nn_graph *g, const char *kind, const char *name, const char *what, int a, int b)
{
    if (g->err[0]) return;
    snprintf(g->err, sizeof g->err, "model %s: node %d (%s%s%s): ", g->model, g->nn, kind, *name ? " " : "", name);
    size_t k = strlen(g->err);
    snprintf(g->err + k, sizeof g->err - k, what, a, b);
}

int nn_add(nn_graph *g, const nn_op *op, const char *name, const int *in, int nin, const void *attr,
           size_t attr_bytes)
{
    if (g->nn >= NN_MAX_NODES) rt_fatal("model %s: more than %d nodes", g->model, NN_MAX_NODES);
    if (attr_bytes > NN_ATTR_BYTES) rt_fatal("model %s: %s attributes of %zu bytes", g->model, op->kind, attr_bytes);
    nn_node *n = &g->nodes[g->nn];
    memset(n, 0, sizeof *n);
    n->op = op;
    snprintf(n->name, sizeof n->name, "%s", name ? name : "");
    int lo = op->min_in, hi = op->max_in;
    if (!lo && !hi && !(op->flags & NN_SOURCE)) lo = hi = 1;
    if (nin < lo || nin > hi || nin > NN_MAX_IN) {
        if (lo == hi) build_error(g, op->kind, n->name, "takes %d input(s), got %d", lo, nin);
        else build_error(g, op->kind, n->name, "takes %d to %d inputs", lo, hi < NN_MAX_IN ? hi : NN_MAX_IN);
        nin = 0;
    }
    for (int i = 0; i < nin; i++) {
        if (in[i] < 0 || in[i] >= g->nn) rt_fatal("model %s: node %s takes node %d, not built yet", g->model, op->kind, in[i]);
        n->in[i] = in[i];
    }
    n->nin = nin;
    if (attr) memcpy(n->attr, attr, attr_bytes);
    /* Shapes are inferred as the graph grows, so builders can read them (a block's
     * input width); the first error is kept and reported by nn_graph_finish. */
    int id = g->nn++;
    if (!g->err[0] && n->op->infer(g, n, g->err, sizeof g->err)) {
        if (!g->err[0]) snprintf(g->err, sizeof g->err, "model %s: node %d (%s) failed", g->model, id, op->kind);
    }
    if (g->err[0]) n->out = (nn_shape){1, 1, 1, 0}; /* keeps later nodes' inference harmless */
    n->rng_offset = g->rng_total;
    g->rng_total += (uint64_t)n->rng_per_sample;
    return id;
}

/* "layer1.0.bn1" + "running_mean"; -1 (g->err) when longer than a name may be. */
static int full_name(nn_graph *g, char *out, const nn_node *n, const char *suffix)
{
    size_t a = strlen(n->name), b = strlen(suffix);
    if (a + b + 2 > NN_NAME) {
        if (!g->err[0])
            snprintf(g->err, sizeof g->err, "model %s: tensor name %s.%s is longer than %d characters", g->model,
                     n->name, suffix, NN_NAME - 1);
        return -1;
    }
    memcpy(out, n->name, a);
    if (a) out[a++] = '.';
    memcpy(out + a, suffix, b + 1);
    return 0;
}

/* Past the fixed tables: an error of the model (a cfg file can ask for it). */
static int table_full(nn_graph *g, int used, int max, const char *what)
{
    if (used < max) return 0;
    if (!g->err[0]) snprintf(g->err, sizeof g->err, "model %s: more than %d %s", g->model, max, what);
    return -1;
}

/* A state_dict name must be unique: found while building, not at the first save. */
static void name_taken(nn_graph *g, const nn_node *n, const char *full)
{
    int owner = -1;
    for (int i = 0; i < g->np && owner < 0; i++)
        if (!strcmp(g->p[i].name, full)) owner = g->p[i].node;
    for (int i = 0; i < g->nb && owner < 0; i++)
        if (!strcmp(g->b[i].name, full))
            for (int k = 0; k < g->nn; k++)
                if (g->nodes[k].nb && g->nodes[k].b0 <= i && i < g->nodes[k].b0 + g->nodes[k].nb) owner = k;
    if (owner < 0 || g->err[0]) return;
    const char *ok = g->nodes[owner].op->kind;
    if (!n->name[0])
        snprintf(g->err, sizeof g->err, "model %s: node %d (%s) has parameters but no name, as node %d (%s) "
                 "before it: both would save a tensor '%s' (give each a name)", g->model, (int)(n - g->nodes),
                 n->op->kind, owner, ok, full);
    else
        snprintf(g->err, sizeof g->err, "model %s: node %d (%s %s): tensor '%s' is already node %d's (%s); names "
                 "must be unique", g->model, (int)(n - g->nodes), n->op->kind, n->name, full, owner, ok);
}

/* A new tensor's name (the node's name and suffix, checked unique) and shape: -1 on a
 * bad name (g->err says why). */
static int tensor_init(nn_graph *g, nn_node *n, const char *suffix, char *name, int *ndim, int *dims, size_t *numel,
                       int rank, const int *shape)
{
    char full[NN_NAME];
    if (full_name(g, full, n, suffix)) return -1;
    name_taken(g, n, full);
    memcpy(name, full, sizeof full);
    *ndim = rank;
    *numel = 1;
    for (int i = 0; i < rank; i++) {
        dims[i] = shape[i];
        *numel *= (size_t)shape[i];
    }
    return 0;
}

int nn_param_add(nn_graph *g, nn_node *n, const char *suffix, int ndim, const int *shape, int init, int fan,
                 int no_decay)
{
    if (table_full(g, g->np, NN_MAX_PARAMS, "parameter tensors")) return -1;
    nn_param *p = memset(&g->p[g->np], 0, sizeof *p);
    if (tensor_init(g, n, suffix, p->name, &p->ndim, p->shape, &p->numel, ndim, shape)) return -1;
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
    if (table_full(g, g->nb, NN_MAX_BUFS, "buffers")) return -1;
    nn_buf *b = memset(&g->b[g->nb], 0, sizeof *b);
    if (tensor_init(g, n, suffix, b->name, &b->ndim, b->shape, &b->numel, ndim, shape)) return -1;
    b->dtype = dt;
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

int nn_node_describe(const nn_graph *g, int i, char *buf, size_t len)
{
    const nn_node *n = &g->nodes[i];
    size_t k = 0;
#define PUT(...) do { int w_ = snprintf(buf + (k < len ? k : len), k < len ? len - k : 0, __VA_ARGS__); \
    if (w_ > 0) k += (size_t)w_; } while (0)
    PUT("%s", n->op->kind);
    if (n->name[0]) PUT(" %s", n->name);
    for (int j = 0; j < n->nin; j++) PUT("%s%d", j ? "," : " <- ", n->in[j]);
    for (const nn_attr *a = n->op->attrs; a && a->key; a++) {
        const unsigned char *p = n->attr + a->off;
        if (a->type == NN_ATTR_FLOAT) {
            float f;
            memcpy(&f, p, sizeof f);
            int prec = 6; /* the shortest that reads back as the same float: 0.9, not 0.899999976 */
            char num[32];
            do snprintf(num, sizeof num, "%.*g", prec, (double)f);
            while ((float)strtod(num, NULL) != f && prec++ < 9);
            PUT(" %s=%s", a->key, num);
        } else {
            int v;
            memcpy(&v, p, sizeof v);
            if (a->type == NN_ATTR_CHOICE) { /* the word, not its index */
                const char *c = a->choices;
                for (int j = 0; j < v && strchr(c, '|'); j++) c = strchr(c, '|') + 1;
                PUT(" %s=%.*s", a->key, (int)strcspn(c, "|"), c);
            } else {
                PUT(" %s=%d", a->key, v);
            }
        }
    }
    PUT(" -> %dx%dx%d%s", n->out.c, n->out.h, n->out.w, n->out.tokens ? " tokens" : "");
#undef PUT
    return (int)k;
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
