/* ddprt-bench-kernels --device cuda [--batch N] [--iters N]: times the CUDA kernels on
 * LeNet's shapes, ResNet-like convolutions and the layer-graph ops (batchnorm, stem
 * pool, TextCNN's embedding and max over time), with GFLOP/s (GB/s for memory-bound
 * kernels) and, when cuBLAS / cuDNN are installed, their time for the same problem
 * and our time / theirs. They are loaded with dlopen here only: the runtime never
 * links them. cuDNN is asked for plain FP32 FMA math (no TF32) so the comparison is
 * like for like. Times are medians over --iters launches, each timed by events. */
#include "apps/bench-kernels/bench_kernels.h"
#include "apps/bench-kernels/k_cuda_bench.h"
#include "kernels/cuda/k_cuda.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference libraries, by hand-declared entry points (no headers needed) */
struct kb_ref kb_ref;

static void *open_any(const char *const *names)
{
    for (; *names; names++) {
        void *h = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    return NULL;
}

static void load_refs(port_stream s)
{
    static const char *const blas[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12", NULL};
    static const char *const dnn[] = {"libcudnn.so", "libcudnn.so.9", "libcudnn.so.8", NULL};
    if ((kb_ref.blas = open_any(blas))) {
        fn_cublas_create create = (fn_cublas_create)dlsym(kb_ref.blas, "cublasCreate_v2");
        fn_cublas_set_stream ss = (fn_cublas_set_stream)dlsym(kb_ref.blas, "cublasSetStream_v2");
        kb_ref.sgemm = (fn_cublas_sgemm)dlsym(kb_ref.blas, "cublasSgemm_v2");
        kb_ref.gemm_ex = (fn_cublas_gemm_ex)dlsym(kb_ref.blas, "cublasGemmEx");
        kb_ref.set_math_blas = (fn_cublas_set_math)dlsym(kb_ref.blas, "cublasSetMathMode");
        if (!create || !ss || !kb_ref.sgemm || create(&kb_ref.h_blas) || ss(kb_ref.h_blas, s)) kb_ref.sgemm = NULL;
    }
    if ((kb_ref.dnn = open_any(dnn))) {
        fn_cudnn_create create = (fn_cudnn_create)dlsym(kb_ref.dnn, "cudnnCreate");
        fn_cudnn_set_stream ss = (fn_cudnn_set_stream)dlsym(kb_ref.dnn, "cudnnSetStream");
        kb_ref.tensor = (fn_cudnn_create_desc)dlsym(kb_ref.dnn, "cudnnCreateTensorDescriptor");
        kb_ref.filter = (fn_cudnn_create_desc)dlsym(kb_ref.dnn, "cudnnCreateFilterDescriptor");
        kb_ref.conv = (fn_cudnn_create_desc)dlsym(kb_ref.dnn, "cudnnCreateConvolutionDescriptor");
        kb_ref.set_tensor = (fn_cudnn_set_tensor4d)dlsym(kb_ref.dnn, "cudnnSetTensor4dDescriptor");
        kb_ref.set_filter = (fn_cudnn_set_filter4d)dlsym(kb_ref.dnn, "cudnnSetFilter4dDescriptor");
        kb_ref.set_conv = (fn_cudnn_set_conv2d)dlsym(kb_ref.dnn, "cudnnSetConvolution2dDescriptor");
        kb_ref.set_math = (fn_cudnn_set_math)dlsym(kb_ref.dnn, "cudnnSetConvolutionMathType");
        kb_ref.fwd_ws = (fn_cudnn_ws)dlsym(kb_ref.dnn, "cudnnGetConvolutionForwardWorkspaceSize");
        kb_ref.bwdf_ws = (fn_cudnn_ws)dlsym(kb_ref.dnn, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
        kb_ref.fwd = (fn_cudnn_fwd)dlsym(kb_ref.dnn, "cudnnConvolutionForward");
        kb_ref.bwdf = (fn_cudnn_bwd_filter)dlsym(kb_ref.dnn, "cudnnConvolutionBackwardFilter");
        kb_ref.fwd_algo = (fn_cudnn_algo)dlsym(kb_ref.dnn, "cudnnGetConvolutionForwardAlgorithm_v7");
        kb_ref.bwdd_algo = (fn_cudnn_algo)dlsym(kb_ref.dnn, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        kb_ref.bwdf_algo = (fn_cudnn_algo)dlsym(kb_ref.dnn, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        kb_ref.bwdd_ws = (fn_cudnn_ws)dlsym(kb_ref.dnn, "cudnnGetConvolutionBackwardDataWorkspaceSize");
        kb_ref.bwdd = (fn_cudnn_fwd)dlsym(kb_ref.dnn, "cudnnConvolutionBackwardData");
        if (!create || !ss || !kb_ref.tensor || !kb_ref.filter || !kb_ref.conv || !kb_ref.set_tensor || !kb_ref.set_filter ||
            !kb_ref.set_conv || !kb_ref.set_math || !kb_ref.fwd_ws || !kb_ref.bwdf_ws || !kb_ref.fwd || !kb_ref.bwdf ||
            create(&kb_ref.h_dnn) || ss(kb_ref.h_dnn, s))
            kb_ref.fwd = NULL;
    }
}

/* ---- timing */
port_stream kb_S;
static int iters = 50;


static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}


/* Median microseconds of one call, or -1 when it failed. */
double kb_time_us(kb_fn fn, void *ctx)
{
    static port_event a, b;
    static float ms[1000];
    if (!a && (port_event_create(&a, 1, "timing") || port_event_create(&b, 1, "timing"))) return -1;
    if (fn(ctx)) return -1; /* warm-up */
    int n = iters > 1000 ? 1000 : iters;
    for (int i = 0; i < n; i++) {
        if (port_event_record(a, kb_S) || fn(ctx) || port_event_record(b, kb_S) || port_event_sync(b, "timing") ||
            port_event_elapsed_ms(a, b, &ms[i]))
            return -1;
    }
    qsort(ms, (size_t)n, sizeof ms[0], cmp_f);
    return ms[n / 2] * 1000.0;
}

void kb_row(const char *name, const char *shape, double us, double work, int is_bytes, double ref_us)
{
    char rate[32] = "-", r[32] = "-", ratio[32] = "-";
    if (us > 0) snprintf(rate, sizeof rate, "%.1f %s", work / us / 1e3, is_bytes ? "GB/s" : "GFLOP/s");
    if (ref_us > 0) {
        snprintf(r, sizeof r, "%.1f", ref_us);
        snprintf(ratio, sizeof ratio, "%.2fx", us / ref_us);
    }
    printf("%-18s %-34s %10.1f %16s %12s %8s\n", name, shape, us, rate, r, ratio);
}

float *kb_dbuf(size_t n)
{
    float *p;
    if (port_dev_malloc((void **)&p, n * sizeof(float) + 256, "bench buffer")) {
        fprintf(stderr, "ddprt-bench-kernels: %s\n", port_cuda_errmsg());
        exit(1);
    }
    k_cuda_init_uniform(n, 1.0f, 1, 0, p, kb_S);
    return p;
}

/* ---- cases */
typedef struct conv_ctx {
    k_conv_shape sh;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db;
    void *ws, *ref_ws;
    size_t ref_ws_bytes;
    void *xd, *wd, *yd, *cd; /* cuDNN descriptors */
} conv_ctx;

static int conv_fwd(void *c_) { conv_ctx *c = c_; return k_cuda_conv2d_fwd(&c->sh, c->x, c->w, c->b, c->y, c->ws, kb_S); }
static int conv_bwd(void *c_)
{
    conv_ctx *c = c_;
    return k_cuda_conv2d_bwd(&c->sh, c->x, c->w, c->dy, c->dx, c->dw, c->db, c->ws, kb_S);
}
static int conv_bwd_w(void *c_) /* the first layer's: its input (the data) takes no gradient */
{
    conv_ctx *c = c_;
    return k_cuda_conv2d_bwd(&c->sh, c->x, c->w, c->dy, NULL, c->dw, c->db, c->ws, kb_S);
}
static int dnn_fwd(void *c_)
{
    conv_ctx *c = c_;
    float one = 1, zero = 0;
    return kb_ref.fwd(kb_ref.h_dnn, &one, c->xd, c->x, c->wd, c->w, c->cd, 1, c->ref_ws, c->ref_ws_bytes, &zero, c->yd, c->y)
               ? -1 : 0;
}
static int dnn_bwdf(void *c_)
{
    conv_ctx *c = c_;
    float one = 1, zero = 0;
    return kb_ref.bwdf(kb_ref.h_dnn, &one, c->xd, c->x, c->yd, c->dy, c->cd, 1, c->ref_ws, c->ref_ws_bytes, &zero, c->wd,
                    c->dw) ? -1 : 0;
}

static int dnn_setup(conv_ctx *c)
{
    k_conv_shape *s = &c->sh;
    size_t a = 0, b = 0;
    if (!kb_ref.fwd || kb_ref.tensor(&c->xd) || kb_ref.tensor(&c->yd) || kb_ref.filter(&c->wd) || kb_ref.conv(&c->cd) ||
        kb_ref.set_tensor(c->xd, 0, 0, s->n, s->c, s->h, s->w) || kb_ref.set_tensor(c->yd, 0, 0, s->n, s->k, s->p, s->q) ||
        kb_ref.set_filter(c->wd, 0, 0, s->k, s->c, s->r, s->s) ||
        kb_ref.set_conv(c->cd, s->pad, s->pad, s->stride, s->stride, 1, 1, 1, 0) || kb_ref.set_math(c->cd, 3) ||
        kb_ref.fwd_ws(kb_ref.h_dnn, c->xd, c->wd, c->cd, c->yd, 1, &a) || kb_ref.bwdf_ws(kb_ref.h_dnn, c->xd, c->yd, c->cd, c->wd, 1, &b))
        return -1;
    c->ref_ws_bytes = a > b ? a : b;
    return port_dev_malloc(&c->ref_ws, c->ref_ws_bytes + 256, "cuDNN workspace");
}

/* first: the network's first layer (backward without the input gradient, as trained) */
static void bench_conv_at(const char *name, int n, int ci, int h, int co, int r, int st, int pad, int first)
{
    conv_ctx c = {.sh = {.n = n, .c = ci, .h = h, .w = h, .k = co, .r = r, .s = r, .stride = st, .pad = pad}};
    k_conv_shape_init(&c.sh);
    size_t nx = (size_t)n * ci * h * h, ny = (size_t)n * co * c.sh.p * c.sh.q, nw = (size_t)co * ci * r * r;
    c.x = kb_dbuf(nx); c.w = kb_dbuf(nw); c.b = kb_dbuf(co); c.y = kb_dbuf(ny); c.dy = kb_dbuf(ny); c.dx = kb_dbuf(nx);
    c.dw = kb_dbuf(nw); c.db = kb_dbuf(co);
    if (port_dev_malloc(&c.ws, k_cuda_conv2d_workspace(&c.sh) + 256, "workspace")) return;
    double flop = 2.0 * ny * ci * r * r;
    int have_ref = dnn_setup(&c) == 0;
    char shape[64];
    snprintf(shape, sizeof shape, "n%d c%d %dx%d k%d %dx%d/%d p%d", n, ci, h, h, co, r, r, st, pad);
    char nm[40];
    snprintf(nm, sizeof nm, "%s fwd", name);
    kb_row(nm, shape, kb_time_us(conv_fwd, &c), flop, 0, have_ref ? kb_time_us(dnn_fwd, &c) : -1);
    snprintf(nm, sizeof nm, "%s bwd", name);
    /* Our bwd is input grad + weight grad + bias grad (2x the forward's FLOPs); cuDNN's
     * column is the weight gradient alone, times 2 (the input grad costs the same). A
     * first layer's is the weight gradient alone on both sides. */
    double rb = have_ref ? kb_time_us(dnn_bwdf, &c) : -1;
    if (first) snprintf(nm, sizeof nm, "%s bwd dW", name);
    kb_row(nm, shape, kb_time_us(first ? conv_bwd_w : conv_bwd, &c), (first ? 1 : 2) * flop, 0,
        rb > 0 ? (first ? 1 : 2) * rb : -1);
    port_dev_free(c.x); port_dev_free(c.w); port_dev_free(c.b); port_dev_free(c.y); port_dev_free(c.dy);
    port_dev_free(c.dx); port_dev_free(c.dw); port_dev_free(c.db); port_dev_free(c.ws); port_dev_free(c.ref_ws);
}

static void bench_conv(const char *name, int n, int ci, int h, int co, int r, int st, int pad)
{
    bench_conv_at(name, n, ci, h, co, r, st, pad, 0);
}

typedef struct lin_ctx { int n, in, out; float *x, *w, *b, *y, *dy, *dx, *dw, *db; void *ws; } lin_ctx;
static int lin_fwd(void *c_) { lin_ctx *c = c_; return k_cuda_linear_fwd(c->n, c->in, c->out, c->x, c->w, c->b, c->y, c->ws, kb_S); }
static int lin_bwd(void *c_)
{
    lin_ctx *c = c_;
    return k_cuda_linear_bwd(c->n, c->in, c->out, c->x, c->w, c->dy, c->dx, c->dw, c->db, c->ws, kb_S);
}
static int blas_fwd(void *c_)
{
    lin_ctx *c = c_;
    float one = 1, zero = 0;
    /* Row-major y[n,out] = x w^T is column-major y^T = w(T) x^T. */
    return kb_ref.sgemm(kb_ref.h_blas, 1, 0, c->out, c->n, c->in, &one, c->w, c->in, c->x, c->in, &zero, c->y, c->out) ? -1 : 0;
}

static void bench_linear(const char *name, int n, int in, int out)
{
    lin_ctx c = {n, in, out, kb_dbuf((size_t)n * in), kb_dbuf((size_t)out * in), kb_dbuf(out), kb_dbuf((size_t)n * out),
                 kb_dbuf((size_t)n * out), kb_dbuf((size_t)n * in), kb_dbuf((size_t)out * in), kb_dbuf(out), NULL};
    if (port_dev_malloc(&c.ws, k_cuda_linear_workspace(n, in, out) + 256, "workspace")) return;
    char shape[64], nm[40];
    snprintf(shape, sizeof shape, "n%d in%d out%d", n, in, out);
    double flop = 2.0 * n * in * out;
    snprintf(nm, sizeof nm, "%s fwd", name);
    kb_row(nm, shape, kb_time_us(lin_fwd, &c), flop, 0, kb_ref.sgemm ? kb_time_us(blas_fwd, &c) : -1);
    snprintf(nm, sizeof nm, "%s bwd", name);
    kb_row(nm, shape, kb_time_us(lin_bwd, &c), 2 * flop, 0, -1);
}

typedef struct ew_ctx { size_t n; float *a, *b, *c; uint8_t *m; int32_t *idx; int pn, pc, ph; k_sgd_cfg sgd; } ew_ctx;
static int ew_relu(void *c_) { ew_ctx *c = c_; return k_cuda_relu_fwd(c->n, c->a, c->b, kb_S); }
static int ew_drop(void *c_) { ew_ctx *c = c_; return k_cuda_dropout_fwd(c->n, 0.5f, 1, 0, c->a, c->b, c->m, kb_S); }
static int ew_sgd(void *c_) { ew_ctx *c = c_; return k_cuda_sgd_step(c->n, &c->sgd, 0, c->a, c->b, c->c, kb_S); }
static int ew_pool(void *c_) { ew_ctx *c = c_; return k_cuda_maxpool2d_fwd(c->pn, c->pc, c->ph, c->ph, 2, 2, c->a, c->b, c->idx, kb_S); }
static int ew_pool_b(void *c_) { ew_ctx *c = c_; return k_cuda_maxpool2d_bwd(c->pn, c->pc, c->ph, c->ph, 2, 2, c->b, c->idx, c->a, kb_S); }

static void bench_elementwise(int B)
{
    ew_ctx c = {.n = (size_t)B * 5760, .pn = B, .pc = 10, .ph = 24, .sgd = {0.01f, 0.5f, 0, 0, 0}};
    c.a = kb_dbuf(c.n); c.b = kb_dbuf(c.n); c.c = kb_dbuf(c.n);
    if (port_dev_malloc((void **)&c.m, c.n, "mask") || port_dev_malloc((void **)&c.idx, c.n * 4, "idx")) return;
    char shape[64];
    snprintf(shape, sizeof shape, "%zu elements", c.n);
    kb_row("relu fwd", shape, kb_time_us(ew_relu, &c), 8.0 * c.n, 1, -1);
    kb_row("dropout fwd", shape, kb_time_us(ew_drop, &c), 9.0 * c.n, 1, -1);
    kb_row("sgd step", shape, kb_time_us(ew_sgd, &c), 20.0 * c.n, 1, -1);
    snprintf(shape, sizeof shape, "n%d c10 24x24 2x2/2", B);
    kb_row("maxpool fwd", shape, kb_time_us(ew_pool, &c), (4.0 + 2.0) * c.n / 4 * 4 + 0.25 * c.n * 4, 1, -1);
    kb_row("maxpool bwd", shape, kb_time_us(ew_pool_b, &c), 4.0 * c.n + 0.5 * c.n * 4, 1, -1);
}

/* Layer-graph ops (rates in GB/s: bytes each kernel must move at least). */
typedef struct go_ctx {
    int n, c, hw, ks, len, dim, vocab;
    float *x, *y, *dy, *dx, *mean, *var, *is, *g, *b, *dg, *db;
    int32_t *idx, *ids;
} go_ctx;
static int go_stats(void *c_) { go_ctx *c = c_; return k_cuda_bn_stats(c->n, c->c, c->hw, c->x, c->mean, c->var, kb_S); }
static int go_bn_fwd(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_bn_fwd(c->n, c->c, c->hw, c->x, c->mean, c->is, c->g, c->b, c->y, kb_S);
}
static int go_bn_sums(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_bn_bwd_sums(c->n, c->c, c->hw, c->x, c->mean, c->is, c->dy, c->dg, c->db, kb_S);
}
static int go_bn_dx(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_bn_bwd_dx(c->n, c->c, c->hw, c->x, c->mean, c->is, c->g, c->dg, c->db, (double)c->n * c->hw, c->dy,
                            c->dx, kb_S);
}
static int go_pool(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_maxpool2d_pad_fwd(c->n, c->c, c->ks, c->ks, 3, 2, 1, c->x, c->y, c->idx, kb_S);
}
static int go_pool_b(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_maxpool2d_pad_bwd(c->n, c->c, c->ks, c->ks, 3, 2, 1, c->dy, c->idx, c->dx, kb_S);
}
static int go_emb(void *c_) { go_ctx *c = c_; return k_cuda_embedding_fwd(c->n, c->len, c->dim, c->ids, c->x, c->y, kb_S); }
static int go_emb_b(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_embedding_bwd(c->n, c->len, c->dim, c->vocab, c->ids, c->dy, c->dx, kb_S);
}
static int go_mt(void *c_) { go_ctx *c = c_; return k_cuda_max_time_fwd(c->n, c->c, c->len, c->x, c->y, c->idx, kb_S); }

static void bench_bn(const char *name, int n, int ch, int hw)
{
    size_t e = (size_t)n * ch * hw;
    go_ctx c = {.n = n, .c = ch, .hw = hw};
    c.x = kb_dbuf(e); c.y = kb_dbuf(e); c.dy = kb_dbuf(e); c.dx = kb_dbuf(e);
    c.mean = kb_dbuf(ch); c.var = kb_dbuf(ch); c.is = kb_dbuf(ch); c.g = kb_dbuf(ch); c.b = kb_dbuf(ch); c.dg = kb_dbuf(ch); c.db = kb_dbuf(ch);
    char shape[64], nm[64];
    snprintf(shape, sizeof shape, "n%d c%d hw%d", n, ch, hw);
    snprintf(nm, sizeof nm, "%s stats", name);
    kb_row(nm, shape, kb_time_us(go_stats, &c), 8.0 * e, 1, -1); /* two passes over x */
    snprintf(nm, sizeof nm, "%s fwd", name);
    kb_row(nm, shape, kb_time_us(go_bn_fwd, &c), 8.0 * e, 1, -1);
    snprintf(nm, sizeof nm, "%s bwd sums", name);
    kb_row(nm, shape, kb_time_us(go_bn_sums, &c), 8.0 * e, 1, -1);
    snprintf(nm, sizeof nm, "%s bwd dx", name);
    kb_row(nm, shape, kb_time_us(go_bn_dx, &c), 12.0 * e, 1, -1);
}

static void bench_graph_ops(void)
{
    bench_bn("bn 112x112", 32, 64, 112 * 112);
    bench_bn("bn 7x7", 32, 512, 49);
    bench_bn("bn r20 28x28", 128, 16, 28 * 28);
    /* ResNet stem pool: 3x3/2 pad 1, 112 -> 56 */
    go_ctx c = {.n = 32, .c = 64, .ks = 112};
    size_t in = (size_t)32 * 64 * 112 * 112, out = in / 4;
    c.x = kb_dbuf(in); c.dx = kb_dbuf(in); c.y = kb_dbuf(out); c.dy = kb_dbuf(out);
    if (port_dev_malloc((void **)&c.idx, out * 4, "idx")) return;
    kb_row("maxpool3/2p1 fwd", "n32 c64 112x112", kb_time_us(go_pool, &c), 4.0 * in + 8.0 * out, 1, -1);
    kb_row("maxpool3/2p1 bwd", "n32 c64 112x112", kb_time_us(go_pool_b, &c), 4.0 * in + 8.0 * out, 1, -1);
    /* TextCNN: embedding 20000 x 128, batch 64, seq 64; max over time of 100 filters */
    go_ctx t = {.n = 64, .len = 64, .dim = 128, .vocab = 20000, .c = 100};
    size_t ny = (size_t)64 * 64 * 128, nt = (size_t)20000 * 128;
    t.x = kb_dbuf(nt); t.y = kb_dbuf(ny); t.dy = kb_dbuf(ny); t.dx = kb_dbuf(nt);
    if (port_dev_malloc((void **)&t.ids, 64 * 64 * 4, "ids") || port_dev_malloc((void **)&t.idx, ny * 4, "idx")) return;
    int32_t *h = malloc(64 * 64 * 4);
    for (int i = 0; i < 64 * 64; i++) h[i] = (int32_t)(k_rand_uniform(5, i) * 20000);
    int up = port_memcpy_h2d(t.ids, h, 64 * 64 * 4, kb_S, "ids") || port_stream_sync(kb_S, "ids");
    free(h);
    if (up) return;
    kb_row("embedding fwd", "n64 len64 dim128", kb_time_us(go_emb, &t), 8.0 * ny, 1, -1);
    kb_row("embedding bwd", "n64 len64 dim128 v20000", kb_time_us(go_emb_b, &t), 4.0 * nt + 8.0 * ny, 1, -1);
    t.len = 62;
    kb_row("max over time fwd", "n64 c100 len62", kb_time_us(go_mt, &t), 4.0 * 64 * 100 * 62, 1, -1);
}

/* The transformer's kernels at GPT small's (6x384, T 256, batch 8) and GPT-2's
 * attention (T 1024, 12 heads, batch 4). Attention FLOPs: the causal half of QK^T and
 * PV (forward), twice that again for backward's four products. */
typedef struct tf_ctx { int b, t, h, hd, n, c; float *qkv, *y, *lse, *dy, *dq, *x, *w, *mean, *rstd, *dw, *db; void *ws; } tf_ctx;
static int tf_attn_f(void *c_) { tf_ctx *c = c_; return k_cuda_attention_fwd(c->b, c->t, c->h, c->hd, c->qkv, c->y, c->lse, kb_S); }
static int tf_attn_b(void *c_)
{
    tf_ctx *c = c_;
    return k_cuda_attention_bwd(c->b, c->t, c->h, c->hd, c->qkv, c->y, c->lse, c->dy, c->dq, c->ws, kb_S);
}
static int tf_ln_b(void *c_)
{
    tf_ctx *c = c_;
    return k_cuda_layernorm_bwd(c->n, c->c, c->x, c->w, c->mean, c->rstd, c->dy, c->dq, c->dw, c->db, kb_S);
}

static void bench_attention(int b, int t, int h, int hd)
{
    size_t nq = (size_t)b * t * 3 * h * hd, ny = (size_t)b * t * h * hd, nl = (size_t)b * h * t;
    tf_ctx c = {.b = b, .t = t, .h = h, .hd = hd, .qkv = kb_dbuf(nq), .y = kb_dbuf(ny), .lse = kb_dbuf(nl), .dy = kb_dbuf(ny),
                .dq = kb_dbuf(nq)};
    if (port_dev_malloc(&c.ws, k_cuda_attention_workspace(b, t, h, hd) + 256, "workspace")) return;
    char shape[64];
    snprintf(shape, sizeof shape, "b%d t%d h%d hd%d", b, t, h, hd);
    double flop = 2.0 * 2 * b * h * ((double)t * (t + 1) / 2) * hd;
    kb_row("attention fwd", shape, kb_time_us(tf_attn_f, &c), flop, 0, -1);
    kb_row("attention bwd", shape, kb_time_us(tf_attn_b, &c), 2 * flop, 0, -1);
    port_dev_free(c.qkv); port_dev_free(c.y); port_dev_free(c.lse); port_dev_free(c.dy); port_dev_free(c.dq);
    port_dev_free(c.ws);
}

static void bench_transformer(void)
{
    bench_attention(8, 256, 6, 64);
    bench_attention(4, 1024, 12, 64);
    tf_ctx c = {.n = 2048, .c = 384};
    size_t e = (size_t)c.n * c.c;
    c.x = kb_dbuf(e); c.dy = kb_dbuf(e); c.dq = kb_dbuf(e); c.w = kb_dbuf(c.c); c.dw = kb_dbuf(c.c); c.db = kb_dbuf(c.c);
    c.mean = kb_dbuf(c.n); c.rstd = kb_dbuf(c.n);
    kb_row("layernorm bwd", "n2048 c384", kb_time_us(tf_ln_b, &c), 4.0 * 3 * e, 1, -1);
}

/* The fp32 kernels (CUDA cores) on LeNet's, ResNet's and GPT's shapes. */
static void bench_fp32(int B)
{
    bench_conv("lenet conv1", B, 1, 28, 10, 5, 1, 0);
    bench_conv("lenet conv2", B, 10, 12, 20, 5, 1, 0);
    bench_linear("lenet fc1", B, 320, 50);
    bench_linear("lenet fc2", B, 50, 10);
    bench_elementwise(B);
    bench_conv("resnet 56x56", 32, 64, 56, 64, 3, 1, 1);
    bench_conv("resnet 56->28", 32, 64, 56, 128, 3, 2, 1);
    bench_conv("resnet 28x28", 32, 128, 28, 128, 3, 1, 1);
    bench_conv("resnet 14x14", 32, 256, 14, 256, 3, 1, 1);
    bench_conv("resnet 7x7", 32, 256, 7, 256, 3, 1, 1);
    bench_linear("resnet fc", 256, 2048, 1000);
    bench_conv_at("resnet stem 7x7/2", 32, 3, 224, 64, 7, 2, 3, 1);
    bench_conv("resnet 1x1/2", 32, 64, 56, 128, 1, 2, 0);
    bench_graph_ops();
    bench_transformer();
}

int k_cuda_bench_run(int batch, int n_iters, int smoke)
{
    int B = batch > 0 ? batch : 64;
    if (n_iters > 0) iters = n_iters;
    if (smoke) iters = 1;
    char err[512];
    if (port_cuda_init(0, err, sizeof err) || port_stream_create(&kb_S, "bench stream")) {
        fprintf(stderr, "ddprt-bench-kernels: %s\n", err[0] ? err : port_cuda_errmsg());
        return 1;
    }
    load_refs(kb_S);
    char wg[200];
    int wgmma = k_cuda_wgmma_setup(wg, sizeof wg);
    if (wgmma == -2) { /* a probe hung: nothing more can run */
        fprintf(stderr, "ddprt-bench-kernels: %s\n", wg);
        return 1;
    }
    wgmma = wgmma == 1;
    printf("# %s; median of %d; reference: cuBLAS %s, cuDNN %s (FP32 FMA math); tensor cores on %s (%s)\n",
           port_cuda_device_desc(), iters, kb_ref.sgemm ? "yes" : "not found", kb_ref.fwd ? "yes" : "not found",
           wgmma ? "wgmma" : "mma.sync", wg);
    printf("%-18s %-34s %10s %16s %12s %8s\n", "kernel", "shape", "time(us)", "rate", "ref(us)", "ours/ref");
    if (!smoke) bench_fp32(B);
    kb_tensor_cores(wgmma, smoke);
    if (port_cuda_errmsg()[0]) {
        fprintf(stderr, "ddprt-bench-kernels: %s\n", port_cuda_errmsg());
        return 1;
    }
    return 0;
}
