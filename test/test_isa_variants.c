/* The kernels written once per ISA level through rt/isa_each.h (max over time, Adam,
 * the strided col2im)
 * against their scalar definitions, bit for bit, on every level this CPU has: row
 * lengths around every vector width, ties, -0 and +0, NaNs and infinities. (The
 * reductions, the other rt/isa_each.h user, are checked in test_collectives_reduce.c.) */
#include "test/t.h"
#include "kernels/k.h"
#include "kernels/k_optim.h"
#include "kernels/cpu/k_gemm.h"
#include "rt/isa.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x853C49E6748FEA9BULL;
static uint32_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 11); }

/* The definition: the first maximum wins ties; a NaN wins over numbers, the first one. */
static void max_ref(int len, const float *x, float *y, int32_t *idx)
{
    float m = x[0];
    int32_t a = 0;
    for (int t = 1; t < len && !isnan(m); t++)
        if (x[t] > m || isnan(x[t])) m = x[t], a = t;
    *y = m, *idx = a;
}

TEST(isa_variants_max_time_bits_on_every_level)
{
    enum { ROWS = 7, MAXLEN = 70 };
    static float x[ROWS * MAXLEN], y[ROWS], yr[ROWS];
    static int32_t idx[ROWS], ir[ROWS];
    static const float pick[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, 2.5f, -3.0f};
    int bad = 0;
    for (int len = 1; len <= MAXLEN; len++)
        for (int trial = 0; trial < 4; trial++) {
            for (int i = 0; i < ROWS * len; i++) {
                uint32_t r = rnd();
                x[i] = trial == 0 ? pick[r % 7] : trial == 1 ? (float)(int)(r % 5) - 2.0f : (float)(r % 1000) * 0.01f;
                if (trial == 3 && r % 17 == 0) x[i] = r % 2 ? NAN : (r % 4 == 1 ? INFINITY : -INFINITY);
            }
            for (int r = 0; r < ROWS; r++) max_ref(len, x + r * len, &yr[r], &ir[r]);
            for (int lvl = 0; lvl < RT_NISA; lvl++) {
                if (k_set_isa(rt_isa_name(lvl))) continue;
                k_max_time_fwd(1, ROWS, len, x, y, idx);
                if ((memcmp(y, yr, sizeof(float) * ROWS) || memcmp(idx, ir, sizeof(int32_t) * ROWS)) && bad++ < 5)
                    CHECKF(0, "max_time len %d trial %d differs on %s", len, trial, rt_isa_name(lvl));
            }
        }
    k_set_isa(NULL);
    CHECK_EQ(bad, 0);
}

TEST(isa_variants_adam_bits_on_every_level)
{
    enum { N = 1037 }; /* odd: every level's tail too */
    static float p[N], g[N], m[N], v[N], p2[N], m2[N], v2[N];
    int bad = 0;
    for (int dec = 0; dec < 2; dec++)
        for (int lvl = 0; lvl < RT_NISA; lvl++) {
            if (k_set_isa(rt_isa_name(lvl))) continue;
            for (int i = 0; i < N; i++) {
                p[i] = p2[i] = (float)(rnd() % 2001) * 1e-3f - 1.0f;
                m[i] = m2[i] = v[i] = v2[i] = 0;
            }
            for (int t = 1; t <= 3; t++) {
                for (int i = 0; i < N; i++) g[i] = (float)(rnd() % 2001) * 1e-3f - 1.0f;
                k_adam_cfg c = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .decoupled = dec,
                                .step_size = 1e-3f / (1.0f - powf(0.9f, (float)t)),
                                .bc2_sqrt = sqrtf(1.0f - powf(0.999f, (float)t)), .decay_mul = dec ? 1.0f - 1e-5f : 1.0f};
                k_adam_step(N, &c, p, g, m, v);
                k_adam_step_ref(N, &c, p2, g, m2, v2);
            }
            if ((memcmp(p, p2, sizeof p) || memcmp(m, m2, sizeof m) || memcmp(v, v2, sizeof v)) && bad++ < 5)
                CHECKF(0, "adam (decoupled %d) differs from the scalar on %s", dec, rt_isa_name(lvl));
        }
    k_set_isa(NULL);
    CHECK_EQ(bad, 0);
}

/* col2im's definition: dx zeroed, then each column element added to its pixel in
 * (c, r, s, p, q) order. */
static void col2im_ref(const k_im2col_geo *g, const float *col, float *dx)
{
    for (long i = 0; i < (long)g->c * g->h * g->w; i++) dx[i] = 0.0f;
    for (int c = 0; c < g->c; c++)
        for (int r = 0; r < g->r; r++)
            for (int s = 0; s < g->s; s++)
                for (int p = 0; p < g->p; p++)
                    for (int q = 0; q < g->q; q++) {
                        int ih = p * g->stride - g->pad + r, iw = q * g->stride - g->pad + s;
                        if (ih >= 0 && ih < g->h && iw >= 0 && iw < g->w)
                            dx[((long)c * g->h + ih) * g->w + iw] +=
                                col[(((long)(c * g->r + r) * g->s + s) * g->p + p) * g->q + q];
                    }
}

/* Strided col2im (the vector stride-2 rows: even and odd columns summed apart) against
 * the definition, bit for bit: widths around the vector lengths, odd and even,
 * paddings 0-3, 1-7 tap columns, values with -0, +0, sums that cancel, NaN, inf. */
TEST(isa_variants_col2im_bits_on_every_level)
{
    static const int geo[][6] = {/* c, h, w, r, s, pad (stride 2) */
                                 {3, 28, 28, 3, 3, 1}, {2, 9, 7, 3, 3, 1},   {2, 7, 7, 2, 2, 0},
                                 {1, 17, 16, 7, 7, 3}, {2, 14, 14, 3, 3, 1}, {1, 33, 35, 3, 3, 1},
                                 {1, 12, 40, 1, 1, 0}, {2, 6, 18, 5, 4, 2},  {1, 5, 3, 3, 3, 1}};
    static float col[1 << 15], dx[1 << 13], ref[1 << 13];
    static const float pick[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 3.0f, -3.0f};
    int bad = 0;
    for (unsigned gi = 0; gi < sizeof geo / sizeof geo[0]; gi++)
        for (int trial = 0; trial < 3; trial++) {
            const int *a = geo[gi];
            k_im2col_geo g = {a[0], a[1], a[2], a[3], a[4], 2, a[5], 0, 0};
            g.p = (g.h + 2 * g.pad - g.r) / 2 + 1;
            g.q = (g.w + 2 * g.pad - g.s) / 2 + 1;
            long n = (long)g.c * g.r * g.s * g.p * g.q, nx = (long)g.c * g.h * g.w;
            CHECK(n + 64 <= (long)(sizeof col / sizeof col[0]) && nx <= (long)(sizeof dx / sizeof dx[0]));
            float *cb = col + 32; /* slack either side: reads outside the rows are bugs, not faults */
            for (long i = 0; i < n + 64; i++) col[i] = NAN;
            for (long i = 0; i < n; i++) {
                uint32_t r = rnd();
                cb[i] = trial == 0 ? pick[r % 7] : (float)(r % 1000) * 0.01f - 5.0f;
                if (trial == 2 && r % 23 == 0) cb[i] = r % 2 ? NAN : (r % 4 == 1 ? INFINITY : -INFINITY);
            }
            col2im_ref(&g, cb, ref);
            for (int lvl = 0; lvl < RT_NISA; lvl++) {
                if (k_set_isa(rt_isa_name(lvl))) continue;
                memset(dx, 0x7f, sizeof dx);
                k_col2im(&g, cb, dx);
                if (memcmp(dx, ref, sizeof(float) * nx) && bad++ < 5)
                    CHECKF(0, "col2im geo %u trial %d differs on %s", gi, trial, rt_isa_name(lvl));
            }
        }
    k_set_isa(NULL);
    CHECK_EQ(bad, 0);
}
