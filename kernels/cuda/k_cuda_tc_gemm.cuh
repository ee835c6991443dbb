// The tensor-core GEMM (sm_80 path: mma.sync m16n8k16) behind conv, linear and the raw
// entry k_cuda_tc_gemm: C[m][n] = sum_k A(m,k) B(k,n) with bf16 or f16 operands and fp32
// accumulation, written through the same epilogue functors as the fp32 SGEMM
// (k_cuda_gemm.cuh) - bias, NCHW scatter, split-K partials - so conv and linear switch
// precision by the call, not by their code.
//
// Operands come two ways. 16-bit arrays (TcRawK / TcRawMN: the device's 16-bit weight
// copy, 16-bit activations) are copied into shared memory by cp.async, 16 bytes at a time,
// when their rows are 16-byte aligned; so are TcRaw-derived operands whose chunks a
// geometry places (TcGeo: conv's NHWC copies, k_cuda_conv.cu). Any other loader is the fp32 SGEMM's functor (the
// im2col gathers of an implicit-GEMM convolution, a transposed view): its values are read,
// rounded to bf16 (f16) exactly as the CPU's --amp bf16 rounds them (rt/half.h) and
// stored through registers.
//
// Block: 256 threads, 8 warps as 2 (M) x 4 (N), a BM x BN tile (128x128 or 64x64, as
// the SGEMM picks); k in 32-deep slices through static shared memory (48 KiB at 128x128):
// 3 cp.async stages when both operands are 16-bit arrays; 2 stages when one is gathered
// (its next slice prefetched into registers, the 16-bit one's by cp.async meanwhile).
// Every way adds the same rounded products in the same order (tc_slice on 32-deep
// slices): a 16-bit copy made with the same rounding gives the same bits as the gather.
// Each warp loads its fragments with ldmatrix (.trans for the M/N-contiguous operands)
// from XOR-swizzled tiles: the 8 rows one ldmatrix phase reads lie in 8 different
// 16-byte bank groups. Rows or k past the matrix are zero.
#pragma once
#include "kernels/cuda/k_cuda_gemm.cuh"
#include "kernels/cuda/k_cuda_tc.cuh"
#include <type_traits>

#define TC_BK 32
#define TC_STAGES 3
#define TC_THREADS 256

namespace {
// 16-bit operands in memory: A(m,k) / B(k,n) at p[i * ld + k] (K) or p[k * ld + i] (MN).
// at(r, k, valid): the 16-byte chunk (8 k of row r for K, 8 rows from r at k for MN);
// valid (the elements in range) is only ever lowered by it.
struct TcRaw {
    const unsigned short *p;
    int ld, vec; // vec: rows 16-byte aligned, copied by cp.async
    static constexpr bool geo = false; // plain matrix (wgg_fetch may read p[r * ld + k])
};
struct TcRawK : TcRaw {
    static constexpr bool k_fast = true;
    __device__ __forceinline__ const unsigned short *at(int r, int k, int &) const { return p + (size_t)r * ld + k; }
};
struct TcRawMN : TcRaw {
    static constexpr bool k_fast = false;
    __device__ __forceinline__ const unsigned short *at(int r, int k, int &) const { return p + (size_t)k * ld + r; }
};
// A TcRaw-derived operand whose chunks a geometry places (conv's NHWC copies,
// k_cuda_conv.cu: geo = true, vec always 1, every chunk whole or zero): tc_load and
// wg_load take it by cp.async like the plain ones; nothing reads it element by element.
template <class L, bool R = std::is_base_of<TcRaw, L>::value> struct TcGeo {
    static constexpr bool value = false;
};
template <class L> struct TcGeo<L, true> {
    static constexpr bool value = L::geo;
};

// A 16-bit array p (row stride ld) as an operand of products at precision mm: true where
// it is there, the products are bf16 / f16 and its rows are 16-byte aligned (cp.async);
// otherwise the caller keeps its gathering loader.
template <class R> static inline bool k_tc_raw(R &r, int mm, const void *p, int ld)
{
    r.p = (const unsigned short *)p, r.ld = ld, r.vec = 1;
    return p && k_cuda_mm16(mm) && !((uintptr_t)p & 15) && ld % 8 == 0;
}

// Element offset of 16-byte chunk c of row r. K-contiguous tile: R rows of 32 (four
// chunks, 64 bytes); M/N-contiguous tile: 32 rows (k) of R.
template <int R, bool KF> __device__ __forceinline__ int tc_off(int r, int c)
{
    if (KF) return r * TC_BK + ((c ^ ((r >> 1) & 3)) << 3);
    return r * R + ((c ^ (r & 7)) << 3);
}

struct alignas(16) TcChunk {
    unsigned w[4];
};

template <int TY> __device__ __forceinline__ unsigned tc_pack(float lo, float hi)
{
    return TY == K_CUDA_MM_BF16 ? k_pack_bf16x2(lo, hi) : k_pack_f16x2(lo, hi);
}

// wgmma's M/N-major tile (k_cuda_tc_wgmma.cuh, R = 128 rows x 32 k): element offset of
// 16-byte chunk c (rows 8c..8c+7) at k-row kr. Four 1 KiB 128-byte-swizzle patterns per 64
// rows (one per 8 k: 8 k-rows of 64 rows, chunk c at (c & 7) ^ (kr & 7)), the second 64
// rows 4 KiB on. A warp's cp.async phase (8 lanes: one k-row's 8 chunks) fills a whole
// 128-byte row: no bank conflict.
__device__ __forceinline__ int wg_off_mn(int kr, int c)
{
    return (c >> 3) * 2048 + (kr >> 3) * 512 + (kr & 7) * 64 + (((c & 7) ^ (kr & 7)) << 3);
}

// Slice [k0, min(k0 + 32, kend)) of a 16-bit operand's rows [r0, r0 + R) into a tile:
// cp.async where rows are 16-byte aligned, else element by element (zero past the ends).
// WGMN: an M/N-contiguous operand into wgmma's M/N-major tile (wg_off_mn), not tc_off's.
template <int R, class L, bool WGMN = false>
__device__ __forceinline__ void tc_load(unsigned short *tile, const L &l, int rows, int r0, int kend, int k0)
{
    constexpr bool KF = L::k_fast;
    constexpr int CH = R * TC_BK / 8;
#pragma unroll
    for (int q = threadIdx.x; q < CH; q += TC_THREADS) {
        int valid, dst, r, k;
        if (KF) {
            int c = q & 3;
            r = r0 + (q >> 2), k = k0 + c * 8;
            valid = r < rows ? min(8, kend - k) : 0;
            dst = tc_off<R, true>(q >> 2, c);
        } else {
            int kr = q / (R / 8), c = q % (R / 8);
            r = r0 + c * 8, k = k0 + kr;
            valid = k < kend ? min(8, rows - r) : 0;
            dst = WGMN ? wg_off_mn(kr, c) : tc_off<R, false>(kr, c);
        }
        valid = max(valid, 0);
        const unsigned short *src = l.at(r, k, valid);
        if (TcGeo<L>::value || l.vec) {
            K_CP_ASYNC16(tile + dst, valid ? src : l.p, valid * 2);
        } else if constexpr (!TcGeo<L>::value) {
            TcChunk ch;
#pragma unroll
            for (int e = 0; e < 4; e++)
                ch.w[e] = (2 * e < valid ? (unsigned)src[2 * e] : 0u) |
                          (2 * e + 1 < valid ? (unsigned)src[2 * e + 1] << 16 : 0u);
            *(TcChunk *)(tile + dst) = ch;
        }
    }
}

// Accumulators of a warp's (BM/2) x (BN/4) part of the tile, mma's C layout in n8 blocks
// (rows lane/4 and +8, columns 2(lane%4) and +1): zeroed, and written through st.
template <int MT, int NT> __device__ __forceinline__ void tc_zero(float (&acc)[MT][NT][4])
{
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
}

template <int BM, int BN, int MT, int NT, class ST>
__device__ __forceinline__ void tc_store(const float (&acc)[MT][NT][4], const ST &st, int M, int N, int m0, int n0,
                                         int lane, int wm, int wn)
{
    const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int m = m0 + wm * (BM / 2) + i * 16 + gid + (e >> 1) * 8;
                int n = n0 + wn * (BN / 4) + j * 8 + 2 * tig + (e & 1);
                if (m < M && n < N) st(blockIdx.z, m, n, acc[i][j][e]);
            }
}

// The gathering loaders' chunks of one slice, held in registers (fetched before the
// slice before it is multiplied, stored after): the global loads overlap the MMAs.
template <int R, bool IS_B, int TY, class L> struct TcPrefetch {
    static constexpr int CH = R * TC_BK / 8 / TC_THREADS; // 16-byte chunks a thread
    TcChunk c[CH];
    __device__ __forceinline__ void fetch(const L &l, int rows, int r0, int kend, int k0)
    {
#pragma unroll
        for (int i = 0; i < CH; i++) {
            int q = threadIdx.x + i * TC_THREADS, r, k, valid;
            if (L::k_fast) r = r0 + (q >> 2), k = k0 + (q & 3) * 8, valid = r < rows ? min(8, kend - k) : 0;
            else r = r0 + q % (R / 8) * 8, k = k0 + q / (R / 8), valid = k < kend ? min(8, rows - r) : 0;
            float f[8];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                int rr = L::k_fast ? r : r + e, kk = L::k_fast ? k + e : k;
                f[e] = e < valid ? (IS_B ? l(kk, rr) : l(rr, kk)) : 0.0f;
            }
#pragma unroll
            for (int e = 0; e < 4; e++) c[i].w[e] = tc_pack<TY>(f[2 * e], f[2 * e + 1]);
        }
    }
    __device__ __forceinline__ void store(unsigned short *tile) const
    {
#pragma unroll
        for (int i = 0; i < CH; i++) {
            int q = threadIdx.x + i * TC_THREADS;
            int dst = L::k_fast ? tc_off<R, true>(q >> 2, q & 3) : tc_off<R, false>(q / (R / 8), q % (R / 8));
            *(TcChunk *)(tile + dst) = c[i];
        }
    }
};

// One operand of a mixed product (one 16-bit array, one gathered): get starts slice k0
// into a stage (cp.async for the array; into registers for the gatherer), put stores the
// registers (after the current slice is multiplied; nothing for the array).
template <int R, bool IS_B, int TY, class L, bool RAW = std::is_base_of<TcRaw, L>::value> struct TcSide {
    TcPrefetch<R, IS_B, TY, L> p;
    __device__ __forceinline__ void get(unsigned short *, const L &l, int rows, int r0, int kend, int k0)
    {
        p.fetch(l, rows, r0, kend, k0);
    }
    __device__ __forceinline__ void put(unsigned short *tile) const { p.store(tile); }
};
template <int R, bool IS_B, int TY, class L> struct TcSide<R, IS_B, TY, L, true> {
    __device__ __forceinline__ void get(unsigned short *tile, const L &l, int rows, int r0, int kend, int k0)
    {
        tc_load<R>(tile, l, rows, r0, kend, k0);
    }
    __device__ __forceinline__ void put(unsigned short *) const {}
};

// Slice k0 of a mixed product into stages ta / tb: the array's cp.async first (one group),
// so its copies run on while the gatherer's loads are waited for.
template <bool RA, class SA, class SB, class LA, class LB>
__device__ __forceinline__ void tc_mixed_get(SA &sa, SB &sb, unsigned short *ta, unsigned short *tb, const LA &la,
                                             const LB &lb, int M, int N, int m0, int n0, int kend, int k0)
{
    if (RA) sa.get(ta, la, M, m0, kend, k0);
    else sb.get(tb, lb, N, n0, kend, k0);
    K_CP_ASYNC_COMMIT();
    if (RA) sb.get(tb, lb, N, n0, kend, k0);
    else sa.get(ta, la, M, m0, kend, k0);
}

// One 32-deep slice from the tiles into the warp's accumulators.
template <int BM, int BN, int TY, bool AK, bool BK, int MT, int NT>
__device__ __forceinline__ void tc_slice(const unsigned short *ta, const unsigned short *tb, float (&acc)[MT][NT][4],
                                         int lane, int wm, int wn)
{
    constexpr int WM = BM / 2, WN = BN / 4;
#pragma unroll
    for (int kk = 0; kk < TC_BK; kk += 16) {
        unsigned af[MT][4], bf[NT][2];
#pragma unroll
        for (int i = 0; i < MT; i++) {
            // matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
            int mb = wm * WM + i * 16;
            const unsigned short *p = AK ? ta + tc_off<BM, true>(mb + (lane & 15), kk / 8 + (lane >> 4))
                                         : ta + tc_off<BM, false>(kk + (lane & 7) + (lane >> 4) * 8,
                                                                  mb / 8 + ((lane >> 3) & 1));
            if (AK) K_LDMATRIX_X4(af[i], p);
            else K_LDMATRIX_X4_T(af[i], p);
        }
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            // matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
            int nb = wn * WN + j * 8;
            const unsigned short *p = BK ? tb + tc_off<BN, true>(nb + (lane & 7) + (lane >> 4) * 8,
                                                                 kk / 8 + ((lane >> 3) & 1))
                                         : tb + tc_off<BN, false>(kk + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                                  nb / 8 + (lane >> 4));
            unsigned q[4];
            if (BK) K_LDMATRIX_X4(q, p);
            else K_LDMATRIX_X4_T(q, p);
            bf[j][0] = q[0], bf[j][1] = q[1], bf[j + 1][0] = q[2], bf[j + 1][1] = q[3];
        }
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (TY == K_CUDA_MM_BF16) K_MMA_BF16(acc[i][j], af[i], bf[j]);
                else K_MMA_F16(acc[i][j], af[i], bf[j]);
            }
    }
}

// One BM x BN tile of C over k in [blockIdx.z * kchunk, + kchunk), written through st
// (st(split, m, n, value), as the SGEMM's epilogues). Two 16-bit arrays: 3 cp.async
// stages; otherwise 2 stages, the next slice's gathered operand fetched into registers
// (and the 16-bit one's cp.async issued) while this one is multiplied.
template <int BM, int BN, int TY, class LA, class LB, class ST>
__global__ void __launch_bounds__(TC_THREADS) tc_gemm(int M, int N, int K, int kchunk, LA la, LB lb, ST st)
{
    struct alignas(16) Smem {
        unsigned short a[TC_STAGES][BM * TC_BK], b[TC_STAGES][BN * TC_BK];
    };
    __shared__ Smem sm;
    constexpr int WM = BM / 2, WN = BN / 4, MT = WM / 16, NT = WN / 8;
    constexpr bool AK = LA::k_fast, BK = LB::k_fast;
    constexpr bool RA = std::is_base_of<TcRaw, LA>::value, RB = std::is_base_of<TcRaw, LB>::value;
    static_assert(NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp >> 2, wn = warp & 3;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int kbeg = blockIdx.z * kchunk, kend = min(K, kbeg + kchunk), kt_n = (kend - kbeg + TC_BK - 1) / TC_BK;
    float acc[MT][NT][4];
    tc_zero(acc);
    if constexpr (!RA && !RB) {
        TcPrefetch<BM, false, TY, LA> pa;
        TcPrefetch<BN, true, TY, LB> pb;
        if (kt_n > 0) {
            pa.fetch(la, M, m0, kend, kbeg), pb.fetch(lb, N, n0, kend, kbeg);
            pa.store(sm.a[0]), pb.store(sm.b[0]);
        }
        for (int kt = 0; kt < kt_n; kt++) {
            __syncthreads(); // slice kt stored; every warp done with slice kt - 1's stage
            if (kt + 1 < kt_n)
                pa.fetch(la, M, m0, kend, kbeg + (kt + 1) * TC_BK), pb.fetch(lb, N, n0, kend, kbeg + (kt + 1) * TC_BK);
            tc_slice<BM, BN, TY, AK, BK>(sm.a[kt & 1], sm.b[kt & 1], acc, lane, wm, wn);
            if (kt + 1 < kt_n) pa.store(sm.a[(kt + 1) & 1]), pb.store(sm.b[(kt + 1) & 1]);
        }
    } else if constexpr (RA != RB) {
        TcSide<BM, false, TY, LA> sa;
        TcSide<BN, true, TY, LB> sb;
        if (kt_n > 0) {
            tc_mixed_get<RA>(sa, sb, sm.a[0], sm.b[0], la, lb, M, N, m0, n0, kend, kbeg);
            sa.put(sm.a[0]), sb.put(sm.b[0]);
        }
        for (int kt = 0; kt < kt_n; kt++) {
            // Slice kt's copies are in, for every thread; every warp is done with slice
            // kt - 1's stage, which the next slice overwrites.
            K_CP_ASYNC_WAIT(0);
            __syncthreads(); // mixed: after the wait
            const int nx = (kt + 1) & 1;
            if (kt + 1 < kt_n)
                tc_mixed_get<RA>(sa, sb, sm.a[nx], sm.b[nx], la, lb, M, N, m0, n0, kend, kbeg + (kt + 1) * TC_BK);
            tc_slice<BM, BN, TY, AK, BK>(sm.a[kt & 1], sm.b[kt & 1], acc, lane, wm, wn);
            if (kt + 1 < kt_n) sa.put(sm.a[nx]), sb.put(sm.b[nx]);
        }
    } else {
        for (int s = 0; s < TC_STAGES - 1; s++) {
            if (s < kt_n) {
                tc_load<BM>(sm.a[s], la, M, m0, kend, kbeg + s * TC_BK);
                tc_load<BN>(sm.b[s], lb, N, n0, kend, kbeg + s * TC_BK);
            }
            K_CP_ASYNC_COMMIT();
        }
        for (int kt = 0; kt < kt_n; kt++) {
            // Slice kt is in; every warp is done with the stage the next load overwrites.
            K_CP_ASYNC_WAIT(TC_STAGES - 2);
            __syncthreads();
            int nx = kt + TC_STAGES - 1;
            if (nx < kt_n) {
                tc_load<BM>(sm.a[nx % TC_STAGES], la, M, m0, kend, kbeg + nx * TC_BK);
                tc_load<BN>(sm.b[nx % TC_STAGES], lb, N, n0, kend, kbeg + nx * TC_BK);
            }
            K_CP_ASYNC_COMMIT();
            tc_slice<BM, BN, TY, AK, BK>(sm.a[kt % TC_STAGES], sm.b[kt % TC_STAGES], acc, lane, wm, wn);
        }
        K_CP_ASYNC_WAIT(0); // the empty trailing groups
    }
    tc_store<BM, BN>(acc, st, M, N, m0, n0, lane, wm, wn);
}

} // namespace
#include "kernels/cuda/k_cuda_tc_wgmma.cuh"
#include "kernels/cuda/k_cuda_tc_tma.cuh"
#include "kernels/cuda/k_cuda_tc_tf32.cuh"
#include "kernels/cuda/k_cuda_tc_wgtf.cuh"
#include "kernels/cuda/k_cuda_probe.h"

// The 128-tile TF32 products on wgmma (wgtf_gemm) where the device takes it and the
// start-up probe agreed (k_cuda_tf32_wgmma_on), else mma.sync's tf_gemm.
static inline bool k_tf32_on_wgmma() { return k_cuda_wgmma_on() && k_cuda_tf32_wgmma_on(); }

// Two k-contiguous fp32 arrays (KgRowA: A [m][k]; KgColB: B [n][k]: linear's forward) at
// TF32 by TMA (wt_gemm, k_cuda_tc_tma.cuh: wgmma truncates their low 13 bits, as
// cuBLAS's TF32 on Hopper) where TMA and tf32 wgmma are on and their rows 16-byte
// aligned; kchunk as wt_launch's. 0 launched, 1 not taken (the maps refused too).
template <class L> struct TfRawK {
    static constexpr bool value = false;
};
template <> struct TfRawK<KgRowA> {
    static constexpr bool value = true;
    static const float *p(const KgRowA &l) { return l.a; }
};
template <> struct TfRawK<KgColB> {
    static constexpr bool value = true;
    static const float *p(const KgColB &l) { return l.b; }
};
template <class LA, class LB, class ST>
static inline int k_tf32_tma(int M, int N, int K, const LA &la, const LB &lb, const ST &st, cudaStream_t s,
                             int kchunk = 0)
{
    if constexpr (TfRawK<LA>::value && TfRawK<LB>::value) {
        const float *a = TfRawK<LA>::p(la), *b = TfRawK<LB>::p(lb);
        const char *why;
        if (k_tf32_on_wgmma() && k_cuda_tma_on() && !((uintptr_t)a & 15) && !((uintptr_t)b & 15) && la.ld % 4 == 0 &&
            lb.ld % 4 == 0 && !wt_launch<K_CUDA_MM_TF32, true, true>(M, N, K, a, la.ld, b, lb.ld, st, s, &why, kchunk))
            return 0;
    }
    return 1;
}

// C = A B on the tensor cores (TY: K_CUDA_MM_BF16, _F16 or _TF32) through st, split over k
// as the SGEMM splits it (the same k_cuda_gemm_ws_bytes workspace; ws NULL: no split).
template <int T, int TY, class LA, class LB, class ST>
static int k_cuda_gemm_tc_t(const char *kernel, const char *shapes, int M, int N, int K, LA la, LB lb, ST st,
                            void *ws, cudaStream_t s)
{
    int splits = ws ? k_cuda_gemm_splits(M, N, K) : 1;
    dim3 grid((N + T - 1) / T, (M + T - 1) / T, 1);
    // The 128-tile bf16 / f16 products on wgmma where the device takes it (sm_90:
    // k_cuda_wgmma_on): two aligned 16-bit arrays by TMA (wt_gemm, where k_cuda_tma_on;
    // plain arrays only) or cp.async (wg_gemm; either of them k- or M/N-contiguous: conv's
    // weight gradient, linear's dX / dW), the rest through registers (wgg_gemm).
    // Geometry operands (conv's NHWC copies) only by cp.async: wg_gemm where the other
    // operand is a 16-bit array too, else mma.sync's tc_gemm.
    constexpr bool GEO = TcGeo<LA>::value || TcGeo<LB>::value;
    constexpr bool WGR0 = std::is_base_of<TcRaw, LA>::value && std::is_base_of<TcRaw, LB>::value;
    constexpr bool WG = T == WGG_T && TY != K_CUDA_MM_TF32 && (!GEO || WGR0);
    constexpr bool WGR = WG && WGR0;
    if (splits == 1) {
        if constexpr (TY == K_CUDA_MM_TF32) {
            if constexpr (T == WGG_T) {
                if (!k_tf32_tma(M, N, K, la, lb, st, s))
                    return k_cuda_check_launch(kernel, "%s (tensor cores, wgmma tf32, TMA)", shapes);
                if (k_tf32_on_wgmma()) {
                    K_LAUNCH((wgtf_gemm<LA, LB, ST>), grid, 256, 0, s)(M, N, K, K, la, lb, st);
                    return k_cuda_check_launch(kernel, "%s (tensor cores, wgmma tf32)", shapes);
                }
            }
            K_LAUNCH((tf_gemm<T, T, LA, LB, ST>), grid, TC_THREADS, 0, s)(M, N, K, K, la, lb, st);
        } else {
            if constexpr (WG) {
                if (k_cuda_wgmma_on()) {
                    bool raw = false;
                    if constexpr (WGR) {
                        raw = GEO || (la.vec && lb.vec);
                        // two plain 16-bit arrays, k- or M/N-contiguous: TMA's wt_gemm where it is on
                        // (k_cuda_tma_on), wg_gemm where not or where the tensor maps are refused
                        if constexpr ((std::is_same<LA, TcRawK>::value || std::is_same<LA, TcRawMN>::value) &&
                                      (std::is_same<LB, TcRawK>::value || std::is_same<LB, TcRawMN>::value)) {
                            const char *why;
                            if (raw && k_cuda_tma_on() &&
                                !wt_launch<TY, LA::k_fast, LB::k_fast>(M, N, K, la.p, la.ld, lb.p, lb.ld, st, s, &why))
                                return k_cuda_check_launch(kernel, "%s (tensor cores, wgmma, TMA)", shapes);
                        }
                        if (raw) K_LAUNCH((wg_gemm<TY, LA, LB, ST>), grid, 256, 0, s)(M, N, K, K, la, lb, st);
                    }
                    if constexpr (!GEO) {
                        if (!raw) K_LAUNCH((wgg_gemm<TY, LA, LB, ST>), grid, 256, 0, s)(M, N, K, K, la, lb, st);
                    }
                    return k_cuda_check_launch(kernel, "%s (tensor cores, wgmma)", shapes);
                }
            }
            K_LAUNCH((tc_gemm<T, T, TY, LA, LB, ST>), grid, TC_THREADS, 0, s)(M, N, K, K, la, lb, st);
        }
        return k_cuda_check_launch(kernel, "%s (tensor cores)", shapes);
    }
    // Whole 64-deep slices (TMA's stage, two of the other kernels'), at most `splits` of
    // them (the workspace's count): every kernel splits k alike, so the same bits.
    int kchunk = ((K + splits - 1) / splits + WT_BK - 1) / WT_BK * WT_BK;
    grid.z = (K + kchunk - 1) / kchunk;
    KgPartial part = {(float *)ws, M, N};
    bool wg = false;
    if constexpr (TY == K_CUDA_MM_TF32) {
        if constexpr (T == WGG_T) {
            if ((wg = k_tf32_on_wgmma()) && k_tf32_tma(M, N, K, la, lb, part, s, kchunk))
                K_LAUNCH((wgtf_gemm<LA, LB, KgPartial>), grid, 256, 0, s)(M, N, K, kchunk, la, lb, part);
        }
        if (!wg) K_LAUNCH((tf_gemm<T, T, LA, LB, KgPartial>), grid, TC_THREADS, 0, s)(M, N, K, kchunk, la, lb, part);
    } else {
        if constexpr (WG) {
            if ((wg = k_cuda_wgmma_on())) {
                bool raw = false;
                if constexpr (WGR) {
                    raw = GEO || (la.vec && lb.vec);
                    bool tma = false; // the partials by TMA too, as the unsplit products (above)
                    if constexpr ((std::is_same<LA, TcRawK>::value || std::is_same<LA, TcRawMN>::value) &&
                                  (std::is_same<LB, TcRawK>::value || std::is_same<LB, TcRawMN>::value)) {
                        const char *why;
                        tma = raw && k_cuda_tma_on() &&
                              !wt_launch<TY, LA::k_fast, LB::k_fast>(M, N, K, la.p, la.ld, lb.p, lb.ld, part, s, &why,
                                                                     kchunk);
                    }
                    if (raw && !tma)
                        K_LAUNCH((wg_gemm<TY, LA, LB, KgPartial>), grid, 256, 0, s)(M, N, K, kchunk, la, lb, part);
                }
                if constexpr (!GEO) {
                    if (!raw)
                        K_LAUNCH((wgg_gemm<TY, LA, LB, KgPartial>), grid, 256, 0, s)(M, N, K, kchunk, la, lb, part);
                }
            }
        }
        if (!wg) K_LAUNCH((tc_gemm<T, T, TY, LA, LB, KgPartial>), grid, TC_THREADS, 0, s)(M, N, K, kchunk, la, lb, part);
    }
    if (k_cuda_check_launch(kernel, "%s (tensor cores, split-K %u)", shapes, grid.z)) return -1;
    K_LAUNCH((k_cuda_gemm_finish<ST>), k_cuda_blocks((size_t)M * N), K_CUDA_THREADS, 0, s)(M, N, (int)grid.z,
                                                                                        (const float *)ws, st);
    return k_cuda_check_launch(kernel, "%s (tensor cores, split-K finish)", shapes);
}

// k_cuda_gemm at the precision mm (K_CUDA_MM_*): fp32 on the CUDA cores, or the tensor
// cores with the operands rounded to bf16 / f16 / tf32.
template <class LA, class LB, class ST>
static int k_cuda_gemm_mm(int mm, const char *kernel, const char *shapes, int M, int N, int K, LA la, LB lb, ST st,
                          void *ws, cudaStream_t s)
{
    int t = k_cuda_gemm_tile(M, N);
    if (mm == K_CUDA_MM_BF16)
        return t == 128 ? k_cuda_gemm_tc_t<128, K_CUDA_MM_BF16>(kernel, shapes, M, N, K, la, lb, st, ws, s)
                        : k_cuda_gemm_tc_t<64, K_CUDA_MM_BF16>(kernel, shapes, M, N, K, la, lb, st, ws, s);
    if (mm == K_CUDA_MM_F16)
        return t == 128 ? k_cuda_gemm_tc_t<128, K_CUDA_MM_F16>(kernel, shapes, M, N, K, la, lb, st, ws, s)
                        : k_cuda_gemm_tc_t<64, K_CUDA_MM_F16>(kernel, shapes, M, N, K, la, lb, st, ws, s);
    if constexpr (!std::is_base_of<TcRaw, LA>::value && !std::is_base_of<TcRaw, LB>::value) {
        if (mm == K_CUDA_MM_TF32)
            return t == 128 ? k_cuda_gemm_tc_t<128, K_CUDA_MM_TF32>(kernel, shapes, M, N, K, la, lb, st, ws, s)
                            : k_cuda_gemm_tc_t<64, K_CUDA_MM_TF32>(kernel, shapes, M, N, K, la, lb, st, ws, s);
    }
    if constexpr (std::is_base_of<TcRaw, LA>::value || std::is_base_of<TcRaw, LB>::value) {
        port_cuda_fail("%s(%s): 16-bit operands need the tensor cores (bf16 or f16), not precision %d", kernel, shapes,
                       mm);
        return -1;
    } else {
        return k_cuda_gemm(kernel, shapes, M, N, K, la, lb, st, ws, s);
    }
}

// The same for loaders / epilogues of 16-bit activations (K_CUDA_MM_X16 / _Y16), which come
// only with bf16 / f16 products: just those two are instantiated (an fp32 or TF32 kernel
// on them would be dead code, and the TF32 one spilled).
template <class LA, class LB, class ST>
static int k_cuda_gemm_mm16(int mm, const char *kernel, const char *shapes, int M, int N, int K, LA la, LB lb, ST st,
                            void *ws, cudaStream_t s)
{
    int t = k_cuda_gemm_tile(M, N);
    if ((mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16)
        return t == 128 ? k_cuda_gemm_tc_t<128, K_CUDA_MM_BF16>(kernel, shapes, M, N, K, la, lb, st, ws, s)
                        : k_cuda_gemm_tc_t<64, K_CUDA_MM_BF16>(kernel, shapes, M, N, K, la, lb, st, ws, s);
    if ((mm & K_CUDA_MM_TYPE) == K_CUDA_MM_F16)
        return t == 128 ? k_cuda_gemm_tc_t<128, K_CUDA_MM_F16>(kernel, shapes, M, N, K, la, lb, st, ws, s)
                        : k_cuda_gemm_tc_t<64, K_CUDA_MM_F16>(kernel, shapes, M, N, K, la, lb, st, ws, s);
    port_cuda_fail("%s(%s): 16-bit activations need bf16 or f16 products, not precision %d", kernel, shapes,
                   mm & K_CUDA_MM_TYPE);
    return -1;
}

// A product whose B is a weight (linear, Conv1D): its 16-bit copy w16 (rows of ld) by
// cp.async where k_tc_raw takes it, else w's gathering loader gb; on the 16-bit entry when
// A16 (A a 16-bit array or activation loader) or the copy is taken, else k_cuda_gemm_mm.
template <class RW, bool A16, class A, class GB, class ST>
static int k_cuda_gemm_w16(int mm, const char *kernel, const char *shapes, int M, int N, int K, A a,
                           const uint16_t *w16, int ld, GB gb, ST st, void *ws, cudaStream_t s)
{
    RW rw;
    if (k_tc_raw(rw, mm, w16, ld)) return k_cuda_gemm_mm16(mm, kernel, shapes, M, N, K, a, rw, st, ws, s);
    if constexpr (A16) return k_cuda_gemm_mm16(mm, kernel, shapes, M, N, K, a, gb, st, ws, s);
    else return k_cuda_gemm_mm(mm & K_CUDA_MM_TYPE, kernel, shapes, M, N, K, a, gb, st, ws, s);
}

// linear's and Conv1D's backward at bf16 / f16: dy (fp32) rounded once into a 16-bit array
// at the front of the workspace, so both products (dX, dW) copy it by cp.async (wg_gemm /
// wt_gemm on sm_90, the two-array kernel on sm_80) instead of gathering and rounding fp32
// through registers in every tile; the same rounding (rt/half.h's), so the same bits.
// k_dy16_bytes: its room (0 where not taken: fp32 / TF32 products, rows of `out` not
// 16-byte aligned).
static inline size_t k_dy16_bytes(int mm, int n, int out)
{
    return k_cuda_mm16(mm) && out % 8 == 0 ? ((size_t)n * out * 2 + 255) / 256 * 256 : 0;
}
// k_dy16: the copy's two views (k- and M/N-contiguous) with raw set and ws moved past it
// (to the split-K partials); raw false and ws as given where not taken or ws is NULL /
// misaligned (the gathers as before). 0, or -1 when the conversion's launch failed.
namespace { // as its loaders
struct KDy16 {
    TcRawK k{};
    TcRawMN mn{};
    void *ws;
    bool raw;
};
} // namespace
static inline int k_dy16(KDy16 &d, int mm, int n, int out, const float *dy, void *ws, cudaStream_t s)
{
    size_t b = k_dy16_bytes(mm, n, out);
    d.ws = ws, d.raw = false;
    if (!b || !ws || ((uintptr_t)ws & 15)) return 0;
    uint16_t *h = (uint16_t *)ws;
    if ((mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16 ? k_cuda_f32_to_bf16((size_t)n * out, dy, h, s)
                                                : k_cuda_f32_to_f16((size_t)n * out, dy, h, s))
        return -1;
    d.ws = (char *)ws + b;
    d.raw = k_tc_raw(d.k, mm, h, out) && k_tc_raw(d.mn, mm, h, out);
    return 0;
}
