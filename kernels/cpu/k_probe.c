/* The machine's own limits, measured the way the kernel tables are timed (the calling
 * thread's CPU time, so a busy shared machine preempting us does not count):
 *   FMA peak: 10 independent multiply-add chains in the vector width of the ISA in
 *             use (vfmadd on AVX2 / AVX-512; on the generic path SSE2 mul + add, kv_fma:
 *             before the template it was scalar, a quarter of that), enough to
 *             cover two FMA pipes' latency on every x86-64 so far. The best of a few
 *             short runs: a boosting clock makes the peak, not the average.
 *   bf16 peak: the same with vdpbf16ps (16 lanes x 2 multiply-adds); on Sapphire
 *             Rapids half the FMA peak, on Zen 4 twice it.
 *   copy:     one buffer copied to another of the same size with the ISA's plain
 *             vector loads and stores (what the memory-bound kernels use; no streaming
 *             stores), bytes read + written per second, median of a few runs.
 * ddprt-bench-kernels prints every rate as a share of these. */
#include "kernels/k.h"
#include "kernels/cpu/k_int.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define K_PROBE_X86 1
#endif

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* a = a*x + y converges to y/(1-x) = 1: no overflow, no denormals. The chains and the
 * copy per ISA level: k_probe_simd.h (chains, copy). */
#define CH10(OP) OP(a0) OP(a1) OP(a2) OP(a3) OP(a4) OP(a5) OP(a6) OP(a7) OP(a8) OP(a9)
#define RT_ISA_TEMPLATE "kernels/cpu/k_probe_simd.h"
#include "rt/isa_each.h"

#ifdef K_PROBE_X86
/* a += 1*0 + 1*0 (bf16 pairs of 1.0 and 0): exact, no denormals. vdpbf16ps has no level
 * in rt/isa_each.h: one target, as the bf16 kernels (k_bf16_simd.h). */
__attribute__((target("avx512f,avx512bf16"))) static double chains_bf16(long it)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_setzero_si512();
#define FB(a) a = _mm512_dpbf16_ps(a, x, y); __asm__("" : "+v"(a));
    for (long i = 0; i < it; i++) { CH10(FB) }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(_mm512_add_ps(a6, a7), _mm512_add_ps(a8, a9))));
    return _mm512_reduce_add_ps(s);
}
#endif

double k_probe_bf16_gflops(void)
{
    double best = 0, sink = 0;
#ifdef K_PROBE_X86
    if (!k_isa_bf16()) return 0;
    long it = 12500000L / 2;
    for (int r = 0; r < 5; r++) {
        double t0 = cpu_now();
        sink += chains_bf16(it);
        double t = cpu_now() - t0, g = t > 0 ? 4.0 * 10 * 16 * it / t * 1e-9 : 0;
        if (g > best) best = g;
    }
#endif
    if (sink == 12345.0) best += 0;
    return best;
}

double k_probe_fma_gflops(void)
{
    int isa = k_isa_level(), lanes = 1;
    (void)RT_ISA_CALL(isa, chains, 1, &lanes);
    /* One run ~20 ms at 100 GFLOP/s. */
    long it = 12500000L * 8 / lanes;
    double best = 0, sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = cpu_now();
        sink += RT_ISA_CALL(isa, chains, it, &lanes);
        double t = cpu_now() - t0, g = t > 0 ? 2.0 * 10 * lanes * it / t * 1e-9 : 0;
        if (g > best) best = g;
    }
    if (sink == 12345.0) best += 0; /* keeps the results live */
    return best;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double k_probe_copy_gbps(size_t bytes)
{
    size_t n = bytes / sizeof(float);
    if (n < 64) n = 64;
    float *s = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64), *d = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!s || !d) {
        free(s);
        free(d);
        return 0;
    }
    memset(s, 0, n * sizeof(float));
    memset(d, 0, n * sizeof(float));
    int isa = k_isa_level(), reps = (int)((64u << 20) / (n * sizeof(float)));
    reps = reps < 1 ? 1 : reps > 4096 ? 4096 : reps;
    double t[7];
    for (int r = 0; r < 7; r++) {
        double t0 = cpu_now();
        for (int k = 0; k < reps; k++) {
            RT_ISA_CALL(isa, copy, d, s, n);
        }
        t[r] = (cpu_now() - t0) / reps;
    }
    qsort(t, 7, sizeof t[0], cmp_d);
    free(s);
    free(d);
    return t[3] > 0 ? 2.0 * n * sizeof(float) / t[3] * 1e-9 : 0;
}
