/* The 8-bit optimizer state (kernels/k_optim.h, --optimizer adamw8bit): the vector
 * codes equal the scalar reference's, decode + encode is exact, the rounding is
 * unbiased and within the format's step, v never rounds to 0 (blocks below 2^-100,
 * v's root below 2^-50, are all 0), and the 8-bit Adam step
 * is decode + k_adam_step + encode, the same bits on 1 and 3 threads. test_isa_paths
 * runs this file on every ISA path. */
#include "test/t.h"
#include "kernels/k.h"
#include "kernels/k_optim.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N 1000 /* three whole blocks and a tail */

/* Values over many binades, both signs, zeros, and one block of tiny ones. */
static void fill(float *x, int n, uint32_t seed, int positive)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        float mag = ldexpf((float)((seed >> 8) & 0xFFFF) / 65536.0f + 0.01f, (int)((seed >> 24) % 24) - 20);
        if (i % 97 == 0) mag = 0.0f;
        if (i >= 512 && i < 768) mag *= 1e-35f;
        x[i] = positive || (seed & 1) ? mag : -mag;
    }
}

TEST(q8_codes_equal_the_scalar_reference)
{
    static float x[N], y[N], r[N];
    static uint8_t c[N], cr[N];
    int8_t s[4], sr[4];
    for (int sq = 0; sq < 2; sq++)
        for (uint32_t t = 1; t < 4; t++) {
            fill(x, N, 7 * t + (uint32_t)sq, sq);
            k_q8_encode(N, x, c, s, sq, 12345, t);
            k_q8_encode_ref(N, x, cr, sr, sq, 12345, t);
            CHECKF(!memcmp(c, cr, N) && !memcmp(s, sr, sizeof s), "sq %d t %u: codes differ from the reference", sq, t);
            k_q8_decode(N, c, s, sq, y);
            k_q8_decode_ref(N, c, s, sq, r);
            CHECKF(!memcmp(y, r, sizeof y), "sq %d t %u: decoded values differ from the reference", sq, t);
        }
}

TEST(q8_round_trip_is_exact_and_the_error_within_a_step)
{
    static float x[N], y[N], z[N];
    static uint8_t c[N], c2[N];
    int8_t s[4], s2[4];
    for (int sq = 0; sq < 2; sq++) {
        fill(x, N, 99 + (uint32_t)sq, sq);
        k_q8_encode(N, x, c, s, sq, 0, 5);
        k_q8_decode(N, c, s, sq, y);
        k_q8_encode(N, y, c2, s2, sq, 777, 9); /* another stream: held values do not move */
        CHECKF(!memcmp(c, c2, N) && !memcmp(s, s2, sizeof s), "sq %d: decode + encode changed the codes", sq);
        k_q8_decode(N, c2, s2, sq, z);
        CHECK(!memcmp(y, z, sizeof y));
        for (int b = 0; b < 4; b++) {
            float amax = 0;
            for (int i = b * K_Q8_BLOCK; i < N && i < (b + 1) * K_Q8_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
            for (int i = b * K_Q8_BLOCK; i < N && i < (b + 1) * K_Q8_BLOCK; i++) {
                /* m: 3 mantissa bits (an eighth), v's root: 4 (a sixteenth); below 2^-14 of the
                 * block's largest m is 0, v at least the smallest code (never 0) */
                double a = sq ? sqrt(x[i]) : fabs(x[i]), d = sq ? sqrt(y[i]) : fabs(y[i]);
                double big = sq ? sqrt(amax) : amax, floor = big * ldexp(1, -14);
                if (big < ldexp(1, sq ? -50 : -100)) CHECKF(y[i] == 0, "sq %d: %g in a negligible block: %g", sq, x[i], y[i]);
                else if (x[i] == 0) CHECKF(y[i] == 0, "sq %d: 0 decoded as %g", sq, y[i]);
                else if (a >= floor) CHECKF(fabs(d - a) <= a * (sq ? 1.0 / 16 : 1.0 / 8) && (sq || (y[i] < 0) == (x[i] < 0)),
                                             "sq %d: %g decoded as %g (block max %g)", sq, x[i], y[i], amax);
                else if (sq) CHECKF(y[i] > 0 && d <= 2 * floor, "v %g decoded as %g", x[i], y[i]);
                else CHECKF(fabs(y[i]) <= 2 * floor, "m %g decoded as %g", x[i], y[i]);
            }
        }
    }
}

/* Rounding up with the dropped bits' probability: the mean over steps' streams is the
 * value, where round-to-nearest would always give the same code. */
TEST(q8_rounding_is_unbiased)
{
    float x[K_Q8_BLOCK], y[K_Q8_BLOCK];
    uint8_t c[K_Q8_BLOCK];
    int8_t s;
    for (int sq = 0; sq < 2; sq++) {
        for (int i = 0; i < K_Q8_BLOCK; i++) x[i] = 1.0f + (float)i / K_Q8_BLOCK; /* 1..2: between codes */
        x[0] = 4.0f;                                                                /* the scale */
        double sum[K_Q8_BLOCK] = {0};
        int T = 4000;
        for (int t = 0; t < T; t++) {
            k_q8_encode(K_Q8_BLOCK, x, c, &s, sq, 0, (uint32_t)t);
            k_q8_decode(K_Q8_BLOCK, c, &s, sq, y);
            for (int i = 1; i < K_Q8_BLOCK; i++) sum[i] += sq ? sqrt(y[i]) : y[i];
        }
        for (int i = 1; i < K_Q8_BLOCK; i += 17) {
            double want = sq ? sqrt(x[i]) : x[i], mean = sum[i] / T;
            CHECKF(fabs(mean - want) < 0.004 * want, "sq %d: %g averages %g over %d streams", sq, want, mean, T);
        }
    }
}

TEST(adam8_step_is_decode_adam_encode_on_any_threads)
{
    enum { M = 70000 }; /* several threads' worth of blocks and a tail */
    float *p = malloc(M * 4 * sizeof(float)), *g = p + M, *tm = g + M, *tv = tm + M;
    uint8_t *m = malloc(M * 4), *v = m + M, *m1 = v + M, *v1 = m1 + M;
    float *p1 = malloc(M * sizeof(float));
    int nb = (M + K_Q8_BLOCK - 1) / K_Q8_BLOCK;
    int8_t *sc = malloc((size_t)nb * 4), *sm = sc, *sv = sc + nb, *sm1 = sv + nb, *sv1 = sm1 + nb;
    if (!p || !m || !p1 || !sc) return;
    fill(p, M, 3, 0);
    fill(g, M, 4, 0);
    fill(tm, M, 5, 0);
    fill(tv, M, 6, 1);
    k_q8_encode(M, tm, m, sm, 0, 0, 1);
    k_q8_encode(M, tv, v, sv, 1, 0, 1);
    memcpy(p1, p, M * sizeof(float));
    memcpy(m1, m, 2 * M);
    memcpy(sm1, sm, 2 * (size_t)nb);
    k_adam_cfg c = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step_size = 1e-3f,
                    .bc2_sqrt = 0.3f, .decay_mul = 0.9999f, .decoupled = 1};
    /* the reference: decode, the scalar Adam, encode */
    k_q8_decode_ref(M, m1, sm1, 0, tm);
    k_q8_decode_ref(M, v1, sv1, 1, tv);
    k_adam_step_ref(M, &c, p1, g, tm, tv);
    k_q8_encode_ref(M, tm, m1, sm1, 0, 100, 2);
    k_q8_encode_ref(M, tv, v1, sv1, 1, 100, 2);
    for (int th = 1; th <= 3; th += 2) {
        float *pp = malloc(M * sizeof(float));
        uint8_t *mm = malloc(2 * M);
        int8_t *ss = malloc(2 * (size_t)nb);
        if (!pp || !mm || !ss) return;
        memcpy(pp, p, M * sizeof(float));
        memcpy(mm, m, 2 * M);
        memcpy(ss, sm, 2 * (size_t)nb);
        k_set_threads(th);
        k_adam8_step(M, &c, pp, g, mm, mm + M, ss, ss + nb, 100, 2);
        k_set_threads(1);
        CHECKF(!memcmp(pp, p1, M * sizeof(float)), "%d threads: parameters differ from the reference", th);
        CHECKF(!memcmp(mm, m1, 2 * M) && !memcmp(ss, sm1, 2 * (size_t)nb), "%d threads: state differs", th);
        free(pp), free(mm), free(ss);
    }
    free(p), free(m), free(p1), free(sc);
}
