// The input grad of a strided conv (stride 2..8, K % 64 == 0) on TMA's im2col, one
// product per output phase (included by k_cuda_conv.cu, inside its namespace).
//
// dx pixel (h, w) = (st a + ph, st b + pw) is reached only by the taps r = r0 + st t,
// r0 = (ph + pad) mod st (s alike), which read dy row p = a + dh - t, dh = (ph + pad -
// r0) / st: for each phase (ph, pw) a stride-1 conv of dyh [N][P][Q][K] by an Rt x St
// sub-kernel, taps flipped (WtI2c's flip), over the Ha x Wb phase grid, with its own
// padding a dimension: above Rt - 1 - dh (it may be negative: a positive lower corner),
// below whatever makes the traversal Ha starts tall (the map's upper corner, Ha - P + lo).
// The product's rows are the phase's pixels (n, a, b), its columns the C channels, B the
// CRSK weights restricted to the phase's taps: for one tap a view (its K columns of every
// c row, R S K apart), else a copy [C][Rt St K] in the workspace (the taps are not one
// strided view). k runs over the valid taps ascending in (r, s), channels fastest: the
// geometry path's order less its zero taps, which change no fp32 sum (the executor's mma
// rounds once a k16 step on c plus the exact products, and a zero step adds +0), so dx
// is bitwise the geometry path's where neither splits k (ResNet-18 at batch 128). Where
// the geometry splits (k_cuda_gemm_splits of C x NHW x RSK, chunks of kc_g a multiple of
// 64: whole stages), a phase's chunks mimic its chunk boundaries: its 64-deep stages
// grouped by the geometry chunk they fall in must make runs of one length but the last
// (then the phase's kchunk is that run; the geometry's chunks holding none of the phase's
// taps are +0 partials, which its finish adds without changing a bit). Where some phase's
// runs are uneven the whole dx stays on the geometry path (small, split products only).
// A phase with no taps (1x1 stride 2: three of four) is written zero: dx is overwritten.
struct PhaseDx { // one output phase: taps r0 + st t (t < Rt), s0 + st u (u < St), Ha x Wb pixels
    int ph, pw, r0, s0, Rt, St, Ha, Wb, lo[2], hi[2]; // lo / hi: the map's corners {w, h}
};
static int ceil_div(int a, int b) { return a > 0 ? (a + b - 1) / b : 0; }
static PhaseDx phase_of(const Geo &g, int ph, int pw)
{
    PhaseDx f;
    f.ph = ph, f.pw = pw, f.r0 = (ph + g.pad) % g.st, f.s0 = (pw + g.pad) % g.st;
    f.Rt = ceil_div(g.R - f.r0, g.st), f.St = ceil_div(g.S - f.s0, g.st);
    f.Ha = ceil_div(g.H - ph, g.st), f.Wb = ceil_div(g.W - pw, g.st);
    const int dh = (ph + g.pad - f.r0) / g.st, dw = (pw + g.pad - f.s0) / g.st;
    f.lo[0] = -(f.St - 1 - dw), f.lo[1] = -(f.Rt - 1 - dh);
    f.hi[0] = f.Wb - g.Q + f.lo[0], f.hi[1] = f.Ha - g.P + f.lo[1];
    return f;
}
static bool phase_corners_ok(const PhaseDx &f)
{
    for (int i = 0; i < 2; i++)
        if (f.lo[i] < -128 || f.lo[i] > 127 || f.hi[i] < -128 || f.hi[i] > 127) return false;
    return true;
}
// The geometry's split chunk over RSK (>= RSK: none): conv_i2c's and tc_gemm's formula.
static int geo_dx_kchunk(const Geo &g)
{
    const int K = g.RS() * g.K, sp = k_cuda_gemm_splits(g.C, g.N * g.HW(), K);
    return sp == 1 ? K : ((K + sp - 1) / sp + WT_BK - 1) / WT_BK * WT_BK;
}
// The phase's kchunk mimicking the geometry's chunks kc (see above): its Rt St K when one
// run, else the runs' length; 0 where they are uneven.
static int phase_kchunk(const Geo &g, const PhaseDx &f, int kc)
{
    int run = 0, len = 0, last = -1, n = 0; // n: stages in the current run
    for (int t = 0; t < f.Rt; t++)
        for (int u = 0; u < f.St; u++)
            for (int kb = 0; kb < g.K; kb += WT_BK) {
                const int z = (((f.r0 + g.st * t) * g.S + f.s0 + g.st * u) * g.K + kb) / kc;
                if (z != last && last >= 0) {
                    if (run++ == 0) len = n;
                    else if (n != len) return 0;
                    n = 0;
                }
                last = z, n++;
            }
    if (run && n > len) return 0;
    return run ? len * WT_BK : f.Rt * f.St * g.K;
}
// Strided, K in 64s, every phase's corners in range (rank 4: [-128, 127]) and its chunks
// the geometry's.
static bool im2col_dx_phase_fits(const Geo &g)
{
    if (!__atomic_load_n(&im2col_on, __ATOMIC_RELAXED) || g.K % 64 || g.st < 2 || g.st > 8 || g.pad < 0) return false;
    const int kc = geo_dx_kchunk(g);
    for (int ph = 0; ph < g.st; ph++)
        for (int pw = 0; pw < g.st; pw++) {
            const PhaseDx f = phase_of(g, ph, pw);
            if (f.Rt && f.St && f.Ha && f.Wb && (!phase_corners_ok(f) || !phase_kchunk(g, f, kc))) return false;
        }
    return true;
}

// The phase's product row j = (n, a, b), channel c to dx pixel (n, st a + ph, st b + pw).
struct PhaseStore {
    DxStore ds;
    Div dAB, dB;
    int ph, pw;
    __host__ __device__ void operator()(int z, int c, int j, float v) const
    {
        int n, ab, a, b;
        dAB.qr(j, n, ab), dB.qr(ab, a, b);
        const Geo &g = ds.g;
        ds(z, c, (n * g.H + g.st * a + ph) * g.W + g.st * b + pw, v);
    }
};
// Every pixel of the phases without taps zero, in one launch: a phase (ph, pw) has none
// where no tap row reaches ph (Rt 0: bit ph of zh) or no tap column pw (St 0: zw's).
__global__ void conv_phase_zero(Geo g, DxStore ds, unsigned zh, unsigned zw)
{
    const int n = g.N * g.HW() * g.C;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int j, c, nn, hw, h, w, a, ph, b, pw;
        g.dC.qr(i, j, c), g.dHW.qr(j, nn, hw), g.dW.qr(hw, h, w), g.dst.qr(h, a, ph), g.dst.qr(w, b, pw);
        if (((zh >> ph) | (zw >> pw)) & 1) ds(0, c, j, 0.0f);
    }
}
// The multi-tap phases' weights [C][Rt][St][K] from the CRSK ones, up to PH_W_MAX phases a
// launch: their copies lie one after another, so 16-byte chunk i (8 k) is dst's i-th; the
// table's entry e covers chunks [end[e - 1], end[e]) (end[-1]: beg).
#define PH_W_MAX 8
struct PhaseWTab {
    int n, beg, end[PH_W_MAX], r0[PH_W_MAX], s0[PH_W_MAX];
    Div dSt[PH_W_MAX], dRt[PH_W_MAX];
};
__global__ void conv_phase_w(Geo g, const K_GRID_CONST PhaseWTab tb, Div dK8, const unsigned short *src,
                             unsigned short *dst)
{
    const int n = tb.end[tb.n - 1] - tb.beg;
    for (int l = blockIdx.x * blockDim.x + threadIdx.x; l < n; l += gridDim.x * blockDim.x) {
        const int i = tb.beg + l;
        int e = 0;
        while (i >= tb.end[e]) e++;
        int rest, kb, ct, u, c, t;
        dK8.qr(i - (e ? tb.end[e - 1] : tb.beg), rest, kb), tb.dSt[e].qr(rest, ct, u), tb.dRt[e].qr(ct, c, t);
        const size_t from = (((size_t)c * g.R + tb.r0[e] + g.st * t) * g.S + tb.s0[e] + g.st * u) * g.K + 8 * kb;
        *(TcChunk *)(dst + (size_t)i * 8) = *(const TcChunk *)(src + from);
    }
}
#include "kernels/cuda/k_cuda_conv_grp.cuh" // the phases' products in one launch

static unsigned long long phase_groups; // grouped products launched (k_cuda_conv2d_phase_groups)

// A group of tap phases f[0 .. n) (B b[i], ld[i] apart) in one product, and its finish
// where some phase splits: 0, -1 failed, 1 not taken (the maps refused).
static int phase_group(int mm, const char *k, const char *shp, const Geo &g, const unsigned short *dyh,
                       const PhaseDx *f, const unsigned short *const *b, const int *ld, int n, int kc_g, void *ws,
                       const DxStore &ds, cudaStream_t s)
{
    PhaseGrp gp;
    gp.ws = (float *)ws, gp.n = n, gp.N = g.C, gp.t0[0] = 0;
    size_t off = 0, fe = 0;
    long long tm = 0;
    bool split = false;
    for (int i = 0; i < n; i++) { // shapes and splits first: the tile N follows from them
        const int M = g.N * f[i].Ha * f[i].Wb, K = f[i].Rt * f[i].St * g.K, kc = phase_kchunk(g, f[i], kc_g);
        gp.M[i] = M, gp.K[i] = K, gp.kc[i] = kc < K ? kc : K, gp.z[i] = (K + gp.kc[i] - 1) / gp.kc[i];
        gp.st[i] = {ds, mkdiv(f[i].Ha * f[i].Wb), mkdiv(f[i].Wb), f[i].ph, f[i].pw};
        gp.ig[i] = {g.K, f[i].Rt, f[i].St, f[i].Ha * f[i].Wb, f[i].Wb, 1, -f[i].lo[1], -f[i].lo[0], 1};
        gp.off[i] = off, fe += gp.z[i] > 1 ? (size_t)M * g.C : 0, gp.fend[i] = fe;
        off += gp.z[i] > 1 ? (size_t)gp.z[i] * M * g.C : 0; // at most the geometry's chunks: its workspace
        split |= gp.z[i] > 1, tm += (M + WGG_T - 1) / WGG_T;
    }
    // wt_launch's rule over the group's tiles (a split product's tile where one splits)
    const int bn = split ? wt_tile_n_split(g.C) : wt_tile_n((int)std::min<long long>(tm * WGG_T, INT_MAX), g.C);
    const char *why = NULL;
    for (int i = 0; i < n; i++) {
        if (k_tmap_encode_im2col_box(&gp.ma[i], dyh, g.N, g.P, g.Q, g.K, 1, f[i].lo, f[i].hi, WT_BK, WGG_T, 128,
                                     &why) ||
            wt_map(&gp.mb[i], b[i], ld[i], true, g.C, gp.K[i], bn, &why))
            return 1;
        gp.t0[i + 1] = gp.t0[i] + (gp.M[i] + WGG_T - 1) / WGG_T * ((g.C + bn - 1) / bn) * gp.z[i];
    }
    const bool bf = (mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16;
    if (bf ? grp_run_bn<K_CUDA_MM_BF16>(bn, gp, s, &why) : grp_run_bn<K_CUDA_MM_F16>(bn, gp, s, &why)) return 1;
    if (k_cuda_check_launch(k, "%s (tensor cores, wgmma, TMA im2col, %d output phases in one product)", shp, n))
        return -1;
    __atomic_add_fetch(&phase_groups, 1, __ATOMIC_RELAXED);
    if (!split) return 0;
    K_LAUNCH(conv_phase_finish, k_cuda_blocks(fe), K_CUDA_THREADS, 0, s)(gp);
    return k_cuda_check_launch(k, "%s (TMA im2col, %d output phases' split-K finish)", shp, n);
}

// dx of a strided conv by phases (where im2col_dx_phase_fits): wt the CRSK weights (16-bit,
// ld R S K), wph the workspace's room for the copies. 0 done, -1 failed, 1 not taken (the
// geometry path then writes all of dx, whatever a phase wrote). One launch for the
// tapless phases' zeros, one for the multi-tap phases' weight copies (PH_W_MAX a launch),
// one product for the tap phases (GRP_MAX a launch) and its split finish. A phase's split
// partials (at most the geometry's chunks, of fewer rows) fit the geometry's workspace,
// and so do a group's together (their rows add up to at most N H W).
static int phase_dx(int mm, const char *k, const char *shp, const Geo &g, const unsigned short *dyh,
                    const unsigned short *wt, unsigned short *wph, const DxStore &ds, void *ws, cudaStream_t s)
{
    if (!k_cuda_wgmma_on() || !k_cuda_tma_on() || ((uintptr_t)dyh & 15) || ((uintptr_t)wt & 15) ||
        ((uintptr_t)wph & 15))
        return 1;
    PhaseDx f[64];
    const unsigned short *b[64];
    int ld[64], n = 0;
    unsigned zh = 0, zw = 0;
    size_t off = 0; // the copies' room used (elements)
    for (int ph = 0; ph < g.st; ph++)
        for (int pw = 0; pw < g.st; pw++) {
            const PhaseDx p = phase_of(g, ph, pw);
            if (!p.Ha || !p.Wb) continue; // no pixels (H or W under st)
            if (!p.Rt || !p.St) {
                zh |= (unsigned)!p.Rt << ph, zw |= (unsigned)!p.St << pw;
                continue;
            }
            f[n] = p, b[n] = wt + ((size_t)p.r0 * g.S + p.s0) * g.K, ld[n] = g.RS() * g.K;
            if (p.Rt * p.St > 1) // a copy: the taps are not one strided view
                b[n] = wph + off, ld[n] = p.Rt * p.St * g.K, off += (size_t)g.C * ld[n];
            n++;
        }
    if (zh | zw) {
        K_LAUNCH(conv_phase_zero, k_cuda_blocks((size_t)g.N * g.HW() * g.C), K_CUDA_THREADS, 0, s)(g, ds, zh, zw);
        if (k_cuda_check_launch(k, "%s (output phases without taps: zero)", shp)) return -1;
    }
    PhaseWTab tb;
    tb.n = 0, tb.beg = 0;
    for (int i = 0; i < n; i++) {
        if (f[i].Rt * f[i].St > 1) {
            const int e = tb.n++;
            tb.end[e] = (e ? tb.end[e - 1] : tb.beg) + g.C * ld[i] / 8, tb.r0[e] = f[i].r0, tb.s0[e] = f[i].s0;
            tb.dSt[e] = mkdiv(f[i].St), tb.dRt[e] = mkdiv(f[i].Rt);
        }
        if (tb.n && (tb.n == PH_W_MAX || i == n - 1)) {
            K_LAUNCH(conv_phase_w, k_cuda_blocks((size_t)(tb.end[tb.n - 1] - tb.beg)), K_CUDA_THREADS, 0, s)(
                g, tb, mkdiv(g.K / 8), wt, wph);
            if (k_cuda_check_launch(k, "%s (output phases' weights)", shp)) return -1;
            tb.beg = tb.end[tb.n - 1], tb.n = 0;
        }
    }
    const int kc = geo_dx_kchunk(g);
    for (int i = 0; i < n; i += GRP_MAX) {
        const int r = phase_group(mm, k, shp, g, dyh, f + i, b + i, ld + i, std::min(GRP_MAX, n - i), kc, ws, ds, s);
        if (r) return r;
    }
    return 0;
}
