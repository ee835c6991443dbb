// Causal attention on the device (kernels/k_tfm.h's k_attention_* twins). qkv rows
// [t, 3C] (C = h hd): q at column j hd, k at C + j hd, v at 2C + j hd; y [t, C];
// lse[b, h, i] kept, the probabilities recomputed in backward.
//
// Tiled: a block of 8 warps takes AT_R (32) rows of one (sequence, head), each warp 4 of
// them (w, w + 8, w + 16, w + 24: the causal work spread evenly); tiles of 32 keys
// (queries, for dk and dv) pass through shared memory zero-padded to 64 columns, so
// every dot product is one fixed unrolled loop. A lane computes one key's (query's)
// scores for its warp's 4 rows, then owns head dimensions lane and lane + 32 of each
// 64-wide chunk for the sums over the tile, the scores passed round by shuffles. Heads
// up to 64 (GPT-2's: NC = 1) keep their rows in shared memory; wider ones (NC chunks of
// 64, up to K_ATTN_MAX_HD) bring each chunk in turn (48 KiB of static shared memory).
// No atomics: every sum has one owner and a fixed order (the same bits on every run).
#include "kernels/cuda/k_cuda_common.cuh"
#include "kernels/k_tfm.h"
#include <math.h>

#define AT_R 32  // rows of a tile (= lanes: a lane per key or query)
#define AT_HD 64 // head columns of a chunk
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

// sm[r][d] = src[(r0 + r) ld + ch 64 + d] for rows below t and columns below hd, else 0.
__device__ __forceinline__ void at_load(float (*sm)[AT_LD], const float *src, size_t ld, int r0, int t, int hd,
                                        int ch)
{
    for (int e = threadIdx.x; e < AT_R * AT_HD; e += blockDim.x) {
        int r = e / AT_HD, d = e % AT_HD, col = ch * AT_HD + d;
        sm[r][d] = (r0 + r < t && col < hd) ? src[(size_t)(r0 + r) * ld + col] : 0.0f;
    }
}

// a[0], a[1] (head dimensions lane and lane + 32 of a chunk) += the sum over the tile's
// rows jj of lane jj's x times tile[jj][those dimensions], in row order.
__device__ __forceinline__ void at_rows(float x, const float (*tile)[AT_LD], int lane, float *a)
{
    float a0 = a[0], a1 = a[1];
    for (int jj = 0; jj < AT_R; jj++) {
        float xj = __shfl_sync(AT_FULL, x, jj);
        a0 = fmaf(xj, tile[jj][lane], a0);
        a1 = fmaf(xj, tile[jj][lane + 32], a1);
    }
    a[0] = a0, a[1] = a1;
}

// The head column of a lane's accumulator u (chunk u / 2, then lane or lane + 32).
__device__ __forceinline__ int at_col(int u, int lane) { return (u / 2) * AT_HD + lane + 32 * (u % 2); }

// Forward: block (query tile, head, sequence).
template <int NC>
__global__ void __launch_bounds__(AT_W * 32)
at_fwd(int t, int h, int hd, float scale, const float *qkv, float *y, float *lse)
{
    __shared__ float qs[AT_R][AT_LD], ks[AT_R][AT_LD], vs[AT_R][AT_LD];
    const int q0 = blockIdx.x * AT_R, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)s * t * ld + (size_t)hh * hd;
    if (NC == 1) at_load(qs, base, ld, q0, t, hd, 0);
    float m[4], l[4], p[4], acc[4][2 * NC];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int u = 0; u < 2 * NC; u++) acc[r][u] = 0.0f;
    }
    for (int k0 = 0; k0 < t && k0 < q0 + AT_R; k0 += AT_R) {
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int ch = 0; ch < NC; ch++) {
            __syncthreads(); // the last tile's (chunk's) readers are done
            if (NC > 1) at_load(qs, base, ld, q0, t, hd, ch);
            at_load(ks, base + C, ld, k0, t, hd, ch);
            if (NC == 1) at_load(vs, base + 2 * C, ld, k0, t, hd, 0);
            __syncthreads();
#pragma unroll 16
            for (int d = 0; d < AT_HD; d++) {
                float kv = ks[lane][d];
#pragma unroll
                for (int r = 0; r < 4; r++) sc[r] = fmaf(qs[w + 8 * r][d], kv, sc[r]);
            }
        }
        const int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = q0 + w + 8 * r;
            p[r] = 0.0f;
            if (i >= t || k0 > i) continue; // the whole tile masked for this row: warp-uniform
            float v = j <= i ? sc[r] * scale : -INFINITY;
            float nm = fmaxf(m[r], warp_max(v)), corr = expf(m[r] - nm);
            p[r] = expf(v - nm);
            l[r] = l[r] * corr + warp_sum(p[r]);
#pragma unroll
            for (int u = 0; u < 2 * NC; u++) acc[r][u] *= corr;
            m[r] = nm;
        }
#pragma unroll
        for (int ch = 0; ch < NC; ch++) {
            if (NC > 1) {
                __syncthreads();
                at_load(vs, base + 2 * C, ld, k0, t, hd, ch);
                __syncthreads();
            }
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = q0 + w + 8 * r;
                if (i >= t || k0 > i) continue;
                at_rows(p[r], vs, lane, &acc[r][2 * ch]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = q0 + w + 8 * r;
        if (i >= t) continue;
        float *yr = y + ((size_t)s * t + i) * C + (size_t)hh * hd;
#pragma unroll
        for (int u = 0; u < 2 * NC; u++) {
            int col = at_col(u, lane);
            if (col < hd) yr[col] = acc[r][u] / l[r];
        }
        if (lane == 0) lse[((size_t)s * h + hh) * t + i] = m[r] + logf(l[r]);
    }
}

// dq_i = scale sum_{j <= i} dS_ij k_j, dS_ij = P_ij (dy_i . v_j - D_i): block (query tile, head, sequence).
template <int NC>
__global__ void __launch_bounds__(AT_W * 32)
at_bwd_dq(int t, int h, int hd, float scale, const float *qkv, const float *dy, const float *lse, const float *dd,
          float *dqkv)
{
    __shared__ float qs[AT_R][AT_LD], gs[AT_R][AT_LD], ks[AT_R][AT_LD], vs[AT_R][AT_LD];
    const int q0 = blockIdx.x * AT_R, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t ld = 3 * (size_t)C, row0 = ((size_t)s * h + hh) * t;
    const float *base = qkv + (size_t)s * t * ld + (size_t)hh * hd, *gbase = dy + (size_t)s * t * C + (size_t)hh * hd;
    if (NC == 1) at_load(qs, base, ld, q0, t, hd, 0), at_load(gs, gbase, C, q0, t, hd, 0);
    float li[4], di[4], ds[4], acc[4][2 * NC];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = q0 + w + 8 * r;
        li[r] = i < t ? lse[row0 + i] : 0.0f, di[r] = i < t ? dd[row0 + i] : 0.0f;
#pragma unroll
        for (int u = 0; u < 2 * NC; u++) acc[r][u] = 0.0f;
    }
    for (int k0 = 0; k0 < t && k0 < q0 + AT_R; k0 += AT_R) {
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int ch = 0; ch < NC; ch++) {
            __syncthreads();
            if (NC > 1) at_load(qs, base, ld, q0, t, hd, ch), at_load(gs, gbase, C, q0, t, hd, ch);
            at_load(ks, base + C, ld, k0, t, hd, ch);
            at_load(vs, base + 2 * C, ld, k0, t, hd, ch);
            __syncthreads();
#pragma unroll 16
            for (int d = 0; d < AT_HD; d++) {
                float kv = ks[lane][d], vv = vs[lane][d];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    sc[r] = fmaf(qs[w + 8 * r][d], kv, sc[r]);
                    dp[r] = fmaf(gs[w + 8 * r][d], vv, dp[r]);
                }
            }
        }
        const int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = q0 + w + 8 * r;
            float pr = (i < t && j <= i) ? expf(sc[r] * scale - li[r]) : 0.0f;
            ds[r] = pr * (dp[r] - di[r]) * scale;
        }
#pragma unroll
        for (int ch = 0; ch < NC; ch++) {
            if (NC > 1) { // the chunk's keys again (the scores' loop left the last one)
                __syncthreads();
                at_load(ks, base + C, ld, k0, t, hd, ch);
                __syncthreads();
            }
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = q0 + w + 8 * r;
                if (i >= t || k0 > i) continue; // warp-uniform
                at_rows(ds[r], ks, lane, &acc[r][2 * ch]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = q0 + w + 8 * r;
        if (i >= t) continue;
        float *dq = dqkv + ((size_t)s * t + i) * 3 * C + (size_t)hh * hd;
#pragma unroll
        for (int u = 0; u < 2 * NC; u++) {
            int col = at_col(u, lane);
            if (col < hd) dq[col] = acc[r][u];
        }
    }
}

// dk_j = scale sum_{i >= j} dS_ij q_i, dv_j = sum_{i >= j} P_ij dy_i: block (key tile, head, sequence).
template <int NC>
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
    if (NC == 1) at_load(ks, base + C, ld, j0, t, hd, 0), at_load(vs, base + 2 * C, ld, j0, t, hd, 0);
    float ak[4][2 * NC], av[4][2 * NC], p[4], ds[4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int u = 0; u < 2 * NC; u++) ak[r][u] = av[r][u] = 0.0f;
    for (int q0 = j0; q0 < t; q0 += AT_R) {
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int ch = 0; ch < NC; ch++) {
            __syncthreads();
            if (NC > 1) at_load(ks, base + C, ld, j0, t, hd, ch), at_load(vs, base + 2 * C, ld, j0, t, hd, ch);
            at_load(qs, base, ld, q0, t, hd, ch);
            at_load(gs, gbase, C, q0, t, hd, ch);
            if (ch == 0 && threadIdx.x < AT_R) {
                int i = q0 + threadIdx.x;
                ls[threadIdx.x] = i < t ? lse[row0 + i] : 0.0f;
                ds_[threadIdx.x] = i < t ? dd[row0 + i] : 0.0f;
            }
            __syncthreads();
#pragma unroll 16
            for (int d = 0; d < AT_HD; d++) {
                float qv = qs[lane][d], gv = gs[lane][d];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    sc[r] = fmaf(qv, ks[w + 8 * r][d], sc[r]);
                    dp[r] = fmaf(gv, vs[w + 8 * r][d], dp[r]);
                }
            }
        }
        const int i = q0 + lane;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int j = j0 + w + 8 * r;
            p[r] = (i < t && i >= j && j < t) ? expf(sc[r] * scale - ls[lane]) : 0.0f;
            ds[r] = p[r] * (dp[r] - ds_[lane]) * scale;
        }
#pragma unroll
        for (int ch = 0; ch < NC; ch++) {
            if (NC > 1) { // the chunk's queries and their dy again
                __syncthreads();
                at_load(qs, base, ld, q0, t, hd, ch);
                at_load(gs, gbase, C, q0, t, hd, ch);
                __syncthreads();
            }
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int j = j0 + w + 8 * r;
                if (j >= t || q0 + AT_R - 1 < j) continue; // warp-uniform: no query of the tile sees key j
                at_rows(ds[r], qs, lane, &ak[r][2 * ch]);
                at_rows(p[r], gs, lane, &av[r][2 * ch]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int j = j0 + w + 8 * r;
        if (j >= t) continue;
        float *dk = dqkv + ((size_t)s * t + j) * 3 * C + (size_t)C + (size_t)hh * hd, *dv = dk + C;
#pragma unroll
        for (int u = 0; u < 2 * NC; u++) {
            int col = at_col(u, lane);
            if (col < hd) dk[col] = ak[r][u], dv[col] = av[r][u];
        }
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

} // namespace

// The grid: (row tiles, heads, sequences); NC: 64-wide chunks of the head.
static dim3 at_grid(int b, int t, int h) { return dim3((unsigned)((t + AT_R - 1) / AT_R), (unsigned)h, (unsigned)b); }
#define AT_LAUNCH(kernel, nc, b, t, h, s, ...)                                                                   \
    do {                                                                                                         \
        switch (nc) {                                                                                            \
        case 1: K_LAUNCH((kernel<1>), at_grid(b, t, h), AT_W * 32, 0, s)(__VA_ARGS__); break;                   \
        case 2: K_LAUNCH((kernel<2>), at_grid(b, t, h), AT_W * 32, 0, s)(__VA_ARGS__); break;                   \
        case 3: K_LAUNCH((kernel<3>), at_grid(b, t, h), AT_W * 32, 0, s)(__VA_ARGS__); break;                   \
        default: K_LAUNCH((kernel<4>), at_grid(b, t, h), AT_W * 32, 0, s)(__VA_ARGS__); break;                  \
        }                                                                                                        \
    } while (0)
static_assert(K_ATTN_MAX_HD <= 4 * AT_HD, "the tiled kernels take heads of up to 4 chunks");

// The tensor-core backward's 16-bit copy of dy (k_cuda_attn_tc.cu: fa_dy16_bytes) in front
// of the row terms (fp32, one a row: this file's backward and the tensor cores' D).
size_t k_cuda_attention_workspace(int b, int t, int h, int hd)
{
    return ((size_t)b * t * h * hd * 2 + 255) / 256 * 256 + (size_t)b * h * t * sizeof(float);
}

int k_cuda_attention_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *lse, port_stream s)
{
    if (hd > K_ATTN_MAX_HD) {
        port_cuda_fail("k_cuda_attention_fwd: head size %d above %d", hd, K_ATTN_MAX_HD);
        return -1;
    }
    AT_LAUNCH(at_fwd, (hd + AT_HD - 1) / AT_HD, b, t, h, (cudaStream_t)s, t, h, hd, 1.0f / sqrtf((float)hd), qkv, y,
              lse);
    return k_cuda_check_launch("k_cuda_attention_fwd", "b=%d t=%d h=%d hd=%d", b, t, h, hd);
}

int k_cuda_attention_bwd(int b, int t, int h, int hd, const float *qkv, const float *y, const float *lse,
                         const float *dy, float *dqkv, void *ws, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    size_t rows = (size_t)b * h * t;
    float *dd = (float *)ws, scale = 1.0f / sqrtf((float)hd);
    int nc = (hd + AT_HD - 1) / AT_HD;
    K_LAUNCH(attn_bwd_d, k_cuda_blocks(rows), K_CUDA_THREADS, 0, cs)(b, t, h, hd, y, dy, dd);
    if (k_cuda_check_launch("k_cuda_attention_bwd (D)", "b=%d t=%d h=%d hd=%d", b, t, h, hd)) return -1;
    AT_LAUNCH(at_bwd_dq, nc, b, t, h, cs, t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    if (k_cuda_check_launch("k_cuda_attention_bwd (dq)", "b=%d t=%d h=%d hd=%d", b, t, h, hd)) return -1;
    AT_LAUNCH(at_bwd_dkv, nc, b, t, h, cs, t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    return k_cuda_check_launch("k_cuda_attention_bwd (dk, dv)", "b=%d t=%d h=%d hd=%d", b, t, h, hd);
}
