// BatchNorm2d parts of kernels/k.h on the GPU (k_bn_stats, k_bn_fwd, k_bn_bwd_sums,
// k_bn_bwd_dx) and k_cuda_bn_finish (invstd and the running statistics on the device).
//
// Per-channel sums: one block of BN_THREADS per channel (a channel of an early ResNet
// layer holds n*112*112 values, so the block is large to keep loads in flight); thread t
// adds the channel's values e = t, t + BN_THREADS, ... (e runs over n*hw) in double,
// then a fixed shared-memory tree (bn_block_sum).
// The order depends on the shapes only: a run repeats bit for bit, on any GPU. The
// statistics take two passes (mean, then the centred squares) so the variance does not
// cancel.
#include "kernels/cuda/k_cuda_launch.cuh"
// x and y may be 16-bit activations (k_act_ld / k_act_st: --amp-activations 16); the
// statistics and every sum stay fp32 / double, as PyTorch's BN on a 16-bit input.

#define BN_THREADS 1024

namespace {

struct Chan { // element e (0 <= e < n*hw) of channel c in x[n, C, hw]
    int C, hw;
    __host__ __device__ size_t at(int c, size_t e) const { return ((e / hw) * C + c) * hw + e % hw; }
};

struct StatPart {
    Chan ch; size_t m; const void *x; int xt;
    __host__ __device__ double sum(int c, int t, int T) const
    {
        double s = 0.0;
        for (size_t e = t; e < m; e += T) s += k_act_ld(x, xt, ch.at(c, e));
        return s;
    }
    __host__ __device__ double sq(int c, int t, int T, double mean) const
    {
        double s = 0.0;
        for (size_t e = t; e < m; e += T) {
            double d = k_act_ld(x, xt, ch.at(c, e)) - mean;
            s += d * d;
        }
        return s;
    }
};

// dbeta = sum dy, dgamma = sum dy * xhat, xhat = (x - mean) * invstd (in float, as bn_fwd).
struct BwdPart {
    Chan ch; size_t m; const void *x; int xt; const float *mean, *invstd, *dy;
    const float *gamma, *beta; int relu; // relu: dy masked where this BN's output is <= 0 (fused ReLU)
    __host__ __device__ void sums(int c, int t, int T, double *sdy, double *sdx) const
    {
        double a = 0.0, b = 0.0;
        float mu = mean[c], is = invstd[c], g = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
        for (size_t e = t; e < m; e += T) {
            size_t i = ch.at(c, e);
            float xh = (k_act_ld(x, xt, i) - mu) * is;
            float d = relu && !(fmaf(xh, g, be) > 0.0f) ? 0.0f : dy[i];
            a += d;
            b += (double)d * xh;
        }
        *sdy = a;
        *sdx = b;
    }
};

// fmaf explicitly: every compiler then rounds alike.
struct Fwd {
    int C, hw; const void *x; int xt; const float *mean, *invstd, *gamma, *beta; void *y; int yt;
    const void *add; int at, relu; // fused: relu(BN(x) [+ add]), the unfused ops' bits
    __host__ __device__ void operator()(size_t i) const
    {
        int c = (int)((i / hw) % C);
        float xh = (k_act_ld(x, xt, i) - mean[c]) * invstd[c];
        float v = fmaf(xh, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f);
        if (add) v = v + k_act_ld(add, at, i);
        k_act_st(y, yt, i, relu && v < 0.0f ? 0.0f : v);
    }
};

struct Dx {
    int C, hw; float inv_m; const void *x; int xt; const float *mean, *invstd, *gamma, *dgamma, *dbeta, *dy;
    float *dx; const float *beta; int relu; // relu: dy masked as in BwdPart
    __host__ __device__ void operator()(size_t i) const
    {
        int c = (int)((i / hw) % C);
        float xh = (k_act_ld(x, xt, i) - mean[c]) * invstd[c];
        float k = (gamma ? gamma[c] : 1.0f) * invstd[c];
        float d = relu && !(fmaf(xh, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f) > 0.0f) ? 0.0f : dy[i];
        dx[i] = k * fmaf(-xh, dgamma[c] * inv_m, d - dbeta[c] * inv_m);
    }
};

struct Finish {
    float eps, momentum; double count; const float *mean, *var; float *invstd, *rmean, *rvar;
    __host__ __device__ void operator()(size_t c) const
    {
        invstd[c] = 1.0f / sqrtf(var[c] + eps);
        if (!rmean) return;
        double unb = count > 1 ? (double)var[c] * count / (count - 1) : (double)var[c];
        rmean[c] = (float)((1.0 - momentum) * rmean[c] + (double)momentum * mean[c]);
        rvar[c] = (float)((1.0 - momentum) * rvar[c] + (double)momentum * unb);
    }
};

// k_cuda_block_sum's tree for BN_THREADS threads.
__device__ __forceinline__ double bn_block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = BN_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(BN_THREADS) stats_kernel(StatPart f, float *mean, float *var)
{
    __shared__ double sh[BN_THREADS];
    int c = blockIdx.x;
    double mu = bn_block_sum(f.sum(c, threadIdx.x, BN_THREADS), sh) / (double)f.m;
    double v = bn_block_sum(f.sq(c, threadIdx.x, BN_THREADS, mu), sh) / (double)f.m;
    if (threadIdx.x == 0) { mean[c] = (float)mu; var[c] = (float)v; }
}

__global__ void __launch_bounds__(BN_THREADS) bwd_sums_kernel(BwdPart f, float *dgamma, float *dbeta)
{
    __shared__ double sh[BN_THREADS];
    int c = blockIdx.x;
    double a, b;
    f.sums(c, threadIdx.x, BN_THREADS, &a, &b);
    a = bn_block_sum(a, sh);
    b = bn_block_sum(b, sh);
    if (threadIdx.x == 0) { dbeta[c] = (float)a; dgamma[c] = (float)b; }
}

} // namespace

int k_cuda_bn_stats_t(int n, int c, int hw, const void *x, int xt, float *mean, float *var, port_stream s)
{
    if (c <= 0) return 0;
    StatPart f = {{c, hw}, (size_t)n * hw, x, xt};
    K_LAUNCH(stats_kernel, c, BN_THREADS, 0, (cudaStream_t)s)(f, mean, var);
    char d_[48];
    return k_cuda_check_launch("k_cuda_bn_stats", "n=%d c=%d hw=%d%s", n, c, hw, k_act_desc(d_, sizeof d_, xt, 0));
}

int k_cuda_bn_fwd_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                    const float *gamma, const float *beta, void *y, int yt, port_stream s)
{
    k_cuda_each((size_t)n * c * hw, Fwd{c, hw, x, xt, mean, invstd, gamma, beta, y, yt, NULL, 0, 0}, s);
    char d_[48];
    return k_cuda_check_launch("k_cuda_bn_fwd", "n=%d c=%d hw=%d%s", n, c, hw, k_act_desc(d_, sizeof d_, xt, yt));
}

int k_cuda_bn_relu_fwd_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                         const float *gamma, const float *beta, const void *add, int at, void *y, int yt, port_stream s)
{
    k_cuda_each((size_t)n * c * hw, Fwd{c, hw, x, xt, mean, invstd, gamma, beta, y, yt, add, at, 1}, s);
    char d_[48];
    return k_cuda_check_launch(add ? "k_cuda_bn_add_relu_fwd" : "k_cuda_bn_relu_fwd", "n=%d c=%d hw=%d%s", n, c, hw,
                               k_act_desc(d_, sizeof d_, xt | at, yt));
}

// The per-channel sums of BN's backward; relu: with the fused ReLU's mask on dy.
static int bwd_sums(const char *name, int relu, int n, int c, int hw, const void *x, int xt, const float *mean,
                    const float *invstd, const float *gamma, const float *beta, const float *dy, float *dgamma,
                    float *dbeta, port_stream s)
{
    if (c <= 0) return 0;
    BwdPart f = {{c, hw}, (size_t)n * hw, x, xt, mean, invstd, dy, gamma, beta, relu};
    K_LAUNCH(bwd_sums_kernel, c, BN_THREADS, 0, (cudaStream_t)s)(f, dgamma, dbeta);
    char d_[48];
    return k_cuda_check_launch(name, "n=%d c=%d hw=%d%s", n, c, hw, k_act_desc(d_, sizeof d_, xt, 0));
}

int k_cuda_bn_bwd_sums_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                         const float *dy, float *dgamma, float *dbeta, port_stream s)
{
    return bwd_sums("k_cuda_bn_bwd_sums", 0, n, c, hw, x, xt, mean, invstd, NULL, NULL, dy, dgamma, dbeta, s);
}

int k_cuda_bn_relu_bwd_sums_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                              const float *gamma, const float *beta, const float *dy, float *dgamma, float *dbeta,
                              port_stream s)
{
    return bwd_sums("k_cuda_bn_relu_bwd_sums", 1, n, c, hw, x, xt, mean, invstd, gamma, beta, dy, dgamma, dbeta, s);
}

int k_cuda_bn_bwd_dx_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                       const float *gamma, const float *dgamma, const float *dbeta, double m, const float *dy,
                       float *dx, port_stream s)
{
    Dx f = {c, hw, (float)(1.0 / m), x, xt, mean, invstd, gamma, dgamma, dbeta, dy, dx, NULL, 0};
    k_cuda_each((size_t)n * c * hw, f, s);
    char d_[48];
    return k_cuda_check_launch("k_cuda_bn_bwd_dx", "n=%d c=%d hw=%d m=%g%s", n, c, hw, m, k_act_desc(d_, sizeof d_, xt, 0));
}

int k_cuda_bn_relu_bwd_dx_t(int n, int c, int hw, const void *x, int xt, const float *mean, const float *invstd,
                            const float *gamma, const float *beta, const float *dgamma, const float *dbeta, double m,
                            const float *dy, float *dx, port_stream s)
{
    Dx f = {c, hw, (float)(1.0 / m), x, xt, mean, invstd, gamma, dgamma, dbeta, dy, dx, beta, 1};
    k_cuda_each((size_t)n * c * hw, f, s);
    char d_[48];
    return k_cuda_check_launch("k_cuda_bn_relu_bwd_dx", "n=%d c=%d hw=%d m=%g%s", n, c, hw, m, k_act_desc(d_, sizeof d_, xt, 0));
}

int k_cuda_bn_stats(int n, int c, int hw, const float *x, float *mean, float *var, port_stream s)
{
    return k_cuda_bn_stats_t(n, c, hw, x, K_CUDA_ACT_F32, mean, var, s);
}

int k_cuda_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd, const float *gamma,
                  const float *beta, float *y, port_stream s)
{
    return k_cuda_bn_fwd_t(n, c, hw, x, K_CUDA_ACT_F32, mean, invstd, gamma, beta, y, K_CUDA_ACT_F32, s);
}

int k_cuda_bn_bwd_sums(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                       const float *dy, float *dgamma, float *dbeta, port_stream s)
{
    return k_cuda_bn_bwd_sums_t(n, c, hw, x, K_CUDA_ACT_F32, mean, invstd, dy, dgamma, dbeta, s);
}

int k_cuda_bn_bwd_dx(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                     const float *gamma, const float *dgamma, const float *dbeta, double m, const float *dy,
                     float *dx, port_stream s)
{
    return k_cuda_bn_bwd_dx_t(n, c, hw, x, K_CUDA_ACT_F32, mean, invstd, gamma, dgamma, dbeta, m, dy, dx, s);
}

int k_cuda_bn_finish(int c, const float *mean, const float *var, float eps, float momentum, double count,
                     float *invstd, float *running_mean, float *running_var, port_stream s)
{
    k_cuda_each((size_t)c, Finish{eps, momentum, count, mean, var, invstd, running_mean, running_var}, s);
    return k_cuda_check_launch("k_cuda_bn_finish", "c=%d count=%g", c, count);
}
