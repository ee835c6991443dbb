// The attention's backward on sm_90a's wgmma (k_cuda_wgmma_on(), a 16-bit qkv and dO by
// cp.async: fa_bwd_t's LD 2; heads 33..128), FlashAttention-3 style, included by
// k_cuda_attn_tc.cu after k_cuda_attn_wg.cuh (its tiles, loads and wgmma macro). The same
// two deterministic kernels as fa_bwd_dkv / fa_bwd_dq (no atomics: every sum has one
// owner and a fixed order), one warpgroup of 128 threads a block, wgmma's M the block's
// 64 rows, every product on shared-memory tiles in the 128-byte swizzle (fw_off):
//  fw_bwd_dkv (64 keys, M; the query tiles from the key tile on stream through):
//   - S^T = K Q^T and dP^T = V dO^T: m64n64k16, A = K / V (keys x hd), B = Q / dO
//     (queries x hd), all K-major (hd contiguous);
//   - dV += P^T dO and dK += dS^T Q: m64nHDk16, A = P^T / dS^T (keys x queries: S^T's
//     accumulators, the block's key rows, rounded into registers as fw_fwd's P: fw_pack),
//     B = dO / Q (k = the queries, the rows of their tiles; hd contiguous: N-major,
//     imm-trans-b 1, as V in fw_fwd).
//  fw_bwd_dq (64 queries, M; the key tiles up to its last query stream through):
//   - S = Q K^T and dP = dO V^T: A = Q / dO, B = K / V, all K-major;
//   - dQ += dS K: A = dS (in registers, fw_pack), B = K (k = keys, N-major, imm-trans-b 1).
// A streamed tile is 64 rows at every HD (dynamic shared memory, not fa_bwd's 32-row
// inner tiles at 128) and double-buffered by cp.async, one tile ahead.
// Bits: P, dP, dS are fa_bwd's element for element (the same k16 sums over hd from zero,
// the same fp32 expressions); dV, dK and dQ add their k16 steps in fa_bwd's order (the
// queries, or keys, in steps of 16 from the first tile on: the tiles' height does not
// change it), on the same rounded operands, so on the executor (one rounding a k16 step
// for both units) dq, dk, dv are fa_bwd's bit for bit. On a GPU the units' internal sums
// may round otherwise.
#pragma once
#include "kernels/cuda/k_cuda_attn_wg.cuh"

namespace {
// Shared memory: 6 tiles of 64 x HD (the block's two, the streamed two double-buffered)
// and the alignment's slack (P^T, dS^T and dS stay in registers).
__host__ __device__ constexpr int fw_bwd_smem_bytes(int hd_tile) { return 6 * FA_T * hd_tile * 2 + FW_ALIGN; }

// d = A B^T over hd (m64n64, both K-major tiles of HD columns), the first k16 step
// overwriting d. Issued, not committed.
template <int TY, int HD>
__device__ __forceinline__ void fw_abt(float (&d)[FA_T / 8][4], const unsigned short *a, const unsigned short *b)
{
    const unsigned long long da = k_wgmma_desc(a, 16, 1024, K_WGMMA_SW128), db = k_wgmma_desc(b, 16, 1024, K_WGMMA_SW128);
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        const int at = ((kk >> 2) * FW_BLOCK + 16 * (kk & 3)) >> 3; // the 16 k's 32 bytes in the rows
        FW_WGMMA(TY, 64, &d[0][0], da + at, db + at, kk > 0, 0);
    }
}

// d += A B (m64nHD): A 64 x 64 in registers (fw_pack's; k: its columns), B a tile of 64
// k-rows x HD (N-major: the next 64 n 8 KiB on, the next 16 k 2 KiB on). Issued, not
// committed; a's registers must stay as they are until the wait_group.
template <int TY, int HD>
__device__ __forceinline__ void fw_ab(float (&d)[HD / 8][4], const unsigned (&a)[FA_T / 16][4], const unsigned short *b)
{
    const unsigned long long db = k_wgmma_desc(b, 2 * FW_BLOCK, 1024, K_WGMMA_SW128);
#pragma unroll
    for (int ks = 0; ks < FA_T / 16; ks++) FW_WGMMA_RS(TY, HD, &d[0][0], a[ks], db + 128 * ks, 1, 1);
}

// The top of a streamed tile: this thread's copies in, visible to the async proxy and to
// every thread; the other buffers free (their products waited for).
__device__ __forceinline__ void fw_tile_in()
{
    K_CP_ASYNC_WAIT(0);
    K_FENCE_PROXY_ASYNC(); // cp.async's writes, for the async proxy wgmma reads through
    __syncthreads();
}

// dK, dV: block (key tile, head, sequence), the query tiles from the key tile on.
template <int TY, int HD>
__global__ void __launch_bounds__(FA_THREADS)
fw_bwd_dkv(int t, int h, int hd, float scale, const void *qkv, const void *dy, const float *lse, const float *dd,
           float *dqkv)
{
    static_assert(HD == 64 || HD == 128, "64-column blocks; N 64 or 128");
    constexpr int TL = FA_T * HD; // a tile's elements
    K_DYN_SHARED(unsigned char, raw);
    // K, V; Q[b] at 2 + b, dO[b] at 4 + b tiles on
    unsigned short *const sk = (unsigned short *)(((uintptr_t)raw + FW_ALIGN - 1) & ~(uintptr_t)(FW_ALIGN - 1));
    unsigned short *const sv = sk + TL;
    const int j0 = blockIdx.x * FA_T, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const size_t ld = 3 * (size_t)C, row0 = ((size_t)s * h + hh) * t;
    const size_t base = (size_t)s * t * ld + (size_t)hh * hd, gbase = (size_t)s * t * C + (size_t)hh * hd;
    const unsigned short *src = (const unsigned short *)qkv, *gsrc = (const unsigned short *)dy;
    fw_load<HD>(sk, src, base + C, ld, j0, t, hd);
    fw_load<HD>(sv, src, base + 2 * C, ld, j0, t, hd);
    fw_load<HD>(sk + 2 * TL, src, base, ld, j0, t, hd);
    fw_load<HD>(sk + 4 * TL, gsrc, gbase, C, j0, t, hd);
    K_CP_ASYNC_COMMIT();
    float dk[HD / 8][4], dv[HD / 8][4];
    fa_zero(dk), fa_zero(dv);
    const int key[2] = {j0 + 16 * w + g, j0 + 16 * w + g + 8};
    const float *lr = lse + row0, *dr = dd + row0; // the head's lse and D rows
    for (int i0 = j0, bf = 0; i0 < t; i0 += FA_T, bf ^= 1) {
        fw_tile_in();
        const unsigned short *tq = sk + (2 + bf) * TL, *tg = sk + (4 + bf) * TL;
        if (i0 + FA_T < t) { // the next Q, dO tiles land while this one's products run
            fw_load<HD>(sk + (3 - bf) * TL, src, base, ld, i0 + FA_T, t, hd);
            fw_load<HD>(sk + (5 - bf) * TL, gsrc, gbase, C, i0 + FA_T, t, hd);
        }
        K_CP_ASYNC_COMMIT();
        float p[FA_T / 8][4], dp[FA_T / 8][4];
        K_WGMMA_FENCE();
        fw_abt<TY, HD>(p, sk, tq); // S^T = K Q^T
        fw_abt<TY, HD>(dp, sv, tg); // dP^T = V dO^T
        K_WGMMA_COMMIT();
        K_WGMMA_WAIT(0);
        // P^T and dS^T (fa_bwd_dkv's expressions: row key[r], column query i)
#pragma unroll
        for (int n = 0; n < FA_T / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int i = i0 + 8 * n + 2 * tig + e;
                float li = i < t ? lr[i] : 0.0f, di = i < t ? dr[i] : 0.0f;
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float pv = i < t && i >= key[r] && key[r] < t ? expf(p[n][2 * r + e] * scale - li) : 0.0f;
                    p[n][2 * r + e] = pv;
                    dp[n][2 * r + e] = pv * (dp[n][2 * r + e] - di) * scale;
                }
            }
        unsigned pt[FA_T / 16][4], dsa[FA_T / 16][4]; // P^T, dS^T as register A
        fw_pack<TY>(pt, p);
        fw_pack<TY>(dsa, dp);
        K_WGMMA_FENCE(); // after the registers are written
        fw_ab<TY, HD>(dv, pt, tg); // dV += P^T dO
        fw_ab<TY, HD>(dk, dsa, tq); // dK += dS^T Q
        K_WGMMA_COMMIT();
        K_WGMMA_WAIT(0);
    }
    K_CP_ASYNC_WAIT(0); // (the last, empty group)
    const size_t dst = (size_t)s * t * ld + (size_t)hh * hd + C;
    fa_store(dk, dqkv, K_CUDA_ACT_F32, dst, ld, j0 + 16 * w, t, hd, lane, nullptr);
    fa_store(dv, dqkv, K_CUDA_ACT_F32, dst + C, ld, j0 + 16 * w, t, hd, lane, nullptr);
}

// dQ: block (query tile, counted from the last; head, sequence), the key tiles up to its
// last query.
template <int TY, int HD>
__global__ void __launch_bounds__(FA_THREADS)
fw_bwd_dq(int t, int h, int hd, float scale, const void *qkv, const void *dy, const float *lse, const float *dd,
          float *dqkv)
{
    static_assert(HD == 64 || HD == 128, "64-column blocks; N 64 or 128");
    constexpr int TL = FA_T * HD;
    K_DYN_SHARED(unsigned char, raw);
    // Q, dO; K[b] at 2 + b, V[b] at 4 + b tiles on
    unsigned short *const sq = (unsigned short *)(((uintptr_t)raw + FW_ALIGN - 1) & ~(uintptr_t)(FW_ALIGN - 1));
    unsigned short *const sg = sq + TL;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FA_T, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const size_t ld = 3 * (size_t)C, row0 = ((size_t)s * h + hh) * t;
    const size_t base = (size_t)s * t * ld + (size_t)hh * hd, gbase = (size_t)s * t * C + (size_t)hh * hd;
    const unsigned short *src = (const unsigned short *)qkv, *gsrc = (const unsigned short *)dy;
    const int kend = min(t, q0 + FA_T); // the causal mask's last key tile
    fw_load<HD>(sq, src, base, ld, q0, t, hd);
    fw_load<HD>(sg, gsrc, gbase, C, q0, t, hd);
    fw_load<HD>(sq + 2 * TL, src, base + C, ld, 0, t, hd);
    fw_load<HD>(sq + 4 * TL, src, base + 2 * C, ld, 0, t, hd);
    K_CP_ASYNC_COMMIT();
    const int row[2] = {q0 + 16 * w + g, q0 + 16 * w + g + 8};
    float li[2], di[2], dq[HD / 8][4];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        li[r] = row[r] < t ? lse[row0 + row[r]] : 0.0f;
        di[r] = row[r] < t ? dd[row0 + row[r]] : 0.0f;
    }
    fa_zero(dq);
    for (int k0 = 0, bf = 0; k0 < kend; k0 += FA_T, bf ^= 1) {
        fw_tile_in();
        const unsigned short *tk = sq + (2 + bf) * TL, *tv = sq + (4 + bf) * TL;
        if (k0 + FA_T < kend) {
            fw_load<HD>(sq + (3 - bf) * TL, src, base + C, ld, k0 + FA_T, t, hd);
            fw_load<HD>(sq + (5 - bf) * TL, src, base + 2 * C, ld, k0 + FA_T, t, hd);
        }
        K_CP_ASYNC_COMMIT();
        float p[FA_T / 8][4], ds[FA_T / 8][4];
        K_WGMMA_FENCE();
        fw_abt<TY, HD>(p, sq, tk); // S = Q K^T
        fw_abt<TY, HD>(ds, sg, tv); // dP = dO V^T
        K_WGMMA_COMMIT();
        K_WGMMA_WAIT(0);
        // dS (fa_bwd_dq's expressions: row row[r], column key j)
#pragma unroll
        for (int n = 0; n < FA_T / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = k0 + 8 * n + 2 * tig + (e & 1), r = e >> 1;
                float pv = row[r] < t && j <= row[r] ? expf(p[n][e] * scale - li[r]) : 0.0f;
                ds[n][e] = pv * (ds[n][e] - di[r]) * scale;
            }
        unsigned da[FA_T / 16][4]; // dS as register A
        fw_pack<TY>(da, ds);
        K_WGMMA_FENCE(); // after the registers are written
        fw_ab<TY, HD>(dq, da, tk); // dQ += dS K
        K_WGMMA_COMMIT();
        K_WGMMA_WAIT(0);
    }
    K_CP_ASYNC_WAIT(0);
    fa_store(dq, dqkv, K_CUDA_ACT_F32, (size_t)s * t * ld + (size_t)hh * hd, ld, q0 + 16 * w, t, hd, lane, nullptr);
}

// Both kernels on the stream (fa_bwd_t's LD 2 with wgmma on), their dynamic shared memory
// limits raised once.
template <int TY, int HD>
int fw_bwd_t(int b, int t, int h, int hd, const void *qkv, const float *lse, const void *dy, const float *dd,
             float *dqkv, cudaStream_t s)
{
    static int attr;
    const int mkv = fw_bwd_smem_bytes(HD), mq = fw_bwd_smem_bytes(HD);
    if (!attr) {
        if (cudaFuncSetAttribute(fw_bwd_dkv<TY, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, mkv) ||
            cudaFuncSetAttribute(fw_bwd_dq<TY, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, mq)) {
            port_cuda_fail("k_cuda_attention_bwd_mm (wgmma): cudaFuncSetAttribute refused %d / %d bytes of dynamic "
                           "shared memory", mkv, mq);
            return -1;
        }
        attr = 1;
    }
    const float scale = 1.0f / sqrtf((float)hd);
    dim3 grid((unsigned)((t + FA_T - 1) / FA_T), (unsigned)h, (unsigned)b);
    K_LAUNCH((fw_bwd_dkv<TY, HD>), grid, FA_THREADS, mkv, s)(t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    if (k_cuda_check_launch("k_cuda_attention_bwd_mm (dk, dv)", "b=%d t=%d h=%d hd=%d (wgmma)", b, t, h, hd))
        return -1;
    K_LAUNCH((fw_bwd_dq<TY, HD>), grid, FA_THREADS, mq, s)(t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    return k_cuda_check_launch("k_cuda_attention_bwd_mm (dq)", "b=%d t=%d h=%d hd=%d (wgmma)", b, t, h, hd);
}
} // namespace
