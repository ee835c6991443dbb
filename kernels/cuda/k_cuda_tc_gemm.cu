// The tensor-core GEMM (sm_80 path: mma.sync m16n8k16): C[m][n] = sum_k A(m,k) B(k,n)
// with bf16 or f16 operands, fp32 accumulation and an fp32 result, plus a fused
// epilogue (bias per column, ReLU). Either operand may be K-contiguous or M/N-contiguous,
// so linear's forward (x w^T), input gradient (dy w) and weight gradient (dy^T x) are
// all one kernel without transposing anything in memory.
//
// Block: 256 threads, 8 warps as 2 (M) x 4 (N), a BM x BN tile (128x128 or 64x64);
// k in 32-deep slices through a 3-stage cp.async pipeline in static shared memory
// (48 KiB at 128x128). Each warp loads its fragments with ldmatrix (.trans for the
// M/N-contiguous operands) from XOR-swizzled tiles: the 8 rows one ldmatrix phase
// reads lie in 8 different 16-byte bank groups.
//
// Odd shapes: rows or k past the matrix are zero-filled (cp.async's src-size), and
// when a row's start is not 16-byte aligned (ld or base not a multiple of 8 elements)
// the tile is loaded element by element instead, still zero-filled.
#include "kernels/cuda/k_cuda_tc.cuh"
#include <stdio.h>

#define TC_BK 32
#define TC_STAGES 3
#define TC_THREADS 256

namespace {
struct TcArgs {
    int m, n, k;
    const unsigned short *a, *b;
    int lda, ldb, ldc, relu, va, vb; // va, vb: 16-byte aligned rows (cp.async)
    float *c;
    const float *bias;
};

// Element offset of 16-byte chunk c of row r. K-contiguous tile: R rows of 32 (four
// chunks, 64 bytes); M/N-contiguous tile: 32 rows (k) of R.
template <int R, bool KF> __device__ __forceinline__ int tc_off(int r, int c)
{
    if (KF) return r * TC_BK + ((c ^ ((r >> 1) & 3)) << 3);
    return r * R + ((c ^ (r & 7)) << 3);
}

struct alignas(16) Chunk {
    unsigned w[4];
};

// Slice [k0, k0 + 32) of the operand's rows [r0, r0 + R) into a tile.
template <int R, bool KF>
__device__ __forceinline__ void tc_load(unsigned short *tile, const unsigned short *p, int ld, int rows, int r0,
                                        int K, int k0, int vec)
{
    constexpr int CH = R * TC_BK / 8;
    for (int q = threadIdx.x; q < CH; q += TC_THREADS) {
        int valid, dst;
        const unsigned short *src;
        if (KF) {
            int r = q >> 2, c = q & 3, k = k0 + c * 8;
            valid = r0 + r < rows ? min(8, K - k) : 0;
            src = p + (size_t)(r0 + r) * ld + k;
            dst = tc_off<R, true>(r, c);
        } else {
            int kr = q / (R / 8), c = q % (R / 8), rr = r0 + c * 8;
            valid = k0 + kr < K ? min(8, rows - rr) : 0;
            src = p + (size_t)(k0 + kr) * ld + rr;
            dst = tc_off<R, false>(kr, c);
        }
        valid = max(valid, 0);
        if (vec) {
            K_CP_ASYNC16(tile + dst, valid ? src : p, valid * 2);
        } else {
            unsigned short v[8];
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = e < valid ? src[e] : (unsigned short)0;
            Chunk ch;
            for (int e = 0; e < 4; e++) ch.w[e] = (unsigned)v[2 * e] | (unsigned)v[2 * e + 1] << 16;
            *(Chunk *)(tile + dst) = ch;
        }
    }
}

template <int BM, int BN, bool AK, bool BK, int TY>
__global__ void __launch_bounds__(TC_THREADS) tc_gemm(TcArgs g)
{
    struct alignas(16) Smem {
        unsigned short a[TC_STAGES][BM * TC_BK], b[TC_STAGES][BN * TC_BK];
    };
    __shared__ Smem sm;
    constexpr int WM = BM / 2, WN = BN / 4, MT = WM / 16, NT = WN / 8;
    static_assert(NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp >> 2, wn = warp & 3;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, kt_n = (g.k + TC_BK - 1) / TC_BK;
    float acc[MT][NT][4];
    #pragma unroll
    for (int i = 0; i < MT; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    for (int s = 0; s < TC_STAGES - 1; s++) {
        if (s < kt_n) {
            tc_load<BM, AK>(sm.a[s], g.a, g.lda, g.m, m0, g.k, s * TC_BK, g.va);
            tc_load<BN, BK>(sm.b[s], g.b, g.ldb, g.n, n0, g.k, s * TC_BK, g.vb);
        }
        K_CP_ASYNC_COMMIT();
    }
    for (int kt = 0; kt < kt_n; kt++) {
        // Slice kt is in; every warp is done with the stage the next load overwrites.
        K_CP_ASYNC_WAIT(TC_STAGES - 2);
        __syncthreads();
        int nx = kt + TC_STAGES - 1;
        if (nx < kt_n) {
            tc_load<BM, AK>(sm.a[nx % TC_STAGES], g.a, g.lda, g.m, m0, g.k, nx * TC_BK, g.va);
            tc_load<BN, BK>(sm.b[nx % TC_STAGES], g.b, g.ldb, g.n, n0, g.k, nx * TC_BK, g.vb);
        }
        K_CP_ASYNC_COMMIT();
        const unsigned short *ta = sm.a[kt % TC_STAGES], *tb = sm.b[kt % TC_STAGES];
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
                    if (TY == K_TC_BF16) K_MMA_BF16(acc[i][j], af[i], bf[j]);
                    else K_MMA_F16(acc[i][j], af[i], bf[j]);
                }
        }
    }
    K_CP_ASYNC_WAIT(0); // the empty trailing groups

    const int gid = lane >> 2, tig = lane & 3;
    #pragma unroll
    for (int i = 0; i < MT; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                int m = m0 + wm * WM + i * 16 + gid + (e >> 1) * 8, n = n0 + wn * WN + j * 8 + 2 * tig + (e & 1);
                if (m >= g.m || n >= g.n) continue;
                float v = acc[i][j][e] + (g.bias ? g.bias[n] : 0.0f);
                g.c[(size_t)m * g.ldc + n] = g.relu && v < 0.0f ? 0.0f : v;
            }
}

template <int BM, int BN, int TY> int tc_launch(const TcArgs &a, int ak, int bk, cudaStream_t s)
{
    dim3 grid((unsigned)((a.n + BN - 1) / BN), (unsigned)((a.m + BM - 1) / BM));
    if (ak && bk) K_LAUNCH((tc_gemm<BM, BN, true, true, TY>), grid, TC_THREADS, 0, s)(a);
    else if (ak) K_LAUNCH((tc_gemm<BM, BN, true, false, TY>), grid, TC_THREADS, 0, s)(a);
    else if (bk) K_LAUNCH((tc_gemm<BM, BN, false, true, TY>), grid, TC_THREADS, 0, s)(a);
    else K_LAUNCH((tc_gemm<BM, BN, false, false, TY>), grid, TC_THREADS, 0, s)(a);
    return 0;
}

int aligned16(const void *p, int ld) { return !((uintptr_t)p & 15) && ld % 8 == 0; }
} // namespace

int k_cuda_tc_gemm(const k_tc_gemm *g, port_stream s)
{
    char shp[128];
    snprintf(shp, sizeof shp, "%s m=%d n=%d k=%d a %s lda=%d, b %s ldb=%d", g->type == K_TC_BF16 ? "bf16" : "f16",
             g->m, g->n, g->k, g->a_kfast ? "k-contiguous" : "m-contiguous", g->lda,
             g->b_kfast ? "k-contiguous" : "n-contiguous", g->ldb);
    if (g->m <= 0 || g->n <= 0 || g->k <= 0 || (g->type != K_TC_BF16 && g->type != K_TC_F16))
    {
        port_cuda_fail("k_cuda_tc_gemm: %s: an empty product or an unknown type %d", shp, g->type);
        return -1;
    }
    TcArgs a = {g->m, g->n, g->k, g->a, g->b, g->lda, g->ldb, g->ldc, g->relu, aligned16(g->a, g->lda),
                aligned16(g->b, g->ldb), g->c, g->bias};
    cudaStream_t cs = (cudaStream_t)s;
    // 128x128 tiles where the output has enough of them to fill the GPU; else 64x64.
    int big = g->m >= 128 && g->n >= 128 && (long)((g->m + 127) / 128) * ((g->n + 127) / 128) >= 64;
    if (g->type == K_TC_BF16) {
        if (big) tc_launch<128, 128, K_TC_BF16>(a, g->a_kfast, g->b_kfast, cs);
        else tc_launch<64, 64, K_TC_BF16>(a, g->a_kfast, g->b_kfast, cs);
    } else {
        if (big) tc_launch<128, 128, K_TC_F16>(a, g->a_kfast, g->b_kfast, cs);
        else tc_launch<64, 64, K_TC_F16>(a, g->a_kfast, g->b_kfast, cs);
    }
    return k_cuda_check_launch("k_cuda_tc_gemm", "%s", shp);
}
