/* The tensor-core causal attention (k_cuda_attn_tc.cu: mma.sync m16n8k16, ldmatrix and
 * .trans, P and dS reused from the accumulators as A fragments) against two references.
 *
 * 1. A double-precision reference on the same 16-bit operands the kernels round (Q, K,
 *    V, dO; P and dS rounded where the products take them, as the CPU's --amp bf16 does).
 *    Both sides hold the same rounded Q, K, V, dO; P and dS are rounded from fp32 values
 *    that differ only in fp32 noise (and P, in the forward, relative to the running max of
 *    its key tile), so each term of a sum may differ by two roundings of its 16-bit factor:
 *        |x - ref| <= 2u * sum |term| + 2^-23 * sum |other factor|      (u = 2^-8 bf16,
 *    2^-11 f16; the second part: f16's subnormals), where a term of dK (dQ) is counted as
 *    P scale (|dP| + |D|) |q| (|k|), an upper bound of |dS q|. lse: fp32 sums of exact
 *    products, 2^-18 (1 + |lse|). A wrong fragment, tile, mask or row term is off by the
 *    size of the values themselves.
 * 2. The CPU's own --amp bf16 kernels (k_attention_*_bf16: AMX where the CPU has it, else
 *    the fp32 kernels) for bf16, the fp32 kernels on the f16-rounded Q, K, V, dO for f16
 *    (on an AMX CPU the bf16 kernels round to bf16, 4e-3 from f16), at the 16-bit types'
 *    end-to-end bound: largest error relative to the largest value below 2^-6 (bf16) or
 *    2^-9 (f16).
 * Odd t (1, 17, 70, 130: partial and masked tiles), heads 8, 32, 64 and 128 (padded to 32,
 * 64, 128 columns), b * h > 1. */
#include "test/gpu/g.h"
#include "kernels/k_tfm.h"
#include "rt/half.h"
#include <math.h>

static float rnd(int type, float f)
{
    return type == K_CUDA_MM_BF16 ? rt_bf16_to_f32(rt_f32_to_bf16(f)) : rt_f16_to_f32(rt_f32_to_f16(f));
}

/* elements of x outside |x - ref| <= tol; the worst ratio |x - ref| / tol in *worst */
static size_t outside(const float *x, const double *ref, const double *tol, size_t n, double *worst, size_t *first)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - ref[i]), r = e / tol[i];
        if (!(r <= 1.0) && !bad++) *first = i;
        if (r > *worst || r != r) *worst = r;
    }
    return bad;
}

typedef struct {
    int type, b, t, h, hd;
} acase;

/* The reference and its bounds (ry/ty: y, rl/tl: lse, rd/td: dqkv), from the rounded
 * operands r (qkv) and g (dO), and the device's y and lse for backward (its inputs). */
typedef struct {
    acase c;
    double u, scale;
    const float *r, *g, *dy, *y, *lse;
    double *ry, *ty, *rl, *tl, *rd, *td, *p;
} aref;

static const float *row_of(const aref *a, int s, int i, int part)
{
    int C = a->c.h * a->c.hd;
    return a->r + ((size_t)s * a->c.t + i) * 3 * C + (size_t)part * C;
}

/* Row i of head hh of sequence s: its y and lse, its terms of dq, dk, dv. */
static void ref_row(aref *a, int s, int hh, int i)
{
    const int T = a->c.t, HD = a->c.hd, C = a->c.h * HD, type = a->c.type;
    const double u = a->u, sl = 0x1p-23; /* sl: f16's subnormals, per unit of the other factor */
    const float *q = row_of(a, s, i, 0) + (size_t)hh * HD;
    double m = -INFINITY, l = 0, amax = 0, D = 0, *p = a->p;
    for (int j = 0; j <= i; j++) {
        const float *k = row_of(a, s, j, 1) + (size_t)hh * HD;
        double sc = 0, sa = 0;
        for (int d = 0; d < HD; d++) sc += (double)q[d] * k[d], sa += fabs((double)q[d] * k[d]);
        p[j] = sc * a->scale, amax = fmax(amax, sa * a->scale), m = fmax(m, p[j]);
    }
    for (int j = 0; j <= i; j++) p[j] = exp(p[j] - m), l += p[j];
    size_t li = ((size_t)s * a->c.h + hh) * T + i, yo = ((size_t)s * T + i) * C + (size_t)hh * HD;
    a->rl[li] = m + log(l), a->tl[li] = 0x1p-18 * (1 + fabs(a->rl[li])) + (HD + 2) * 0x1p-23 * amax;
    for (int j = 0; j <= i; j++) {
        const float *v = row_of(a, s, j, 2) + (size_t)hh * HD;
        double pr = rnd(type, (float)p[j]);
        for (int d = 0; d < HD; d++) {
            a->ry[yo + d] += pr * v[d] / l;
            a->ty[yo + d] += (2 * u * p[j] + sl) * fabs(v[d]) / l;
        }
    }
    /* backward: P from the device's lse, D from its y and the unrounded dO */
    for (int d = 0; d < HD; d++) D += (double)a->dy[yo + d] * a->y[yo + d];
    const float *g = a->g + yo;
    double *dq = a->rd + ((size_t)s * T + i) * 3 * C + (size_t)hh * HD, *tq = a->td + (dq - a->rd);
    for (int j = 0; j <= i; j++) {
        const float *k = row_of(a, s, j, 1) + (size_t)hh * HD, *v = k + C;
        double sc = 0, dp = 0;
        for (int d = 0; d < HD; d++) sc += (double)q[d] * k[d], dp += (double)g[d] * v[d];
        double P = exp(sc * a->scale - a->lse[li]), dS = P * (dp - D) * a->scale;
        double term = P * a->scale * (fabs(dp) + fabs(D)), Pr = rnd(type, (float)P), dSr = rnd(type, (float)dS);
        double *dk = a->rd + ((size_t)s * T + j) * 3 * C + C + (size_t)hh * HD, *tk = a->td + (dk - a->rd);
        for (int d = 0; d < HD; d++) {
            dq[d] += dSr * k[d], tq[d] += (2 * u * term + sl) * fabs(k[d]);
            dk[d] += dSr * q[d], tk[d] += (2 * u * term + sl) * fabs(q[d]);
            dk[C + d] += Pr * g[d], tk[C + d] += (2 * u * P + sl) * fabs(g[d]);
        }
    }
}

static double worst_ref[2], worst_cpu[2][2]; /* by type: ratio to the bound; relerr y/lse, dqkv */

static void attn_case(acase c)
{
    g_init();
    const int B = c.b, T = c.t, H = c.h, HD = c.hd, C = H * HD, type = c.type, f16 = type == K_CUDA_MM_F16;
    const size_t nqkv = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = g_rand(nqkv, 31 + T), *dy = g_rand(ny, 32 + HD);
    for (size_t i = 0; i < nqkv; i++) qkv[i] *= 2.0f; /* sharper rows: the max and its rescaling matter */
    /* the device */
    float *gq = g_up(qkv, nqkv * 4), *gdy = g_up(dy, ny * 4), *gy = g_dev(ny * 4), *gl = g_dev(nl * 4);
    float *gdq = g_dev(nqkv * 4);
    void *ws = g_dev(k_cuda_attention_workspace(B, T, H, HD) + 64);
    g_need(k_cuda_attention_fwd_mm(type, B, T, H, HD, gq, gy, gl, NULL) == 0, "attention fwd (tensor cores)");
    g_need(k_cuda_attention_bwd_mm(type, B, T, H, HD, gq, gy, gl, gdy, gdq, ws, NULL) == 0,
           "attention bwd (tensor cores)");
    float *y = g_result(gy, ny), *lse = g_result(gl, nl), *dq = g_result(gdq, nqkv);
    /* 1: the reference on the rounded operands */
    float *r = malloc(nqkv * 4), *rdy = malloc(ny * 4);
    for (size_t i = 0; i < nqkv; i++) r[i] = rnd(type, qkv[i]);
    for (size_t i = 0; i < ny; i++) rdy[i] = rnd(type, dy[i]);
    aref a = {c, f16 ? 0x1p-11 : 0x1p-8, 1.0 / sqrt((double)HD), r, rdy, dy, y, lse, calloc(ny, 8), calloc(ny, 8),
              calloc(nl, 8), calloc(nl, 8), calloc(nqkv, 8), calloc(nqkv, 8), malloc((size_t)T * 8)};
    for (int s = 0; s < B; s++)
        for (int hh = 0; hh < H; hh++)
            for (int i = 0; i < T; i++) ref_row(&a, s, hh, i);
    const char *tn = f16 ? "f16" : "bf16";
    double w = 0;
    size_t first = 0, bad;
    bad = outside(y, a.ry, a.ty, ny, &w, &first);
    CHECKF(!bad, "%s b=%d t=%d h=%d hd=%d: y: %zu of %zu outside the bound, first %zu = %.8g, reference %.8g", tn, B, T,
           H, HD, bad, ny, first, y[first], a.ry[first]);
    bad = outside(lse, a.rl, a.tl, nl, &w, &first);
    CHECKF(!bad, "%s b=%d t=%d h=%d hd=%d: lse: %zu of %zu outside the bound, first %zu = %.8g, reference %.8g", tn,
           B, T, H, HD, bad, nl, first, lse[first], a.rl[first]);
    bad = outside(dq, a.rd, a.td, nqkv, &w, &first);
    CHECKF(!bad, "%s b=%d t=%d h=%d hd=%d: dqkv: %zu of %zu outside the bound, first [%zu][%zu] = %.8g, reference %.8g",
           tn, B, T, H, HD, bad, nqkv, first / (3 * C), first % (3 * C), dq[first], a.rd[first]);
    worst_ref[f16] = fmax(worst_ref[f16], w);
    /* 2: the CPU's --amp bf16 kernels (bf16); f16: the fp32 kernels on the f16 operands
     * (the CPU has no f16 attention, and its bf16 one rounds to bf16 where it has AMX) */
    float *cy = malloc(ny * 4), *cl = malloc(nl * 4), *cdq = malloc(nqkv * 4);
    if (f16) {
        k_attention_fwd(B, T, H, HD, r, cy, cl);
        k_attention_bwd(B, T, H, HD, r, cy, cl, rdy, cdq);
    } else {
        k_attention_fwd_bf16(B, T, H, HD, qkv, cy, cl);
        k_attention_bwd_bf16(B, T, H, HD, qkv, cy, cl, dy, cdq);
    }
    double ey = g_relerr(y, cy, ny), el = g_relerr(lse, cl, nl), ed = g_relerr(dq, cdq, nqkv);
    double bound = f16 ? 0x1p-9 : 0x1p-6;
    CHECKF(ey < bound && el < bound && ed < bound, "%s b=%d t=%d h=%d hd=%d against the CPU: rel err y %.3g lse %.3g "
           "dqkv %.3g (bound %.3g)", tn, B, T, H, HD, ey, el, ed, bound);
    worst_cpu[f16][0] = fmax(worst_cpu[f16][0], fmax(ey, el)), worst_cpu[f16][1] = fmax(worst_cpu[f16][1], ed);
    port_dev_free(gq), port_dev_free(gdy), port_dev_free(gy), port_dev_free(gl), port_dev_free(gdq), port_dev_free(ws);
    free(qkv), free(dy), free(y), free(lse), free(dq), free(r), free(rdy), free(a.ry), free(a.ty), free(a.rl);
    free(a.tl), free(a.rd), free(a.td), free(a.p), free(cy), free(cl), free(cdq);
}

static void report(int type)
{
    int f16 = type == K_CUDA_MM_F16;
    t_note("%s: worst |x - ref| / bound %.3f; against the CPU's kernels rel err y/lse %.3g, dqkv %.3g",
           f16 ? "f16" : "bf16", worst_ref[f16], worst_cpu[f16][0], worst_cpu[f16][1]);
}

/* GPT-2's head (64) over the odd lengths; 2 sequences x 3 heads. */
TEST(gpu_tc_attention_bf16_hd64_odd_t)
{
    static const int ts[] = {1, 17, 70, 130};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) attn_case((acase){K_CUDA_MM_BF16, 2, ts[i], 3, 64});
    report(K_CUDA_MM_BF16);
}

/* The other head tiles: 32 (and 8, the tiny GPT's, padded to 32), 128 (backward's 32-row
 * inner tiles). */
TEST(gpu_tc_attention_bf16_hd8_32_128)
{
    attn_case((acase){K_CUDA_MM_BF16, 1, 70, 2, 32});
    attn_case((acase){K_CUDA_MM_BF16, 2, 17, 2, 8});
    attn_case((acase){K_CUDA_MM_BF16, 1, 130, 2, 128});
    attn_case((acase){K_CUDA_MM_BF16, 2, 33, 1, 96});
    report(K_CUDA_MM_BF16);
}

TEST(gpu_tc_attention_f16)
{
    attn_case((acase){K_CUDA_MM_F16, 2, 70, 2, 64});
    attn_case((acase){K_CUDA_MM_F16, 1, 130, 2, 32});
    attn_case((acase){K_CUDA_MM_F16, 1, 17, 2, 128});
    report(K_CUDA_MM_F16);
}
