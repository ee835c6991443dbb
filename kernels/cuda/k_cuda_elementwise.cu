// Elementwise kernels: relu, dropout, dropout2d, the fused SGD step, init, the RNG,
// the staged-allreduce reduction and the f16/bf16 conversions. Each element's result
// depends only on its index, so any grid gives the same bits; the arithmetic is the
// CPU's, with __fmul_rn/__fadd_rn where nvcc would otherwise fuse a multiply-add the
// CPU rounds twice (so SGD matches kernels/cpu bit for bit).
#include "kernels/cuda/k_cuda_common.cuh"

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

#define LAUNCH(kernel, n, s, ...) K_LAUNCH(kernel, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)(s))(__VA_ARGS__)

static float dropout_scale(float p) { return p >= 1.0f ? 0.0f : (float)(1.0 / (1.0 - (double)p)); }

// ---- relu: y = x < 0 ? 0 : x (NaN passes through, as PyTorch); dx = y > 0 ? dy : 0
__global__ void relu_fwd(size_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n) { float v = x[i]; y[i] = v < 0.0f ? 0.0f : v; }
}
__global__ void relu_bwd(size_t n, const float *y, const float *dy, float *dx)
{
    GRID_STRIDE(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

int k_cuda_relu_fwd(size_t n, const float *x, float *y, port_stream s)
{
    LAUNCH(relu_fwd, n, s, n, x, y);
    return k_cuda_check_launch("k_cuda_relu_fwd", "n=%zu", n);
}
int k_cuda_relu_bwd(size_t n, const float *y, const float *dy, float *dx, port_stream s)
{
    LAUNCH(relu_bwd, n, s, n, y, dy, dx);
    return k_cuda_check_launch("k_cuda_relu_bwd", "n=%zu", n);
}
// 16-bit activations (k_act_ld / k_act_st): rounding keeps the sign, and in bf16 (fp32's
// exponent range) only a value under 2^-134 rounds to zero, so the mask is the fp32 one;
// in f16 a positive value under 2^-25 rounds to zero and so does its gradient, as with
// PyTorch's relu on a half tensor.
__global__ void relu_fwd_t(size_t n, const void *x, int xt, void *y, int yt)
{
    GRID_STRIDE(i, n) { float v = k_act_ld(x, xt, i); k_act_st(y, yt, i, v < 0.0f ? 0.0f : v); }
}
__global__ void relu_bwd_t(size_t n, const void *y, int yt, const float *dy, float *dx)
{
    GRID_STRIDE(i, n) dx[i] = k_act_ld(y, yt, i) > 0.0f ? dy[i] : 0.0f;
}
int k_cuda_relu_fwd_t(size_t n, const void *x, int xt, void *y, int yt, port_stream s)
{
    LAUNCH(relu_fwd_t, n, s, n, x, xt, y, yt);
    char d_[48];
    return k_cuda_check_launch("k_cuda_relu_fwd", "n=%zu%s", n, k_act_desc(d_, sizeof d_, xt, yt));
}
int k_cuda_relu_bwd_t(size_t n, const void *y, int yt, const float *dy, float *dx, port_stream s)
{
    LAUNCH(relu_bwd_t, n, s, n, y, yt, dy, dx);
    char d_[48];
    return k_cuda_check_launch("k_cuda_relu_bwd", "n=%zu%s", n, k_act_desc(d_, sizeof d_, 0, yt));
}

// ---- dropout: element i keeps when u(seed, offset + i) >= p
__global__ void dropout_fwd(size_t n, float p, float sc, uint64_t key, uint64_t offset, const float *x, float *y,
                            uint8_t *mask)
{
    GRID_STRIDE(i, n) {
        uint8_t keep = k_cuda_rng_at(key, offset + i) >= p;
        mask[i] = keep;
        y[i] = x[i] * (keep ? sc : 0.0f);
    }
}
__global__ void mask_scale(size_t n, size_t group, float sc, const uint8_t *mask, const float *dy, float *dx)
{
    GRID_STRIDE(i, n) dx[i] = dy[i] * (mask[i / group] ? sc : 0.0f);
}
// dropout2d: plane j = i / hw keeps when u(seed, offset + j) >= p; the plane's first
// element's thread writes the mask.
__global__ void dropout2d_fwd(size_t n, int hw, float p, float sc, uint64_t key, uint64_t offset, const float *x,
                              float *y, uint8_t *mask)
{
    GRID_STRIDE(i, n) {
        size_t pl = i / (size_t)hw;
        uint8_t keep = k_cuda_rng_at(key, offset + pl) >= p;
        if (i % (size_t)hw == 0) mask[pl] = keep;
        y[i] = x[i] * (keep ? sc : 0.0f);
    }
}

int k_cuda_dropout_fwd(size_t n, float p, uint64_t seed, uint64_t offset, const float *x, float *y,
                       uint8_t *mask, port_stream s)
{
    LAUNCH(dropout_fwd, n, s, n, p, dropout_scale(p), k_cuda_rng_key(seed), offset, x, y, mask);
    return k_cuda_check_launch("k_cuda_dropout_fwd", "n=%zu p=%g", n, p);
}
int k_cuda_dropout_bwd(size_t n, float p, const uint8_t *mask, const float *dy, float *dx, port_stream s)
{
    LAUNCH(mask_scale, n, s, n, (size_t)1, dropout_scale(p), mask, dy, dx);
    return k_cuda_check_launch("k_cuda_dropout_bwd", "n=%zu p=%g", n, p);
}
int k_cuda_dropout2d_fwd(int n, int c, int hw, float p, uint64_t seed, uint64_t offset, const float *x,
                         float *y, uint8_t *mask, port_stream s)
{
    size_t total = (size_t)n * c * hw;
    LAUNCH(dropout2d_fwd, total, s, total, hw, p, dropout_scale(p), k_cuda_rng_key(seed), offset, x, y, mask);
    return k_cuda_check_launch("k_cuda_dropout2d_fwd", "n=%d c=%d hw=%d p=%g", n, c, hw, p);
}
int k_cuda_dropout2d_bwd(int n, int c, int hw, float p, const uint8_t *mask, const float *dy, float *dx,
                         port_stream s)
{
    size_t total = (size_t)n * c * hw;
    LAUNCH(mask_scale, total, s, total, (size_t)hw, dropout_scale(p), mask, dy, dx);
    return k_cuda_check_launch("k_cuda_dropout2d_bwd", "n=%d c=%d hw=%d p=%g", n, c, hw, p);
}

// ---- SGD with momentum (torch.optim.SGD order of operations), one pass.
__global__ void sgd_step(size_t n, k_sgd_cfg c, int first, float *p, const float *g, float *v)
{
    GRID_STRIDE(i, n) {
        float d = g[i];
        if (c.weight_decay != 0.0f) d = __fadd_rn(d, __fmul_rn(c.weight_decay, p[i]));
        if (c.momentum != 0.0f) {
            float buf = first ? d : __fadd_rn(__fmul_rn(v[i], c.momentum), __fmul_rn(d, 1.0f - c.dampening));
            v[i] = buf;
            d = c.nesterov ? __fadd_rn(d, __fmul_rn(c.momentum, buf)) : buf;
        }
        p[i] = __fsub_rn(p[i], __fmul_rn(c.lr, d));
    }
}

int k_cuda_sgd_step(size_t n, const k_sgd_cfg *cfg, int first_step, float *p, const float *g, float *v,
                    port_stream s)
{
    LAUNCH(sgd_step, n, s, n, *cfg, first_step, p, g, v);
    return k_cuda_check_launch("k_cuda_sgd_step", "n=%zu", n);
}

// ---- Adam / AdamW: k_adam_step's order (kernels/cpu/k_optim.c), nothing contracted.
__global__ void adam_step(size_t n, k_adam_cfg c, float *p, const float *g, float *m, float *v)
{
    GRID_STRIDE(i, n) {
        float gi = g[i], pi = p[i], mo = m[i];
        if (c.decoupled) pi = __fmul_rn(pi, c.decay_mul);
        else if (c.weight_decay != 0.0f) gi = __fadd_rn(gi, __fmul_rn(c.weight_decay, pi));
        float mi = __fadd_rn(mo, __fmul_rn(1.0f - c.beta1, __fsub_rn(gi, mo)));
        float vi = __fadd_rn(__fmul_rn(v[i], c.beta2), __fmul_rn(__fmul_rn(1.0f - c.beta2, gi), gi));
        float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);
        m[i] = mi;
        v[i] = vi;
        p[i] = __fadd_rn(pi, __fmul_rn(-c.step_size, __fdiv_rn(mi, den)));
    }
}

int k_cuda_adam_step(size_t n, const k_adam_cfg *cfg, float *p, const float *g, float *m, float *v, port_stream s)
{
    LAUNCH(adam_step, n, s, n, *cfg, p, g, m, v);
    return k_cuda_check_launch("k_cuda_adam_step", "n=%zu", n);
}

// ---- init and the RNG itself
__global__ void init_uniform(size_t n, float bound, uint64_t key, uint64_t offset, float *out)
{
    GRID_STRIDE(i, n) out[i] = (2.0f * k_cuda_rng_at(key, offset + i) - 1.0f) * bound;
}
__global__ void rand_uniform(size_t n, uint64_t key, uint64_t offset, float *out)
{
    GRID_STRIDE(i, n) out[i] = k_cuda_rng_at(key, offset + i);
}

int k_cuda_init_uniform(size_t n, float bound, uint64_t seed, uint64_t offset, float *out, port_stream s)
{
    LAUNCH(init_uniform, n, s, n, bound, k_cuda_rng_key(seed), offset, out);
    return k_cuda_check_launch("k_cuda_init_uniform", "n=%zu", n);
}
int k_cuda_rand_uniform(size_t n, uint64_t seed, uint64_t offset, float *out, port_stream s)
{
    LAUNCH(rand_uniform, n, s, n, k_cuda_rng_key(seed), offset, out);
    return k_cuda_check_launch("k_cuda_rand_uniform", "n=%zu", n);
}

// ---- reduction and conversions (dt: rt_dtype values RT_F32 = 0, RT_F16 = 2, RT_BF16 = 3)
enum { DT_F32 = 0, DT_F16 = 2, DT_BF16 = 3 };

__global__ void sum_f32(size_t n, float *d, const float *a, const float *b)
{
    GRID_STRIDE(i, n) d[i] = a[i] + b[i];
}
__global__ void sum_f16(size_t n, uint16_t *d, const uint16_t *a, const uint16_t *b)
{
    GRID_STRIDE(i, n) d[i] = rt_f32_to_f16(rt_f16_to_f32(a[i]) + rt_f16_to_f32(b[i]));
}
__global__ void sum_bf16(size_t n, uint16_t *d, const uint16_t *a, const uint16_t *b)
{
    GRID_STRIDE(i, n) d[i] = rt_f32_to_bf16(rt_bf16_to_f32(a[i]) + rt_bf16_to_f32(b[i]));
}
__global__ void scale_f32(size_t n, float f, float *x)
{
    GRID_STRIDE(i, n) x[i] *= f;
}

int k_cuda_reduce_sum(void *dst, const void *a, const void *b, size_t n, int dt, port_stream s)
{
    switch (dt) {
    case DT_F32: LAUNCH(sum_f32, n, s, n, (float *)dst, (const float *)a, (const float *)b); break;
    case DT_F16: LAUNCH(sum_f16, n, s, n, (uint16_t *)dst, (const uint16_t *)a, (const uint16_t *)b); break;
    case DT_BF16: LAUNCH(sum_bf16, n, s, n, (uint16_t *)dst, (const uint16_t *)a, (const uint16_t *)b); break;
    default:
        port_cuda_fail("k_cuda_reduce_sum(n=%zu dt=%d): only f32, f16 and bf16 are supported", n, dt);
        return -1;
    }
    return k_cuda_check_launch("k_cuda_reduce_sum", "n=%zu dt=%d", n, dt);
}

int k_cuda_scale(size_t n, float f, float *x, port_stream s)
{
    LAUNCH(scale_f32, n, s, n, f, x);
    return k_cuda_check_launch("k_cuda_scale", "n=%zu", n);
}

// ---- sum of squares (the clipping norm): chunks of SS_CHUNK floats, one block each, a
// fixed tree in double; then one block adds the chunks' sums, again a fixed tree.
#define SS_CHUNK 65536
__global__ void __launch_bounds__(K_CUDA_THREADS) sumsq_chunks(size_t n, const float *x, double *part)
{
    __shared__ double sh[K_CUDA_THREADS];
    size_t lo = (size_t)blockIdx.x * SS_CHUNK, hi = n < lo + SS_CHUNK ? n : lo + SS_CHUNK;
    double acc = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        double v = x[i];
        acc += v * v;
    }
    acc = k_cuda_block_sum(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}
__global__ void __launch_bounds__(K_CUDA_THREADS) sum_chunks(unsigned np, const double *part, double *out)
{
    __shared__ double sh[K_CUDA_THREADS];
    double acc = 0.0;
    for (unsigned i = threadIdx.x; i < np; i += blockDim.x) acc += part[i];
    acc = k_cuda_block_sum(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

static unsigned ss_chunks(size_t n) { return n ? (unsigned)((n + SS_CHUNK - 1) / SS_CHUNK) : 1; }
size_t k_cuda_sumsq_workspace(size_t n) { return ss_chunks(n) * sizeof(double); }

int k_cuda_sumsq(size_t n, const float *x, double *out, void *ws, port_stream s)
{
    unsigned nb = ss_chunks(n);
    K_LAUNCH(sumsq_chunks, nb, K_CUDA_THREADS, 0, (cudaStream_t)s)(n, x, (double *)ws);
    if (k_cuda_check_launch("k_cuda_sumsq (chunks)", "n=%zu", n)) return -1;
    K_LAUNCH(sum_chunks, 1, K_CUDA_THREADS, 0, (cudaStream_t)s)(nb, (const double *)ws, out);
    return k_cuda_check_launch("k_cuda_sumsq", "n=%zu", n);
}

__global__ void to_f16(size_t n, const float *x, uint16_t *y) { GRID_STRIDE(i, n) y[i] = rt_f32_to_f16(x[i]); }
__global__ void from_f16(size_t n, const uint16_t *x, float *y) { GRID_STRIDE(i, n) y[i] = rt_f16_to_f32(x[i]); }
__global__ void to_bf16(size_t n, const float *x, uint16_t *y) { GRID_STRIDE(i, n) y[i] = rt_f32_to_bf16(x[i]); }
__global__ void from_bf16(size_t n, const uint16_t *x, float *y) { GRID_STRIDE(i, n) y[i] = rt_bf16_to_f32(x[i]); }

int k_cuda_f32_to_f16(size_t n, const float *x, uint16_t *y, port_stream s)
{
    LAUNCH(to_f16, n, s, n, x, y);
    return k_cuda_check_launch("k_cuda_f32_to_f16", "n=%zu", n);
}
int k_cuda_f16_to_f32(size_t n, const uint16_t *x, float *y, port_stream s)
{
    LAUNCH(from_f16, n, s, n, x, y);
    return k_cuda_check_launch("k_cuda_f16_to_f32", "n=%zu", n);
}
int k_cuda_f32_to_bf16(size_t n, const float *x, uint16_t *y, port_stream s)
{
    LAUNCH(to_bf16, n, s, n, x, y);
    return k_cuda_check_launch("k_cuda_f32_to_bf16", "n=%zu", n);
}
int k_cuda_bf16_to_f32(size_t n, const uint16_t *x, float *y, port_stream s)
{
    LAUNCH(from_bf16, n, s, n, x, y);
    return k_cuda_check_launch("k_cuda_bf16_to_f32", "n=%zu", n);
}
