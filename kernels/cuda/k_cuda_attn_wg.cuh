// The attention's forward on sm_90a's wgmma (H100/H200; k_cuda_wgmma_on(), as the GEMMs),
// FlashAttention-3 style, included by k_cuda_attn_tc.cu: fw_fwd computes what fa_fwd does
// (same tiles, same online softmax: fa_softmax) with one warpgroup of 128 threads per block
// (64 query rows: wgmma's M), both products as warpgroup wgmma ops:
//  - S = Q K^T: m64n64k16, A = Q (64 queries x hd), B = K (64 keys x hd), both K-major in
//    shared memory;
//  - O += P V: m64nHDk16, A = P in registers (FA3's "RS" form), B = V (64 keys x hd: hd
//    contiguous, so N-major, imm-trans-b 1).
// S and O sit in wgmma's accumulator layout, which is mma.sync's C fragments repeated over
// N / 8 (warp w rows 16w.., element 4n + e = fragment n's e): fa_fwd's softmax and stores
// run on them unchanged. S's fragments n = 2ks, 2ks + 1 are also register A's fragment of
// k16 step ks (mma.sync's A layout, per warp): P is rounded to 16 bits into four registers
// a step (fa_pack, as fa_fwd), then wgmma.fence (the ops read registers written since the
// last one); no shared P tile, no proxy fence or barrier for it. The registers must stay
// unchanged until the wait_group (the executor checks both).
// Tiles: 64 rows in 64-column blocks (8 KiB each) in the 128-byte swizzle (row r's 16-byte
// chunk c at c ^ (r & 7), patterns of 8 rows x 128 bytes, 1 KiB-aligned): for a K-major
// operand one descriptor's 16 k lie in one 128-byte row (SBO 1 KiB: the next 8 rows); for
// V a row is one key's 64 n (SBO 1 KiB: the next 8 keys, LBO 8 KiB: the next 64 n).
// At HD 64 that is fa_off<64>, fa_fwd's own layout.
// Loads: cp.async only (a 16-bit qkv of the kernel's type, fa_cp); K and V double-buffered
// in dynamic shared memory (HD 64: 40 KiB; HD 128: 80 KiB; + 1 KiB alignment slack).
// Bits: every k16 step of both products is an exact sum added to the accumulator once,
// in fa_fwd's k order (S: hd in steps of 16; P V: the tile's keys in steps of 16), on the
// same rounded operands, so on the executor (one rounding per k16 step for mma.sync and
// wgmma alike) y and lse are fa_fwd's bit for bit. The GPU's units may round their
// internal sums differently (not modelled): there the bound of the 16-bit products holds.
#pragma once
#include "kernels/cuda/k_cuda_attn_tc.cuh"
#include "kernels/cuda/k_cuda_tma.cuh" // K_DYN_SHARED

// wgmma m64nNk16 (N 64 or 128), A K-major, B K-major (tb 0) or N-major (tb 1).
#ifdef DDPRT_SIMT
#define FW_WGMMA(TY, N, d, da, db, scale_d, tb)                                                                    \
    simt::wgmma(__FILE__, __LINE__, (TY) == K_CUDA_MM_BF16 ? simt::MMA_BF16 : simt::MMA_F16, N, d, da, db, scale_d, \
                0, tb)
// The register-A form: A = a[4] (four 32-bit registers a thread, mma.sync's A fragment of
// the warp's 16 rows), B by descriptor; PTX has no imm-trans-a for it.
#define FW_WGMMA_RS(TY, N, d, a, db, scale_d, tb)                                                                  \
    simt::wgmma_rs(__FILE__, __LINE__, (TY) == K_CUDA_MM_BF16 ? simt::MMA_BF16 : simt::MMA_F16, N, d, a, db,       \
                   scale_d, tb)
#else
#define FW_WGMMA(TY, N, d, da, db, scale_d, tb) fw_wgmma<TY, N, tb>(d, da, db, scale_d)
#define FW_WGMMA_RS(TY, N, d, a, db, scale_d, tb) fw_wgmma_rs<TY, N, tb>(d, a, db, scale_d)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FW_WGMMA_64_(ty)                                                                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11," \
                 "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, " \
                 "1, 0, %35;\n}\n"                                                                                 \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),   \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),         \
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),       \
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),       \
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                           \
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TB))
// m64nNk16 with A from registers: d, {a0..a3}, b-desc, scale-d, imm-scale-a, -b, imm-trans-b
#define FW_WGMMA_RS64_(ty)                                                                                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty " {" \
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, " \
                 "{%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"                                      \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),    \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),    \
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),    \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB))
#define FW_WGMMA_RS128_(ty)                                                                                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." ty "." ty " {" \
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, " \
                 "{%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"                                      \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),    \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),    \
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),    \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),    \
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),    \
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),    \
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),    \
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB))
#else
#define FW_WGMMA_64_(ty) __trap()
#define FW_WGMMA_RS64_(ty) __trap()
#define FW_WGMMA_RS128_(ty) __trap()
#endif
template <int TY, int N, int TB>
__device__ __forceinline__ void fw_wgmma(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    if constexpr (N == 128) {
        if constexpr (TY == K_CUDA_MM_BF16) K_WGMMA_BF16_128T(d, da, db, scale_d, 0, TB);
        else K_WGMMA_F16_128T(d, da, db, scale_d, 0, TB);
    } else {
        static_assert(N == 64, "m64n64k16 or m64n128k16");
        if constexpr (TY == K_CUDA_MM_BF16) FW_WGMMA_64_("bf16");
        else FW_WGMMA_64_("f16");
    }
}
template <int TY, int N, int TB>
__device__ __forceinline__ void fw_wgmma_rs(float *d, const unsigned *a, unsigned long long db, int scale_d)
{
    static_assert(N == 64 || N == 128, "m64n64k16 or m64n128k16");
    if constexpr (N == 128) {
        if constexpr (TY == K_CUDA_MM_BF16) FW_WGMMA_RS128_("bf16");
        else FW_WGMMA_RS128_("f16");
    } else {
        if constexpr (TY == K_CUDA_MM_BF16) FW_WGMMA_RS64_("bf16");
        else FW_WGMMA_RS64_("f16");
    }
}
#endif

namespace {
#define FW_BLOCK (FA_T * 64) // a 64-row x 64-column block of a tile (elements)
#define FW_ALIGN 1024        // the 128-byte swizzle's pattern

// Element offset of 16-byte chunk c (8 columns) of row r of a tile of HD columns.
__device__ __forceinline__ int fw_off(int r, int c) { return (c >> 3) * FW_BLOCK + r * 64 + (((c & 7) ^ (r & 7)) << 3); }

// Shared memory: Q, K[2], V[2] (64 x HD each) and the alignment's slack (P stays in registers).
__host__ __device__ constexpr int fw_smem_bytes(int hd_tile) { return 5 * FA_T * hd_tile * 2 + FW_ALIGN; }

// A 64 x 64 accumulator tile (C-fragment layout, warp w's rows 16w..) rounded to 16 bits
// as wgmma's register A (FlashAttention-3's P): fragments n = 2ks, 2ks + 1 are the A
// fragment of k16 step ks (rows g, g + 8; k 16ks + 2tig, +1, +8, +9: mma.sync's A), so no
// tile, no proxy fence and no barrier (a warp's ops read its own rows).
template <int TY>
__device__ __forceinline__ void fw_pack(unsigned (&pa)[FA_T / 16][4], const float (&a)[FA_T / 8][4])
{
#pragma unroll
    for (int ks = 0; ks < FA_T / 16; ks++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float *f = &a[2 * ks + (i >> 1)][2 * (i & 1)];
            pa[ks][i] = fa_pack<TY>(f[0], f[1]);
        }
}

// 64 rows from row r0 (src[at + (r0 + r) ld + (0, hd)]) by cp.async into the tile, zero
// past t and hd (hd % 8 == 0: a chunk is all in or all out). Eight consecutive threads
// fill one 128-byte row of a block (no bank conflict).
template <int HD>
__device__ __forceinline__ void fw_load(unsigned short *tile, const unsigned short *src, size_t at, size_t ld, int r0,
                                        int t, int hd)
{
    constexpr int CPR = HD / 8;
#pragma unroll 1
    for (int i = 0; i < FA_T * CPR / FA_THREADS; i++) {
        int q = threadIdx.x + i * FA_THREADS, r = q / CPR, col = q % CPR, gr = r0 + r;
        bool in = gr < t && col * 8 < hd;
        K_CP_ASYNC16(tile + fw_off(r, col), in ? src + at + (size_t)gr * ld + col * 8 : src, in ? 16 : 0);
    }
}

// Block (query tile, counted from the last; head, sequence), as fa_fwd. HD 64: 4 blocks an
// SM (128 registers a thread; shared memory, 41 KiB a block, would allow 5). HD 128 takes
// 128 registers unbounded with P in registers (167 with its tile), 2 blocks an SM (81 KiB).
template <int TY, int HD>
__global__ void __launch_bounds__(FA_THREADS, HD == 64 ? 4 : 0)
fw_fwd(int t, int h, int hd, float scale, const void *qkv, void *y, int yt, float *lse)
{
    static_assert(HD == 64 || HD == 128, "64-column blocks; N 64 or 128");
    K_DYN_SHARED(unsigned char, raw);
    unsigned short *const sq = (unsigned short *)(((uintptr_t)raw + FW_ALIGN - 1) & ~(uintptr_t)(FW_ALIGN - 1));
    // K[b] at sq + (1 + b) 64 HD, V[b] at sq + (3 + b) 64 HD
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FA_T, hh = blockIdx.y, s = blockIdx.z, C = h * hd;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const size_t ld = 3 * (size_t)C, base = (size_t)s * t * ld + (size_t)hh * hd;
    const unsigned short *src = (const unsigned short *)qkv;
    const int kend = min(t, q0 + FA_T); // the causal mask's last key tile
    fw_load<HD>(sq, src, base, ld, q0, t, hd);
    fw_load<HD>(sq + FA_T * HD, src, base + C, ld, 0, t, hd);
    fw_load<HD>(sq + 3 * FA_T * HD, src, base + 2 * C, ld, 0, t, hd);
    K_CP_ASYNC_COMMIT();
    float o[HD / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    fa_zero(o);
    const int row[2] = {q0 + 16 * w + g, q0 + 16 * w + g + 8};
    for (int k0 = 0, bf = 0; k0 < kend; k0 += FA_T, bf ^= 1) {
        K_CP_ASYNC_WAIT(0); // this thread's copies of the tile
        K_FENCE_PROXY_ASYNC(); // cp.async's writes, for the async proxy wgmma reads through
        __syncthreads(); // everyone's; the other buffers free (their products waited for)
        const unsigned short *tk = sq + (1 + bf) * FA_T * HD, *tv = sq + (3 + bf) * FA_T * HD;
        if (k0 + FA_T < kend) { // the next K, V tiles land while this one's products run
            fw_load<HD>(sq + (2 - bf) * FA_T * HD, src, base + C, ld, k0 + FA_T, t, hd);
            fw_load<HD>(sq + (4 - bf) * FA_T * HD, src, base + 2 * C, ld, k0 + FA_T, t, hd);
        }
        K_CP_ASYNC_COMMIT();
        // S = Q K^T: hd in steps of 16, the first step overwriting the accumulators
        float sc[FA_T / 8][4];
        // (descriptors: the tile's, plus the step's offset in 16-byte units in the address field)
        const unsigned long long dq = k_wgmma_desc(sq, 16, 1024, K_WGMMA_SW128), dk = k_wgmma_desc(tk, 16, 1024, K_WGMMA_SW128);
        K_WGMMA_FENCE();
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const int at = ((kk >> 2) * FW_BLOCK + 16 * (kk & 3)) >> 3; // the 16 k's 32 bytes in the rows
            FW_WGMMA(TY, 64, &sc[0][0], dq + at, dk + at, kk > 0, 0);
        }
        K_WGMMA_COMMIT();
        K_WGMMA_WAIT(0);
        fa_softmax<HD>(sc, o, m, l, row, k0, t, scale, tig);
        // P rounded to 16 bits in registers (fa_fwd's rounding), register A of P V
        unsigned pa[FA_T / 16][4];
        fw_pack<TY>(pa, sc);
        // O += P V: the tile's keys in steps of 16 (V's next 16 rows: 2 KiB on)
        const unsigned long long dv = k_wgmma_desc(tv, 2 * FW_BLOCK, 1024, K_WGMMA_SW128);
        K_WGMMA_FENCE(); // after P's registers are written: the ops read them (and O's)
#pragma unroll
        for (int ks = 0; ks < FA_T / 16; ks++) FW_WGMMA_RS(TY, HD, &o[0][0], pa[ks], dv + 128 * ks, 1, 1);
        K_WGMMA_COMMIT();
        K_WGMMA_WAIT(0); // (also: P's registers may change only after it)
    }
    K_CP_ASYNC_WAIT(0); // (the last, empty group)
    fa_fwd_out<HD>(o, m, l, row, t, h, hh, s, hd, q0 + 16 * w, lane, y, yt, lse);
}

// fw_fwd on the stream, its dynamic shared memory limit raised once.
template <int TY, int HD>
int fw_fwd_t(int b, int t, int h, int hd, const void *qkv, void *y, int yt, float *lse, cudaStream_t s)
{
    static int attr;
    if (!attr) {
        if (cudaFuncSetAttribute(fw_fwd<TY, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, fw_smem_bytes(HD))) {
            port_cuda_fail("k_cuda_attention_fwd_mm (wgmma): cudaFuncSetAttribute refused %d bytes of dynamic shared "
                           "memory", fw_smem_bytes(HD));
            return -1;
        }
        attr = 1;
    }
    dim3 grid((unsigned)((t + FA_T - 1) / FA_T), (unsigned)h, (unsigned)b);
    K_LAUNCH((fw_fwd<TY, HD>), grid, FA_THREADS, fw_smem_bytes(HD), s)(t, h, hd, 1.0f / sqrtf((float)hd), qkv, y, yt,
                                                                        lse);
    return k_cuda_check_launch("k_cuda_attention_fwd_mm", "b=%d t=%d h=%d hd=%d (wgmma)", b, t, h, hd);
}
} // namespace
