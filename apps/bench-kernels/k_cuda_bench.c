/* ddprt-bench-kernels --device cuda [--batch N] [--iters N]: times the CUDA kernels on
 * LeNet's shapes, ResNet-like convolutions and the layer-graph ops (batchnorm, stem
 * pool, TextCNN's embedding and max over time), with GFLOP/s (GB/s for memory-bound
 * kernels) and, when cuBLAS / cuDNN are installed, their time for the same problem
 * and our time / theirs. They are loaded with dlopen here only: the runtime never
 * links them. cuDNN is asked for plain FP32 FMA math (no TF32) so the comparison is
 * like for like. Times are medians over --iters launches, each timed by events. */
#include "apps/bench-kernels/bench_kernels.h"
#include "kernels/cuda/k_cuda.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference libraries, by hand-declared entry points (no headers needed) */
typedef int (*fn_cublas_create)(void **);
typedef int (*fn_cublas_set_stream)(void *, port_stream);
typedef int (*fn_cublas_sgemm)(void *, int, int, int, int, int, const float *, const float *, int, const float *,
                               int, const float *, float *, int);
typedef int (*fn_cublas_gemm_ex)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *,
                                 int, int, const void *, void *, int, int, int, int);
typedef int (*fn_cublas_set_math)(void *, int);
typedef int (*fn_cudnn_create)(void **);
typedef int (*fn_cudnn_set_stream)(void *, port_stream);
typedef int (*fn_cudnn_create_desc)(void **);
typedef int (*fn_cudnn_set_tensor4d)(void *, int, int, int, int, int, int);
typedef int (*fn_cudnn_set_filter4d)(void *, int, int, int, int, int, int);
typedef int (*fn_cudnn_set_conv2d)(void *, int, int, int, int, int, int, int, int);
typedef int (*fn_cudnn_set_math)(void *, int);
typedef int (*fn_cudnn_ws)(void *, void *, void *, void *, void *, int, size_t *);
typedef int (*fn_cudnn_fwd)(void *, const float *, void *, const void *, void *, const void *, void *, int, void *,
                            size_t, const float *, void *, void *);
typedef int (*fn_cudnn_bwd_filter)(void *, const float *, void *, const void *, void *, const void *, void *, int,
                                   void *, size_t, const float *, void *, void *);

static struct {
    void *blas, *h_blas;
    fn_cublas_sgemm sgemm;
    fn_cublas_gemm_ex gemm_ex;
    fn_cublas_set_math set_math_blas;
    void *dnn, *h_dnn;
    fn_cudnn_create_desc tensor, filter, conv;
    fn_cudnn_set_tensor4d set_tensor;
    fn_cudnn_set_filter4d set_filter;
    fn_cudnn_set_conv2d set_conv;
    fn_cudnn_set_math set_math;
    fn_cudnn_ws fwd_ws, bwdf_ws;
    fn_cudnn_fwd fwd;
    fn_cudnn_bwd_filter bwdf;
} ref;

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
    if ((ref.blas = open_any(blas))) {
        fn_cublas_create create = (fn_cublas_create)dlsym(ref.blas, "cublasCreate_v2");
        fn_cublas_set_stream ss = (fn_cublas_set_stream)dlsym(ref.blas, "cublasSetStream_v2");
        ref.sgemm = (fn_cublas_sgemm)dlsym(ref.blas, "cublasSgemm_v2");
        ref.gemm_ex = (fn_cublas_gemm_ex)dlsym(ref.blas, "cublasGemmEx");
        ref.set_math_blas = (fn_cublas_set_math)dlsym(ref.blas, "cublasSetMathMode");
        if (!create || !ss || !ref.sgemm || create(&ref.h_blas) || ss(ref.h_blas, s)) ref.sgemm = NULL;
    }
    if ((ref.dnn = open_any(dnn))) {
        fn_cudnn_create create = (fn_cudnn_create)dlsym(ref.dnn, "cudnnCreate");
        fn_cudnn_set_stream ss = (fn_cudnn_set_stream)dlsym(ref.dnn, "cudnnSetStream");
        ref.tensor = (fn_cudnn_create_desc)dlsym(ref.dnn, "cudnnCreateTensorDescriptor");
        ref.filter = (fn_cudnn_create_desc)dlsym(ref.dnn, "cudnnCreateFilterDescriptor");
        ref.conv = (fn_cudnn_create_desc)dlsym(ref.dnn, "cudnnCreateConvolutionDescriptor");
        ref.set_tensor = (fn_cudnn_set_tensor4d)dlsym(ref.dnn, "cudnnSetTensor4dDescriptor");
        ref.set_filter = (fn_cudnn_set_filter4d)dlsym(ref.dnn, "cudnnSetFilter4dDescriptor");
        ref.set_conv = (fn_cudnn_set_conv2d)dlsym(ref.dnn, "cudnnSetConvolution2dDescriptor");
        ref.set_math = (fn_cudnn_set_math)dlsym(ref.dnn, "cudnnSetConvolutionMathType");
        ref.fwd_ws = (fn_cudnn_ws)dlsym(ref.dnn, "cudnnGetConvolutionForwardWorkspaceSize");
        ref.bwdf_ws = (fn_cudnn_ws)dlsym(ref.dnn, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
        ref.fwd = (fn_cudnn_fwd)dlsym(ref.dnn, "cudnnConvolutionForward");
        ref.bwdf = (fn_cudnn_bwd_filter)dlsym(ref.dnn, "cudnnConvolutionBackwardFilter");
        if (!create || !ss || !ref.tensor || !ref.filter || !ref.conv || !ref.set_tensor || !ref.set_filter ||
            !ref.set_conv || !ref.set_math || !ref.fwd_ws || !ref.bwdf_ws || !ref.fwd || !ref.bwdf ||
            create(&ref.h_dnn) || ss(ref.h_dnn, s))
            ref.fwd = NULL;
    }
}

/* ---- timing */
static port_stream S;
static int iters = 50;

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef int (*bench_fn)(void *ctx);

/* Median microseconds of one call, or -1 when it failed. */
static double time_us(bench_fn fn, void *ctx)
{
    static port_event a, b;
    static float ms[1000];
    if (!a && (port_event_create(&a, 1, "timing") || port_event_create(&b, 1, "timing"))) return -1;
    if (fn(ctx)) return -1; /* warm-up */
    int n = iters > 1000 ? 1000 : iters;
    for (int i = 0; i < n; i++) {
        if (port_event_record(a, S) || fn(ctx) || port_event_record(b, S) || port_event_sync(b, "timing") ||
            port_event_elapsed_ms(a, b, &ms[i]))
            return -1;
    }
    qsort(ms, (size_t)n, sizeof ms[0], cmp_f);
    return ms[n / 2] * 1000.0;
}

static void row(const char *name, const char *shape, double us, double work, int is_bytes, double ref_us)
{
    char rate[32] = "-", r[32] = "-", ratio[32] = "-";
    if (us > 0) snprintf(rate, sizeof rate, "%.1f %s", work / us / 1e3, is_bytes ? "GB/s" : "GFLOP/s");
    if (ref_us > 0) {
        snprintf(r, sizeof r, "%.1f", ref_us);
        snprintf(ratio, sizeof ratio, "%.2fx", us / ref_us);
    }
    printf("%-18s %-34s %10.1f %16s %12s %8s\n", name, shape, us, rate, r, ratio);
}

static float *dbuf(size_t n)
{
    float *p;
    if (port_dev_malloc((void **)&p, n * sizeof(float) + 256, "bench buffer")) {
        fprintf(stderr, "ddprt-bench-kernels: %s\n", port_cuda_errmsg());
        exit(1);
    }
    k_cuda_init_uniform(n, 1.0f, 1, 0, p, S);
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

static int conv_fwd(void *c_) { conv_ctx *c = c_; return k_cuda_conv2d_fwd(&c->sh, c->x, c->w, c->b, c->y, c->ws, S); }
static int conv_bwd(void *c_)
{
    conv_ctx *c = c_;
    return k_cuda_conv2d_bwd(&c->sh, c->x, c->w, c->dy, c->dx, c->dw, c->db, c->ws, S);
}
static int conv_bwd_w(void *c_) /* the first layer's: its input (the data) takes no gradient */
{
    conv_ctx *c = c_;
    return k_cuda_conv2d_bwd(&c->sh, c->x, c->w, c->dy, NULL, c->dw, c->db, c->ws, S);
}
static int dnn_fwd(void *c_)
{
    conv_ctx *c = c_;
    float one = 1, zero = 0;
    return ref.fwd(ref.h_dnn, &one, c->xd, c->x, c->wd, c->w, c->cd, 1, c->ref_ws, c->ref_ws_bytes, &zero, c->yd, c->y)
               ? -1 : 0;
}
static int dnn_bwdf(void *c_)
{
    conv_ctx *c = c_;
    float one = 1, zero = 0;
    return ref.bwdf(ref.h_dnn, &one, c->xd, c->x, c->yd, c->dy, c->cd, 1, c->ref_ws, c->ref_ws_bytes, &zero, c->wd,
                    c->dw) ? -1 : 0;
}

static int dnn_setup(conv_ctx *c)
{
    k_conv_shape *s = &c->sh;
    size_t a = 0, b = 0;
    if (!ref.fwd || ref.tensor(&c->xd) || ref.tensor(&c->yd) || ref.filter(&c->wd) || ref.conv(&c->cd) ||
        ref.set_tensor(c->xd, 0, 0, s->n, s->c, s->h, s->w) || ref.set_tensor(c->yd, 0, 0, s->n, s->k, s->p, s->q) ||
        ref.set_filter(c->wd, 0, 0, s->k, s->c, s->r, s->s) ||
        ref.set_conv(c->cd, s->pad, s->pad, s->stride, s->stride, 1, 1, 1, 0) || ref.set_math(c->cd, 3) ||
        ref.fwd_ws(ref.h_dnn, c->xd, c->wd, c->cd, c->yd, 1, &a) || ref.bwdf_ws(ref.h_dnn, c->xd, c->yd, c->cd, c->wd, 1, &b))
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
    c.x = dbuf(nx); c.w = dbuf(nw); c.b = dbuf(co); c.y = dbuf(ny); c.dy = dbuf(ny); c.dx = dbuf(nx);
    c.dw = dbuf(nw); c.db = dbuf(co);
    if (port_dev_malloc(&c.ws, k_cuda_conv2d_workspace(&c.sh) + 256, "workspace")) return;
    double flop = 2.0 * ny * ci * r * r;
    int have_ref = dnn_setup(&c) == 0;
    char shape[64];
    snprintf(shape, sizeof shape, "n%d c%d %dx%d k%d %dx%d/%d p%d", n, ci, h, h, co, r, r, st, pad);
    char nm[40];
    snprintf(nm, sizeof nm, "%s fwd", name);
    row(nm, shape, time_us(conv_fwd, &c), flop, 0, have_ref ? time_us(dnn_fwd, &c) : -1);
    snprintf(nm, sizeof nm, "%s bwd", name);
    /* Our bwd is input grad + weight grad + bias grad (2x the forward's FLOPs); cuDNN's
     * column is the weight gradient alone, times 2 (the input grad costs the same). A
     * first layer's is the weight gradient alone on both sides. */
    double rb = have_ref ? time_us(dnn_bwdf, &c) : -1;
    if (first) snprintf(nm, sizeof nm, "%s bwd dW", name);
    row(nm, shape, time_us(first ? conv_bwd_w : conv_bwd, &c), (first ? 1 : 2) * flop, 0,
        rb > 0 ? (first ? 1 : 2) * rb : -1);
    port_dev_free(c.x); port_dev_free(c.w); port_dev_free(c.b); port_dev_free(c.y); port_dev_free(c.dy);
    port_dev_free(c.dx); port_dev_free(c.dw); port_dev_free(c.db); port_dev_free(c.ws); port_dev_free(c.ref_ws);
}

static void bench_conv(const char *name, int n, int ci, int h, int co, int r, int st, int pad)
{
    bench_conv_at(name, n, ci, h, co, r, st, pad, 0);
}

typedef struct lin_ctx { int n, in, out; float *x, *w, *b, *y, *dy, *dx, *dw, *db; void *ws; } lin_ctx;
static int lin_fwd(void *c_) { lin_ctx *c = c_; return k_cuda_linear_fwd(c->n, c->in, c->out, c->x, c->w, c->b, c->y, c->ws, S); }
static int lin_bwd(void *c_)
{
    lin_ctx *c = c_;
    return k_cuda_linear_bwd(c->n, c->in, c->out, c->x, c->w, c->dy, c->dx, c->dw, c->db, c->ws, S);
}
static int blas_fwd(void *c_)
{
    lin_ctx *c = c_;
    float one = 1, zero = 0;
    /* Row-major y[n,out] = x w^T is column-major y^T = w(T) x^T. */
    return ref.sgemm(ref.h_blas, 1, 0, c->out, c->n, c->in, &one, c->w, c->in, c->x, c->in, &zero, c->y, c->out) ? -1 : 0;
}

static void bench_linear(const char *name, int n, int in, int out)
{
    lin_ctx c = {n, in, out, dbuf((size_t)n * in), dbuf((size_t)out * in), dbuf(out), dbuf((size_t)n * out),
                 dbuf((size_t)n * out), dbuf((size_t)n * in), dbuf((size_t)out * in), dbuf(out), NULL};
    if (port_dev_malloc(&c.ws, k_cuda_linear_workspace(n, in, out) + 256, "workspace")) return;
    char shape[64], nm[40];
    snprintf(shape, sizeof shape, "n%d in%d out%d", n, in, out);
    double flop = 2.0 * n * in * out;
    snprintf(nm, sizeof nm, "%s fwd", name);
    row(nm, shape, time_us(lin_fwd, &c), flop, 0, ref.sgemm ? time_us(blas_fwd, &c) : -1);
    snprintf(nm, sizeof nm, "%s bwd", name);
    row(nm, shape, time_us(lin_bwd, &c), 2 * flop, 0, -1);
}

typedef struct ew_ctx { size_t n; float *a, *b, *c; uint8_t *m; int32_t *idx; int pn, pc, ph; k_sgd_cfg sgd; } ew_ctx;
static int ew_relu(void *c_) { ew_ctx *c = c_; return k_cuda_relu_fwd(c->n, c->a, c->b, S); }
static int ew_drop(void *c_) { ew_ctx *c = c_; return k_cuda_dropout_fwd(c->n, 0.5f, 1, 0, c->a, c->b, c->m, S); }
static int ew_sgd(void *c_) { ew_ctx *c = c_; return k_cuda_sgd_step(c->n, &c->sgd, 0, c->a, c->b, c->c, S); }
static int ew_pool(void *c_) { ew_ctx *c = c_; return k_cuda_maxpool2d_fwd(c->pn, c->pc, c->ph, c->ph, 2, 2, c->a, c->b, c->idx, S); }
static int ew_pool_b(void *c_) { ew_ctx *c = c_; return k_cuda_maxpool2d_bwd(c->pn, c->pc, c->ph, c->ph, 2, 2, c->b, c->idx, c->a, S); }

static void bench_elementwise(int B)
{
    ew_ctx c = {.n = (size_t)B * 5760, .pn = B, .pc = 10, .ph = 24, .sgd = {0.01f, 0.5f, 0, 0, 0}};
    c.a = dbuf(c.n); c.b = dbuf(c.n); c.c = dbuf(c.n);
    if (port_dev_malloc((void **)&c.m, c.n, "mask") || port_dev_malloc((void **)&c.idx, c.n * 4, "idx")) return;
    char shape[64];
    snprintf(shape, sizeof shape, "%zu elements", c.n);
    row("relu fwd", shape, time_us(ew_relu, &c), 8.0 * c.n, 1, -1);
    row("dropout fwd", shape, time_us(ew_drop, &c), 9.0 * c.n, 1, -1);
    row("sgd step", shape, time_us(ew_sgd, &c), 20.0 * c.n, 1, -1);
    snprintf(shape, sizeof shape, "n%d c10 24x24 2x2/2", B);
    row("maxpool fwd", shape, time_us(ew_pool, &c), (4.0 + 2.0) * c.n / 4 * 4 + 0.25 * c.n * 4, 1, -1);
    row("maxpool bwd", shape, time_us(ew_pool_b, &c), 4.0 * c.n + 0.5 * c.n * 4, 1, -1);
}

/* Layer-graph ops (rates in GB/s: bytes each kernel must move at least). */
typedef struct go_ctx {
    int n, c, hw, ks, len, dim, vocab;
    float *x, *y, *dy, *dx, *mean, *var, *is, *g, *b, *dg, *db;
    int32_t *idx, *ids;
} go_ctx;
static int go_stats(void *c_) { go_ctx *c = c_; return k_cuda_bn_stats(c->n, c->c, c->hw, c->x, c->mean, c->var, S); }
static int go_bn_fwd(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_bn_fwd(c->n, c->c, c->hw, c->x, c->mean, c->is, c->g, c->b, c->y, S);
}
static int go_bn_sums(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_bn_bwd_sums(c->n, c->c, c->hw, c->x, c->mean, c->is, c->dy, c->dg, c->db, S);
}
static int go_bn_dx(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_bn_bwd_dx(c->n, c->c, c->hw, c->x, c->mean, c->is, c->g, c->dg, c->db, (double)c->n * c->hw, c->dy,
                            c->dx, S);
}
static int go_pool(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_maxpool2d_pad_fwd(c->n, c->c, c->ks, c->ks, 3, 2, 1, c->x, c->y, c->idx, S);
}
static int go_pool_b(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_maxpool2d_pad_bwd(c->n, c->c, c->ks, c->ks, 3, 2, 1, c->dy, c->idx, c->dx, S);
}
static int go_emb(void *c_) { go_ctx *c = c_; return k_cuda_embedding_fwd(c->n, c->len, c->dim, c->ids, c->x, c->y, S); }
static int go_emb_b(void *c_)
{
    go_ctx *c = c_;
    return k_cuda_embedding_bwd(c->n, c->len, c->dim, c->vocab, c->ids, c->dy, c->dx, S);
}
static int go_mt(void *c_) { go_ctx *c = c_; return k_cuda_max_time_fwd(c->n, c->c, c->len, c->x, c->y, c->idx, S); }

static void bench_bn(const char *name, int n, int ch, int hw)
{
    size_t e = (size_t)n * ch * hw;
    go_ctx c = {.n = n, .c = ch, .hw = hw};
    c.x = dbuf(e); c.y = dbuf(e); c.dy = dbuf(e); c.dx = dbuf(e);
    c.mean = dbuf(ch); c.var = dbuf(ch); c.is = dbuf(ch); c.g = dbuf(ch); c.b = dbuf(ch); c.dg = dbuf(ch); c.db = dbuf(ch);
    char shape[64], nm[64];
    snprintf(shape, sizeof shape, "n%d c%d hw%d", n, ch, hw);
    snprintf(nm, sizeof nm, "%s stats", name);
    row(nm, shape, time_us(go_stats, &c), 8.0 * e, 1, -1); /* two passes over x */
    snprintf(nm, sizeof nm, "%s fwd", name);
    row(nm, shape, time_us(go_bn_fwd, &c), 8.0 * e, 1, -1);
    snprintf(nm, sizeof nm, "%s bwd sums", name);
    row(nm, shape, time_us(go_bn_sums, &c), 8.0 * e, 1, -1);
    snprintf(nm, sizeof nm, "%s bwd dx", name);
    row(nm, shape, time_us(go_bn_dx, &c), 12.0 * e, 1, -1);
}

static void bench_graph_ops(void)
{
    bench_bn("bn 112x112", 32, 64, 112 * 112);
    bench_bn("bn 7x7", 32, 512, 49);
    bench_bn("bn r20 28x28", 128, 16, 28 * 28);
    /* ResNet stem pool: 3x3/2 pad 1, 112 -> 56 */
    go_ctx c = {.n = 32, .c = 64, .ks = 112};
    size_t in = (size_t)32 * 64 * 112 * 112, out = in / 4;
    c.x = dbuf(in); c.dx = dbuf(in); c.y = dbuf(out); c.dy = dbuf(out);
    if (port_dev_malloc((void **)&c.idx, out * 4, "idx")) return;
    row("maxpool3/2p1 fwd", "n32 c64 112x112", time_us(go_pool, &c), 4.0 * in + 8.0 * out, 1, -1);
    row("maxpool3/2p1 bwd", "n32 c64 112x112", time_us(go_pool_b, &c), 4.0 * in + 8.0 * out, 1, -1);
    /* TextCNN: embedding 20000 x 128, batch 64, seq 64; max over time of 100 filters */
    go_ctx t = {.n = 64, .len = 64, .dim = 128, .vocab = 20000, .c = 100};
    size_t ny = (size_t)64 * 64 * 128, nt = (size_t)20000 * 128;
    t.x = dbuf(nt); t.y = dbuf(ny); t.dy = dbuf(ny); t.dx = dbuf(nt);
    if (port_dev_malloc((void **)&t.ids, 64 * 64 * 4, "ids") || port_dev_malloc((void **)&t.idx, ny * 4, "idx")) return;
    int32_t *h = malloc(64 * 64 * 4);
    for (int i = 0; i < 64 * 64; i++) h[i] = (int32_t)(k_rand_uniform(5, i) * 20000);
    int up = port_memcpy_h2d(t.ids, h, 64 * 64 * 4, S, "ids") || port_stream_sync(S, "ids");
    free(h);
    if (up) return;
    row("embedding fwd", "n64 len64 dim128", time_us(go_emb, &t), 8.0 * ny, 1, -1);
    row("embedding bwd", "n64 len64 dim128 v20000", time_us(go_emb_b, &t), 4.0 * nt + 8.0 * ny, 1, -1);
    t.len = 62;
    row("max over time fwd", "n64 c100 len62", time_us(go_mt, &t), 4.0 * 64 * 100 * 62, 1, -1);
}

/* The transformer's kernels at GPT small's (6x384, T 256, batch 8) and GPT-2's
 * attention (T 1024, 12 heads, batch 4). Attention FLOPs: the causal half of QK^T and
 * PV (forward), twice that again for backward's four products. */
typedef struct tf_ctx { int b, t, h, hd, n, c; float *qkv, *y, *lse, *dy, *dq, *x, *w, *mean, *rstd, *dw, *db; void *ws; } tf_ctx;
static int tf_attn_f(void *c_) { tf_ctx *c = c_; return k_cuda_attention_fwd(c->b, c->t, c->h, c->hd, c->qkv, c->y, c->lse, S); }
static int tf_attn_b(void *c_)
{
    tf_ctx *c = c_;
    return k_cuda_attention_bwd(c->b, c->t, c->h, c->hd, c->qkv, c->y, c->lse, c->dy, c->dq, c->ws, S);
}
static int tf_ln_b(void *c_)
{
    tf_ctx *c = c_;
    return k_cuda_layernorm_bwd(c->n, c->c, c->x, c->w, c->mean, c->rstd, c->dy, c->dq, c->dw, c->db, S);
}

static void bench_attention(int b, int t, int h, int hd)
{
    size_t nq = (size_t)b * t * 3 * h * hd, ny = (size_t)b * t * h * hd, nl = (size_t)b * h * t;
    tf_ctx c = {.b = b, .t = t, .h = h, .hd = hd, .qkv = dbuf(nq), .y = dbuf(ny), .lse = dbuf(nl), .dy = dbuf(ny),
                .dq = dbuf(nq)};
    if (port_dev_malloc(&c.ws, k_cuda_attention_workspace(b, t, h) + 256, "workspace")) return;
    char shape[64];
    snprintf(shape, sizeof shape, "b%d t%d h%d hd%d", b, t, h, hd);
    double flop = 2.0 * 2 * b * h * ((double)t * (t + 1) / 2) * hd;
    row("attention fwd", shape, time_us(tf_attn_f, &c), flop, 0, -1);
    row("attention bwd", shape, time_us(tf_attn_b, &c), 2 * flop, 0, -1);
    port_dev_free(c.qkv); port_dev_free(c.y); port_dev_free(c.lse); port_dev_free(c.dy); port_dev_free(c.dq);
    port_dev_free(c.ws);
}

static void bench_transformer(void)
{
    bench_attention(8, 256, 6, 64);
    bench_attention(4, 1024, 12, 64);
    tf_ctx c = {.n = 2048, .c = 384};
    size_t e = (size_t)c.n * c.c;
    c.x = dbuf(e); c.dy = dbuf(e); c.dq = dbuf(e); c.w = dbuf(c.c); c.dw = dbuf(c.c); c.db = dbuf(c.c);
    c.mean = dbuf(c.n); c.rstd = dbuf(c.n);
    row("layernorm bwd", "n2048 c384", time_us(tf_ln_b, &c), 4.0 * 3 * e, 1, -1);
}

/* ---- the tensor cores: the GEMM at 4096^3 (bf16, f16: 16-bit arrays, cp.async; TF32:
 * linear's fp32 operands) against cuBLAS at the same precision (cublasGemmEx, fp32
 * compute; TF32 math for the fp32 one), and ResNet's 3x3 convs at bf16 (cuDNN's bf16
 * path is not wired here: ours only). % of the card's dense tensor-core peak where the
 * card is known. */
static double tc_peak_tflops(int mm)
{
    const char *d = port_cuda_device_desc();
    double p = strstr(d, "H200") ? 989.4 : strstr(d, "H100") ? (strstr(d, "PCIe") ? 756.0 : 989.4)
               : strstr(d, "A100") ? 312.0 : 0; /* bf16 / f16 dense; TF32 is half */
    return mm == K_CUDA_MM_TF32 ? p / 2 : p;
}

typedef struct tc_ctx { k_tc_gemm g; int mm; lin_ctx l; } tc_ctx;
static int tc_ours(void *c_) { tc_ctx *c = c_; return k_cuda_tc_gemm(&c->g, S); }
static int tc_blas(void *c_)
{
    tc_ctx *c = c_;
    float one = 1, zero = 0;
    int ty = c->g.type == K_CUDA_MM_BF16 ? 14 /* CUDA_R_16BF */ : 2 /* CUDA_R_16F */;
    /* row-major C[m][n] = A[m][k] B[n][k]^T is column-major C^T = B^T(T) A^T */
    return ref.gemm_ex(ref.h_blas, 1, 0, c->g.n, c->g.m, c->g.k, &one, c->g.b, ty, c->g.ldb, c->g.a, ty, c->g.lda,
                       &zero, c->g.c, 0 /* CUDA_R_32F */, c->g.ldc, 68 /* CUBLAS_COMPUTE_32F */, -1) ? -1 : 0;
}
static int tf_ours(void *c_)
{
    tc_ctx *c = c_;
    return k_cuda_linear_fwd_mm(K_CUDA_MM_TF32, c->l.n, c->l.in, c->l.out, c->l.x, c->l.w, NULL, c->l.y, c->l.ws, S);
}
static int tf_blas(void *c_)
{
    tc_ctx *c = c_;
    if (ref.set_math_blas(ref.h_blas, 3 /* CUBLAS_TF32_TENSOR_OP_MATH */)) return -1;
    int rc = blas_fwd(&c->l);
    return ref.set_math_blas(ref.h_blas, 0) || rc ? -1 : 0;
}

static void tc_row(const char *name, const char *shape, double us, double flop, double ref_us, int mm)
{
    double peak = tc_peak_tflops(mm), tf = us > 0 ? flop / us / 1e6 : 0;
    char pk[16] = "-";
    if (peak > 0 && us > 0) snprintf(pk, sizeof pk, "%.0f%%", 100 * tf / peak);
    row(name, shape, us, flop, 0, ref_us);
    printf("%-18s %-34s %10s %16.1f TFLOP/s, %s of the dense tensor-core peak\n", "", "", "", tf, pk);
}

static void bench_tensor_cores(void)
{
    const int M = 4096;
    tc_ctx c = {0};
    size_t e = (size_t)M * M;
    void *a, *b;
    if (port_dev_malloc(&a, e * 2, "tc A") || port_dev_malloc(&b, e * 2, "tc B")) return;
    float *fa = dbuf(e), *fb = dbuf(e), *cc = dbuf(e);
    k_cuda_f32_to_bf16(e, fa, a, S), k_cuda_f32_to_bf16(e, fb, b, S);
    c.g = (k_tc_gemm){.type = K_CUDA_MM_BF16, .m = M, .n = M, .k = M, .a = a, .b = b, .lda = M, .ldb = M,
                      .a_kfast = 1, .b_kfast = 1, .c = cc, .ldc = M};
    double flop = 2.0 * M * M * M;
    int blas = ref.gemm_ex != NULL;
    tc_row("gemm bf16 (mma)", "4096^3, fp32 accumulate", time_us(tc_ours, &c), flop, blas ? time_us(tc_blas, &c) : -1,
           K_CUDA_MM_BF16);
    k_cuda_f32_to_f16(e, fa, a, S), k_cuda_f32_to_f16(e, fb, b, S);
    c.g.type = K_CUDA_MM_F16;
    tc_row("gemm f16 (mma)", "4096^3, fp32 accumulate", time_us(tc_ours, &c), flop, blas ? time_us(tc_blas, &c) : -1,
           K_CUDA_MM_F16);
    c.l = (lin_ctx){.n = M, .in = M, .out = M, .x = fa, .w = fb, .y = cc};
    if (port_dev_malloc(&c.l.ws, k_cuda_linear_workspace(M, M, M) + 256, "workspace")) return;
    tc_row("gemm tf32 (mma)", "4096^3 (linear fwd)", time_us(tf_ours, &c), flop,
           ref.sgemm && ref.set_math_blas ? time_us(tf_blas, &c) : -1, K_CUDA_MM_TF32);
    port_dev_free(a), port_dev_free(b), port_dev_free(fa), port_dev_free(fb), port_dev_free(cc), port_dev_free(c.l.ws);
}

typedef struct tcc_ctx { conv_ctx *c; int mm; } tcc_ctx;
static int tcc_fwd(void *p)
{
    tcc_ctx *t = p;
    return k_cuda_conv2d_fwd_mm(t->mm, &t->c->sh, t->c->x, t->c->w, t->c->b, t->c->y, t->c->ws, S);
}
static int tcc_bwd(void *p)
{
    tcc_ctx *t = p;
    conv_ctx *c = t->c;
    return k_cuda_conv2d_bwd_mm(t->mm, &c->sh, c->x, c->w, c->dy, c->dx, c->dw, c->db, c->ws, S);
}

static void bench_conv_tc(const char *name, int n, int ci, int h, int co, int mm)
{
    conv_ctx c = {.sh = {.n = n, .c = ci, .h = h, .w = h, .k = co, .r = 3, .s = 3, .stride = 1, .pad = 1}};
    k_conv_shape_init(&c.sh);
    size_t nx = (size_t)n * ci * h * h, ny = (size_t)n * co * c.sh.p * c.sh.q, nw = (size_t)co * ci * 9;
    c.x = dbuf(nx); c.w = dbuf(nw); c.y = dbuf(ny); c.dy = dbuf(ny); c.dx = dbuf(nx); c.dw = dbuf(nw);
    if (port_dev_malloc(&c.ws, k_cuda_conv2d_workspace(&c.sh) + 256, "workspace")) return;
    tcc_ctx t = {&c, mm};
    double flop = 2.0 * ny * ci * 9;
    char shape[64], nm[40];
    snprintf(shape, sizeof shape, "n%d c%d %dx%d k%d 3x3 p1", n, ci, h, h, co);
    snprintf(nm, sizeof nm, "%s fwd", name);
    tc_row(nm, shape, time_us(tcc_fwd, &t), flop, -1, mm);
    snprintf(nm, sizeof nm, "%s bwd", name);
    tc_row(nm, shape, time_us(tcc_bwd, &t), 2 * flop, -1, mm);
    port_dev_free(c.x), port_dev_free(c.w), port_dev_free(c.y), port_dev_free(c.dy), port_dev_free(c.dx);
    port_dev_free(c.dw), port_dev_free(c.ws);
}

int k_cuda_bench_run(int batch, int n_iters)
{
    int B = batch > 0 ? batch : 64;
    if (n_iters > 0) iters = n_iters;
    char err[512];
    if (port_cuda_init(0, err, sizeof err) || port_stream_create(&S, "bench stream")) {
        fprintf(stderr, "ddprt-bench-kernels: %s\n", err[0] ? err : port_cuda_errmsg());
        return 1;
    }
    load_refs(S);
    char wg[200];
    int wgmma = k_cuda_wgmma_setup(wg, sizeof wg) == 1;
    printf("# %s; median of %d; reference: cuBLAS %s, cuDNN %s (FP32 FMA math); tensor cores on %s (%s)\n",
           port_cuda_device_desc(), iters, ref.sgemm ? "yes" : "not found", ref.fwd ? "yes" : "not found",
           wgmma ? "wgmma" : "mma.sync", wg);
    printf("%-18s %-34s %10s %16s %12s %8s\n", "kernel", "shape", "time(us)", "rate", "ref(us)", "ours/ref");
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
    printf("# tensor cores (mma.sync; reference: cuBLAS at the same precision, fp32 compute)\n");
    bench_tensor_cores();
    bench_conv_tc("resnet 56x56 bf16", 32, 64, 56, 64, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 28x28 bf16", 32, 128, 28, 128, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 14x14 bf16", 32, 256, 14, 256, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 7x7 bf16", 32, 512, 7, 512, K_CUDA_MM_BF16);
    bench_conv_tc("resnet 28x28 tf32", 32, 128, 28, 128, K_CUDA_MM_TF32);
    if (port_cuda_errmsg()[0]) {
        fprintf(stderr, "ddprt-bench-kernels: %s\n", port_cuda_errmsg());
        return 1;
    }
    return 0;
}
