// conv2d forward and backward as implicit GEMMs (k_cuda_gemm.cuh): the input patches
// are gathered while tiles load, so no im2col buffer exists. With bf16 / f16 products
// and channels in multiples of 8, x, w and dy are first permuted to 16-bit NHWC copies
// in the workspace and both operands go by cp.async (below: "NHWC copies"). General
// stride and zero padding; NCHW input, KCRS weights (PyTorch's Conv2d layout). b and db
// may be NULL (no bias); dx NULL = not needed.
//   forward:      y[k][n,p,q]   = sum_{c,r,s} w[k][c,r,s] * x(n, c, p*st-pad+r, q*st-pad+s)
//   input grad:   dx[c][n,h,w]  = sum_{k,r,s} w[k][c,r,s] * dy(n, k, (h+pad-r)/st, (w+pad-s)/st)
//                 (terms whose division is not exact, or land outside, are zero)
//   weight grad:  dw[k][c,r,s]  = sum_{n,p,q} dy[n,k,p,q] * x(n, c, p*st-pad+r, q*st-pad+s)
//   bias grad:    db[k]         = sum_{n,p,q} dy[n,k,p,q]
// The input gradient is a gather, not a scatter: each dx element is written once, in a
// fixed order, with no atomics.
#include "kernels/cuda/k_cuda_tc_gemm.cuh"
#include "kernels/cuda/k_cuda_nhwc.h"
#include <algorithm>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

namespace {

// x / d and x % d for 0 <= x < 2^31 by a multiply and a shift (CUTLASS's FastDivmod:
// m = ceil(2^p / d), p = 31 + ceil(log2 d)). The loaders split every index they
// gather into 4-6 coordinates; a division by a runtime divisor is some 20 instructions,
// so the 64x64 tile's gathers took more instructions than its FMAs. Exact for every
// such x (checked against / for 3e8 pairs).
struct Div {
    unsigned d, m, s;
    __host__ __device__ int q(int x) const
    {
        return d == 1 ? x : (int)((unsigned)(((unsigned long long)(unsigned)x * m) >> 32) >> s);
    }
    __host__ __device__ void qr(int x, int &quo, int &rem) const { quo = q(x), rem = x - quo * (int)d; }
};

static Div mkdiv(int d)
{
    Div v = {(unsigned)d, 0, 0};
    if (d > 1) {
        int l = 0;
        while ((1u << l) < (unsigned)d) l++;
        unsigned p = 31 + l;
        v.m = (unsigned)(((1ull << p) + d - 1) / d), v.s = p - 32;
    }
    return v;
}

struct Geo { // the shape, with the products and divisors the index maths needs
    int N, C, H, W, K, R, S, st, pad, P, Q;
    Div dRS, dS, dPQ, dQ, dHW, dW, dst, dC, dK;
    __host__ __device__ int RS() const { return R * S; }
    __host__ __device__ int PQ() const { return P * Q; }
    __host__ __device__ int HW() const { return H * W; }
};

static Geo geo(const k_conv_shape *sh)
{
    Geo g = {sh->n, sh->c, sh->h, sh->w, sh->k, sh->r, sh->s, sh->stride, sh->pad, sh->p, sh->q,
             mkdiv(sh->r * sh->s), mkdiv(sh->s), mkdiv(sh->p * sh->q), mkdiv(sh->q), mkdiv(sh->h * sh->w),
             mkdiv(sh->w), mkdiv(sh->stride), mkdiv(sh->c), mkdiv(sh->k)};
    return g;
}

// x(n, c, h, w) with zero padding; x of type xt (fp32, or 16 bits: k_act_ld).
__host__ __device__ __forceinline__ float x_at(const Geo &g, const void *x, int xt, int n, int c, int h, int w)
{
    return (h >= 0 && h < g.H && w >= 0 && w < g.W) ? k_act_ld(x, xt, (((size_t)n * g.C + c) * g.H + h) * g.W + w)
                                                    : 0.0f;
}

// ---- forward: A = w [K x CRS], B = patches [CRS x NPQ]
struct FwdA {
    static constexpr bool k_fast = true;
    const float *w; int crs;
    __host__ __device__ float operator()(int m, int k) const { return w[(size_t)m * crs + k]; }
};
struct FwdB {
    static constexpr bool k_fast = false;
    Geo g; const void *x; int xt;
    __host__ __device__ float operator()(int k, int j) const
    {
        int c, rs, r, s, n, pq, p, q;
        g.dRS.qr(k, c, rs), g.dS.qr(rs, r, s), g.dPQ.qr(j, n, pq), g.dQ.qr(pq, p, q);
        return x_at(g, x, xt, n, c, p * g.st - g.pad + r, q * g.st - g.pad + s);
    }
};
struct FwdStore { // nhwc: y [n, p, q, k] (K_CUDA_MM_YNHWC), column j = (n, p, q) its row
    Geo g; const float *b; void *y; int yt, nhwc;
    __host__ __device__ void operator()(int, int m, int j, float v) const
    {
        int n, pq;
        g.dPQ.qr(j, n, pq);
        size_t i = nhwc ? (size_t)j * g.K + m : ((size_t)n * g.K + m) * g.PQ() + pq;
        k_act_st(y, yt, i, v + (b ? b[m] : 0.0f));
    }
};

// ---- input gradient: A = w^T [C x KRS], B = dy gathered [KRS x NHW]
struct DxA {
    static constexpr bool k_fast = true;
    Geo g; const float *w;
    __host__ __device__ float operator()(int c, int k) const
    {
        int kk, rs;
        g.dRS.qr(k, kk, rs);
        return w[((size_t)kk * g.C + c) * g.RS() + rs];
    }
};
struct DxB {
    static constexpr bool k_fast = false;
    Geo g; const float *dy;
    __host__ __device__ float operator()(int k, int j) const
    {
        int kk, rs, r, s, n, hw, h, w, p, q, pr, qr;
        g.dRS.qr(k, kk, rs), g.dS.qr(rs, r, s), g.dHW.qr(j, n, hw), g.dW.qr(hw, h, w);
        int ph = h + g.pad - r, qw = w + g.pad - s;
        if (ph < 0 || qw < 0) return 0.0f;
        g.dst.qr(ph, p, pr), g.dst.qr(qw, q, qr);
        if (pr || qr || p >= g.P || q >= g.Q) return 0.0f;
        return dy[(((size_t)n * g.K + kk) * g.P + p) * g.Q + q];
    }
};
struct DxStore { // nhwc: dx [n, h, w, c] (K_CUDA_MM_XNHWC)
    Geo g; float *dx; int nhwc;
    __host__ __device__ void operator()(int, int c, int j, float v) const
    {
        int n, hw;
        g.dHW.qr(j, n, hw);
        dx[nhwc ? (size_t)j * g.C + c : ((size_t)n * g.C + c) * g.HW() + hw] = v;
    }
};

// ---- weight gradient: A = dy [K x NPQ], B = patches^T [NPQ x CRS]
struct DwA { // nhwc: dy [n, p, q, k] (K_CUDA_MM_YNHWC), k = (n, p, q) its row
    static constexpr bool k_fast = true;
    Geo g; const float *dy; int nhwc;
    __host__ __device__ float operator()(int m, int k) const
    {
        int n, pq;
        g.dPQ.qr(k, n, pq);
        return dy[nhwc ? (size_t)k * g.K + m : ((size_t)n * g.K + m) * g.PQ() + pq];
    }
};
struct DwB {
    static constexpr bool k_fast = true;
    Geo g; const void *x; int xt;
    __host__ __device__ float operator()(int k, int j) const
    {
        int n, pq, p, q, c, rs, r, s;
        g.dPQ.qr(k, n, pq), g.dQ.qr(pq, p, q), g.dRS.qr(j, c, rs), g.dS.qr(rs, r, s);
        return x_at(g, x, xt, n, c, p * g.st - g.pad + r, q * g.st - g.pad + s);
    }
};
struct DwStore {
    float *dw; int crs;
    __host__ __device__ void operator()(int, int m, int j, float v) const { dw[(size_t)m * crs + j] = v; }
};

// ---- 16-bit products on NHWC copies (cuDNN's way with NCHW tensors): x, w and dy are
// permuted into the workspace as 16-bit arrays with channels last, so every operand chunk
// of 8 k is 8 consecutive channels, 16 bytes, copied by cp.async (the NCHW gathers went
// element by element through registers). k runs over (r, s, c) / (r, s, k): other sums'
// order than the gathers', not their bits. Needs the channels the chunks run over in
// multiples of 8 (C: forward and weight grad, K: input grad); else the gathers above.

// y[(a * B + b) * Cn + c] = x[(a * Cn + c) * B + b] as 16 bits (the middle axis last;
// a = blockIdx.y), x of type xt, rounded as tc_pack rounds: the gathers' values. A thread
// a run of 8 channels (ncb = ceil(Cn / 8) a row): one 16-byte store where Cn % 8 == 0.
template <int TY>
__global__ void conv_chan_last(int B, int Cn, int ncb, Div dncb, const void *x, int xt, unsigned short *y)
{
    const int a = blockIdx.y, n = B * ncb;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int b, cb;
        dncb.qr(i, b, cb);
        const int c0 = cb * 8, ne = min(8, Cn - c0);
        const size_t src = ((size_t)a * Cn + c0) * B + b;
        unsigned short *dst = y + ((size_t)a * B + b) * Cn + c0;
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = e < ne ? k_act_ld(x, xt, src + (size_t)e * B) : 0.0f;
        if (Cn % 8 == 0) {
            TcChunk ch;
#pragma unroll
            for (int e = 0; e < 4; e++) ch.w[e] = tc_pack<TY>(v[2 * e], v[2 * e + 1]);
            *(TcChunk *)dst = ch;
        } else {
            for (int e = 0; e < ne; e++) dst[e] = (unsigned short)tc_pack<TY>(v[e], 0.0f);
        }
    }
}

// Every chan_last launch (the channels-last activations' tests count the calls that
// still permute x or dy; host-side, relaxed: a count, not an order).
static unsigned long chan_last_calls;
static int chan_last(int mm, int A, int B, int Cn, const void *x, int xt, unsigned short *y, cudaStream_t s,
                     const char *what, const char *shp)
{
    __atomic_fetch_add(&chan_last_calls, 1ul, __ATOMIC_RELAXED);
    int ncb = (Cn + 7) / 8;
    dim3 grid(std::min(k_cuda_blocks((size_t)B * ncb), 65535u), (unsigned)A);
    if ((mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16)
        K_LAUNCH(conv_chan_last<K_CUDA_MM_BF16>, grid, K_CUDA_THREADS, 0, s)(B, Cn, ncb, mkdiv(ncb), x, xt, y);
    else K_LAUNCH(conv_chan_last<K_CUDA_MM_F16>, grid, K_CUDA_THREADS, 0, s)(B, Cn, ncb, mkdiv(ncb), x, xt, y);
    return k_cuda_check_launch(what, "%s (NHWC copy)", shp);
}

// xh's element under patch row rsc = (r, s, c) of output pixel npq = (n, p, q):
// xh[((n * H + h) * W + w) * C + c]; valid = 0 in the padding.
__device__ __forceinline__ const unsigned short *xh_at(const Geo &g, const unsigned short *p, int rsc, int npq,
                                                      int &valid)
{
    int rs, c, r, s, n, pq, pp, q;
    g.dC.qr(rsc, rs, c), g.dS.qr(rs, r, s), g.dPQ.qr(npq, n, pq), g.dQ.qr(pq, pp, q);
    int h = pp * g.st - g.pad + r, w = q * g.st - g.pad + s;
    if (h < 0 || h >= g.H || w < 0 || w >= g.W) valid = 0;
    return p + (((size_t)n * g.H + h) * g.W + w) * g.C + c;
}
// forward B(kk = (r, s, c), j = (n, p, q)): rows j of 8 c.
struct NhwcFwdB : TcRaw {
    static constexpr bool k_fast = true, geo = true;
    Geo g;
    __device__ __forceinline__ const unsigned short *at(int j, int kk, int &valid) const
    {
        return xh_at(g, p, kk, j, valid);
    }
};
// input grad B(kk = (r, s, k), j = (n, h, w)) = dyh[((n * P + p) * Q + q) * K + k], p =
// (h + pad - r) / st exact and in range (q alike), else zero.
struct NhwcDxB : TcRaw {
    static constexpr bool k_fast = true, geo = true;
    Geo g;
    __device__ __forceinline__ const unsigned short *at(int j, int kk, int &valid) const
    {
        int rs, k, r, s, n, hw, h, w, pp, q, pr, qr;
        g.dK.qr(kk, rs, k), g.dS.qr(rs, r, s), g.dHW.qr(j, n, hw), g.dW.qr(hw, h, w);
        int ph = h + g.pad - r, qw = w + g.pad - s;
        if (ph < 0 || qw < 0) {
            valid = 0;
            return p;
        }
        g.dst.qr(ph, pp, pr), g.dst.qr(qw, q, qr);
        if (pr || qr || pp >= g.P || q >= g.Q) valid = 0;
        return p + (((size_t)n * g.P + pp) * g.Q + q) * g.K + k;
    }
};
// weight grad B(npq, j = (r, s, c)): the same elements as the forward's, rows of 8 c.
struct NhwcDwB : TcRaw {
    static constexpr bool k_fast = false, geo = true;
    Geo g;
    __device__ __forceinline__ const unsigned short *at(int j, int npq, int &valid) const
    {
        return xh_at(g, p, j, npq, valid);
    }
};
// dw[m][c, r, s] from the product's column j = (r, s, c).
struct DwStoreRsc {
    Geo g; float *dw;
    __host__ __device__ void operator()(int, int m, int j, float v) const
    {
        int rs, c;
        g.dC.qr(j, rs, c);
        dw[((size_t)m * g.C + c) * g.RS() + rs] = v;
    }
};

// The workspace: the split-K partials, then (16-byte aligned) xh, wh (KRSC or CRSK), dyh,
// and for a strided input grad with K % 64 == 0 its phases' weights (k_cuda_conv_phase.cuh).
struct ConvWs {
    size_t xh, wh, dyh, ph, end; // byte offsets
};
static size_t up16(size_t b) { return (b + 15) & ~(size_t)15; }
// w16p: the caller passes k_cuda_conv2d_w16_prep's block (K_CUDA_MM_W16P), so no wh;
// xdir: x is 16-bit and channels last (XNHWC with X16), read as it is, so no xh. dyh stays
// where dy is channels last: fp32 dy is still rounded into it (only not permuted).
// nodx (K_CUDA_MM_NODX): no input grad, so none of its split-K, nor wh / dyh for it alone.
static ConvWs conv_ws(const Geo &g, int copies, int w16p, int xdir, int nodx)
{
    size_t a = k_cuda_gemm_ws_bytes(g.K, g.N * g.PQ(), g.C * g.RS());
    size_t b = nodx ? 0 : k_cuda_gemm_ws_bytes(g.C, g.N * g.HW(), g.K * g.RS());
    size_t c = k_cuda_gemm_ws_bytes(g.K, g.C * g.RS(), g.N * g.PQ());
    int cx = copies && g.C % 8 == 0, ck = copies && g.K % 8 == 0 && !nodx;
    ConvWs w;
    w.xh = up16(std::max(a, std::max(b, c)));
    w.wh = w.xh + (cx && !xdir ? up16((size_t)2 * g.N * g.HW() * g.C) : 0);
    w.dyh = w.wh + ((cx || ck) && !w16p ? up16((size_t)2 * g.K * g.C * g.RS()) : 0);
    w.ph = w.dyh + (cx || ck ? up16((size_t)2 * g.N * g.PQ() * g.K) : 0);
    w.end = w.ph + (ck && g.st > 1 && g.K % 64 == 0 ? up16((size_t)2 * g.K * g.C * g.RS()) : 0);
    return w;
}
// Whether mm's x is read where it lies (no xh): 16-bit, channels last, 16-bit products.
static int x_direct(int mm) { return k_cuda_mm16(mm) && (mm & K_CUDA_MM_XNHWC) && (mm & K_CUDA_MM_X16); }
static int no_dx(int mm) { return (mm & K_CUDA_MM_NODX) != 0; }
// The copies' base where the products are 16-bit and ws holds them (NULL: the gathers).
static char *nhwc_ws(int mm, void *ws) { return k_cuda_mm16(mm) && ws && !((uintptr_t)ws & 15) ? (char *)ws : NULL; }

// The weights' block of k_cuda_conv2d_w16_prep (mm's K_CUDA_MM_W16P, 16-byte aligned), or
// NULL: its first part K x RSC where C % 8 == 0 (else K x CRS), then C x RSK where K % 8 == 0.
static const unsigned short *w16_block(int mm, const uint16_t *w16)
{
    return (mm & K_CUDA_MM_W16P) && k_cuda_mm16(mm) && w16 && !((uintptr_t)w16 & 15) ? (const unsigned short *)w16
                                                                                       : NULL;
}
static size_t w_elems(const Geo &g) { return (size_t)g.K * g.C * g.RS(); }
// A workspace sized with K_CUDA_MM_W16P has no room for wh: the block must be there.
static int w16p_check(int mm, const char *cw, const unsigned short *wp, const char *k, const char *shp)
{
    if (!cw || !(mm & K_CUDA_MM_W16P) || wp) return 0;
    port_cuda_fail("%s(%s): K_CUDA_MM_W16P without a 16-byte aligned weight block", k, shp);
    return -1;
}
// Channels-last activations (k_cuda.h's K_CUDA_MM_XNHWC / YNHWC) where the NHWC copies'
// path reads them: x, dx on it (C % 8; a 16-bit x is read as xh is, an fp32 one rounded
// into xh unpermuted), dy on the input grad's (K % 8; the weight grad's gathers take dy
// channels last too, the stem conv's C = 3), y, dx, db stored either way.
static int nhwc_check(int mm, const Geo &g, const char *cw, const void *x, const char *k, const char *shp)
{
    const int xn = mm & K_CUDA_MM_XNHWC, yn = mm & K_CUDA_MM_YNHWC;
    if (!xn && !yn) return 0;
    if (cw && (!xn || (g.C % 8 == 0 && !((uintptr_t)x & 15))) && (!yn || g.K % 8 == 0)) return 0;
    port_cuda_fail("%s(%s): channels-last activations need bf16 / f16 products, a 16-byte aligned workspace, and c "
                   "(x channels last: with a 16-byte aligned x) / k (y) in multiples of 8", k, shp);
    return -1;
}
// x channels last as the products read it: x itself where 16-bit, else rounded into xh.
static const unsigned short *x_nhwc(int mm, const Geo &g, const void *x, int xt, unsigned short *xh, cudaStream_t s)
{
    if (xt != K_CUDA_ACT_F32) return (const unsigned short *)x;
    const size_t n = (size_t)g.N * g.HW() * g.C;
    int rc = (mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16 ? k_cuda_f32_to_bf16(n, (const float *)x, xh, (port_stream)s)
                                                      : k_cuda_f32_to_f16(n, (const float *)x, xh, (port_stream)s);
    return rc ? NULL : xh;
}

// 1x1, stride 1, no padding: patch row c of output pixel j is x's row j itself, so on the
// NHWC copies every product's geometry operand is a plain 16-bit array (xh or a 16-bit
// x [NHW x C], dyh [NPQ x K]): TcRawK / TcRawMN, which the dispatcher sends to TMA's
// wt_gemm where it is on (geometry operands go by cp.async only). The same elements
// in the same tiles and k order, so the same bits. k_cuda_conv2d_set_1x1(0): the
// geometry loaders (the tests' reference), a relaxed flag as chan_last_calls.
static int plain_1x1_on = 1;
static bool plain_1x1(const Geo &g)
{
    return g.R == 1 && g.S == 1 && g.st == 1 && g.pad == 0 && __atomic_load_n(&plain_1x1_on, __ATOMIC_RELAXED);
}

// Convs other than those (any R x S, stride, padding) with C % 64 == 0 on TMA's im2col
// mode (sm_90a, where k_cuda_tma_on): the product turned so that its rows are the output
// pixels, A the im2col of xh / x (NHWC 16-bit), B the weights [K x RSC], on wt_gemm
// (k_cuda_tc_tma.cuh's wt_launch_i2c). The geometry path's k order (r, s, c: the
// weights' RSC rows) and its split over k (counted in its orientation, K x NPQ), so the
// same sums: the same bits on the executor, whose wgmma and mma.sync (the geometry's 64
// tiles: K = 64) both round once per k16. The stem (C = 3) and C % 64 != 0 stay on the
// geometry loaders. The input grad of a stride-1 square conv with K % 64 == 0 alike: a
// conv of dyh (padding R-1-pad) by the CRSK weights, taps flipped (WtI2c's flip); of a
// strided one (stride 2..8) such a conv per output phase, over the phase's taps with its
// own corners, stored to every st-th pixel (k_cuda_conv_phase.cuh: its chunks the
// geometry's, else the geometry path). The
// weight grad where the forward is taken: turned the other way (M = the RSC rows, N = K,
// k = the NPQ pixels ascending, A the im2col 64 pixels deep, M-major; B = dyh [NPQ x K]),
// split as the geometry's K x RSC x NPQ product, stored through DwStoreRsc swapped.
// k_cuda_conv2d_set_im2col(0): off (the tests' reference).
static int im2col_on = 1;
// 1x1 stride-1 unpadded: plain_1x1's, or the geometry loaders with its switch off (the
// 1x1 tests' and probe's reference), never im2col.
static bool one_by_one(const Geo &g) { return g.R == 1 && g.S == 1 && g.st == 1 && g.pad == 0; }
static bool corners_ok(int R, int S, int pad) // the map's corners (rank 4)
{
    return pad >= 0 && pad <= 128 && pad - (R - 1) >= -128 && pad - (S - 1) >= -128;
}
static bool im2col_fwd_fits(const Geo &g)
{
    return __atomic_load_n(&im2col_on, __ATOMIC_RELAXED) && g.C % 64 == 0 && !one_by_one(g) && g.st <= 8 &&
           corners_ok(g.R, g.S, g.pad);
}
static bool im2col_dx_fits(const Geo &g)
{
    return __atomic_load_n(&im2col_on, __ATOMIC_RELAXED) && g.K % 64 == 0 && !one_by_one(g) && g.st == 1 &&
           g.R == g.S && g.pad <= g.R - 1 && corners_ok(g.R, g.S, g.R - 1 - g.pad);
}
// The turned product's (pixel, channel) to the geometry's store (channel, pixel).
template <class ST> struct SwapStore {
    ST st;
    __host__ __device__ void operator()(int z, int m, int n, float v) const { st(z, n, m, v); }
};
// An im2col product: x [n][h][w][c] walked by an r x s conv (stride st, padding pad) to p
// x q outputs, N weight rows (wt, ld apart), flip as WtI2c's; for the weight grad (conv_i2c
// DW) wt is dyh [npq x N], ld apart.
// box: the map's corners lo / hi {w, h} as given (a strided input grad's phase), else
// from pad (I2C_CORNERS).
struct I2cConv {
    int n, h, w, c, r, s, st, pad, p, q, flip, N;
    const unsigned short *x, *wt;
    int ld, box, lo[2], hi[2];
};
template <int TY, bool DW, class ST>
static int i2c_launch(const I2cConv &v, const ST &st, cudaStream_t s, int kchunk)
{
    const char *why;
    I2C_CORNERS(v.r, v.s, v.pad);
    if (v.box) lo[0] = v.lo[0], lo[1] = v.lo[1], hi[0] = v.hi[0], hi[1] = v.hi[1];
    return wt_launch_i2c<TY, DW>(v.x, v.n, v.h, v.w, v.c, v.r, v.s, v.st, lo, hi, v.p, v.q, v.flip, v.N, v.wt, v.ld, st,
                                 s, &why, kchunk);
}
// 0 done, -1 failed, 1 not taken (the geometry path then: TMA off, maps refused). DW: the
// weight grad (M = r s c, k = the n p q pixels), else the conv (M = n p q, k = r s c).
// kc >= 0: the split's chunk as given (a multiple of WT_BK; >= K: none), for a strided
// input grad's phase product, whose chunks are the geometry's (k_cuda_conv_phase.cuh).
template <bool DW, class ST>
static int conv_i2c(int mm, const char *k, const char *shp, const I2cConv &v, const ST &st, void *ws, cudaStream_t s,
                    int kc = -1)
{
    if (!k_cuda_wgmma_on() || !k_cuda_tma_on() || ((uintptr_t)v.x & 15) || ((uintptr_t)v.wt & 15)) return 1;
    // the geometry product is N x M: its split
    const int npq = v.n * v.p * v.q, rsc = v.r * v.s * v.c, M = DW ? rsc : npq, K = DW ? npq : rsc;
    const int splits = kc >= 0 ? (kc >= K ? 1 : 2) : ws ? k_cuda_gemm_splits(v.N, M, K) : 1;
    const bool bf = (mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16;
    const SwapStore<ST> sw = {st};
    if (splits == 1) {
        if (bf ? i2c_launch<K_CUDA_MM_BF16, DW>(v, sw, s, 0) : i2c_launch<K_CUDA_MM_F16, DW>(v, sw, s, 0)) return 1;
        return k_cuda_check_launch(k, "%s (tensor cores, wgmma, TMA im2col)", shp);
    }
    const int kchunk = kc >= 0 ? kc : ((K + splits - 1) / splits + WT_BK - 1) / WT_BK * WT_BK,
              z = (K + kchunk - 1) / kchunk;
    const KgPartial part = {(float *)ws, M, v.N};
    if (bf ? i2c_launch<K_CUDA_MM_BF16, DW>(v, part, s, kchunk) : i2c_launch<K_CUDA_MM_F16, DW>(v, part, s, kchunk))
        return 1;
    if (k_cuda_check_launch(k, "%s (tensor cores, wgmma, TMA im2col, split-K %d)", shp, z)) return -1;
    K_LAUNCH((k_cuda_gemm_finish<SwapStore<ST>>), k_cuda_blocks((size_t)M * v.N), K_CUDA_THREADS, 0, s)(
        M, v.N, z, (const float *)ws, sw);
    return k_cuda_check_launch(k, "%s (TMA im2col, split-K finish)", shp);
}
#include "kernels/cuda/k_cuda_conv_phase.cuh" // the strided input grad, a product per output phase

// db[k]: one block per output channel, a fixed-order tree over its n*p*q values (nhwc:
// dy [n, p, q, k], the same values in the same order, K apart).
__global__ void conv_bias_grad(Geo g, const float *dy, float *db, int nhwc)
{
    __shared__ double sh[K_CUDA_THREADS];
    int k = blockIdx.x;
    double s = 0.0;
    for (int n = 0; n < g.N; n++) {
        const float *row = dy + (nhwc ? (size_t)n * g.PQ() * g.K + k : ((size_t)n * g.K + k) * g.PQ());
        const size_t step = nhwc ? g.K : 1;
        for (int i = threadIdx.x; i < g.PQ(); i += blockDim.x) s += row[i * step];
    }
    s = k_cuda_block_sum(s, sh);
    if (threadIdx.x == 0) db[k] = (float)s;
}

void shape_str(const k_conv_shape *sh, char *buf, size_t len)
{
    snprintf(buf, len, "n=%d c=%d h=%d w=%d k=%d r=%d s=%d stride=%d pad=%d", sh->n, sh->c, sh->h, sh->w,
             sh->k, sh->r, sh->s, sh->stride, sh->pad);
}

} // namespace

unsigned long k_cuda_conv2d_chan_last_calls(void) { return __atomic_load_n(&chan_last_calls, __ATOMIC_RELAXED); }

// Test hook (test_gpu_tc_conv1x1.c): 1x1 convs' plain-array products on (1) or off; the
// previous setting.
extern "C" int k_cuda_conv2d_set_1x1(int on)
{
    return __atomic_exchange_n(&plain_1x1_on, on ? 1 : 0, __ATOMIC_RELAXED);
}

// Test hook (test_gpu_tc_conv_im2col.c): the forward's im2col products on (1) or off; the
// previous setting.
extern "C" int k_cuda_conv2d_set_im2col(int on)
{
    return __atomic_exchange_n(&im2col_on, on ? 1 : 0, __ATOMIC_RELAXED);
}
// Test hook: the strided input grads' grouped phase products launched so far (phase_dx).
extern "C" unsigned long long k_cuda_conv2d_phase_groups(void)
{
    return __atomic_load_n(&phase_groups, __ATOMIC_RELAXED);
}

size_t k_cuda_conv2d_workspace(const k_conv_shape *sh) { return conv_ws(geo(sh), 1, 0, 0, 0).end; }

size_t k_cuda_conv2d_workspace_mm(int mm, const k_conv_shape *sh)
{
    return conv_ws(geo(sh), k_cuda_mm16(mm), k_cuda_mm16(mm) && (mm & K_CUDA_MM_W16P), x_direct(mm), no_dx(mm)).end;
}

size_t k_cuda_conv2d_w16_elems(int mm, const k_conv_shape *sh)
{
    Geo g = geo(sh);
    return k_cuda_mm16(mm) ? w_elems(g) * (g.K % 8 == 0 ? 2 : 1) : 0;
}

int k_cuda_conv2d_w16_prep(int mm, const k_conv_shape *sh, const float *w, uint16_t *w16, port_stream s)
{
    Geo g = geo(sh);
    cudaStream_t cs = (cudaStream_t)s;
    const char *k = "k_cuda_conv2d_w16_prep";
    char shp[160];
    shape_str(sh, shp, sizeof shp);
    if (!k_cuda_mm16(mm) || ((uintptr_t)w16 & 15)) {
        port_cuda_fail("%s(%s): needs bf16 / f16 products (precision %d) and a 16-byte aligned block", k, shp,
                       mm & K_CUDA_MM_TYPE);
        return -1;
    }
    const size_t n = w_elems(g);
    int bf = (mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16;
    if (g.C % 8 == 0 ? chan_last(mm, g.K, g.RS(), g.C, w, K_CUDA_ACT_F32, (unsigned short *)w16, cs, k, shp)
                     : bf ? k_cuda_f32_to_bf16(n, w, w16, s) : k_cuda_f32_to_f16(n, w, w16, s))
        return -1;
    if (g.K % 8 == 0 && chan_last(mm, 1, g.C * g.RS(), g.K, w, K_CUDA_ACT_F32, (unsigned short *)w16 + n, cs, k, shp))
        return -1;
    return 0;
}

int k_cuda_conv2d_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *y,
                      void *ws, port_stream s)
{
    return k_cuda_conv2d_fwd_mm(K_CUDA_MM_FP32, sh, x, w, NULL, b, y, ws, s);
}

int k_cuda_conv2d_bwd(const k_conv_shape *sh, const float *x, const float *w, const float *dy, float *dx,
                      float *dw, float *db, void *ws, port_stream s)
{
    return k_cuda_conv2d_bwd_mm(K_CUDA_MM_FP32, sh, x, w, NULL, dy, dx, dw, db, ws, s);
}

int k_cuda_conv2d_fwd_mm(int mm, const k_conv_shape *sh, const float *x, const float *w, const uint16_t *w16,
                         const float *b, float *y, void *ws, port_stream s)
{
    Geo g = geo(sh);
    char shp[160];
    shape_str(sh, shp, sizeof shp);
    if (k_act_mm_check(mm, "k_cuda_conv2d_fwd", shp)) return -1;
    FwdA a = {w, g.C * g.RS()};
    FwdB bb = {g, x, k_act_of(mm, K_CUDA_MM_X16)};
    FwdStore st = {g, b, y, k_act_of(mm, K_CUDA_MM_Y16), (mm & K_CUDA_MM_YNHWC) != 0};
    cudaStream_t cs = (cudaStream_t)s;
    char *cw = nhwc_ws(mm, ws);
    const unsigned short *wp = w16_block(mm, w16);
    if (w16p_check(mm, cw, wp, "k_cuda_conv2d_fwd", shp) || nhwc_check(mm, g, cw, x, "k_cuda_conv2d_fwd", shp))
        return -1;
    if (cw && g.C % 8 == 0) { // A = wh [K x RSC], B = xh's patches, both by cp.async
        const char *k = "k_cuda_conv2d_fwd";
        ConvWs L = conv_ws(g, 1, wp != NULL, x_direct(mm), no_dx(mm));
        unsigned short *xh = (unsigned short *)(cw + L.xh), *wh = (unsigned short *)(cw + L.wh);
        const bool xn = mm & K_CUDA_MM_XNHWC; // x is xh's layout already
        if ((!xn && chan_last(mm, g.N, g.HW(), g.C, x, bb.xt, xh, cs, k, shp)) ||
            (!wp && chan_last(mm, g.K, g.RS(), g.C, w, K_CUDA_ACT_F32, wh, cs, k, shp)))
            return -1;
        TcRawK ah; // the update's KRSC copy where there is one, else this call's
        ah.p = wp ? wp : wh, ah.ld = g.RS() * g.C, ah.vec = 1;
        NhwcFwdB bh;
        bh.p = xh, bh.ld = 0, bh.vec = 1, bh.g = g;
        if (xn && !(bh.p = x_nhwc(mm, g, x, bb.xt, xh, cs))) return -1;
        if (im2col_fwd_fits(g)) {
            const I2cConv v = {g.N, g.H, g.W, g.C, g.R, g.S, g.st, g.pad, g.P, g.Q, 0, g.K, bh.p, ah.p, ah.ld,
                               0, {}, {}};
            const int ri = conv_i2c<false>(mm, k, shp, v, st, ws, cs);
            if (ri <= 0) return ri;
        }
        if (plain_1x1(g)) { // B = x's rows [NHW x C], k-contiguous
            TcRawK bp;
            bp.p = bh.p, bp.ld = g.C, bp.vec = 1;
            return k_cuda_gemm_mm16(mm, k, shp, g.K, g.N * g.PQ(), g.C, ah, bp, st, ws, cs);
        }
        return k_cuda_gemm_mm16(mm, k, shp, g.K, g.N * g.PQ(), g.RS() * g.C, ah, bh, st, ws, cs);
    }
    TcRawK ar; // w [K x CRS] as it is: its 16-bit rows by cp.async (a block's first part is KRSC where C % 8 == 0)
    if (k_tc_raw(ar, mm, wp && g.C % 8 == 0 ? NULL : w16, g.C * g.RS()))
        return k_cuda_gemm_mm16(mm, "k_cuda_conv2d_fwd", shp, g.K, g.N * g.PQ(), g.C * g.RS(), ar, bb, st, ws, cs);
    return k_cuda_gemm_mm(mm & K_CUDA_MM_TYPE, "k_cuda_conv2d_fwd", shp, g.K, g.N * g.PQ(), g.C * g.RS(), a, bb, st, ws,
                          cs);
}

int k_cuda_conv2d_bwd_mm(int mm, const k_conv_shape *sh, const float *x, const float *w, const uint16_t *w16,
                         const float *dy, float *dx, float *dw, float *db, void *ws, port_stream s)
{
    Geo g = geo(sh);
    cudaStream_t cs = (cudaStream_t)s;
    char shp[160];
    shape_str(sh, shp, sizeof shp);
    if (k_act_mm_check(mm, "k_cuda_conv2d_bwd", shp)) return -1;
    const int xt = k_act_of(mm, K_CUDA_MM_X16);
    char *cw = nhwc_ws(mm, ws);
    const bool hx = cw && dx && g.K % 8 == 0, hw = cw && g.C % 8 == 0; // input / weight grad on the copies
    const unsigned short *wp = w16_block(mm, w16);
    if (w16p_check(mm, cw, wp, "k_cuda_conv2d_bwd", shp) || nhwc_check(mm, g, cw, x, "k_cuda_conv2d_bwd", shp))
        return -1;
    if (no_dx(mm) && dx) {
        port_cuda_fail("k_cuda_conv2d_bwd(%s): a dx with K_CUDA_MM_NODX (its workspace may lack the input grad's room)",
                       shp);
        return -1;
    }
    const bool xn = mm & K_CUDA_MM_XNHWC, yn = mm & K_CUDA_MM_YNHWC;
    ConvWs L = conv_ws(g, 1, wp != NULL, x_direct(mm), no_dx(mm));
    unsigned short *xh = cw ? (unsigned short *)(cw + L.xh) : NULL, *wh = cw ? (unsigned short *)(cw + L.wh) : NULL;
    unsigned short *dyh = cw ? (unsigned short *)(cw + L.dyh) : NULL;
    // dy channels last: its 16-bit copy is a plain rounding (the bits chan_last's give)
    const size_t ndy = (size_t)g.N * g.PQ() * g.K;
    if ((hx || hw) &&
        (yn ? ((mm & K_CUDA_MM_TYPE) == K_CUDA_MM_BF16 ? k_cuda_f32_to_bf16(ndy, dy, dyh, s)
                                                        : k_cuda_f32_to_f16(ndy, dy, dyh, s))
            : chan_last(mm, g.N, g.PQ(), g.K, dy, K_CUDA_ACT_F32, dyh, cs, "k_cuda_conv2d_bwd", shp)))
        return -1;
    if (hx) { // A = wh [C x RSK], B = dyh's gather, both by cp.async
        const char *k = "k_cuda_conv2d_bwd (input grad)";
        if (!wp && chan_last(mm, 1, g.C * g.RS(), g.K, w, K_CUDA_ACT_F32, wh, cs, k, shp)) return -1;
        TcRawK ah; // the update's CRSK copy where there is one, else this call's
        ah.p = wp ? wp + w_elems(g) : wh, ah.ld = g.RS() * g.K, ah.vec = 1;
        NhwcDxB bh;
        bh.p = dyh, bh.ld = 0, bh.vec = 1, bh.g = g;
        DxStore st = {g, dx, xn};
        TcRawK bp; // 1x1: B = dyh's rows [NHW x K], k-contiguous
        bp.p = dyh, bp.ld = g.K, bp.vec = 1;
        int ri = 1; // stride 1: a conv of dyh, padding R-1-pad, taps flipped
        if (im2col_dx_fits(g)) {
            const I2cConv v = {g.N, g.P, g.Q, g.K, g.R, g.S, 1, g.R - 1 - g.pad, g.H, g.W, 1, g.C, dyh, ah.p, ah.ld,
                               0, {}, {}};
            if ((ri = conv_i2c<false>(mm, k, shp, v, st, ws, cs)) < 0) return -1;
        } else if (im2col_dx_phase_fits(g)) { // strided: one such conv per output phase
            if ((ri = phase_dx(mm, k, shp, g, dyh, ah.p, (unsigned short *)(cw + L.ph), st, ws, cs)) < 0)
                return -1;
        }
        if (ri && (plain_1x1(g) ? k_cuda_gemm_mm16(mm, k, shp, g.C, g.N * g.HW(), g.K, ah, bp, st, ws, cs)
                                : k_cuda_gemm_mm16(mm, k, shp, g.C, g.N * g.HW(), g.RS() * g.K, ah, bh, st, ws, cs)))
            return -1;
    } else if (dx) {
        const char *k = "k_cuda_conv2d_bwd (input grad)";
        DxA a = {g, w};
        DxB b = {g, dy};
        DxStore st = {g, dx, (int)xn};
        TcRawMN ar; // 1x1: w^T(c, k) = w[k * C + c], w16's rows (over c) by cp.async (a block's KRSC is KCRS)
        int rc = g.RS() == 1 && k_tc_raw(ar, mm, w16, g.C)
                     ? k_cuda_gemm_mm16(mm, k, shp, g.C, g.N * g.HW(), g.K, ar, b, st, ws, cs)
                     : k_cuda_gemm_mm(mm & K_CUDA_MM_TYPE, k, shp, g.C, g.N * g.HW(), g.K * g.RS(), a, b, st, ws, cs);
        if (rc) return -1;
    }
    DwA a = {g, dy, (int)yn};
    DwB b = {g, x, xt};
    DwStore st = {dw, g.C * g.RS()};
    if (hw) { // A = dyh [K x NPQ] (M-contiguous), B = xh's patches (rows of 8 c): cp.async
        const char *k = "k_cuda_conv2d_bwd (weight grad)";
        if (!xn && chan_last(mm, g.N, g.HW(), g.C, x, xt, xh, cs, k, shp)) return -1;
        TcRawMN ah; // by cp.async where K % 8 == 0, else its elements
        ah.p = dyh, ah.ld = g.K, ah.vec = g.K % 8 == 0;
        NhwcDwB bh;
        bh.p = xh, bh.ld = 0, bh.vec = 1, bh.g = g;
        if (xn && !(bh.p = x_nhwc(mm, g, x, xt, xh, cs))) return -1;
        DwStoreRsc sth = {g, dw};
        TcRawMN bp; // 1x1 with dyh's rows aligned (K % 8): B = x's rows [NPQ x C], N-contiguous
        bp.p = bh.p, bp.ld = g.C, bp.vec = 1;
        int ri = 1; // the forward's im2col (M = RSC, k = the NPQ pixels), B = dyh [NPQ x K]
        if (im2col_fwd_fits(g)) {
            const I2cConv v = {g.N, g.H, g.W, g.C, g.R, g.S, g.st, g.pad, g.P, g.Q, 0, g.K, bh.p, dyh, g.K, 0, {}, {}};
            if ((ri = conv_i2c<true>(mm, k, shp, v, sth, ws, cs)) < 0) return -1;
        }
        if (ri && (plain_1x1(g) && ah.vec
                       ? k_cuda_gemm_mm16(mm, k, shp, g.K, g.C, g.N * g.PQ(), ah, bp, sth, ws, cs)
                       : k_cuda_gemm_mm16(mm, k, shp, g.K, g.RS() * g.C, g.N * g.PQ(), ah, bh, sth, ws, cs)))
            return -1;
    } else if (k_cuda_gemm_mm(mm & K_CUDA_MM_TYPE, "k_cuda_conv2d_bwd (weight grad)", shp, g.K, g.C * g.RS(),
                              g.N * g.PQ(), a, b, st, ws, cs)) {
        return -1;
    }
    if (!db) return 0; // no bias (ResNet's convs), as the CPU kernel
    K_LAUNCH(conv_bias_grad, g.K, K_CUDA_THREADS, 0, cs)(g, dy, db, (int)yn);
    return k_cuda_check_launch("k_cuda_conv2d_bwd (bias grad)", "%s", shp);
}
