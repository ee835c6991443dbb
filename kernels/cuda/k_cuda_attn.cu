// Causal attention on the device (kernels/k_tfm.h's k_attention_* twins). qkv rows
// [t, 3C] (C = h hd): q at column j hd, k at C + j hd, v at 2C + j hd; y [t, C];
// lse[b, h, i] kept, the probabilities recomputed in backward.
//
// Head sizes up to AT_HD (64: GPT-2's): tiled. A block of 8 warps takes AT_R (32) rows of
// one (sequence, head), each warp 4 of them (w, w + 8, w + 16, w + 24: the causal work
// spread evenly); tiles of 32 keys (queries, for dk and dv) pass through shared memory
// zero-padded to 64 columns, so every dot product is one fixed unrolled loop. A lane
// computes one key's (query's) scores for its warp's 4 rows, then owns head dimensions
// lane and lane + 32 for the sums over the tile, the scores passed round by shuffles.
// Larger heads: one thread per row (plain, the first version's kernels).
// No atomics: every sum has one owner and a fixed order (the same bits on every run).
#include "kernels/cuda/k_cuda_common.cuh"
#include "kernels/k_tfm.h"
#include <math.h>

#define AT_R 32  // rows of a tile (= lanes: a lane per key or query)
#define AT_HD 64 // head size limit of the tiled kernels
#define AT_LD 65 // padded row: a lane per row reads 32 different banks
#define AT_W 8   // warps a block
#define AT_FULL 0xffffffffu

namespace {

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(AT_FULL, v, o));
    return v;
}
// A butterfly: every lane ends with the same bits (a + b is b + a).
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(AT_FULL, v, o);
    return v;
}

// sm[r][d] = src[(r0 + r) ld + d] for rows below t and columns below hd, else 0.
__device__ __forceinline__ void at_load(float (*sm)[AT_LD], const float *src, size_t ld, int r0, int t, int hd)
{
    for (int e = threadIdx.x; e < AT_R * AT_HD; e += blockDim.x) {
        int r = e / AT_HD, d = e % AT_HD;
        sm[r][d] = (r0 + r < t && d < hd) ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
    }
}

// Forward: block (query tile, head, sequence).
__global__ void __launch_bounds__(AT_W * 32)
at_fwd(int t, int h, int hd, float scale, const float *qkv, float *y, float *lse)
{
    __shared__ float qs[AT_R][AT_LD], ks[AT_R][AT_LD], vs[AT_R][AT_LD];
    const int q0 = blockIdx.x * AT_R, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)s * t * ld + (size_t)hh * hd;
    at_load(qs, base, ld, q0, t, hd);
    float m[4], l[4], acc[4][2];
#pragma unroll
    for (int r = 0; r < 4; r++) m[r] = -INFINITY, l[r] = 0.0f, acc[r][0] = acc[r][1] = 0.0f;
    for (int k0 = 0; k0 < t && k0 < q0 + AT_R; k0 += AT_R) {
        __syncthreads(); // the last tile's readers are done
        at_load(ks, base + C, ld, k0, t, hd);
        at_load(vs, base + 2 * C, ld, k0, t, hd);
        __syncthreads();
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 16
        for (int d = 0; d < AT_HD; d++) {
            float kv = ks[lane][d];
#pragma unroll
            for (int r = 0; r < 4; r++) sc[r] = fmaf(qs[w + 8 * r][d], kv, sc[r]);
        }
        const int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = q0 + w + 8 * r;
            if (i >= t || k0 > i) continue; // the whole tile masked for this row: warp-uniform
            float v = j <= i ? sc[r] * scale : -INFINITY;
            float nm = fmaxf(m[r], warp_max(v)), corr = expf(m[r] - nm), p = expf(v - nm);
            l[r] = l[r] * corr + warp_sum(p);
            float a0 = acc[r][0] * corr, a1 = acc[r][1] * corr;
            for (int jj = 0; jj < AT_R; jj++) {
                float pj = __shfl_sync(AT_FULL, p, jj);
                a0 = fmaf(pj, vs[jj][lane], a0);
                a1 = fmaf(pj, vs[jj][lane + 32], a1);
            }
            acc[r][0] = a0, acc[r][1] = a1, m[r] = nm;
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = q0 + w + 8 * r;
        if (i >= t) continue;
        float *yr = y + ((size_t)s * t + i) * C + (size_t)hh * hd;
        if (lane < hd) yr[lane] = acc[r][0] / l[r];
        if (lane + 32 < hd) yr[lane + 32] = acc[r][1] / l[r];
        if (lane == 0) lse[((size_t)s * h + hh) * t + i] = m[r] + logf(l[r]);
    }
}

// dq_i = scale sum_{j <= i} dS_ij k_j, dS_ij = P_ij (dy_i . v_j - D_i): block (query tile, head, sequence).
__global__ void __launch_bounds__(AT_W * 32)
at_bwd_dq(int t, int h, int hd, float scale, const float *qkv, const float *dy, const float *lse, const float *dd,
          float *dqkv)
{
    __shared__ float qs[AT_R][AT_LD], gs[AT_R][AT_LD], ks[AT_R][AT_LD], vs[AT_R][AT_LD];
    const int q0 = blockIdx.x * AT_R, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t ld = 3 * (size_t)C, row0 = ((size_t)s * h + hh) * t;
    const float *base = qkv + (size_t)s * t * ld + (size_t)hh * hd;
    at_load(qs, base, ld, q0, t, hd);
    at_load(gs, dy + (size_t)s * t * C + (size_t)hh * hd, C, q0, t, hd);
    float li[4], di[4], acc[4][2];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = q0 + w + 8 * r;
        li[r] = i < t ? lse[row0 + i] : 0.0f, di[r] = i < t ? dd[row0 + i] : 0.0f;
        acc[r][0] = acc[r][1] = 0.0f;
    }
    for (int k0 = 0; k0 < t && k0 < q0 + AT_R; k0 += AT_R) {
        __syncthreads();
        at_load(ks, base + C, ld, k0, t, hd);
        at_load(vs, base + 2 * C, ld, k0, t, hd);
        __syncthreads();
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 16
        for (int d = 0; d < AT_HD; d++) {
            float kv = ks[lane][d], vv = vs[lane][d];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                sc[r] = fmaf(qs[w + 8 * r][d], kv, sc[r]);
                dp[r] = fmaf(gs[w + 8 * r][d], vv, dp[r]);
            }
        }
        const int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = q0 + w + 8 * r;
            if (i >= t || k0 > i) continue; // warp-uniform
            float p = j <= i ? expf(sc[r] * scale - li[r]) : 0.0f, ds = p * (dp[r] - di[r]) * scale;
            float a0 = acc[r][0], a1 = acc[r][1];
            for (int jj = 0; jj < AT_R; jj++) {
                float dj = __shfl_sync(AT_FULL, ds, jj);
                a0 = fmaf(dj, ks[jj][lane], a0);
                a1 = fmaf(dj, ks[jj][lane + 32], a1);
            }
            acc[r][0] = a0, acc[r][1] = a1;
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = q0 + w + 8 * r;
        if (i >= t) continue;
        float *dq = dqkv + ((size_t)s * t + i) * 3 * C + (size_t)hh * hd;
        if (lane < hd) dq[lane] = acc[r][0];
        if (lane + 32 < hd) dq[lane + 32] = acc[r][1];
    }
}

// dk_j = scale sum_{i >= j} dS_ij q_i, dv_j = sum_{i >= j} P_ij dy_i: block (key tile, head, sequence).
__global__ void __launch_bounds__(AT_W * 32)
at_bwd_dkv(int t, int h, int hd, float scale, const float *qkv, const float *dy, const float *lse, const float *dd,
           float *dqkv)
{
    __shared__ float ks[AT_R][AT_LD], vs[AT_R][AT_LD], qs[AT_R][AT_LD], gs[AT_R][AT_LD];
    __shared__ float ls[AT_R], ds_[AT_R];
    const int j0 = blockIdx.x * AT_R, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t ld = 3 * (size_t)C, row0 = ((size_t)s * h + hh) * t;
    const float *base = qkv + (size_t)s * t * ld + (size_t)hh * hd, *gbase = dy + (size_t)s * t * C + (size_t)hh * hd;
    at_load(ks, base + C, ld, j0, t, hd);
    at_load(vs, base + 2 * C, ld, j0, t, hd);
    float ak[4][2], av[4][2];
#pragma unroll
    for (int r = 0; r < 4; r++) ak[r][0] = ak[r][1] = av[r][0] = av[r][1] = 0.0f;
    for (int q0 = j0; q0 < t; q0 += AT_R) {
        __syncthreads();
        at_load(qs, base, ld, q0, t, hd);
        at_load(gs, gbase, C, q0, t, hd);
        if (threadIdx.x < AT_R) {
            int i = q0 + threadIdx.x;
            ls[threadIdx.x] = i < t ? lse[row0 + i] : 0.0f;
            ds_[threadIdx.x] = i < t ? dd[row0 + i] : 0.0f;
        }
        __syncthreads();
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 16
        for (int d = 0; d < AT_HD; d++) {
            float qv = qs[lane][d], gv = gs[lane][d];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                sc[r] = fmaf(qv, ks[w + 8 * r][d], sc[r]);
                dp[r] = fmaf(gv, vs[w + 8 * r][d], dp[r]);
            }
        }
        const int i = q0 + lane;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int j = j0 + w + 8 * r;
            if (j >= t || q0 + AT_R - 1 < j) continue; // warp-uniform: no query of the tile sees key j
            float p = (i < t && i >= j) ? expf(sc[r] * scale - ls[lane]) : 0.0f;
            float ds = p * (dp[r] - ds_[lane]) * scale;
            float k0v = ak[r][0], k1v = ak[r][1], v0 = av[r][0], v1 = av[r][1];
            for (int ii = 0; ii < AT_R; ii++) {
                float pi = __shfl_sync(AT_FULL, p, ii), di = __shfl_sync(AT_FULL, ds, ii);
                k0v = fmaf(di, qs[ii][lane], k0v);
                k1v = fmaf(di, qs[ii][lane + 32], k1v);
                v0 = fmaf(pi, gs[ii][lane], v0);
                v1 = fmaf(pi, gs[ii][lane + 32], v1);
            }
            ak[r][0] = k0v, ak[r][1] = k1v, av[r][0] = v0, av[r][1] = v1;
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int j = j0 + w + 8 * r;
        if (j >= t) continue;
        float *dk = dqkv + ((size_t)s * t + j) * 3 * C + (size_t)C + (size_t)hh * hd, *dv = dk + C;
        if (lane < hd) dk[lane] = ak[r][0], dv[lane] = av[r][0];
        if (lane + 32 < hd) dk[lane + 32] = ak[r][1], dv[lane + 32] = av[r][1];
    }
}

// ---- head sizes above AT_HD: one thread per (b, head, query row), keys streamed
// through an online softmax; backward one thread per query row (dq) or key row (dk, dv).
__device__ __forceinline__ const float *qkv_at(const float *qkv, int t, int h, int hd, int s, int i, int part, int j)
{
    return qkv + ((size_t)s * t + i) * 3 * h * hd + (size_t)part * h * hd + (size_t)j * hd;
}

__global__ void attn_fwd(int b, int t, int h, int hd, float scale, const float *qkv, float *y, float *lse)
{
    size_t rows = (size_t)b * h * t;
    float acc[K_ATTN_MAX_HD];
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < rows; g += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(g % t), hh = (int)(g / t % h), s = (int)(g / ((size_t)t * h));
        const float *q = qkv_at(qkv, t, h, hd, s, i, 0, hh);
        float mx = -INFINITY, l = 0.0f;
        for (int d = 0; d < hd; d++) acc[d] = 0.0f;
        for (int j = 0; j <= i; j++) {
            const float *k = qkv_at(qkv, t, h, hd, s, j, 1, hh), *v = qkv_at(qkv, t, h, hd, s, j, 2, hh);
            float sc = 0.0f;
            for (int d = 0; d < hd; d++) sc += q[d] * k[d];
            sc *= scale;
            float nm = fmaxf(mx, sc), corr = expf(mx - nm), p = expf(sc - nm);
            l = l * corr + p;
            for (int d = 0; d < hd; d++) acc[d] = acc[d] * corr + p * v[d];
            mx = nm;
        }
        float *yr = y + ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
        for (int d = 0; d < hd; d++) yr[d] = acc[d] / l;
        lse[g] = mx + logf(l);
    }
}

// D[b, h, i] = dy_i . y_i (the softmax backward's row term)
__global__ void attn_bwd_d(int b, int t, int h, int hd, const float *y, const float *dy, float *dd)
{
    size_t rows = (size_t)b * h * t;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < rows; g += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(g % t), hh = (int)(g / t % h), s = (int)(g / ((size_t)t * h));
        size_t o = ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
        float a = 0.0f;
        for (int d = 0; d < hd; d++) a += dy[o + d] * y[o + d];
        dd[g] = a;
    }
}

// P_ij = exp(scale q_i.k_j - lse_i), dS_ij = P_ij (dy_i . v_j - D_i).
__device__ __forceinline__ void attn_pds(const float *qkv, const float *dy, const float *lse, const float *dd, int t,
                                         int h, int hd, float scale, int s, int hh, int i, int j, float *p, float *ds)
{
    const float *q = qkv_at(qkv, t, h, hd, s, i, 0, hh), *k = qkv_at(qkv, t, h, hd, s, j, 1, hh);
    const float *v = qkv_at(qkv, t, h, hd, s, j, 2, hh);
    const float *g = dy + ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
    size_t r = ((size_t)s * h + hh) * t + i;
    float sc = 0.0f, dp = 0.0f;
    for (int d = 0; d < hd; d++) sc += q[d] * k[d], dp += g[d] * v[d];
    *p = expf(sc * scale - lse[r]);
    *ds = *p * (dp - dd[r]);
}

// dq_i = scale sum_{j <= i} dS_ij k_j: one thread per query row.
__global__ void attn_bwd_dq(int b, int t, int h, int hd, float scale, const float *qkv, const float *dy,
                            const float *lse, const float *dd, float *dqkv)
{
    size_t rows = (size_t)b * h * t;
    for (size_t gi = blockIdx.x * (size_t)blockDim.x + threadIdx.x; gi < rows; gi += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(gi % t), hh = (int)(gi / t % h), s = (int)(gi / ((size_t)t * h));
        float *dq = dqkv + ((size_t)s * t + i) * 3 * h * hd + (size_t)hh * hd;
        for (int d = 0; d < hd; d++) dq[d] = 0.0f;
        for (int j = 0; j <= i; j++) {
            float p, ds;
            attn_pds(qkv, dy, lse, dd, t, h, hd, scale, s, hh, i, j, &p, &ds);
            const float *k = qkv_at(qkv, t, h, hd, s, j, 1, hh);
            for (int d = 0; d < hd; d++) dq[d] += ds * scale * k[d];
        }
    }
}

// dk_j = scale sum_{i >= j} dS_ij q_i, dv_j = sum_{i >= j} P_ij dy_i: one thread per key row.
__global__ void attn_bwd_dkv(int b, int t, int h, int hd, float scale, const float *qkv, const float *dy,
                             const float *lse, const float *dd, float *dqkv)
{
    size_t rows = (size_t)b * h * t;
    for (size_t gj = blockIdx.x * (size_t)blockDim.x + threadIdx.x; gj < rows; gj += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(gj % t), hh = (int)(gj / t % h), s = (int)(gj / ((size_t)t * h));
        float *dk = dqkv + ((size_t)s * t + j) * 3 * h * hd + (size_t)h * hd + (size_t)hh * hd;
        float *dv = dk + (size_t)h * hd;
        for (int d = 0; d < hd; d++) dk[d] = 0.0f, dv[d] = 0.0f;
        for (int i = j; i < t; i++) {
            float p, ds;
            attn_pds(qkv, dy, lse, dd, t, h, hd, scale, s, hh, i, j, &p, &ds);
            const float *q = qkv_at(qkv, t, h, hd, s, i, 0, hh);
            const float *g = dy + ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
            for (int d = 0; d < hd; d++) dk[d] += ds * scale * q[d], dv[d] += p * g[d];
        }
    }
}

} // namespace

// The tiled kernels' grid: (row tiles, heads, sequences).
static dim3 at_grid(int b, int t, int h) { return dim3((unsigned)((t + AT_R - 1) / AT_R), (unsigned)h, (unsigned)b); }

size_t k_cuda_attention_workspace(int b, int t, int h) { return (size_t)b * h * t * sizeof(float); }

int k_cuda_attention_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *lse, port_stream s)
{
    if (hd > K_ATTN_MAX_HD) {
        port_cuda_fail("k_cuda_attention_fwd: head size %d above %d", hd, K_ATTN_MAX_HD);
        return -1;
    }
    size_t rows = (size_t)b * h * t;
    if (hd <= AT_HD)
        K_LAUNCH(at_fwd, at_grid(b, t, h), AT_W * 32, 0, (cudaStream_t)s)(t, h, hd, 1.0f / sqrtf((float)hd), qkv, y,
                                                                        lse);
    else
        K_LAUNCH(attn_fwd, k_cuda_blocks(rows, 64), 64, 0, (cudaStream_t)s)(b, t, h, hd, 1.0f / sqrtf((float)hd),
                                                                            qkv, y, lse);
    return k_cuda_check_launch("k_cuda_attention_fwd", "b=%d t=%d h=%d hd=%d", b, t, h, hd);
}

int k_cuda_attention_bwd(int b, int t, int h, int hd, const float *qkv, const float *y, const float *lse,
                         const float *dy, float *dqkv, void *ws, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    size_t rows = (size_t)b * h * t;
    float *dd = (float *)ws, scale = 1.0f / sqrtf((float)hd);
    K_LAUNCH(attn_bwd_d, k_cuda_blocks(rows), K_CUDA_THREADS, 0, cs)(b, t, h, hd, y, dy, dd);
    if (k_cuda_check_launch("k_cuda_attention_bwd (D)", "b=%d t=%d h=%d hd=%d", b, t, h, hd)) return -1;
    if (hd <= AT_HD)
        K_LAUNCH(at_bwd_dq, at_grid(b, t, h), AT_W * 32, 0, cs)(t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    else
        K_LAUNCH(attn_bwd_dq, k_cuda_blocks(rows, 64), 64, 0, cs)(b, t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    if (k_cuda_check_launch("k_cuda_attention_bwd (dq)", "b=%d t=%d h=%d hd=%d", b, t, h, hd)) return -1;
    if (hd <= AT_HD)
        K_LAUNCH(at_bwd_dkv, at_grid(b, t, h), AT_W * 32, 0, cs)(t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    else
        K_LAUNCH(attn_bwd_dkv, k_cuda_blocks(rows, 64), 64, 0, cs)(b, t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    return k_cuda_check_launch("k_cuda_attention_bwd (dk, dv)", "b=%d t=%d h=%d hd=%d", b, t, h, hd);
}

