/* The graph executor's device path (test_gpu_graph_train.c; on a GPU and on the SIMT
 * executor): a model is built twice from the same seed, one copy trained by the CPU
 * executor (nn/exec.c), the other through nn/graph_cuda.c (device graph planned into
 * the "device" arena, ops' CUDA halves, device loss, gradient-ready hooks, SGD kernel,
 * BN statistics on the device). Two training steps and an evaluation must agree:
 * losses, every gradient and parameter, the BatchNorm buffers, the correct counts and
 * the order of the gradient-ready hooks. */
#include "nn/graph_cuda.h"
#include "nn/models/models.h"
#include "ports/cuda/port_cuda.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/gpu/gpu_models.h"
#include "test/t_data.h"

int gm_build(gm_model *m, const char *name, nn_shape in, int classes, int vocab, int B)
{
    nn_node *nodes = calloc(NN_MAX_NODES, sizeof *nodes);
    nn_param *p = calloc(NN_MAX_PARAMS, sizeof *p);
    nn_buf *b = calloc(NN_MAX_BUFS, sizeof *b);
    /* a .cfg file on token windows: a language model (the [gpt] case) */
    int file = strstr(name, ".cfg") != NULL;
    nn_model_cfg mc = {.name = file ? NULL : name, .file = file ? name : NULL, .in = in, .num_classes = classes,
                       .vocab = vocab, .embed_dim = 16, .lm = file && in.tokens};
    char err[256];
    rt_arena plan;
    rt_arena_plan(&plan, "model");
    if (nn_model_build(&m->g, nodes, p, b, &mc, err, sizeof err) || nn_graph_finish(&m->g, &plan, B, err, sizeof err) ||
        rt_arena_init(&m->a, "model", plan.high + (size_t)m->g.nparams * 4 + 4096) ||
        nn_model_build(&m->g, nodes, p, b, &mc, err, sizeof err) || nn_graph_finish(&m->g, &m->a, B, err, sizeof err)) {
        printf("FAIL %s: build: %s\n", name, err);
        return -1;
    }
    m->mom = rt_arena_alloc(&m->a, m->g.nparams * sizeof(float), RT_MEM_OPTIM, "momentum");
    nn_graph_init(&m->g, 42);
    memset(m->mom, 0, m->g.nparams * sizeof(float));
    memset(m->g.grads, 0, m->g.nparams * sizeof(float));
    return 0;
}

void gm_drop(gm_model *m)
{
    free(m->g.nodes);
    free(m->g.p);
    free(m->g.b);
    rt_arena_free(&m->a);
}

static int build_amp16(gm_model *m, const char *path, nn_shape in, int B)
{
    nn_node *nodes = calloc(NN_MAX_NODES, sizeof *nodes);
    nn_param *p = calloc(NN_MAX_PARAMS, sizeof *p);
    nn_buf *b = calloc(NN_MAX_BUFS, sizeof *b);
    nn_model_cfg mc = {.file = path, .in = in, .num_classes = 10};
    char err[256];
    rt_arena plan;
    rt_arena_plan(&plan, "model");
    for (int pass = 0; pass < 2; pass++) {
        if (nn_model_build(&m->g, nodes, p, b, &mc, err, sizeof err)) break;
        m->g.amp = NN_AMP_BF16, m->g.act16 = 1, m->g.channels_last = 1, m->g.mem_budget = (size_t)1 << 34;
        if (nn_graph_finish(&m->g, pass ? &m->a : &plan, B, err, sizeof err)) break;
        if (!pass && rt_arena_init(&m->a, "model", plan.high + (size_t)m->g.nparams * 4 + 4096)) break;
        if (!pass) continue;
        m->mom = rt_arena_alloc(&m->a, m->g.nparams * sizeof(float), RT_MEM_OPTIM, "momentum");
        nn_graph_init(&m->g, 42);
        memset(m->mom, 0, m->g.nparams * sizeof(float));
        memset(m->g.grads, 0, m->g.nparams * sizeof(float));
        return 0;
    }
    printf("FAIL %s: build: %s\n", path, err);
    return -1;
}

int gm_train_amp16(const char *path, double l[3], int *nhwc, int *wgmma)
{
    enum { B = 2 };
    nn_shape in = {3, 8, 8, 0};
    gm_model m;
    if (build_amp16(&m, path, in, B)) return -1;
    char err[512];
    nn_cuda *cu = nn_cuda_open(0, err, sizeof err);
    if (!cu || nn_cuda_setup(cu, &m.g, 0, 0, err, sizeof err) || nn_cuda_upload(cu, m.mom)) {
        printf("FAIL %s: device: %s\n", path, err);
        if (cu) nn_cuda_close(cu);
        gm_drop(&m);
        return -1;
    }
    int all;
    *nhwc = nn_cuda_nhwc_outputs(cu, &all);
    *wgmma = nn_cuda_wgmma(cu);
    float x[B * 3 * 8 * 8];
    int32_t y[B];
    k_sgd_cfg sgd = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f};
    for (int step = 0; step < 3; step++) {
        gm_fill(x, y, B, in, 10, 0, 7 + step);
        l[step] = nn_cuda_step(cu, x, y, B, &sgd, 1000 + step, step, 0);
    }
    nn_cuda_close(cu);
    gm_drop(&m);
    return 0;
}


double gm_relerr(const float *a, const float *b, size_t n)
{
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / (m > 0 ? m : 1);
}

/* Hook order: the first parameter of each call, CPU and device. */
typedef struct hooks { int v[NN_MAX_PARAMS * 2], n; } hooks;
static void rec(void *ctx, int first)
{
    hooks *h = ctx;
    if (h->n < NN_MAX_PARAMS * 2) h->v[h->n++] = first;
}

/* Every parameter's tensor in `what` (grads or params) within tol of the CPU's. */
int gm_cmp_params(const char *name, const char *what, const nn_graph *c, const float *cv, const float *dv,
                      double tol)
{
    int bad = 0;
    for (int i = 0; i < c->np; i++) {
        double e = gm_relerr(dv + c->p[i].offset, cv + c->p[i].offset, c->p[i].numel);
        if (!(e < tol * gm_slack)) {
            if (bad++ < 3) printf("FAIL %s: %s of %s: rel err %.3g\n", name, what, c->p[i].name, e);
        }
    }
    return bad != 0;
}

int gm_cmp_bufs(const char *name, const nn_graph *c, const unsigned char *dv)
{
    int bad = 0;
    for (int i = 0; i < c->nb; i++) {
        const nn_buf *b = &c->b[i];
        const void *x = c->bufs + b->offset, *y = dv + b->offset;
        int ok = b->dtype == RT_F32 ? gm_relerr(y, x, b->numel) < 1e-5 * gm_slack : !memcmp(x, y, b->numel * rt_dtype_size(b->dtype));
        if (!ok && bad++ < 3) printf("FAIL %s: buffer %s differs from the CPU's\n", name, b->name);
    }
    return bad != 0;
}

double gm_slack = 1;

void *gm_down(const void *dev, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    if (bytes && (port_memcpy_d2h(h, dev, bytes, NULL, "test download") || port_stream_sync(NULL, "test download")))
        memset(h, 0xff, bytes); /* NaNs: the comparison fails and names the tensor */
    return h;
}

void gm_fill(float *x, int32_t *y, int B, nn_shape in, int classes, int vocab, unsigned seed)
{
    for (size_t i = 0; i < (size_t)B * nn_shape_numel(in); i++) {
        float u = k_rand_uniform(seed, i);
        if (in.tokens) ((int32_t *)x)[i] = (int32_t)(u * vocab);
        else x[i] = 2 * u - 1;
    }
    for (int i = 0; i < B; i++) y[i] = (int32_t)(k_rand_uniform(seed + 1000, i) * classes);
}

static int model_case(const char *name, nn_shape in, int classes, int vocab, int B)
{
    gm_model cpu, host;
    if (gm_build(&cpu, name, in, classes, vocab, B) || gm_build(&host, name, in, classes, vocab, B)) return 1;
    char err[512];
    nn_cuda *cu = nn_cuda_open(0, err, sizeof err);
    if (!cu || nn_cuda_setup(cu, &host.g, 0, 0, err, sizeof err) || nn_cuda_upload(cu, host.mom)) {
        printf("FAIL %s: device setup: %s %s\n", name, err, port_cuda_errmsg());
        return 1;
    }
    nn_graph *dg = nn_cuda_graph(cu);
    int bad = 0;
    if (dg->params == host.g.params || dg->grads == cpu.g.grads || !dg->on_device) {
        printf("FAIL %s: the device graph shares the host graph's memory\n", name);
        bad = 1;
    }
    static hooks hc, hd;
    memset(&hc, 0, sizeof hc);
    memset(&hd, 0, sizeof hd);
    cpu.g.on_grad_ready = rec, cpu.g.on_grad_ctx = &hc;
    dg->on_grad_ready = rec, dg->on_grad_ctx = &hd;
    size_t per = nn_shape_numel(in);
    float *x = malloc((size_t)B * per * sizeof(float));
    int32_t *y = malloc((size_t)B * sizeof(int32_t));
    k_sgd_cfg sgd = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f};
    for (int step = 0; step < 2 && !bad; step++) {
        gm_fill(x, y, B, in, classes, vocab, 7 + step);
        int n = B - step; /* a short last batch too */
        uint64_t seed = 1000 + step;
        nn_forward(&cpu.g, x, n, 1, seed, step);
        double lc = nn_loss(&cpu.g, y, n, NULL) / n;
        nn_backward(&cpu.g, y, n, n);
        k_sgd_step(cpu.g.nparams, &sgd, step == 0, cpu.g.params, cpu.g.grads, cpu.mom);
        double ld = nn_cuda_step(cu, x, y, n, &sgd, seed, step, 0);
        if (!(fabs(ld - lc) <= 1e-5 * gm_slack * (1 + fabs(lc)))) {
            printf("FAIL %s step %d: loss %.8f on the device, %.8f on the CPU\n", name, step, ld, lc);
            bad = 1;
        }
        float *dgr = gm_down(dg->grads, dg->nparams * 4), *dpa = gm_down(dg->params, dg->nparams * 4);
        unsigned char *dbu = gm_down(dg->bufs, dg->buf_bytes);
        bad |= gm_cmp_params(name, "gradient", &cpu.g, cpu.g.grads, dgr, 1e-4);
        /* Parameters that start at zero (BN biases) carry the gradients' error. */
        bad |= gm_cmp_params(name, "parameter", &cpu.g, cpu.g.params, dpa, 1e-4);
        bad |= gm_cmp_bufs(name, &cpu.g, dbu);
        free(dgr), free(dpa), free(dbu);
        if (hc.n != hd.n || memcmp(hc.v, hd.v, sizeof(int) * (size_t)hc.n) || !hc.n) {
            printf("FAIL %s step %d: %d gradient-ready hooks on the CPU, %d on the device, or another order\n",
                   name, step, hc.n, hd.n);
            bad = 1;
        }
        hc.n = hd.n = 0;
    }
    /* Evaluation (running statistics, no dropout), and the download path. */
    long cc = 0, cd = 0;
    nn_forward(&cpu.g, x, B, 0, 0, 0);
    double ec = nn_loss(&cpu.g, y, B, &cc), ed = nn_cuda_eval(cu, x, y, B, &cd);
    if (!bad && (!(fabs(ed - ec) <= 1e-5 * gm_slack * (1 + fabs(ec))) || labs(cc - cd) > (gm_slack > 1))) {
        printf("FAIL %s eval: loss sum %.8f / %ld correct on the device, %.8f / %ld on the CPU\n", name, ed, cd, ec,
               cc);
        bad = 1;
    }
    float *mom = malloc(host.g.nparams * sizeof(float));
    if (!bad && (nn_cuda_download(cu, mom) || gm_cmp_params(name, "downloaded parameter", &cpu.g, cpu.g.params,
                                                        host.g.params, 1e-4) ||
                 gm_cmp_params(name, "downloaded momentum", &cpu.g, cpu.mom, mom, 1e-4) || gm_cmp_bufs(name, &cpu.g, host.g.bufs)))
        bad = 1;
    free(mom);
    free(x);
    free(y);
    nn_cuda_close(cu);
    gm_drop(&cpu);
    gm_drop(&host);
    return bad;
}


int gm_graph_train(int *cases)
{
    int bad = 0;
    bad += model_case("lenet", (nn_shape){1, 28, 28, 0}, 10, 0, 4), (*cases)++;
    bad += model_case("resnet20", (nn_shape){3, 8, 8, 0}, 10, 0, 3), (*cases)++;
    bad += model_case("textcnn", (nn_shape){1, 1, 12, 1}, 4, 50, 3), (*cases)++;
    /* GPT-2's ops (a tied classifier, attention over 7 tokens, windows of 8 ids) */
    static const char gpt[] = "[gpt] layers=2 dim=16 heads=2 ctx=8\n";
    static char path[600];
    const char *dir = t_tmpdir("gpugpt");
    t_write_file(dir, "gpt.cfg", gpt, sizeof gpt - 1, 0);
    snprintf(path, sizeof path, "%s/gpt.cfg", dir);
    bad += model_case(path, (nn_shape){1, 1, 8, 1}, 1, 13, 3), (*cases)++;
    return bad;
}
