// wt_gemm: the sm_90a GEMM fed by TMA (included by k_cuda_tc_gemm.cuh after wg_gemm).
// Two 16-bit arrays as tensor maps, the 128-byte swizzle: a k-contiguous one (AK / BK)
// rows x K, a box 64 k x 128 (A) or BN (B) rows: wgmma's K-major tile; an M/N-contiguous
// one K x rows, boxes of 64 rows (128 bytes) x 64 k, one after another 8 KiB apart:
// wgmma's canonical M/N-major layout (wg_gemm's wg_off_mn with 64 k in place of 32: a
// pattern 8 k x 64 rows, SBO 1 KiB to the next 8 k, LBO 8 KiB to the next 64 rows;
// imm-trans 1). A 128 x BN tile (BN 64, 128 or 256),
// WT_STAGES stages of 64 k. A producer warpgroup (threads 256-383) gives its registers
// away (setmaxnreg.dec 40) and one of its threads issues each stage's boxes with
// cp.async.bulk.tensor, their bytes counted on the stage's full mbarrier; the two consumer
// warpgroups take the registers (setmaxnreg.inc 232: a 64 x 256 accumulator is 128 fp32
// registers a thread) and wait on it, run four m64nBNk16 wgmma on their 64 rows, and keep
// one slice in flight (wgmma.wait_group 1): the slice before's stage is then free, and
// every consumer thread arrives on its empty mbarrier, which the producer waits on before
// reusing the stage. The k16 order is wg_gemm's: the same sums, bit for bit.
//
// Split-K (wt_launch's kchunk): a tile's k range to its partial, as wg_gemm splits.
// Persistent: at most k_cuda_tma_fill() blocks (one an SM), each walking the tiles
// blockIdx.x, + gridDim.x, ...; the producer goes on into the next tile's stages while
// the consumers store the last one (the stage ring and its barrier phases run on over
// tiles), so the loads of a tile's first slices hide behind the one before's epilogue.
//
// A as TMA's im2col (wt_launch_i2c: conv forward on NHWC 16-bit x, k_cuda_conv.cu): the
// product's row m is output pixel (n, p, q), k = (r, s, c) with c fastest (C % 64 == 0:
// a stage is one filter tap's 64 channels), B the weights [K x RSC]; each stage's A is
// one im2col box of 128 pixels x 64 channels from m0's start pixel, the tap as the copy's
// offsets {s, r}: the same K-major, 128-byte swizzled tile a k-contiguous A's box is.
// The weight grad turns it (A M-major, !AK): row m = (r, s, c), k = the output pixels, B
// dy [NPQ x K] by the M/N-contiguous map; a stage's A is two im2col boxes of 64 pixels x
// 64 channels (a consumer warpgroup's 64 rows each), a pixel's channels one 128-byte row:
// the M/N-major tile wt_issue<false, 128> gives. Pixels past the batch are zero fill on
// both sides; a box past the last of the r s c rows re-reads a valid tap (unstored rows).
// A strided conv's input grad is a stride-1 conv of dy per output phase (k_cuda_conv.cu's
// phase_dx), whose padding differs above and left, and whose lower and upper corners
// (wt_launch_i2c's lo / hi) are its own (the upper one sized to the phase's grid).
//
// The tile (wt_launch): 128 x 256 where its tiles still fill the GPU (at least
// k_cuda_tma_fill() of them: the SM count, 132 on an H100 / H200) in no more waves than
// 128 x 128 tiles take (wt_tile_n), 128 x 64 where N <= 64, else 128 x 128. A
// 128 x 256 tile reads 384 rows of shared memory for 128 x 256 products (128 x 128: 256
// rows for half as many).
//
// TF32 (TY K_CUDA_MM_TF32: --matmul-precision high on two fp32 k-contiguous arrays, linear's
// forward and input grad): the same tiles, stages and ring with fp32 maps: a stage's row is still 128
// bytes (32 k), its four k8 ops (m64nBNk8.tf32) 32 bytes apart as the 16-bit k16 steps,
// so the descriptors, boxes and byte counts are the 16-bit ones; k per stage 32
// (wt_sk). wgmma has no transposed tf32: K-major operands only. The operands are the
// fp32 bits TMA copied, and wgmma reads their top 19 bits (PTX: .tf32 truncates the low
// 13), as cuBLAS's TF32 on Hopper does: tf_gemm's and wgtf_gemm's operands are rounded
// (cvt.rna) instead, so the sums are theirs bit for bit only on tf32-exact values.
#pragma once
#include "kernels/cuda/k_cuda_tma.cuh"

// wt_gemm's wide tile (128 x 256) is taken where a product has at least k_cuda_tma_fill()
// of them (the SM count: 132 on an H100 / H200) in no more waves (wt_tile_n), else 128 x 128; it also caps the
// persistent grid. k_cuda_tma_set_fill sets it (tests: 1 always wide and one block for
// all tiles, INT_MAX never wide and a block a tile; 0 back to 132) and returns the old
// value (k_cuda_tc_gemm.cu).
extern "C" int k_cuda_tma_fill(void);
extern "C" int k_cuda_tma_set_fill(int tiles);
// The tile N forced (64, 128 or 256; 0: wt_tile_n's rule): ddprt-bench-kernels times a
// product at each tile on the card, to measure the rule (k_cuda.h).
extern "C" int k_cuda_tma_tile(void);

namespace {
#define WT_BK 64        // k per stage: one 128-byte swizzle row of 16-bit values (32 of tf32: wt_sk)
#define WT_STAGES 4
#define WT_THREADS 384  // two consumer warpgroups, then the producer warpgroup
#define WT_CONSUMERS 256
// Registers a thread: 168 at launch (64K / 384); 40 + 2 x 232 = 3 x 168.
#define WT_PRODUCER_REGS 40
#define WT_CONSUMER_REGS 232
// k per stage of a TY product: a 128-byte row.
template <int TY> __host__ __device__ constexpr int wt_sk() { return TY == K_CUDA_MM_TF32 ? 32 : WT_BK; }
template <int BN> struct WtSmem {
    unsigned short a[WT_STAGES][WGG_T * WT_BK], b[WT_STAGES][BN * WT_BK];
    unsigned long long full[WT_STAGES], empty[WT_STAGES];
};
// Dynamic shared memory: the tiles (128 KiB, or 192 KiB at BN 256) and barriers, 1 KiB
// more to align the tiles to the 128-byte swizzle's pattern (8 rows of 128 bytes).
template <int BN> constexpr int wt_smem_bytes() { return (int)sizeof(WtSmem<BN>) + 1024; }
static_assert(sizeof(WtSmem<256>) + 1024 <= 227 * 1024, "wt_gemm's stages exceed sm_90's shared memory");

// One 64-deep slice on the warpgroup's 64 rows: four k16 steps, 32 bytes on in the
// 128-byte row each (the hardware swizzles the address it forms), 8 rows 1 KiB apart.
// M/N-major (!AK / !BK): k 16kk is 2 KiB into the 64-row box, the warpgroup's 64 rows
// of A its own box. TF32: four k8 steps, the same 32 bytes apart (K-major only).
template <int TY, int BN, bool AK, bool BK>
__device__ __forceinline__ void wt_slice(float (&acc)[BN / 2], const unsigned short *ta, const unsigned short *tb,
                                         int wg)
{
#pragma unroll
    for (int kk = 0; kk < WT_BK / 16; kk++) {
        unsigned long long da = AK ? k_wgmma_desc(ta + 64 * wg * WT_BK + 16 * kk, 16, 8 * WT_BK * 2, K_WGMMA_SW128)
                                   : k_wgmma_desc(ta + 64 * wg * WT_BK + 64 * 16 * kk, 8192, 1024, K_WGMMA_SW128);
        unsigned long long db = BK ? k_wgmma_desc(tb + 16 * kk, 16, 8 * WT_BK * 2, K_WGMMA_SW128)
                                   : k_wgmma_desc(tb + 64 * 16 * kk, 8192, 1024, K_WGMMA_SW128);
        if constexpr (TY == K_CUDA_MM_TF32) {
            static_assert(AK && BK, "tf32 wgmma takes K-major operands only");
            if constexpr (BN == 256) K_WGMMA_TF32_256(acc, da, db, 1);
            else if constexpr (BN == 64) K_WGMMA_TF32_64(acc, da, db, 1);
            else K_WGMMA_TF32_128(acc, da, db, 1);
        } else if constexpr (BN == 256) {
            if (TY == K_CUDA_MM_BF16) K_WGMMA_BF16_256T(acc, da, db, 1, !AK, !BK);
            else K_WGMMA_F16_256T(acc, da, db, 1, !AK, !BK);
        } else if constexpr (BN == 64) {
            if (TY == K_CUDA_MM_BF16) K_WGMMA_BF16_64T(acc, da, db, 1, !AK, !BK);
            else K_WGMMA_F16_64T(acc, da, db, 1, !AK, !BK);
        } else {
            if (TY == K_CUDA_MM_BF16) K_WGMMA_BF16_128T(acc, da, db, 1, !AK, !BK);
            else K_WGMMA_F16_128T(acc, da, db, 1, !AK, !BK);
        }
    }
}

// A stage's R rows of one operand from its map: one box (k-contiguous), or R / 64 boxes
// of 64 rows x 64 k (M/N-contiguous; past the array's end TMA fills zeros and still
// counts the box's bytes).
template <bool KF, int R>
__device__ __forceinline__ void wt_issue(unsigned short *tile, const k_tmap *map, int k, int r0,
                                         unsigned long long *bar)
{
    if constexpr (KF) K_TMA_LOAD_2D(tile, map, k, r0, bar);
    else
#pragma unroll
        for (int j = 0; j < R / 64; j++) K_TMA_LOAD_2D(tile + 64 * WT_BK * j, map, r0 + 64 * j, k, bar);
}

// The conv the im2col A walks (wt_launch_i2c): C channels, R x S taps, PQ output pixels
// an image, Q a row, stride st, padding padh above and padw left (the map's lower corner
// negated: they differ in a strided input grad's phase); flip: k's tap (r, s) read at
// (R-1-r, S-1-s) (the input grad as a conv of dy: the weights' taps flipped, their rows kept).
struct WtI2c {
    int C, R, S, PQ, Q, st, padh, padw, flip;
};
// A stage of A's 128 pixels from row j0, k: tap (r, s), channels [c, c + 64). Pixels past
// the last image are TMA's zero fill (their rows are not stored).
__device__ __forceinline__ void wt_issue_i2c(unsigned short *tile, const k_tmap *map, const WtI2c &g, int k, int j0,
                                             unsigned long long *bar)
{
    const int rs = k / g.C, c = k - rs * g.C, r = rs / g.S, s = rs - r * g.S;
    const int n = j0 / g.PQ, pq = j0 - n * g.PQ, p = pq / g.Q, q = pq - p * g.Q;
    const int ow = g.flip ? g.S - 1 - s : s, oh = g.flip ? g.R - 1 - r : r;
    K_TMA_LOAD_IM2COL_4D(tile, map, c, q * g.st - g.padw, p * g.st - g.padh, n, (unsigned short)ow, (unsigned short)oh,
                         bar);
}
// The weight grad's A (M/N-major: rows m = (r, s, c), k = output pixels): R / 64 im2col
// boxes of 64 pixels from j0 x 64 channels, one a 64-row box of wt_issue<false, R>'s
// layout (a pixel's 64 channels one 128-byte row). A box past the M = R S C rows (the
// last tile of 576 = 4.5 x 128) takes the last valid chunk again: TMA still counts its
// bytes, its rows are never stored.
template <int R>
__device__ __forceinline__ void wt_issue_i2c_mn(unsigned short *tile, const k_tmap *map, const WtI2c &g, int M, int m0,
                                                int j0, unsigned long long *bar)
{
#pragma unroll
    for (int j = 0; j < R / 64; j++) wt_issue_i2c(tile + 64 * WT_BK * j, map, g, min(m0 + 64 * j, M - 64), j0, bar);
}

// The accumulators through st, in PTX's D layout (wgg_store's, BN / 8 blocks of n8).
template <int BN, class ST>
__device__ __forceinline__ void wt_store(const float (&acc)[BN / 2], const ST &st, int M, int N, int m0, int n0,
                                         int wg, int split)
{
    const int j = threadIdx.x & 127, w = j >> 5, gid = (j & 31) >> 2, tig = j & 3;
#pragma unroll
    for (int e = 0; e < BN / 2; e++) {
        int m = m0 + 64 * wg + 16 * w + gid + 8 * ((e >> 1) & 1), n = n0 + 8 * (e >> 2) + 2 * tig + (e & 1);
        if (m < M && n < N) st(split, m, n, acc[e]);
    }
}

// Tile t of a product (persistent blocks walk t = blockIdx.x, + gridDim.x, ...): m
// fastest, so the blocks that run at once share B's columns, then n, then the split. p:
// the product's index in a group (conv_phase_gemm's output phases), else 0. SK: k a stage.
struct WtTile {
    int m0, n0, kbeg, kt_n, p;
};
template <int BN, int SK = WT_BK>
__device__ __forceinline__ WtTile wt_tile(int t, int M, int N, int K, int kchunk)
{
    const int tm = (M + WGG_T - 1) / WGG_T, tn = (N + BN - 1) / BN;
    WtTile w;
    w.p = 0;
    w.m0 = t % tm * WGG_T, w.n0 = t / tm % tn * BN, w.kbeg = t / (tm * tn) * kchunk;
    w.kt_n = (min(K, w.kbeg + kchunk) - w.kbeg + SK - 1) / SK;
    return w;
}

// The pipeline over a block's tiles t = blockIdx.x, + gridDim.x, ... < tl.tiles: a
// producer warpgroup whose one thread issues each stage's TMA copies (tl.issue), two
// consumer warpgroups running wgmma on them (AK / BK: the tiles' majors) and storing each
// tile (tl.store). TL: wt_gemm's one product (WtOne), the strided input grad's group of
// output phases (k_cuda_conv_grp.cuh); tl.tile(t) places tile t.
template <int TY, int BN, bool AK, bool BK, class TL> __device__ __forceinline__ void wt_pipeline(const TL &tl)
{
    K_DYN_SHARED(unsigned char, raw);
    WtSmem<BN> &sm = *(WtSmem<BN> *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    if (threadIdx.x == WT_CONSUMERS) {
        for (int s = 0; s < WT_STAGES; s++) {
            K_MBAR_INIT(&sm.full[s], 1);
            K_MBAR_INIT(&sm.empty[s], WT_CONSUMERS);
        }
        K_FENCE_MBAR_INIT();
    }
    __syncthreads();
    // `it` counts the block's slices over all its tiles: stage it % WT_STAGES, use
    // it / WT_STAGES of that stage (its barriers' phase parity), on both sides alike.
    if (threadIdx.x >= WT_CONSUMERS) { // the producer warpgroup: one thread issues
        K_SETMAXNREG_DEC(WT_PRODUCER_REGS);
        if (threadIdx.x != WT_CONSUMERS) return;
        int it = 0;
        for (int t = blockIdx.x; t < tl.tiles; t += gridDim.x) {
            const WtTile w = tl.template tile<BN>(t);
            for (int kt = 0; kt < w.kt_n; kt++, it++) {
                int s = it % WT_STAGES;
                // the stage's last slice (it - WT_STAGES) released by every consumer thread;
                // it runs ahead into the next tile while the consumers store this one
                if (it >= WT_STAGES) K_MBAR_WAIT(&sm.empty[s], (it / WT_STAGES - 1) & 1);
                K_MBAR_ARRIVE_TX(&sm.full[s], (WGG_T + BN) * 128); // rows of 128 bytes (any TY)
                tl.template issue<AK, BK, BN>(sm.a[s], sm.b[s], w, kt, &sm.full[s]);
            }
        }
        return;
    }
    K_SETMAXNREG_INC(WT_CONSUMER_REGS);
    const int wg = threadIdx.x >> 7;
    int it = 0;
    for (int t = blockIdx.x; t < tl.tiles; t += gridDim.x) {
        const WtTile w = tl.template tile<BN>(t);
        float acc[BN / 2];
#pragma unroll
        for (int e = 0; e < BN / 2; e++) acc[e] = 0.0f;
        for (int kt = 0; kt < w.kt_n; kt++, it++) {
            int s = it % WT_STAGES;
            K_MBAR_WAIT(&sm.full[s], (it / WT_STAGES) & 1);
            K_WGMMA_FENCE(); // the accumulators were the threads' own since the last wait
            wt_slice<TY, BN, AK, BK>(acc, sm.a[s], sm.b[s], wg);
            K_WGMMA_COMMIT();
            K_WGMMA_WAIT(1); // slice it - 1's wgmma is done: its stage may be refilled
            if (kt > 0) K_MBAR_ARRIVE(&sm.empty[(it - 1) % WT_STAGES]);
        }
        K_WGMMA_WAIT(0);
        K_MBAR_ARRIVE(&sm.empty[(it - 1) % WT_STAGES]); // the tile's last stage, for the next tile
        tl.template store<BN>(acc, w, wg);
    }
}

// One product's tiles (wt_gemm). I2C: A by im2col (ig): AK, the conv's (rows = pixels,
// K-major); !AK, its weight grad's (rows = (r, s, c), k = pixels, M-major); else A by
// tiles of ma. ma / mb: the kernel's __grid_constant__ maps, which TMA reads in place.
// SK: k a stage (wt_sk).
template <class ST, bool I2C, int SK = WT_BK> struct WtOne {
    static constexpr bool i2c = I2C;
    int M, N, K, kchunk, tiles;
    const k_tmap *ma, *mb;
    ST st;
    WtI2c ig;
    template <int BN> __device__ __forceinline__ WtTile tile(int t) const
    {
        return wt_tile<BN, SK>(t, M, N, K, kchunk);
    }
    template <bool AK, bool BK, int BN>
    __device__ __forceinline__ void issue(unsigned short *a, unsigned short *b, const WtTile &w, int kt,
                                          unsigned long long *bar) const
    {
        if constexpr (I2C && AK) wt_issue_i2c(a, ma, ig, w.kbeg + kt * WT_BK, w.m0, bar);
        else if constexpr (I2C) wt_issue_i2c_mn<WGG_T>(a, ma, ig, M, w.m0, w.kbeg + kt * WT_BK, bar);
        else wt_issue<AK, WGG_T>(a, ma, w.kbeg + kt * SK, w.m0, bar);
        wt_issue<BK, BN>(b, mb, w.kbeg + kt * SK, w.n0, bar);
    }
    template <int BN> __device__ __forceinline__ void store(const float (&acc)[BN / 2], const WtTile &w, int wg) const
    {
        wt_store<BN>(acc, st, M, N, w.m0, w.n0, wg, w.kbeg / kchunk);
    }
};
template <int TY, int BN, bool AK, bool BK, class ST, bool I2C = false>
__global__ void __launch_bounds__(WT_THREADS, 1)
    wt_gemm(int M, int N, int K, int kchunk, int tiles, const K_GRID_CONST k_tmap ma, const K_GRID_CONST k_tmap mb,
            ST st, WtI2c ig)
{
    const WtOne<ST, I2C, wt_sk<TY>()> tl = {M, N, K, kchunk, tiles, &ma, &mb, st, ig};
    wt_pipeline<TY, BN, AK, BK>(tl);
}

// An array's tensor map: k-contiguous rows x K (a box 64 k x box rows; fp32, eb 4: 32
// k), M/N-contiguous K x rows (a box 64 rows x 64 k; 16-bit only); ld elements apart: 0,
// or -1 with why (TMA's constraints: 16-byte aligned, ld a multiple of 16 bytes).
static inline int wt_map(k_tmap *m, const void *p, int ld, bool kf, int rows, int K, int box_rows, const char **why,
                         int eb = 2)
{
    return kf ? k_tmap_encode_2d_eb(m, p, (unsigned long long)rows, (unsigned long long)K, (unsigned long long)ld,
                                    128 / eb, (unsigned)box_rows, 128, eb, why)
              : k_tmap_encode_2d(m, p, (unsigned long long)K, (unsigned long long)rows, (unsigned long long)ld, 64,
                                 WT_BK, 128, why);
}

// The tile's N for an M x N product: 256 where its tiles fill the GPU (k_cuda_tma_fill, F)
// and take no more waves of F blocks than the narrow tiles, a wide tile counted as two
// narrow ones (a persistent block's time is its tiles'): GPT-2's 8192 x 768 has 192 wide
// tiles, 2 waves of 2, against 384 narrow ones, 3 waves of 1; 4096 x 4096 has 512, 4 waves
// of 2, against 8 of 1 (the wide tile then, for its fewer shared-memory reads a product).
// F 1 (the tests' hook): always wide. N <= 64 (ResNet's first stage, 64 channels; a
// classifier's few columns): 128 x 64, whose tiles are as many as 128 x 128's and whose
// wgmma (m64n64k16) does no work on columns past N (a 128-wide tile: half of it).
static inline int wt_tile_n(int M, int N)
{
    const long long tm = (M + WGG_T - 1) / WGG_T, F = k_cuda_tma_fill();
    const long long wide = tm * ((N + 255) / 256), narrow = tm * ((N + 127) / 128);
    if (k_cuda_tma_tile()) return k_cuda_tma_tile();
    if (F <= 1) return 256;
    if (N <= 64) return 64;
    return wide >= F && 2 * ((wide + F - 1) / F) <= (narrow + F - 1) / F ? 256 : 128;
}
// A split product's tile (its tiles do not fill the GPU): never wide.
static inline int wt_tile_n_split(int N) { return N <= 64 ? 64 : 128; }

// A persistent TMA GEMM kernel's launch (wt_gemm, conv_phase_gemm): its dynamic shared
// memory limit raised once (attr: the instance's flag), at most one block an SM
// (k_cuda_tma_fill) for its tiles. The blocks, or -1 with why.
template <int BN, class KF> static inline int wt_blocks(KF kernel, int &attr, long long tiles, const char **why)
{
    if (!attr) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, wt_smem_bytes<BN>())) {
            *why = "cudaFuncSetAttribute refused the dynamic shared memory";
            return -1;
        }
        attr = 1;
    }
    if (tiles > 0x7fffffff) {
        *why = "more tiles than an int counts";
        return -1;
    }
    *why = NULL;
    return (int)(tiles < k_cuda_tma_fill() ? tiles : k_cuda_tma_fill());
}

template <int TY, int BN, bool AK, bool BK, class ST, bool I2C = false>
static inline int wt_run(int M, int N, int K, int kchunk, const k_tmap &ma, const k_tmap &mb, const ST &st,
                         cudaStream_t s, const char **why, WtI2c ig = WtI2c())
{
    static int attr;
    const long long tiles = (long long)((N + BN - 1) / BN) * ((M + WGG_T - 1) / WGG_T) * ((K + kchunk - 1) / kchunk);
    const int blocks = wt_blocks<BN>(wt_gemm<TY, BN, AK, BK, ST, I2C>, attr, tiles, why);
    if (blocks < 0) return -1;
    K_LAUNCH((wt_gemm<TY, BN, AK, BK, ST, I2C>), blocks, WT_THREADS, wt_smem_bytes<BN>(), s)(M, N, K, kchunk,
                                                                                           (int)tiles, ma, mb, st, ig);
    return 0;
}

// wt_run at the tile N bn (64, 128 or 256).
template <int TY, bool AK, bool BK, class ST, bool I2C = false>
static inline int wt_run_bn(int bn, int M, int N, int K, int kchunk, const k_tmap &ma, const k_tmap &mb,
                            const ST &st, cudaStream_t s, const char **why, WtI2c ig = WtI2c())
{
    return bn == 256  ? wt_run<TY, 256, AK, BK, ST, I2C>(M, N, K, kchunk, ma, mb, st, s, why, ig)
           : bn == 64 ? wt_run<TY, 64, AK, BK, ST, I2C>(M, N, K, kchunk, ma, mb, st, s, why, ig)
                      : wt_run<TY, 128, AK, BK, ST, I2C>(M, N, K, kchunk, ma, mb, st, s, why, ig);
}

// wt_gemm<TY, BN, AK, BK, ST> on the stream (AK / BK: A / B k-contiguous, else
// M/N-contiguous; TF32: two fp32 k-contiguous arrays), BN by wt_tile_n; its dynamic
// shared memory limit raised once; 0, or -1 (a launch error for k_cuda_check_launch, or
// the maps refused: why). kchunk (a multiple of WT_BK) < K: split-K, partial z of k
// [z kchunk, (z + 1) kchunk) through st (KgPartial), on 128 x 128 tiles, or 128 x 64
// where N <= 64 (a split product is one whose tiles do not fill the GPU).
template <int TY, bool AK, bool BK, class ST>
static inline int wt_launch(int M, int N, int K, const void *a, int lda, const void *b, int ldb, const ST &st,
                            cudaStream_t s, const char **why, int kchunk = 0)
{
    static_assert(TY != K_CUDA_MM_TF32 || (AK && BK), "tf32 wgmma takes K-major operands only");
    constexpr int eb = TY == K_CUDA_MM_TF32 ? 4 : 2;
    k_tmap ma, mb;
    if (kchunk <= 0 || kchunk >= K) kchunk = K;
    int bn = kchunk < K ? wt_tile_n_split(N) : wt_tile_n(M, N);
    if (wt_map(&ma, a, lda, AK, M, K, WGG_T, why, eb) || wt_map(&mb, b, ldb, BK, N, K, bn, why, eb)) return -1;
    return wt_run_bn<TY, AK, BK>(bn, M, N, K, kchunk, ma, mb, st, s, why);
}
// wt_gemm with A the im2col of x [n][h][w][c] (16-bit, NHWC, 16-byte aligned; c % 64 ==
// 0) for a conv of an r x s filter, stride st, padding pad, p x q outputs. !DW: M = n p q
// rows (output pixels), N columns of b (k-contiguous, ldb apart: the weights [N x rsc]),
// K = r s c. DW (the weight grad): M = r s c, k = the n p q output pixels, b dy [npq x N]
// (N-contiguous, ldb apart), A's boxes 64 pixels deep. kchunk as wt_launch's (split-K
// through out); flip: WtI2c's. lo / hi: the map's corners {w, h} (I2C_CORNERS: -pad and
// pad - (S-1), pad - (R-1) for a conv; a strided input grad's phase its own, st 1). 0, or
// -1: a launch error, or the maps refused (why).
template <int TY, bool DW, class ST>
static inline int wt_launch_i2c(const void *x, int n, int h, int w, int c, int r, int s_, int st, const int (&lo)[2],
                                const int (&hi)[2], int p, int q, int flip, int N, const void *b, int ldb,
                                const ST &out, cudaStream_t s, const char **why, int kchunk = 0)
{
    const int M = DW ? r * s_ * c : n * p * q, K = DW ? n * p * q : r * s_ * c;
    k_tmap ma, mb;
    if (kchunk <= 0 || kchunk >= K) kchunk = K;
    int bn = kchunk < K ? wt_tile_n_split(N) : wt_tile_n(M, N);
    if (k_tmap_encode_im2col_box(&ma, x, n, h, w, c, st, lo, hi, WT_BK, DW ? WT_BK : WGG_T, 128, why) ||
        wt_map(&mb, b, ldb, !DW, N, K, bn, why))
        return -1;
    const WtI2c ig = {c, r, s_, p * q, q, st, -lo[1], -lo[0], flip};
    return wt_run_bn<TY, !DW, !DW, ST, true>(bn, M, N, K, kchunk, ma, mb, out, s, why, ig);
}
} // namespace
