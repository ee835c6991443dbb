/* The seed's Net written out by hand (llm.c style): the reference the graph-built
 * LeNet (nn/models/lenet.c) is tested against, on the CPU and (through the graph) on
 * the GPU. The seed's Net:
 *   conv1 1->10 k5, max_pool 2, relu; conv2 10->20 k5, dropout2d, max_pool 2, relu;
 *   view 320; fc1 320->50, relu, dropout; fc2 50->10; log_softmax. */
#include "test/t_lenet.h"
#include "rt/log.h"
#include <math.h>
#include <string.h>

static void add_param(nn_lenet *m, const char *name, int ndim, int d0, int d1, int d2, int d3, int fan_in)
{
    nn_lenet_param *p = &m->p[m->np++];
    p->name = name;
    p->ndim = ndim;
    p->shape[0] = d0; p->shape[1] = d1; p->shape[2] = d2; p->shape[3] = d3;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) p->numel *= (size_t)p->shape[i];
    p->offset = m->nparams;
    /* Keep each parameter 16-float aligned so kernels and buckets see aligned slices. */
    m->nparams += (p->numel + 15) & ~(size_t)15;
    p->bound = 1.0f / sqrtf((float)fan_in);
}

static float *acts(rt_arena *a, size_t n, const char *what)
{
    return rt_arena_alloc(a, n * sizeof(float), RT_MEM_ACTS, what);
}

int nn_lenet_build(nn_lenet *m, rt_arena *a, int B)
{
    memset(m, 0, sizeof *m);
    m->name = "lenet";
    m->max_batch = B;
    add_param(m, "conv1.weight", 4, 10, 1, 5, 5, 25);
    add_param(m, "conv1.bias", 1, 10, 0, 0, 0, 25);
    add_param(m, "conv2.weight", 4, 20, 10, 5, 5, 250);
    add_param(m, "conv2.bias", 1, 20, 0, 0, 0, 250);
    add_param(m, "fc1.weight", 2, 50, 320, 0, 0, 320);
    add_param(m, "fc1.bias", 1, 50, 0, 0, 0, 320);
    add_param(m, "fc2.weight", 2, 10, 50, 0, 0, 50);
    add_param(m, "fc2.bias", 1, 10, 0, 0, 0, 50);
    m->params = rt_arena_alloc(a, m->nparams * sizeof(float), RT_MEM_PARAMS, "parameters");
    m->grads = rt_arena_alloc(a, m->nparams * sizeof(float), RT_MEM_GRADS, "gradients");

    m->conv1 = (k_conv_shape){.n = B, .c = 1, .h = 28, .w = 28, .k = 10, .r = 5, .s = 5, .stride = 1};
    m->conv2 = (k_conv_shape){.n = B, .c = 10, .h = 12, .w = 12, .k = 20, .r = 5, .s = 5, .stride = 1};
    k_conv_shape_init(&m->conv1);
    k_conv_shape_init(&m->conv2);
    size_t ws1 = k_conv2d_workspace(&m->conv1), ws2 = k_conv2d_workspace(&m->conv2);
    m->ws = rt_arena_alloc(a, ws1 > ws2 ? ws1 : ws2, RT_MEM_WORKSPACE, "conv workspace");

    size_t b = (size_t)B;
    m->c1 = acts(a, b * 10 * 24 * 24, "conv1 output");
    m->p1 = acts(a, b * 10 * 12 * 12, "pool1 output");
    m->p1i = rt_arena_alloc(a, b * 10 * 12 * 12 * sizeof(int32_t), RT_MEM_ACTS, "pool1 argmax");
    m->c2 = acts(a, b * 20 * 8 * 8, "conv2 output");
    m->d2 = acts(a, b * 20 * 8 * 8, "dropout2d output");
    m->m2 = rt_arena_alloc(a, b * 20, RT_MEM_ACTS, "dropout2d mask");
    m->p2 = acts(a, b * 320, "pool2 output");
    m->p2i = rt_arena_alloc(a, b * 320 * sizeof(int32_t), RT_MEM_ACTS, "pool2 argmax");
    m->f1 = acts(a, b * 50, "fc1 output");
    m->d3 = acts(a, b * 50, "dropout output");
    m->m3 = rt_arena_alloc(a, b * 50, RT_MEM_ACTS, "dropout mask");
    m->f2 = acts(a, b * 10, "fc2 output");
    m->lp = acts(a, b * 10, "log_softmax output");
    /* ga also stages checkpoints between epochs: at least the parameter count. */
    size_t gsz = b * 10 * 24 * 24 > m->nparams + 16 ? b * 10 * 24 * 24 : m->nparams + 16;
    m->ga = acts(a, gsz, "activation gradients A");
    m->gb = acts(a, b * 10 * 24 * 24, "activation gradients B");
    m->drop2d_p = 0.5f;
    m->drop_p = 0.5f;
    return 0;
}

void nn_lenet_init(nn_lenet *m, uint64_t seed)
{
    memset(m->params, 0, m->nparams * sizeof(float));
    for (int i = 0; i < m->np; i++)
        k_init_uniform(m->p[i].numel, m->p[i].bound, seed, m->p[i].offset, m->params + m->p[i].offset);
}

const nn_lenet_param *nn_lenet_find(const nn_lenet *m, const char *name)
{
    for (int i = 0; i < m->np; i++)
        if (!strcmp(m->p[i].name, name)) return &m->p[i];
    return NULL;
}

#define P(i) (m->params + m->p[i].offset)
#define G(i) (m->grads + m->p[i].offset)

const float *nn_lenet_forward(nn_lenet *m, const float *x, int n, int train, uint64_t seed, uint64_t step)
{
    if (n > m->max_batch) rt_fatal("model: batch %d exceeds the planned %d", n, m->max_batch);
    m->conv1.n = m->conv2.n = n;
    /* Distinct counter ranges per layer and step keep the dropout masks independent. */
    uint64_t ctr = step * (uint64_t)m->max_batch * 100;
    k_conv2d_fwd(&m->conv1, x, P(0), P(1), m->c1, m->ws);
    k_maxpool2d_fwd(n, 10, 24, 24, 2, 2, m->c1, m->p1, m->p1i);
    k_relu_fwd((size_t)n * 1440, m->p1, m->p1);
    k_conv2d_fwd(&m->conv2, m->p1, P(2), P(3), m->c2, m->ws);
    const float *d2 = m->c2;
    if (train) {
        k_dropout2d_fwd(n, 20, 64, m->drop2d_p, seed, ctr, m->c2, m->d2, m->m2);
        d2 = m->d2;
    }
    k_maxpool2d_fwd(n, 20, 8, 8, 2, 2, d2, m->p2, m->p2i);
    k_relu_fwd((size_t)n * 320, m->p2, m->p2);
    k_linear_fwd(n, 320, 50, m->p2, P(4), P(5), m->f1);
    k_relu_fwd((size_t)n * 50, m->f1, m->f1);
    const float *d3 = m->f1;
    if (train) {
        k_dropout_fwd((size_t)n * 50, m->drop_p, seed, ctr + (uint64_t)m->max_batch * 20, m->f1, m->d3, m->m3);
        d3 = m->d3;
    }
    k_linear_fwd(n, 50, 10, d3, P(6), P(7), m->f2);
    k_log_softmax_fwd(n, 10, m->f2, m->lp);
    return m->lp;
}

static void grad_ready(nn_lenet *m, int first)
{
    if (m->on_grad_ready) m->on_grad_ready(m->on_grad_ctx, first);
}

/* Assumes the preceding forward ran with train = 1 on the same x. */
void nn_lenet_backward(nn_lenet *m, const float *x, const int32_t *labels, int n, int n_total)
{
    float *ga = m->ga, *gb = m->gb;
    k_log_softmax_nll_bwd(n, 10, m->lp, labels, 1.0f / (float)n_total, ga);
    k_linear_bwd(n, 50, 10, m->d3, P(6), ga, gb, G(6), G(7));
    grad_ready(m, 6);
    k_dropout_bwd((size_t)n * 50, m->drop_p, m->m3, gb, gb);
    k_relu_bwd((size_t)n * 50, m->f1, gb, gb);
    k_linear_bwd(n, 320, 50, m->p2, P(4), gb, ga, G(4), G(5));
    grad_ready(m, 4);
    k_relu_bwd((size_t)n * 320, m->p2, ga, ga);
    k_maxpool2d_bwd(n, 20, 8, 8, 2, 2, ga, m->p2i, gb);
    k_dropout2d_bwd(n, 20, 64, m->drop2d_p, m->m2, gb, gb);
    k_conv2d_bwd(&m->conv2, m->p1, P(2), gb, ga, G(2), G(3), m->ws);
    grad_ready(m, 2);
    k_relu_bwd((size_t)n * 1440, m->p1, ga, ga);
    k_maxpool2d_bwd(n, 10, 24, 24, 2, 2, ga, m->p1i, gb);
    k_conv2d_bwd(&m->conv1, x, P(0), gb, NULL, G(0), G(1), m->ws);
    grad_ready(m, 0);
}
