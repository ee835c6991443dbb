/* nn_fold with row-sparse stretches (--invariant's fold of embedding gradients) gives
 * the dense fold's bits: random shards whose unmarked rows are +0 (marked rows hold
 * values, -0 among them), trees 2x3 and 2x2x2, fp32 and bf16, several steps (so the
 * levels' buffers hold stale rows), the last shard pushed in slices that cut rows. */
#include "nn/vshard.h"
#include "transport/tp_reduce.h"
#include "test/t.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N 1400
static const size_t S0 = 100, R0 = 40, L0 = 7; /* stretch 0: rows 40 x 7 from 100 */
static const size_t S1 = 700, R1 = 60, L1 = 5; /* stretch 1: rows 60 x 5 from 700 */

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static float value(void)
{
    uint32_t r = next() % 16;
    return r == 0 ? -0.0f : r == 1 ? 0.0f : ((float)(next() % 20001) - 10000.0f) / 97.0f;
}

/* A shard: dense values outside the stretches; in them, marked rows random (a quarter). */
static void shard(float *x, unsigned char *nz0, unsigned char *nz1)
{
    for (size_t i = 0; i < N; i++) x[i] = value();
    const size_t off[2] = {S0, S1}, rows[2] = {R0, R1}, len[2] = {L0, L1};
    unsigned char *nz[2] = {nz0, nz1};
    for (int k = 0; k < 2; k++)
        for (size_t r = 0; r < rows[k]; r++) {
            nz[k][r] = next() % 4 == 0;
            for (size_t e = 0; e < len[k]; e++)
                if (!nz[k][r]) x[off[k] + r * len[k] + e] = 0.0f;
        }
}

static void to_wire(rt_dtype dt, const float *x, void *w)
{
    if (dt == RT_F32) memcpy(w, x, N * sizeof(float));
    else tp_f32_to_half(w, x, N, dt);
}

static void fold_case(const int *radix, int nlev, rt_dtype dt)
{
    size_t es = rt_dtype_size(dt);
    nn_fold dense = {.nlev = nlev, .dt = dt, .n = N}, sparse = dense;
    memcpy(dense.radix, radix, sizeof(int) * (size_t)nlev);
    memcpy(sparse.radix, radix, sizeof(int) * (size_t)nlev);
    static unsigned char nz0[64], nz1[64];
    nn_fold_rows sp[2] = {{.off = S0, .rows = R0, .len = L0, .nz = nz0}, {.off = S1, .rows = R1, .len = L1, .nz = nz1}};
    for (int l = 0; l < nlev; l++) {
        dense.acc[l] = calloc(N, es), sparse.acc[l] = calloc(N, es);
        sp[0].acc_nz[l] = calloc(R0, 1), sp[1].acc_nz[l] = calloc(R1, 1);
    }
    sparse.sp = sp, sparse.nsp = 2;
    int m = nn_fold_shards(&dense);
    static float x[N];
    static unsigned char a[N * 4], b[N * 4];
    for (int step = 0; step < 4; step++) {
        for (int i = 0; i < m; i++) {
            shard(x, nz0, nz1);
            to_wire(dt, x, a);
            to_wire(dt, x, b);
            if (i < m - 1) {
                CHECK(nn_fold_push(&dense, i, a, 0, N, a) == 0);
                CHECK(nn_fold_push(&sparse, i, b, 0, N, b) == 0);
                continue;
            }
            /* the last shard in slices of random sizes and order: each cuts rows */
            size_t cut[8] = {0, 0, 0, 0, 0, 0, 0, N};
            for (int c = 1; c < 7; c++) cut[c] = next() % N;
            for (int c = 1; c < 8; c++) /* sort */
                for (int e = c; e > 0 && cut[e] < cut[e - 1]; e--) {
                    size_t t = cut[e];
                    cut[e] = cut[e - 1], cut[e - 1] = t;
                }
            for (int c = 6; c >= 0; c--) {
                if (cut[c + 1] == cut[c]) continue;
                nn_fold_push(&dense, i, a, cut[c], cut[c + 1] - cut[c], a);
                nn_fold_push(&sparse, i, b, cut[c], cut[c + 1] - cut[c], b);
            }
            CHECKF(!memcmp(a, b, N * es), "tree of %d levels, radix0 %d, dtype size %zu, step %d: the sparse fold "
                   "differs from the dense one", nlev, radix[0], es, step);
        }
    }
    for (int l = 0; l < nlev; l++) {
        free(dense.acc[l]), free(sparse.acc[l]);
        free(sp[0].acc_nz[l]), free(sp[1].acc_nz[l]);
    }
}

TEST(fold_rows_sparse_equals_dense)
{
    const int r23[] = {2, 3}, r222[] = {2, 2, 2}, r3[] = {3};
    fold_case(r23, 2, RT_F32);
    fold_case(r222, 3, RT_F32);
    fold_case(r3, 1, RT_F32);
    fold_case(r222, 3, RT_BF16);
    fold_case(r23, 2, RT_F16);
}
