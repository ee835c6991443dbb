/* Helpers for the device suite: device buffers filled from host arrays, results copied
 * back, and comparisons against the CPU kernels. Every failure of the port is fatal to
 * the test with the port's message. The suite runs on a GPU (make test-gpu) and, in
 * make test, on the SIMT executor (test/simt; G_SIMT), which runs a GPU's threads one
 * at a time on the CPU: there the shapes that would take minutes shrink (G_BIG). */
#ifndef TEST_GPU_G_H
#define TEST_GPU_G_H
#include "kernels/cuda/k_cuda.h"
#include "rt/half.h"
#include "test/t.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DDPRT_SIMT
#define G_SIMT 1
#else
#define G_SIMT 0
#endif
/* n on a GPU, small on the executor (a batch, a channel count). */
#define G_BIG(n, small) (G_SIMT ? (small) : (n))

/* The trainer whose --device cuda is this device: ddprt-train, or t-train-simt (the
 * same program linked with the executor). */
static inline const char *g_train(void) { return t_prog(G_SIMT ? "t-train-simt" : "ddprt-train"); }

static inline void g_need(int ok, const char *what)
{
    if (!ok) {
        t_fail(__FILE__, __LINE__, "%s: %s (last kernel %s)", what, port_cuda_errmsg(), k_cuda_last_kernel());
        exit(1);
    }
}

static inline void g_init(void)
{
    char err[512];
    g_need(port_cuda_init(0, err, sizeof err) == 0, err);
}

/* The wgmma / TMA tests' start: the device up, and 1 on the executor and on an sm_90 GPU
 * (H100/H200), else 0 with the note that the test is skipped. */
static inline int g_sm90(void)
{
    g_init();
    if (G_SIMT || strstr(port_cuda_device_desc(), "(sm_90,")) return 1;
    t_note("skipped: wgmma needs an sm_90 GPU (H100/H200)");
    return 0;
}

/* wgmma on (DDPRT_WGMMA=1, no probe) for the products that follow. */
static inline void g_wgmma_on(void)
{
    char why[300];
    setenv("DDPRT_WGMMA", "1", 1);
    CHECKF(k_cuda_wgmma_setup(why, sizeof why) == 1 && k_cuda_wgmma_on(), "%s", why);
}

/* wgmma (and TMA) off again (DDPRT_WGMMA=0: mma.sync), the variable unset after. */
static inline void g_wgmma_off(void)
{
    char why[300];
    setenv("DDPRT_WGMMA", "0", 1);
    CHECKF(k_cuda_wgmma_setup(why, sizeof why) == 0 && !k_cuda_wgmma_on() && !k_cuda_tma_on() &&
           strstr(why, "DDPRT_WGMMA=0"), "%s", why);
    unsetenv("DDPRT_WGMMA");
}

/* fp32 to a 16-bit type's bits (K_CUDA_MM_BF16 or _F16) and back, as the kernels round. */
static inline uint16_t g_to16(int type, float f) { return type == K_CUDA_MM_BF16 ? rt_f32_to_bf16(f) : rt_f32_to_f16(f); }
static inline float g_from16(int type, uint16_t h) { return type == K_CUDA_MM_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h); }

/* The tensor-core GEMMs' reference: ref = A B (+ bias[n]) (ReLU) in double from 16-bit A
 * (m x k; k-contiguous where ak, else m-contiguous; lda) and B (k x n; k-contiguous where
 * bk; ldb), and mag = sum |a b| (+ |bias|): the bound's scale. */
static inline void g_ref_gemm16(int type, const uint16_t *a, int lda, int ak, const uint16_t *b, int ldb, int bk,
                                int m, int n, int k, const float *bias, int relu, float *ref, double *mag)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, s_abs = 0;
            for (int q = 0; q < k; q++) {
                double p = (double)g_from16(type, a[ak ? (size_t)i * lda + q : (size_t)q * lda + i]) *
                           g_from16(type, b[bk ? (size_t)j * ldb + q : (size_t)q * ldb + j]);
                s += p, s_abs += fabs(p);
            }
            float v = (float)s + (bias ? bias[j] : 0.0f);
            ref[(size_t)i * n + j] = relu && v < 0 ? 0.0f : v;
            mag[(size_t)i * n + j] = s_abs + (bias ? fabs(bias[j]) : 0);
        }
}

static inline void *g_dev(size_t bytes)
{
    void *p;
    g_need(port_dev_malloc(&p, bytes, "test buffer") == 0, "cudaMalloc");
    return p;
}

static inline void *g_up(const void *h, size_t bytes)
{
    void *d = g_dev(bytes);
    g_need(port_memcpy_h2d(d, h, bytes, NULL, "upload") == 0 && port_stream_sync(NULL, "upload") == 0, "upload");
    return d;
}

static inline void g_down(void *h, const void *d, size_t bytes)
{
    g_need(port_memcpy_d2h(h, d, bytes, NULL, "download") == 0 && port_stream_sync(NULL, "download") == 0,
           "download");
}

static inline float *g_rand(size_t n, unsigned seed)
{
    float *p = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) p[i] = 2.0f * k_rand_uniform(seed, i) - 1.0f;
    return p;
}

/* Largest |a - b| relative to the largest |b| (1 when b is all zeros). */
static inline double g_relerr(const float *a, const float *b, size_t n)
{
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > e || d != d) e = d != d ? INFINITY : d;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / (m > 0 ? m : 1);
}

static inline size_t g_ndiff(const void *a, const void *b, size_t n, size_t esz)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp((const char *)a + i * esz, (const char *)b + i * esz, esz) != 0;
    return k;
}

/* Two tensor-core paths' fp32 results from the same rounded operands, the same k16 steps
 * in the same order (wgmma against mma.sync, TMA against cp.async): on the executor, which
 * rounds once a k16 step in both, the same bits (how many differ); on a GPU the units may
 * round their inner sums otherwise (not documented), so there: how many differ by more
 * than 2^-16 of b's largest value (the start-up probes' bound is 1e-5). */
static inline size_t g_ndiff_tc(const float *a, const float *b, size_t n)
{
    if (G_SIMT) return g_ndiff(a, b, n, 4);
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(b[i]) > m ? fabs(b[i]) : m;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += !(fabs((double)a[i] - b[i]) <= 0x1p-16 * m);
    return k;
}

/* g_ndiff, but two NaNs are equal whatever their bits (fmt 'f' f32, 'h' f16, 'b' bf16):
 * a GPU's float unit returns its canonical NaN (0x7fffffff) where x86 keeps the first
 * NaN operand's payload, so a kernel that lets NaN through matches the CPU only up to
 * which NaN. Where neither side is NaN the bits must agree. */
static inline int g_isnan_bits(const void *p, char fmt)
{
    uint32_t u = 0;
    memcpy(&u, p, fmt == 'f' ? 4 : 2);
    return fmt == 'f' ? (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)
         : fmt == 'h' ? (u & 0x7c00u) == 0x7c00u && (u & 0x03ffu)
                      : (u & 0x7f80u) == 0x7f80u && (u & 0x007fu);
}
static inline size_t g_ndiff_nan(const void *a, const void *b, size_t n, char fmt)
{
    size_t esz = fmt == 'f' ? 4 : 2, k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *x = (const char *)a + i * esz, *y = (const char *)b + i * esz;
        k += memcmp(x, y, esz) != 0 && !(g_isnan_bits(x, fmt) && g_isnan_bits(y, fmt));
    }
    return k;
}

/* Device copy of the result of a kernel into a fresh host array. */
static inline float *g_result(const float *d, size_t n)
{
    float *h = malloc(n * sizeof(float) + 4);
    g_down(h, d, n * sizeof(float));
    return h;
}

/* The tensor-core tests' names and device helpers (test_gpu_tc_*.c). */
static inline const char *g_tn(int t) { return t == K_CUDA_MM_BF16 ? "bf16" : "f16"; }

/* d (n fp32 values on the device) rounded to t's 16 bits by the graph's cast kernel. */
static inline uint16_t *g_dev16(int t, const float *d, size_t n)
{
    uint16_t *h = g_dev(n * 2 + 16);
    int rc = t == K_CUDA_MM_BF16 ? k_cuda_f32_to_bf16(n, d, h, NULL) : k_cuda_f32_to_f16(n, d, h, NULL);
    g_need(rc == 0 && port_stream_sync(NULL, "cast") == 0, "cast to 16 bits");
    return h;
}

/* How many of two device arrays' n fp32 values differ in any bit. */
static inline size_t g_ndiff_dev(const float *a, const float *b, size_t n)
{
    float *x = g_result(a, n), *y = g_result(b, n);
    size_t k = g_ndiff(x, y, n, 4);
    free(x), free(y);
    return k;
}

#if DDPRT_SIMT
unsigned long long simt_cp_async_count(void); /* test/simt/simt_tc.cc */
/* The executor's count once the launches so far have run (they run on a stream's thread). */
static inline unsigned long long g_cp_count(void)
{
    g_need(port_stream_sync(NULL, "cp.async count") == 0, "sync");
    return simt_cp_async_count();
}
unsigned long long simt_tma_count(void); /* test/simt/simt_tma.cc */
#endif
/* TMA copies so far, once the launches have run (0 on a GPU: not counted there). */
static inline unsigned long long g_tma_count(void)
{
#if DDPRT_SIMT
    g_need(port_stream_sync(NULL, "TMA count") == 0, "sync");
    return simt_tma_count();
#else
    return 0;
#endif
}
#if DDPRT_SIMT
/* cp.async copies a 64-tile product (M or N under 128, no split over k) issues for its
 * one 16-bit operand: 64 rows x 4 chunks a 32-deep slice, every block. */
static inline unsigned long long g_cp_expect(int M, int N, int K)
{
    return 256ull * (unsigned long long)((M + 63) / 64) * ((N + 63) / 64) * ((K + 31) / 32);
}
#endif

static inline int g_run(const char *cmd, char *out, size_t len)
{
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return (st & 0x7f) == 0 ? (st >> 8) & 0xff : -1;
}

/* The trainer's loss lines of two runs agree to tol (relative): how many were compared,
 * or -1 with the first that does not in why. */
static inline int g_same_losses(const char *a, const char *b, double tol, char *why, size_t len)
{
    int steps = 0;
    for (;;) {
        const char *x = strstr(a, "Loss: "), *y = strstr(b, "Loss: ");
        if (!x || !y) return steps;
        double la = atof(x + 6), lb = atof(y + 6);
        if (!(fabs(la - lb) <= tol * (1 + fabs(lb)))) {
            snprintf(why, len, "step %d: loss %.6f vs %.6f", steps, la, lb);
            return -1;
        }
        a = x + 1, b = y + 1, steps++;
    }
}
#endif
