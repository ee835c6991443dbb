/* The FMA-peak chains and the plain vector copy of k_probe.c, a template of
 * rt/isa_each.h on k_kv.h's vectors (the loads, stores and kv_fma the kernels use: an
 * FMA on AVX2/AVX-512, a multiply and an add on the generic level). No header guard:
 * included once per level. */
#include "kernels/cpu/k_kv.h"

/* the chain's register stays a real dependency the compiler cannot fold or reorder */
#if ISA_X86 && ISA_VB == 64
#define KP_KEEP(a) __asm__("" : "+v"(a))
#elif ISA_X86
#define KP_KEEP(a) __asm__("" : "+x"(a))
#else
#define KP_KEEP(a) __asm__("" : "+g"(a))
#endif

/* 10 chains a = a*x + y over KV_W lanes (*lanes); returns lane 0 of their sum (keeps
 * them live). */
static ISA_TARGET double ISA_FN(chains)(long it, int *lanes)
{
    *lanes = KV_W;
    kv a0 = kv_zero(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
    kv x = kv_set1(0.999999f), y = kv_set1(1e-6f);
#define KP_STEP(a) a = kv_fma(a, x, y); KP_KEEP(a);
    for (long i = 0; i < it; i++) { CH10(KP_STEP) }
#undef KP_STEP
    kv s = kv_add(kv_add(kv_add(a0, a1), kv_add(a2, a3)),
                  kv_add(kv_add(a4, a5), kv_add(kv_add(a6, a7), kv_add(a8, a9))));
    float t[KV_W];
    kv_store(t, s);
    return t[0];
}

/* d = s, four vectors a step, then the tail element by element (the asm keeps GCC from
 * turning the loop into memcpy, whose large copies use streaming stores no kernel uses) */
static ISA_TARGET void ISA_FN(copy)(float *d, const float *s, size_t n)
{
    size_t i = 0;
    for (; i + 4 * KV_W <= n; i += 4 * KV_W) {
        kv v0 = kv_load(s + i), v1 = kv_load(s + i + KV_W), v2 = kv_load(s + i + 2 * KV_W),
           v3 = kv_load(s + i + 3 * KV_W);
        kv_store(d + i, v0);
        kv_store(d + i + KV_W, v1);
        kv_store(d + i + 2 * KV_W, v2);
        kv_store(d + i + 3 * KV_W, v3);
        __asm__("" ::: "memory");
    }
    for (; i < n; i++) {
        d[i] = s[i];
        __asm__("" ::: "memory");
    }
}

#undef KP_KEEP
#include "kernels/cpu/k_kv_undef.h"
