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
// A phase with no taps: its M pixels' C channels zero.
__global__ void conv_phase_zero(int M, Div dC, PhaseStore st)
{
    const int n = M * (int)dC.d;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int j, c;
        dC.qr(i, j, c);
        st(0, c, j, 0.0f);
    }
}
// The phase's weights [C][Rt][St][K] from the CRSK ones, 8 k (16 bytes) a thread.
__global__ void conv_phase_w(Geo g, PhaseDx f, Div dK8, Div dSt, Div dRt, const unsigned short *src,
                             unsigned short *dst)
{
    const int n = g.C * f.Rt * f.St * (g.K / 8);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int rest, kb, ct, u, c, t;
        dK8.qr(i, rest, kb), dSt.qr(rest, ct, u), dRt.qr(ct, c, t);
        const size_t from = (((size_t)c * g.R + f.r0 + g.st * t) * g.S + f.s0 + g.st * u) * g.K + 8 * kb;
        *(TcChunk *)(dst + (size_t)i * 8) = *(const TcChunk *)(src + from);
    }
}

// dx of a strided conv by phases (where im2col_dx_phase_fits): wt the CRSK weights (16-bit,
// ld R S K), wph the workspace's room for the copies. 0 done, -1 failed, 1 not taken (the
// geometry path then writes all of dx, whatever a phase wrote). A phase's split partials
// (at most the geometry's chunks, of fewer rows) fit the geometry's workspace.
static int phase_dx(int mm, const char *k, const char *shp, const Geo &g, const unsigned short *dyh,
                    const unsigned short *wt, unsigned short *wph, const DxStore &ds, void *ws, cudaStream_t s)
{
    if (!k_cuda_wgmma_on() || !k_cuda_tma_on() || ((uintptr_t)dyh & 15) || ((uintptr_t)wt & 15) ||
        ((uintptr_t)wph & 15))
        return 1;
    size_t off = 0;
    const int kc = geo_dx_kchunk(g);
    for (int ph = 0; ph < g.st; ph++)
        for (int pw = 0; pw < g.st; pw++) {
            const PhaseDx f = phase_of(g, ph, pw);
            if (!f.Ha || !f.Wb) continue; // no pixels (H or W under st)
            const int M = g.N * f.Ha * f.Wb;
            const PhaseStore pst = {ds, mkdiv(f.Ha * f.Wb), mkdiv(f.Wb), ph, pw};
            if (!f.Rt || !f.St) {
                K_LAUNCH(conv_phase_zero, k_cuda_blocks((size_t)M * g.C), K_CUDA_THREADS, 0, s)(M, mkdiv(g.C), pst);
                if (k_cuda_check_launch(k, "%s (phase %d,%d: no taps, zero)", shp, ph, pw)) return -1;
                continue;
            }
            const unsigned short *b = wt + ((size_t)f.r0 * g.S + f.s0) * g.K;
            int ld = g.RS() * g.K;
            if (f.Rt * f.St > 1) {
                b = wph + off, ld = f.Rt * f.St * g.K;
                const size_t n = (size_t)g.C * ld / 8;
                K_LAUNCH(conv_phase_w, k_cuda_blocks(n), K_CUDA_THREADS, 0, s)(g, f, mkdiv(g.K / 8), mkdiv(f.St),
                                                                              mkdiv(f.Rt), wt, wph + off);
                if (k_cuda_check_launch(k, "%s (phase %d,%d: weights)", shp, ph, pw)) return -1;
                off += (size_t)g.C * ld;
            }
            const I2cConv v = {g.N, g.P, g.Q, g.K, f.Rt, f.St, 1, 0, f.Ha, f.Wb, 1, g.C, dyh, b, ld, 1,
                               {f.lo[0], f.lo[1]}, {f.hi[0], f.hi[1]}};
            const int r = conv_i2c<false>(mm, k, shp, v, pst, ws, s, phase_kchunk(g, f, kc));
            if (r) return r;
        }
    return 0;
}
