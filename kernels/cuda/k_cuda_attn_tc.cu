// Causal attention on the tensor cores (--amp bf16 / fp16), FlashAttention-2 style: the
// layout of k_cuda_attn.cu (qkv rows [t, 3C], y [t, C], lse[b, h, t] kept, probabilities
// recomputed in backward), the rounding of the CPU's --amp bf16 attention (k_attn.c on
// AMX): the products' operands Q, K, V, P, dO and dS are rounded to 16 bits, every sum,
// the softmax's max and sums, lse and D = rowsum(dO * O) stay fp32.
//
// Heads are padded to HD = 32, 64 or 128 columns (zeros), tiles of rows to 64 (zeros past
// t): every product is mma.sync m16n8k16 on whole fragments. Operands pass through shared
// memory as 16-bit rows whose 16-byte chunks are XOR-swizzled (the 8 rows an ldmatrix
// phase reads hit 8 different bank groups). A 16-bit qkv of the kernel's own type
// (--amp-activations 16) with hd % 8 == 0 and a 16-byte aligned base is copied there by
// cp.async, 16 bytes at a time, zero-filled past t and hd: the same bits as reading and
// rounding it, since rounding a 16-bit value to its own type is the identity (NaN
// payloads aside). fp32 qkv is read, rounded (cvt.rn) and stored by the threads. dO (fp32)
// is rounded once, before the backward kernels, into the workspace's front (the same
// rounding: the same bits), whence it goes by cp.async too; read and rounded by the
// threads where it cannot (hd % 8 != 0, a workspace not 16-byte aligned).
//
// The choice of cp.async or read-and-round is made on the host (fa_cp) and is a template
// argument of the kernels (CP; backward's LD for qkv and dO): each kernel holds one path's
// registers.
//
// Pipelines: the streamed tiles (K, V in forward and dQ; Q, dO in dK, dV) are double-
// buffered where two fit the executor's 48 KiB of static shared memory (HD 32 and 64,
// GPT-2's 64 among them): the next tile's cp.async (or its fp32 read and rounding into
// registers, stored after the products, as the GEMM's TcPrefetch) is issued before the
// current tile's products, and one barrier a tile orders both ("in" and "every warp done
// with the buffer the next loads overwrite"). The read-and-round registers are kept to one
// part of a tile at a time: forward's next K lands after S, its next V after P V; dK, dV
// and dQ take their streamed tile in passes of 32 rows (the products of a pass, then its
// part of the next tile lands; the sums keep their order, so the same bits). HD 128 stays
// single-buffered (a K, V pair of tiles is already 32 KiB): load, barrier, products,
// barrier.
//
// Forward: a block of 4 warps per (64-query tile, head, sequence), a warp per 16 query
// rows; its Q fragments are loaded once (ldmatrix), key tiles of 64 stream through; S =
// Q K^T in fp32 accumulators, the online softmax on them (row max and sum across the
// quad of lanes that holds a row), P rounded in registers and used directly as the A
// operand of P V (m16n8k16's C fragment of two n8 blocks is the A fragment of one k16
// step), V through ldmatrix.trans.
// Backward: dK, dV by a block per 64-key tile (a warp per 16 keys, its dK and dV in
// registers) looping over the query tiles at or after it; dQ by a second pass, a block
// per 64-query tile looping over the key tiles. No atomics: every sum has one owner and a
// fixed order, the same bits on every run.
// sm_90a with wgmma on, 16-bit qkv by cp.async: the forward's and the backward's wgmma
// kernels (k_cuda_attn_wg.cuh, k_cuda_attn_wgb.cuh), the same bits on the executor.
#include "kernels/cuda/k_cuda_attn_tc.cuh"
#include "kernels/cuda/k_cuda_attn_wg.cuh"
#include "kernels/cuda/k_cuda_attn_wgb.cuh"

namespace {
// Forward: block (query tile, counted from the last: the longest first; head, sequence).
// Read-and-round at head 64: 3 blocks an SM asked of ptxas (168 registers, no spill; left
// to itself it takes 218-222, 2 blocks); 0 elsewhere: its own choice.
template <int TY, int HD, int CP>
__global__ void __launch_bounds__(FA_THREADS, HD == 64 && !CP ? 3 : 0)
fa_fwd(int t, int h, int hd, float scale, const void *qkv, int xt, void *y, int yt, float *lse)
{
    constexpr int NB = fa_bufs(HD);
    struct alignas(16) Smem {
        unsigned short q[FA_T * HD], k[NB][FA_T * HD], v[NB][FA_T * HD];
    };
    __shared__ Smem sm;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FA_T, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const size_t ld = 3 * (size_t)C;
    const size_t base = (size_t)s * t * ld + (size_t)hh * hd;
    const int kend = min(t, q0 + FA_T); // the causal mask's last key tile
    FaLoad<TY, HD, FA_T, false, CP> lq(qkv, xt, base, ld, t, hd);
    FaLoad<TY, HD, FA_T, NB == 2, CP> lk(qkv, xt, base + C, ld, t, hd), lv(qkv, xt, base + 2 * C, ld, t, hd);
    lq.issue(sm.q, q0);
    if (NB == 2) lk.issue(sm.k[0], 0), lv.issue(sm.v[0], 0), lk.land(sm.k[0]), lv.land(sm.v[0]);
    K_CP_ASYNC_COMMIT();
    K_CP_ASYNC_WAIT(0);
    __syncthreads(); // Q in
    // The warp's Q fragments: once, in registers, up to HD 64; at 128 (their 32 registers
    // beside O's 64: 175 on sm_80, 2 blocks an SM) from shared memory at every key tile.
    constexpr bool QREG = HD <= 64;
    unsigned qf[QREG ? HD / 16 : 1][4];
    if constexpr (QREG)
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) fa_lda<HD>(qf[kk], sm.q, 16 * w, kk, lane);
    float o[HD / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    fa_zero(o);
    const int row[2] = {q0 + 16 * w + g, q0 + 16 * w + g + 8};
    for (int k0 = 0, bf = 0; k0 < kend; k0 += FA_T, bf = (bf + 1) % NB) {
        if (NB == 1) {
            __syncthreads(); // every warp done with the last tile
            lk.issue(sm.k[0], k0), lv.issue(sm.v[0], k0);
            K_CP_ASYNC_COMMIT();
        }
        fa_tile_in();
        const bool next = NB == 2 && k0 + FA_T < kend;
        unsigned short *nk = sm.k[(bf + 1) % NB], *nv = sm.v[(bf + 1) % NB];
        // the next K tile issued before S = Q K^T and landing after it, the next V before the
        // softmax and P V, landing after them: one tile's prefetched chunks in registers
        if (next) lk.issue(nk, k0 + FA_T);
        float sc[FA_T / 8][4];
        fa_zero(sc);
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            if constexpr (!QREG) fa_lda<HD>(qf[0], sm.q, 16 * w, kk, lane);
            fa_abt_step<TY, HD, FA_T / 8>(sc, qf[QREG ? kk : 0], sm.k[bf], kk, lane);
        }
        if (next) {
            lk.land(nk), lv.issue(nv, k0 + FA_T);
            K_CP_ASYNC_COMMIT();
        }
        fa_softmax<HD>(sc, o, m, l, row, k0, t, scale, tig);
        fa_pb<TY, HD, FA_T / 8>(o, sc, sm.v[bf], lane);
        if (next) lv.land(nv);
    }
    fa_fwd_out<HD>(o, m, l, row, t, h, hh, s, hd, q0 + 16 * w, lane, y, yt, lse);
}

// The backward kernels' loads (LD, fa_bwd_t): 2 qkv and dO by cp.async (dO: the 16-bit copy
// in the workspace, gt the kernel's type), 1 dO alone (fp32 qkv), 0 both read and rounded.
// dK, dV: block (key tile, head, sequence), the query tiles (BQ rows) from the key tile on.
template <int TY, int HD, int BQ, int LD>
__global__ void __launch_bounds__(FA_THREADS)
fa_bwd_dkv(int t, int h, int hd, float scale, const void *qkv, int xt, const void *dy, int gt, const float *lse,
           const float *dd, float *dqkv)
{
    constexpr int NB = fa_bufs(HD), QS = BQ > 32 ? 32 : BQ;
    struct alignas(16) Smem {
        unsigned short k[FA_T * HD], v[FA_T * HD], q[NB][BQ * HD], g[NB][BQ * HD];
    };
    __shared__ Smem sm;
    const int j0 = blockIdx.x * FA_T, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const size_t ld = 3 * (size_t)C, row0 = ((size_t)s * h + hh) * t;
    const size_t base = (size_t)s * t * ld + (size_t)hh * hd, gbase = (size_t)s * t * C + (size_t)hh * hd;
    FaLoad<TY, HD, FA_T, false, LD == 2> lk(qkv, xt, base + C, ld, t, hd), lv(qkv, xt, base + 2 * C, ld, t, hd);
    // Q and dO by passes of QS rows: the prefetched chunks of one pass in registers at a time
    FaLoad<TY, HD, QS, NB == 2, LD == 2> lq(qkv, xt, base, ld, t, hd);
    FaLoad<TY, HD, QS, NB == 2, LD >= 1> lg(dy, LD >= 1 ? gt : K_CUDA_ACT_F32, gbase, C, t, hd); // (LD 0: fp32, a constant)
    lk.issue(sm.k, j0), lv.issue(sm.v, j0);
    if (NB == 2)
        for (int qs = 0; qs < BQ; qs += QS) {
            lq.issue(sm.q[0] + qs * HD, j0 + qs), lg.issue(sm.g[0] + qs * HD, j0 + qs);
            lq.land(sm.q[0] + qs * HD), lg.land(sm.g[0] + qs * HD);
        }
    K_CP_ASYNC_COMMIT(); // K, V (and the first Q, dO) arrive by the loop's first fa_tile_in
    float dk[HD / 8][4], dv[HD / 8][4];
    fa_zero(dk), fa_zero(dv);
    const int key[2] = {j0 + 16 * w + g, j0 + 16 * w + g + 8};
    const float *lr = lse + row0, *dr = dd + row0; // the head's lse and D rows
    for (int i0 = j0, bf = 0; i0 < t; i0 += BQ, bf = (bf + 1) % NB) {
        if (NB == 1) {
            __syncthreads(); // every warp done with the last query tile
            for (int qs = 0; qs < BQ; qs += QS)
                lq.issue(sm.q[0] + qs * HD, i0 + qs), lg.issue(sm.g[0] + qs * HD, i0 + qs);
            K_CP_ASYNC_COMMIT();
        }
        fa_tile_in();
        const bool next = NB == 2 && i0 + BQ < t;
        unsigned short *nq = sm.q[(bf + 1) % NB], *ng = sm.g[(bf + 1) % NB];
        // P^T and dP^T: the warp's 16 keys x QS of the tile's queries a pass (the registers:
        // dK, dV, P^T and dP^T are live together; dV and dK still sum the queries in order).
        // The next tile's pass qs is issued before the pass's products and lands after them.
#pragma unroll 1
        for (int qs = 0; qs < BQ; qs += QS) {
            if (next) lq.issue(nq + qs * HD, i0 + BQ + qs), lg.issue(ng + qs * HD, i0 + BQ + qs);
            const unsigned short *tq = sm.q[bf] + qs * HD, *tg = sm.g[bf] + qs * HD; // QS rows: the same swizzle
            float p[QS / 8][4], dp[QS / 8][4];
            fa_zero(p), fa_zero(dp);
            fa_abt<TY, HD, QS / 8>(p, sm.k, 16 * w, tq, lane);
            fa_abt<TY, HD, QS / 8>(dp, sm.v, 16 * w, tg, lane);
#pragma unroll
            for (int n = 0; n < QS / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int i = i0 + qs + 8 * n + 2 * tig + e;
                    float li = i < t ? lr[i] : 0.0f, di = i < t ? dr[i] : 0.0f;
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        float pv = i < t && i >= key[r] && key[r] < t ? expf(p[n][2 * r + e] * scale - li) : 0.0f;
                        p[n][2 * r + e] = pv;
                        dp[n][2 * r + e] = pv * (dp[n][2 * r + e] - di) * scale;
                    }
                }
            fa_pb<TY, HD, QS / 8>(dv, p, tg, lane); // dV += P^T dO
            fa_pb<TY, HD, QS / 8>(dk, dp, tq, lane); // dK += dS^T Q
            if (next) lq.land(nq + qs * HD), lg.land(ng + qs * HD);
        }
        if (next) K_CP_ASYNC_COMMIT();
    }
    const size_t dst = (size_t)s * t * ld + (size_t)hh * hd + C;
    fa_store(dk, dqkv, K_CUDA_ACT_F32, dst, ld, j0 + 16 * w, t, hd, lane, nullptr);
    fa_store(dv, dqkv, K_CUDA_ACT_F32, dst + C, ld, j0 + 16 * w, t, hd, lane, nullptr);
}

// dQ: block (query tile, counted from the last; head, sequence), the key tiles (BK rows)
// up to its last query.
template <int TY, int HD, int BK, int LD>
__global__ void __launch_bounds__(FA_THREADS)
fa_bwd_dq(int t, int h, int hd, float scale, const void *qkv, int xt, const void *dy, int gt, const float *lse,
          const float *dd, float *dqkv)
{
    constexpr int NB = fa_bufs(HD), KS = BK > 32 ? 32 : BK; // KS: keys a pass
    struct alignas(16) Smem {
        unsigned short q[FA_T * HD], g[FA_T * HD], k[NB][BK * HD], v[NB][BK * HD];
    };
    __shared__ Smem sm;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FA_T, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const size_t ld = 3 * (size_t)C, row0 = ((size_t)s * h + hh) * t;
    const size_t base = (size_t)s * t * ld + (size_t)hh * hd, gbase = (size_t)s * t * C + (size_t)hh * hd;
    const int kend = min(t, q0 + FA_T); // the causal mask's last key tile
    FaLoad<TY, HD, FA_T, false, LD == 2> lq(qkv, xt, base, ld, t, hd);
    FaLoad<TY, HD, FA_T, false, LD >= 1> lg(dy, LD >= 1 ? gt : K_CUDA_ACT_F32, gbase, C, t, hd); // (LD 0: fp32, a constant)
    // K and V by passes of KS rows (as dK, dV's Q and dO)
    FaLoad<TY, HD, KS, NB == 2, LD == 2> lk(qkv, xt, base + C, ld, t, hd), lv(qkv, xt, base + 2 * C, ld, t, hd);
    lq.issue(sm.q, q0), lg.issue(sm.g, q0);
    if (NB == 2)
        for (int ks = 0; ks < BK; ks += KS) {
            lk.issue(sm.k[0] + ks * HD, ks), lv.issue(sm.v[0] + ks * HD, ks);
            lk.land(sm.k[0] + ks * HD), lv.land(sm.v[0] + ks * HD);
        }
    K_CP_ASYNC_COMMIT(); // Q, dO (and the first K, V) arrive by the loop's first fa_tile_in
    const int row[2] = {q0 + 16 * w + g, q0 + 16 * w + g + 8};
    float li[2], di[2], dq[HD / 8][4];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        li[r] = row[r] < t ? lse[row0 + row[r]] : 0.0f;
        di[r] = row[r] < t ? dd[row0 + row[r]] : 0.0f;
    }
    fa_zero(dq);
    for (int k0 = 0, bf = 0; k0 < kend; k0 += BK, bf = (bf + 1) % NB) {
        if (NB == 1) {
            __syncthreads(); // every warp done with the last key tile
            for (int ks = 0; ks < BK; ks += KS)
                lk.issue(sm.k[0] + ks * HD, k0 + ks), lv.issue(sm.v[0] + ks * HD, k0 + ks);
            K_CP_ASYNC_COMMIT();
        }
        fa_tile_in();
        const bool next = NB == 2 && k0 + BK < kend;
        unsigned short *nk = sm.k[(bf + 1) % NB], *nv = sm.v[(bf + 1) % NB];
        // P and dS: the warp's 16 queries x KS of the tile's keys a pass (dQ sums the keys in
        // order); the next tile's pass ks issued before the pass's products, landing after.
        // (Unrolled at HD 64: ptxas -v's registers, without a spill on sm_90.)
#pragma unroll(HD == 64 ? 2 : 1)
        for (int ks = 0; ks < BK; ks += KS) {
            if (next) lk.issue(nk + ks * HD, k0 + BK + ks), lv.issue(nv + ks * HD, k0 + BK + ks);
            const unsigned short *tk = sm.k[bf] + ks * HD, *tv = sm.v[bf] + ks * HD; // KS rows: the same swizzle
            float p[KS / 8][4], ds[KS / 8][4];
            fa_zero(p), fa_zero(ds);
            fa_abt<TY, HD, KS / 8>(p, sm.q, 16 * w, tk, lane);
            fa_abt<TY, HD, KS / 8>(ds, sm.g, 16 * w, tv, lane);
#pragma unroll
            for (int n = 0; n < KS / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = k0 + ks + 8 * n + 2 * tig + (e & 1), r = e >> 1;
                    float pv = row[r] < t && j <= row[r] ? expf(p[n][e] * scale - li[r]) : 0.0f;
                    ds[n][e] = pv * (ds[n][e] - di[r]) * scale;
                }
            fa_pb<TY, HD, KS / 8>(dq, ds, tk, lane); // dQ += dS K
            if (next) lk.land(nk + ks * HD), lv.land(nv + ks * HD);
        }
        if (next) K_CP_ASYNC_COMMIT();
    }
    fa_store(dq, dqkv, K_CUDA_ACT_F32, (size_t)s * t * ld + (size_t)hh * hd, ld, q0 + 16 * w, t, hd, lane, nullptr);
}

// D[b, h, i] = dO_i . O_i in fp32 (the softmax backward's row term, of the unrounded values)
__global__ void fa_bwd_d(int b, int t, int h, int hd, const void *y, int yt, const float *dy, float *dd)
{
    size_t rows = (size_t)b * h * t;
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows; r += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(r % t), hh = (int)(r / t % h), s = (int)(r / ((size_t)t * h));
        size_t o = ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
        float a = 0.0f;
        for (int d = 0; d < hd; d++) a += dy[o + d] * k_act_ld(y, yt, o + d);
        dd[r] = a;
    }
}

// the wgmma kernels (fw_fwd, fw_bwd_*) where wgmma is on, unless their start-up probe
// disagreed (k_cuda_probe.cu)
static int fw_on = 1;
extern "C" int k_cuda_attention_set_wgmma(int on) { return __atomic_exchange_n(&fw_on, on ? 1 : 0, __ATOMIC_RELAXED); }

template <int TY, int HD>
int fa_fwd_t(int b, int t, int h, int hd, const void *qkv, int xt, void *y, int yt, float *lse, cudaStream_t s)
{
    dim3 grid((unsigned)((t + FA_T - 1) / FA_T), (unsigned)h, (unsigned)b);
    const float scale = 1.0f / sqrtf((float)hd);
    const bool cp = fa_cp(TY, qkv, xt, hd);
    if constexpr (HD >= 64) // sm_90a: the wgmma kernel (cp.async loads; heads over 32)
        if (cp && k_cuda_wgmma_on() && __atomic_load_n(&fw_on, __ATOMIC_RELAXED)) return fw_fwd_t<TY, HD>(b, t, h, hd, qkv, y, yt, lse, s);
    if (cp) // the kernel of qkv's loads: cp.async, or read and rounded
        K_LAUNCH((fa_fwd<TY, HD, 1>), grid, FA_THREADS, 0, s)(t, h, hd, scale, qkv, xt, y, yt, lse);
    else
        K_LAUNCH((fa_fwd<TY, HD, 0>), grid, FA_THREADS, 0, s)(t, h, hd, scale, qkv, xt, y, yt, lse);
    return k_cuda_check_launch("k_cuda_attention_fwd_mm", "b=%d t=%d h=%d hd=%d (tensor cores)", b, t, h, hd);
}

// The 128-wide heads take 32-row inner tiles in backward: 48 KiB of static shared memory.
// dy: fp32 (gt K_CUDA_ACT_F32), or the 16-bit copy (gt = TY), which goes by cp.async.
template <int TY, int HD>
int fa_bwd_t(int b, int t, int h, int hd, const void *qkv, int xt, const float *lse, const void *dy, int gt,
             const float *dd, float *dqkv, cudaStream_t s)
{
    constexpr int IN = HD >= 128 ? 32 : FA_T;
    const float scale = 1.0f / sqrtf((float)hd);
    dim3 grid((unsigned)((t + FA_T - 1) / FA_T), (unsigned)h, (unsigned)b);
    // the kernels' loads: dO by cp.async where it is the copy, qkv too where fa_cp holds
    const int ld = gt == TY ? (fa_cp(TY, qkv, xt, hd) ? 2 : 1) : 0;
    if constexpr (HD >= 64) // sm_90a: the wgmma kernels (both by cp.async; heads over 32)
        if (ld == 2 && k_cuda_wgmma_on() && __atomic_load_n(&fw_on, __ATOMIC_RELAXED))
            return fw_bwd_t<TY, HD>(b, t, h, hd, qkv, lse, dy, dd, dqkv, s);
#define FA_BWD_LAUNCH(kern)                                                                                      \
    do {                                                                                                           \
        if (ld == 2)                                                                                               \
            K_LAUNCH((kern<TY, HD, IN, 2>), grid, FA_THREADS, 0, s)(t, h, hd, scale, qkv, xt, dy, gt, lse, dd, dqkv); \
        else if (ld == 1)                                                                                          \
            K_LAUNCH((kern<TY, HD, IN, 1>), grid, FA_THREADS, 0, s)(t, h, hd, scale, qkv, xt, dy, gt, lse, dd, dqkv); \
        else                                                                                                       \
            K_LAUNCH((kern<TY, HD, IN, 0>), grid, FA_THREADS, 0, s)(t, h, hd, scale, qkv, xt, dy, gt, lse, dd, dqkv); \
    } while (0)
    FA_BWD_LAUNCH(fa_bwd_dkv);
    if (k_cuda_check_launch("k_cuda_attention_bwd_mm (dk, dv)", "b=%d t=%d h=%d hd=%d (tensor cores)", b, t, h, hd))
        return -1;
    FA_BWD_LAUNCH(fa_bwd_dq);
#undef FA_BWD_LAUNCH
    return k_cuda_check_launch("k_cuda_attention_bwd_mm (dq)", "b=%d t=%d h=%d hd=%d (tensor cores)", b, t, h, hd);
}

int fa_tc(int mm, int hd)
{
    return k_cuda_mm16(mm) && hd <= K_CUDA_ATTN_TC_MAX_HD;
}

// 16-bit qkv / y (K_CUDA_MM_X16 / _Y16) only where the tensor-core kernel runs.
int fa_act_bad(int mm, int hd, const char *kernel, int b, int t, int h)
{
    if (!(mm & (K_CUDA_MM_X16 | K_CUDA_MM_Y16)) || fa_tc(mm, hd)) return 0;
    port_cuda_fail("%s(b=%d t=%d h=%d hd=%d): 16-bit activations need the tensor-core kernel (bf16 / f16, heads up "
                   "to %d)", kernel, b, t, h, hd, K_CUDA_ATTN_TC_MAX_HD);
    return -1;
}
} // namespace

#define FA_DISPATCH(fn, mm, hd, ...)                                                                               \
    ((mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16 ? (hd <= 32 ? fn<K_CUDA_MM_BF16, 32>(__VA_ARGS__)                                        \
                             : hd <= 64 ? fn<K_CUDA_MM_BF16, 64>(__VA_ARGS__)                                      \
                                        : fn<K_CUDA_MM_BF16, 128>(__VA_ARGS__))                                    \
                          : (hd <= 32 ? fn<K_CUDA_MM_F16, 32>(__VA_ARGS__)                                         \
                             : hd <= 64 ? fn<K_CUDA_MM_F16, 64>(__VA_ARGS__)                                       \
                                        : fn<K_CUDA_MM_F16, 128>(__VA_ARGS__)))

int k_cuda_attention_fwd_mm(int mm, int b, int t, int h, int hd, const float *qkv, float *y, float *lse,
                            port_stream s)
{
    if (fa_act_bad(mm, hd, "k_cuda_attention_fwd_mm", b, t, h)) return -1;
    if (!fa_tc(mm, hd)) return k_cuda_attention_fwd(b, t, h, hd, qkv, y, lse, s);
    return FA_DISPATCH(fa_fwd_t, mm, hd, b, t, h, hd, qkv, k_act_of(mm, K_CUDA_MM_X16), y, k_act_of(mm, K_CUDA_MM_Y16),
                       lse, (cudaStream_t)s);
}

int k_cuda_attention_bwd_mm(int mm, int b, int t, int h, int hd, const float *qkv, const float *y, const float *lse,
                            const float *dy, float *dqkv, void *ws, port_stream s)
{
    if (fa_act_bad(mm, hd, "k_cuda_attention_bwd_mm", b, t, h)) return -1;
    if (!fa_tc(mm, hd)) return k_cuda_attention_bwd(b, t, h, hd, qkv, y, lse, dy, dqkv, ws, s);
    cudaStream_t cs = (cudaStream_t)s;
    // dO rounded once into the workspace's front (as linear's k_dy16) where its rows go by
    // cp.async: whole 16-byte chunks (hd % 8 == 0) from a 16-byte aligned workspace; the
    // same rounding (to nearest even) as the kernels' read-and-round path, so the same bits
    const size_t ny = (size_t)b * t * h * hd, front = (ny * 2 + 255) / 256 * 256;
    const void *g = dy;
    int gt = K_CUDA_ACT_F32;
    if (hd % 8 == 0 && ((uintptr_t)ws & 15) == 0) {
        uint16_t *g16 = (uint16_t *)ws;
        if ((mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16 ? k_cuda_f32_to_bf16(ny, dy, g16, s) : k_cuda_f32_to_f16(ny, dy, g16, s))
            return -1;
        g = g16, gt = mm & K_CUDA_MM_TYPE;
    }
    float *dd = (float *)((char *)ws + front);
    K_LAUNCH(fa_bwd_d, k_cuda_blocks((size_t)b * h * t), K_CUDA_THREADS, 0, cs)(b, t, h, hd, y,
                                                                              k_act_of(mm, K_CUDA_MM_Y16), dy, dd);
    if (k_cuda_check_launch("k_cuda_attention_bwd_mm (D)", "b=%d t=%d h=%d hd=%d", b, t, h, hd)) return -1;
    return FA_DISPATCH(fa_bwd_t, mm, hd, b, t, h, hd, qkv, k_act_of(mm, K_CUDA_MM_X16), lse, g, gt, dd, dqkv, cs);
}
