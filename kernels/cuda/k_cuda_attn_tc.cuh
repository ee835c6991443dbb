// The tensor-core attention's building blocks (k_cuda_attn_tc.cu, whose header says what
// the kernels compute): the swizzled 16-bit tiles, their loads (cp.async for 16-bit qkv,
// else read and rounded, optionally held in registers for a double-buffered tile), the
// mma.sync products on them, and the C fragments' stores.
#pragma once
#include "kernels/cuda/k_cuda_tc.cuh"
#include <math.h>

#define FA_T 64       // rows of a query (key) tile
#define FA_THREADS 128 // 4 warps, 16 rows each
#define FA_FULL 0xffffffffu

namespace {

struct alignas(16) FaChunk {
    unsigned w[4];
};

template <int TY> __device__ __forceinline__ unsigned fa_pack(float lo, float hi)
{
    return TY == K_CUDA_MM_BF16 ? k_pack_bf16x2(lo, hi) : k_pack_f16x2(lo, hi);
}

// Element offset of 16-byte chunk c (8 columns) of row r in a tile of HD-wide rows.
template <int HD> __device__ __forceinline__ int fa_off(int r, int c)
{
    if (HD >= 64) return r * HD + ((c ^ (r & 7)) << 3);
    return r * HD + ((c ^ ((r >> 1) & 3)) << 3); // 4 chunks a row: rows in pairs
}

// Whether a kernel's qkv goes by cp.async (its FaLoad's CP, chosen on the host at launch):
// 16-bit rows of the kernel's type, whole 16-byte chunks (hd % 8 == 0) from a 16-byte
// aligned base (ld = 3 C and the offsets of Q, K, V, heads and rows are then multiples of
// 8 elements too).
__host__ __device__ inline bool fa_cp(int ty, const void *qkv, int xt, int hd)
{
    return xt == ty && hd % 8 == 0 && ((size_t)qkv & 15) == 0;
}

// Tiles of R rows of one operand (src[at + (r0 + r) ld + (0, hd)] of element type xt)
// into the swizzled layout, zero past t and hd. CP (fa_cp true for src, a template
// argument so that a kernel carries one path's registers): copied by cp.async (the caller
// commits and waits; land is empty). Else read and rounded (k_act_ld widens a 16-bit
// value exactly): stored at once, or with PF held in registers from issue (before the
// current tile's products) to land (after them).
template <int TY, int HD, int R, bool PF, bool CP> struct FaLoad {
    static constexpr int CPR = HD / 8, CH = R * CPR / FA_THREADS; // chunks a row, chunks a thread
    static_assert(R * CPR % FA_THREADS == 0, "whole chunks a thread");
    static constexpr bool HOLD = PF && !CP; // chunks in registers from issue to land
    const void *src;
    size_t at, ld;
    int xt, t, hd;
    FaChunk c[HOLD ? CH : 1];
    __device__ __forceinline__ FaLoad(const void *s, int x, size_t a, size_t l, int tt, int h)
        : src(s), at(a), ld(l), xt(x), t(tt), hd(h)
    {
    }
    __device__ __forceinline__ FaChunk read(int gr, int col) const
    {
        size_t p = at + (size_t)gr * ld + col * 8;
        float f[8];
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] = gr < t && col * 8 + e < hd ? k_act_ld(src, xt, p + e) : 0.0f;
        FaChunk ch;
#pragma unroll
        for (int e = 0; e < 4; e++) ch.w[e] = fa_pack<TY>(f[2 * e], f[2 * e + 1]);
        return ch;
    }
    __device__ __forceinline__ void issue(unsigned short *tile, int r0)
    {
        if constexpr (CP) {
            const unsigned short *s16 = (const unsigned short *)src;
#pragma unroll 1
            for (int i = 0; i < CH; i++) {
                int q = threadIdx.x + i * FA_THREADS, r = q / CPR, col = q % CPR, gr = r0 + r;
                bool in = gr < t && col * 8 < hd; // hd % 8 == 0: a chunk is all in or all out
                K_CP_ASYNC16(tile + fa_off<HD>(r, col), in ? s16 + at + (size_t)gr * ld + col * 8 : s16, in ? 16 : 0);
            }
        } else if constexpr (PF) {
#pragma unroll
            for (int i = 0; i < CH; i++) {
                int q = threadIdx.x + i * FA_THREADS;
                c[i] = read(r0 + q / CPR, q % CPR);
                K_PIN_X4(c[i].w); // packed now, not after the products (registers)
            }
        } else {
#pragma unroll 1
            for (int i = 0; i < CH; i++) { // one chunk's 8 loads at a time: the registers of the products
                int q = threadIdx.x + i * FA_THREADS;
                *(FaChunk *)(tile + fa_off<HD>(q / CPR, q % CPR)) = read(r0 + q / CPR, q % CPR);
            }
        }
    }
    __device__ __forceinline__ void land(unsigned short *tile) const
    {
        if constexpr (HOLD) {
#pragma unroll
            for (int i = 0; i < CH; i++) {
                int q = threadIdx.x + i * FA_THREADS;
                *(FaChunk *)(tile + fa_off<HD>(q / CPR, q % CPR)) = c[i];
            }
        }
    }
};

// Streamed tiles: two buffers where two fit in 48 KiB of static shared memory.
__host__ __device__ constexpr int fa_bufs(int hd_tile) { return hd_tile <= 64 ? 2 : 1; }

// The top of a streamed tile: its copies in (with two buffers, issued one tile ahead) and
// visible to every thread; every warp done with the tile before, whose buffer the next
// loads overwrite.
__device__ __forceinline__ void fa_tile_in()
{
    K_CP_ASYNC_WAIT(0); // this thread's copies of the tile
    __syncthreads(); // everyone's, and the other buffer free
}

template <int TY> __device__ __forceinline__ void fa_mma(float d[4], const unsigned a[4], const unsigned b[2])
{
    if (TY == K_CUDA_MM_BF16) K_MMA_BF16(d, a, b);
    else K_MMA_F16(d, a, b);
}

// The A fragment of rows [row0, row0 + 16) and k step kk of a row-major tile.
template <int HD> __device__ __forceinline__ void fa_lda(unsigned a[4], const unsigned short *tile, int row0, int kk,
                                                          int lane)
{
    K_LDMATRIX_X4(a, tile + fa_off<HD>(row0 + (lane & 15), 2 * kk + (lane >> 4)));
}

// acc[n][.] += A B for k step kk, B[k][n] = tile[n][k] (the rows of the tile are the N
// columns: K for S = Q K^T, V for dP = dO V^T, Q or dO for the transposed products), NB
// n8 blocks.
template <int TY, int HD, int NB>
__device__ __forceinline__ void fa_abt_step(float (&acc)[NB][4], const unsigned a[4], const unsigned short *bt, int kk,
                                            int lane)
{
#pragma unroll
    for (int nb = 0; nb < NB; nb += 2) {
        // matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
        unsigned q[4];
        K_LDMATRIX_X4(q, bt + fa_off<HD>(nb * 8 + (lane & 7) + (lane >> 4) * 8, 2 * kk + ((lane >> 3) & 1)));
        unsigned b0[2] = {q[0], q[1]}, b1[2] = {q[2], q[3]};
        fa_mma<TY>(acc[nb], a, b0);
        fa_mma<TY>(acc[nb + 1], a, b1);
    }
}

// The same over HD, A's fragments from a row-major tile (rows arow0 + [0, 16)).
template <int TY, int HD, int NB>
__device__ __forceinline__ void fa_abt(float (&acc)[NB][4], const unsigned short *at, int arow0,
                                       const unsigned short *bt, int lane)
{
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        unsigned a[4];
        fa_lda<HD>(a, at, arow0, kk, lane);
        fa_abt_step<TY, HD, NB>(acc, a, bt, kk, lane);
    }
}

// acc[d][.] += P B with P (16 x 8 KB, fp32 in C fragments of KB n8 blocks) rounded into A
// fragments in registers (the C fragment of n8 blocks 2s, 2s + 1 is the A fragment of
// k step s), B[k][d] = tile[k][d] (ldmatrix.trans: the k rows contiguous in d).
template <int TY, int HD, int KB>
__device__ __forceinline__ void fa_pb(float (&acc)[HD / 8][4], const float (&p)[KB][4], const unsigned short *bt,
                                      int lane)
{
#pragma unroll
    for (int s = 0; s < KB / 2; s++) {
        unsigned a[4] = {fa_pack<TY>(p[2 * s][0], p[2 * s][1]), fa_pack<TY>(p[2 * s][2], p[2 * s][3]),
                         fa_pack<TY>(p[2 * s + 1][0], p[2 * s + 1][1]), fa_pack<TY>(p[2 * s + 1][2], p[2 * s + 1][3])};
#pragma unroll
        for (int nb = 0; nb < HD / 8; nb += 2) {
            // matrices: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
            unsigned q[4];
            K_LDMATRIX_X4_T(q, bt + fa_off<HD>(16 * s + (lane & 7) + ((lane >> 3) & 1) * 8, nb + (lane >> 4)));
            unsigned b0[2] = {q[0], q[1]}, b1[2] = {q[2], q[3]};
            fa_mma<TY>(acc[nb], a, b0);
            fa_mma<TY>(acc[nb + 1], a, b1);
        }
    }
}

template <int N> __device__ __forceinline__ void fa_zero(float (&a)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++) a[i][0] = a[i][1] = a[i][2] = a[i][3] = 0.0f;
}

// Rows (row0 + g, + 8) of a C fragment array, columns 8 n + 2 tig + (e & 1), into
// dst[row ld + col] for rows below t and columns below hd.
// dst[at + ...] of element type yt (y: fp32, or a 16-bit activation; the gradients: fp32).
template <int N>
__device__ __forceinline__ void fa_store(const float (&a)[N][4], void *dst, int yt, size_t at, size_t ld, int row0,
                                         int t, int hd, int lane, const float *mul)
{
    const int g = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = row0 + g + 8 * (e >> 1), c = 8 * n + 2 * tig + (e & 1);
            if (r < t && c < hd) k_act_st(dst, yt, at + (size_t)r * ld + c, mul ? a[n][e] * mul[e >> 1] : a[n][e]);
        }
}

// The forward's online softmax over key tile k0, on S in C fragments (this thread's rows
// row[0], row[1]; a row is held by a quad of lanes): S scaled and masked (causal, keys
// past t), the running max m and sum l updated, P = exp(S - m) left in sc, O rescaled.
// fa_fwd's and fw_fwd's (k_cuda_attn_wg.cuh: wgmma's accumulators hold S and O in the same
// layout) one code, so the two kernels' P, m and l are the same bits.
template <int HD>
__device__ __forceinline__ void fa_softmax(float (&sc)[FA_T / 8][4], float (&o)[HD / 8][4], float (&m)[2],
                                           float (&l)[2], const int (&row)[2], int k0, int t, float scale, int tig)
{
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < FA_T / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int j = k0 + 8 * n + 2 * tig + (e & 1), r = row[e >> 1];
            float v = j <= r && j < t ? sc[n][e] * scale : -INFINITY;
            sc[n][e] = v, mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(FA_FULL, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(FA_FULL, mx[r], 2));
    }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (mx[r] == -INFINITY) mx[r] = 0.0f; // no key yet (cannot happen with equal tiles; kept finite)
        corr[r] = expf(m[r] - mx[r]), m[r] = mx[r], l[r] *= corr[r];
    }
#pragma unroll
    for (int n = 0; n < FA_T / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = expf(sc[n][e] - mx[e >> 1]);
            sc[n][e] = p, l[e >> 1] += p;
        }
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] *= corr[e >> 1];
}

// The forward's end: l summed over the quad, lse = m + log l, y = O / l (rows row0 + [0, 16)
// of the warp, sequence s, head hh).
template <int HD>
__device__ __forceinline__ void fa_fwd_out(const float (&o)[HD / 8][4], const float (&m)[2], float (&l)[2],
                                           const int (&row)[2], int t, int h, int hh, int s, int hd, int row0,
                                           int lane, void *y, int yt, float *lse)
{
    const int tig = lane & 3, C = h * hd;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(FA_FULL, l[r], 1);
        l[r] += __shfl_xor_sync(FA_FULL, l[r], 2);
        inv[r] = 1.0f / l[r];
        if (tig == 0 && row[r] < t) lse[((size_t)s * h + hh) * t + row[r]] = m[r] + logf(l[r]);
    }
    fa_store(o, y, yt, (size_t)s * t * C + (size_t)hh * hd, C, row0, t, hd, lane, inv);
}

} // namespace
