// The strided input grad's phase products in one launch (included by k_cuda_conv_phase.cuh,
// inside k_cuda_conv.cu's namespace): wt_pipeline (k_cuda_tc_tma.cuh: the producer
// warpgroup's TMA boxes, the consumers' wgmma, the stage ring running on over tiles) whose
// persistent tile loop walks the concatenation of up to GRP_MAX phases' tile spaces. A
// phase apart (ResNet-18's layer 4 at batch 128: ~98 tiles of 128 x 128) leaves a quarter
// of 132 SMs idle, and its launches queue one after another; together they fill the GPU.
// A tile's phase picks its own A (the im2col map of dyh by its corners), B (a view of
// the CRSK weights or its copy), walk (WtI2c), k depth, split and store: each tile runs
// the k16 steps the phase's own wt_gemm launch ran, in the same order, so dx is bitwise
// the sequential phases'. The maps and tables are one __grid_constant__ parameter (~2 KiB
// of 4), which the TMA copies read in place (CUtensorMaps 64-byte aligned in it).
#pragma once

#define GRP_MAX 4 // phases a launch: stride 2's all; stride 3's nine in 4 + 4 + 1
// The tap phases of one grouped product: phase i has M[i] rows (n, a, b), K[i] = Rt St K
// deep, split in z[i] chunks of kc[i] (z 1: stored into dx; else partials at ws + off[i],
// as conv_i2c's KgPartial, which conv_phase_finish adds); tiles t0[i] .. t0[i + 1] - 1;
// fend: the split phases' M N elements, cumulative (the finish's walk).
struct PhaseGrp {
    k_tmap ma[GRP_MAX], mb[GRP_MAX];
    PhaseStore st[GRP_MAX];
    WtI2c ig[GRP_MAX];
    float *ws;
    size_t off[GRP_MAX], fend[GRP_MAX];
    int M[GRP_MAX], K[GRP_MAX], kc[GRP_MAX], z[GRP_MAX], t0[GRP_MAX + 1], n, N;
};
// The product's (pixel, channel) to the phase's store, read in place (no copy to registers).
struct GrpStore {
    const PhaseStore *ps;
    __device__ void operator()(int z, int m, int n, float v) const { (*ps)(z, n, m, v); }
};
// The group's tiles for wt_pipeline: tile t's phase p (the last whose first tile is <= t: a
// few compares) places it and picks its A map, B map, walk and store (gp: the kernel's
// __grid_constant__ table, read in place).
struct GrpTiles {
    static constexpr bool i2c = true;
    const PhaseGrp *gp;
    int tiles;
    template <int BN> __device__ __forceinline__ WtTile tile(int t) const
    {
        int p = 0;
        while (p + 1 < gp->n && t >= gp->t0[p + 1]) p++;
        WtTile w = wt_tile<BN>(t - gp->t0[p], gp->M[p], gp->N, gp->K[p], gp->kc[p]);
        w.p = p;
        return w;
    }
    template <bool AK, bool BK, int BN>
    __device__ __forceinline__ void issue(unsigned short *a, unsigned short *b, const WtTile &w, int kt,
                                          unsigned long long *bar) const
    {
        wt_issue_i2c(a, &gp->ma[w.p], gp->ig[w.p], w.kbeg + kt * WT_BK, w.m0, bar);
        wt_issue<true, BN>(b, &gp->mb[w.p], w.kbeg + kt * WT_BK, w.n0, bar);
    }
    // split phases: partials for conv_phase_finish; else dx through the phase's store
    template <int BN> __device__ __forceinline__ void store(const float (&acc)[BN / 2], const WtTile &w, int wg) const
    {
        const int p = w.p;
        if (gp->z[p] > 1) {
            const KgPartial part = {gp->ws + gp->off[p], gp->M[p], gp->N};
            wt_store<BN>(acc, part, gp->M[p], gp->N, w.m0, w.n0, wg, w.kbeg / gp->kc[p]);
        } else {
            const GrpStore gs = {&gp->st[p]};
            wt_store<BN>(acc, gs, gp->M[p], gp->N, w.m0, w.n0, wg, 0);
        }
    }
};

template <int TY, int BN>
__global__ void __launch_bounds__(WT_THREADS, 1) conv_phase_gemm(const K_GRID_CONST PhaseGrp gp)
{
    const GrpTiles tl = {&gp, gp.t0[gp.n]};
    wt_pipeline<TY, BN, true, true>(tl);
}

// The split phases' partials added in order (k_cuda_gemm_finish's sum), into dx.
__global__ void conv_phase_finish(const K_GRID_CONST PhaseGrp gp)
{
    const size_t n = gp.fend[gp.n - 1];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int p = 0;
        while (i >= gp.fend[p]) p++;
        const size_t l = i - (p ? gp.fend[p - 1] : 0), mn = (size_t)gp.M[p] * gp.N;
        const float *ws = gp.ws + gp.off[p];
        float s = 0.0f;
        for (int z = 0; z < gp.z[p]; z++) s += ws[z * mn + l];
        gp.st[p](0, (int)(l % gp.N), (int)(l / gp.N), s);
    }
}

// conv_phase_gemm<TY, BN> on the stream (wt_blocks: as wt_gemm's launch). 0, or -1 (why).
template <int TY, int BN> static int grp_run(const PhaseGrp &gp, cudaStream_t s, const char **why)
{
    static int attr;
    const int blocks = wt_blocks<BN>(conv_phase_gemm<TY, BN>, attr, gp.t0[gp.n], why);
    if (blocks < 0) return -1;
    K_LAUNCH((conv_phase_gemm<TY, BN>), blocks, WT_THREADS, wt_smem_bytes<BN>(), s)(gp);
    return 0;
}
template <int TY> static int grp_run_bn(int bn, const PhaseGrp &gp, cudaStream_t s, const char **why)
{
    return bn == 256 ? grp_run<TY, 256>(gp, s, why) : bn == 64 ? grp_run<TY, 64>(gp, s, why)
                                                                : grp_run<TY, 128>(gp, s, why);
}
