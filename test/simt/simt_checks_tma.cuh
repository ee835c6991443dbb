// t-simt-checks' TMA and mbarrier cases (test/simt/simt_tma.cc), included by
// simt_checks.cu: a tile copied by cp.async.bulk.tensor.2d and read back through its
// swizzle, two tiles fed to wgmma through swizzled descriptors (the TMA's swizzle and
// wgmma's must pair), and one kernel per misuse.
#include "kernels/cuda/k_cuda_tma.cuh"

// A 64-row box of BC = SW / 2 columns (64 without swizzle) at column c0, row c1 of a
// bf16 matrix, into a tile; every thread reads it back through the swizzle into out.
// BUG: 1 ldmatrix without the wait, 2 expect_tx 16 bytes too many, 3 destination 128
// bytes off the swizzle's pattern, 4 barrier never initialised, 5 a second copy into the
// tile before anyone waited for the first, 6 another thread arrives with no
// __syncthreads after the init, 7 the barrier completes 3 phases before the wait for
// parity 0, 8 an arrival too many.
template <int SW, int BUG> __global__ void tma_case(const K_GRID_CONST k_tmap map, int c0, int c1, float *out)
{
    const int BC = SW ? SW / 2 : 64, BYTES = 64 * BC * 2;
    __shared__ __attribute__((aligned(1024))) unsigned short tile[64 * 64 + 512];
    __shared__ __attribute__((aligned(8))) unsigned long long bar;
    int t = threadIdx.x;
    unsigned short *dst = BUG == 3 ? tile + 64 : tile;
    if (t == 0 && BUG != 4) K_MBAR_INIT(&bar, 1);
    if (BUG != 6) __syncthreads();
    if (t == (BUG == 6 ? 1 : 0)) {
        if (BUG == 8) K_MBAR_ARRIVE_TX(&bar, BYTES), K_MBAR_ARRIVE(&bar);
        else K_MBAR_ARRIVE_TX(&bar, BYTES + (BUG == 2 ? 16 : 0));
        K_TMA_LOAD_2D(dst, &map, c0, c1, &bar);
        if (BUG == 5) {
            K_MBAR_ARRIVE_TX(&bar, BYTES);
            K_TMA_LOAD_2D(dst, &map, c0, c1 + 1, &bar);
        }
        if (BUG == 7) K_MBAR_ARRIVE(&bar), K_MBAR_ARRIVE(&bar);
    }
    if (BUG == 1) {
        __syncthreads();
        unsigned r[4];
        K_LDMATRIX_X4(r, tile + (t % 32) * 64);
        out[t] = (float)r[0];
        return;
    }
    K_MBAR_WAIT(&bar, 0);
    for (int i = t; i < 64 * BC; i += blockDim.x) {
        int off = (i / BC) * BC * 2 + (i % BC) * 2;
        if (SW) off ^= ((off >> 7) & (SW / 16 - 1)) << 4;
        out[i] = rt_bf16_to_f32(dst[off / 2]);
    }
}

// wgmma m64n128k16 over K = SW / 2 from TMA tiles: A 64 x K, B 128 x K (K-major), both in
// the SW-byte swizzle; descriptors 32 bytes on per k16, 8 rows 8 SW bytes apart.
template <int SW> __global__ void tma_wgmma_case(const K_GRID_CONST k_tmap ma, const K_GRID_CONST k_tmap mb, float *out)
{
    const int K = SW / 2, swz = SW == 128 ? K_WGMMA_SW128 : SW == 64 ? K_WGMMA_SW64 : K_WGMMA_SW32;
    __shared__ __attribute__((aligned(1024))) unsigned short A[64 * 64], B[128 * 64];
    __shared__ __attribute__((aligned(8))) unsigned long long bar;
    int t = threadIdx.x;
    if (t == 0) K_MBAR_INIT(&bar, 1), K_FENCE_MBAR_INIT();
    __syncthreads();
    if (t == 0) {
        K_MBAR_ARRIVE_TX(&bar, (64 + 128) * K * 2);
        K_TMA_LOAD_2D(A, &ma, 0, 0, &bar);
        K_TMA_LOAD_2D(B, &mb, 0, 0, &bar);
    }
    K_MBAR_WAIT(&bar, 0);
    float d[64];
    for (int e = 0; e < 64; e++) d[e] = 0.0f;
    K_WGMMA_FENCE();
    for (int k = 0; k < K; k += 16)
        K_WGMMA_BF16_128(d, k_wgmma_desc((char *)A + 2 * k, 16, 8 * SW, swz), k_wgmma_desc((char *)B + 2 * k, 16, 8 * SW, swz),
                         1);
    K_WGMMA_COMMIT();
    K_WGMMA_WAIT(0);
    int w = (t & 127) >> 5, g = (t & 31) >> 2, q = t & 3;
    for (int e = 0; e < 64; e++) out[(16 * w + g + 8 * ((e >> 1) & 1)) * 128 + 8 * (e >> 2) + 2 * q + (e & 1)] = d[e];
}

// Dynamic shared memory (K_DYN_SHARED): 64 KiB, NaN before the block; each thread
// writes its words and reads its neighbour's after a barrier.
__global__ void dyn_case(float *out)
{
    K_DYN_SHARED(float, sh);
    int t = threadIdx.x, n = 64 * 1024 / 4;
    out[0] = sh[n - 1]; // (thread order: any thread's read before the writes) NaN
    __syncthreads();
    for (int i = t; i < n; i += blockDim.x) sh[i] = (float)i;
    __syncthreads();
    out[1 + t] = sh[(t * 97 + 5) % n] - (float)((t * 97 + 5) % n);
}

// A rows x cols bf16 matrix on the device, ld elements apart: element (r, c) is v(r, c).
static float tma_v(int r, int c) { return (float)(((r * 37 + c * 11) % 97) - 48) / 8.0f; }
static unsigned short *tma_matrix(int rows, int cols, int ld)
{
    unsigned short *h = (unsigned short *)calloc((size_t)rows * ld, 2), *g;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) h[(size_t)r * ld + c] = rt_f32_to_bf16(tma_v(r, c));
    if (cudaMalloc((void **)&g, (size_t)rows * ld * 2) || cudaMemcpy(g, h, (size_t)rows * ld * 2, cudaMemcpyHostToDevice))
        exit(2);
    free(h);
    bufs[nbufs++] = (float *)g;
    return g;
}

// Case names tma_* and mbar_*: 0 done (its report and result printed), 1 unknown.
static int tma_cases(const char *c, float *d)
{
    const int rows = 80, cols = 100, ld = 104; // 208-byte rows: the stride is a multiple of 16
    unsigned short *g = tma_matrix(rows, cols, ld);
    k_tmap m64, m128, m0;
    const char *why;
    if (k_tmap_encode_2d(&m64, g, rows, cols, ld, 32, 64, 64, &why) ||
        k_tmap_encode_2d(&m128, g, rows, cols, ld, 64, 64, 128, &why) ||
        k_tmap_encode_2d(&m0, g, rows, cols, ld, 64, 64, 0, &why)) {
        printf("report: encode: %s\n", why);
        return 0;
    }
    int c0 = 50, c1 = 30, sw = 0; // the box runs past the last row and column: zeros there
    if (!strcmp(c, "tma_encode")) {
        k_tmap m;
        printf("report: encode misaligned: %s\n", k_tmap_encode_2d(&m, g + 1, rows, cols, ld, 64, 64, 128, &why) ? why : "ok");
        printf("report: encode stride: %s\n", k_tmap_encode_2d(&m, g, rows, cols, 100, 64, 64, 128, &why) ? why : "ok");
        printf("report: encode box: %s\n", k_tmap_encode_2d(&m, g, rows, cols, ld, 64, 300, 0, &why) ? why : "ok");
        printf("report: encode wide: %s\n", k_tmap_encode_2d(&m, g, rows, cols, ld, 128, 64, 128, &why) ? why : "ok");
        return 0;
    }
    if (!strcmp(c, "dyn_shared")) { // over 48 KiB refused until the kernel's limit is raised
        SIMT_LAUNCH(dyn_case, 1, 64, 64 * 1024, 0)(d);
        report();
        printf("report: attribute %d\n", (int)cudaFuncSetAttribute(dyn_case, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                    64 * 1024));
        SIMT_LAUNCH(dyn_case, 1, 64, 64 * 1024, 0)(d);
        report();
        float h[65];
        if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost)) return 0;
        int bad = h[0] == h[0];
        for (int i = 1; i < 65; i++) bad += h[i] != 0.0f;
        printf("result: dynamic shared memory %d wrong\n", bad);
        return 0;
    }
    if (!strcmp(c, "tma_ok_sw128")) SIMT_LAUNCH((tma_case<128, 0>), 1, 128, 0, 0)(m128, c0, c1, d), sw = 128;
    else if (!strcmp(c, "tma_ok_sw64")) SIMT_LAUNCH((tma_case<64, 0>), 1, 128, 0, 0)(m64, c0, c1, d), sw = 64;
    else if (!strcmp(c, "tma_ok_noswz")) SIMT_LAUNCH((tma_case<0, 0>), 1, 128, 0, 0)(m0, c0, c1, d);
    else if (!strcmp(c, "tma_no_wait")) SIMT_LAUNCH((tma_case<128, 1>), 1, 128, 0, 0)(m128, c0, c1, d);
    else if (!strcmp(c, "tma_expect_tx_wrong")) SIMT_LAUNCH((tma_case<128, 2>), 1, 128, 0, 0)(m128, c0, c1, d);
    else if (!strcmp(c, "tma_misaligned")) SIMT_LAUNCH((tma_case<128, 3>), 1, 128, 0, 0)(m128, c0, c1, d);
    else if (!strcmp(c, "mbar_uninit")) SIMT_LAUNCH((tma_case<128, 4>), 1, 128, 0, 0)(m128, c0, c1, d);
    else if (!strcmp(c, "tma_overwrite_unwaited")) SIMT_LAUNCH((tma_case<128, 5>), 1, 128, 0, 0)(m128, c0, c1, d);
    else if (!strcmp(c, "mbar_init_no_sync")) SIMT_LAUNCH((tma_case<128, 6>), 1, 128, 0, 0)(m128, c0, c1, d);
    else if (!strcmp(c, "mbar_phase_skipped")) SIMT_LAUNCH((tma_case<128, 7>), 1, 128, 0, 0)(m128, c0, c1, d);
    else if (!strcmp(c, "mbar_extra_arrive")) SIMT_LAUNCH((tma_case<128, 8>), 1, 128, 0, 0)(m128, c0, c1, d);
    else if (!strncmp(c, "tma_wgmma_sw", 12)) {
        int w = atoi(c + 12), K = w / 2;
        unsigned short *a = tma_matrix(64, K, K), *b = tma_matrix(128, K, K);
        k_tmap ma, mb;
        if (k_tmap_encode_2d(&ma, a, 64, K, K, K, 64, w, &why) || k_tmap_encode_2d(&mb, b, 128, K, K, K, 128, w, &why)) {
            printf("report: encode: %s\n", why);
            return 0;
        }
        float *o = dev(64 * 128), *h = (float *)malloc(64 * 128 * sizeof(float));
        if (w == 128) SIMT_LAUNCH(tma_wgmma_case<128>, 1, 128, 0, 0)(ma, mb, o);
        else if (w == 64) SIMT_LAUNCH(tma_wgmma_case<64>, 1, 128, 0, 0)(ma, mb, o);
        else return 1;
        report();
        if (cudaMemcpy(h, o, 64 * 128 * sizeof(float), cudaMemcpyDeviceToHost)) return 0;
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < 128; n++) {
                double s = 0;
                for (int k = 0; k < K; k++) s += (double)tma_v(m, k) * tma_v(n, k);
                if (fabs(h[m * 128 + n] - s) > 1e-5 * (1 + fabs(s))) {
                    printf("result: D[%d][%d] is %g, the product %g\n", m, n, h[m * 128 + n], s);
                    return 0;
                }
            }
        printf("result: tma wgmma ok\n");
        free(h);
        return 0;
    } else return 1;
    report();
    if (strncmp(c, "tma_ok", 6)) return 0;
    int bc = sw ? sw / 2 : 64, bad = 0;
    float *h = (float *)malloc(64 * 64 * sizeof(float));
    if (cudaMemcpy(h, d, 64 * bc * sizeof(float), cudaMemcpyDeviceToHost)) return 0;
    for (int r = 0; r < 64; r++)
        for (int e = 0; e < bc; e++) {
            int gr = c1 + r, gc = c0 + e;
            float want = gr < rows && gc < cols ? tma_v(gr, gc) : 0.0f;
            bad += h[r * bc + e] != want;
        }
    printf("result: tma tile %d of %d wrong\n", bad, 64 * bc);
    free(h);
    return 0;
}

// setmaxnreg (test/simt/simt_regs.cc): warpgroup 0 (the producer's) gives registers away,
// warpgroups 1 and 2 take them: 384 threads at 168 registers (64K / 384 down to a multiple
// of 8), 40 + 2 x 232 = 504 = 3 x 168. BUG: 1 the consumers ask for 240 (more than the
// pool ever holds), 2 a count not a multiple of 8, 3 dec raising a count, 4 two warps of
// warpgroup 0 alone (the others exited), 5 inc lowering a count.
template <int BUG> __global__ void __launch_bounds__(384) setmaxnreg_case(float *out)
{
    int t = threadIdx.x, wg = t / 128;
    if (wg == 0) {
        if (BUG == 4 && t >= 64) return;
        if (BUG == 3) K_SETMAXNREG_DEC(176);
        else K_SETMAXNREG_DEC(40);
    } else if (BUG == 1) K_SETMAXNREG_INC(240);
    else if (BUG == 2) K_SETMAXNREG_INC(228);
    else if (BUG == 5) K_SETMAXNREG_INC(160);
    else K_SETMAXNREG_INC(232);
    out[t] = (float)wg;
}

// Case names setmaxnreg_*: 0 done, 1 unknown.
static int setmaxnreg_cases(const char *c, float *d)
{
    static const char *names[] = {"setmaxnreg_ok", "setmaxnreg_pool", "setmaxnreg_count", "setmaxnreg_dec_raises",
                                  "setmaxnreg_partial", "setmaxnreg_inc_lowers"};
    int bug = -1;
    for (int i = 0; i < 6; i++)
        if (!strcmp(c, names[i])) bug = i;
    switch (bug) {
    case 0: SIMT_LAUNCH(setmaxnreg_case<0>, 1, 384, 0, 0)(d); break;
    case 1: SIMT_LAUNCH(setmaxnreg_case<1>, 1, 384, 0, 0)(d); break;
    case 2: SIMT_LAUNCH(setmaxnreg_case<2>, 1, 384, 0, 0)(d); break;
    case 3: SIMT_LAUNCH(setmaxnreg_case<3>, 1, 384, 0, 0)(d); break;
    case 4: SIMT_LAUNCH(setmaxnreg_case<4>, 1, 384, 0, 0)(d); break;
    case 5: SIMT_LAUNCH(setmaxnreg_case<5>, 1, 384, 0, 0)(d); break;
    default: return 1;
    }
    report();
    if (bug) return 0;
    float h[384];
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost)) return 0;
    int bad = 0;
    for (int i = 0; i < 384; i++) bad += h[i] != (float)(i / 128);
    printf("result: setmaxnreg %d wrong\n", bad);
    return 0;
}
