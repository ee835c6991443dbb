/* CPU feature detection: one detector for kernels and transport (see rt/isa.h). */
#include "rt/isa.h"
#include "rt/env.h"
#include "rt/log.h"
#include <string.h>

/* In level order; test_rt checks that they join to RT_ISA_CHOICES. */
static const char *const names[RT_NISA] = {"generic", "avx2", "avx512", "avx512bf16"};
static int isa_best = -1, isa_env = -1;

static int detect(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")))
        return RT_ISA_GENERIC;
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))) return RT_ISA_AVX2;
    if (!(__builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
          __builtin_cpu_supports("avx512vbmi2")))
        return RT_ISA_AVX512;
    return RT_ISA_AVX512BF16;
#else
    return RT_ISA_GENERIC;
#endif
}

const char *rt_isa_name(int isa) { return isa >= 0 && isa < RT_NISA ? names[isa] : "?"; }

int rt_isa_parse(const char *name)
{
    for (int i = 0; name && i < RT_NISA; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

/* Both chosen once; a racy first call from two threads computes the same values
 * (and at worst warns twice). */
int rt_isa_best(void)
{
    int b = __atomic_load_n(&isa_best, __ATOMIC_RELAXED);
    if (b < 0) __atomic_store_n(&isa_best, b = detect(), __ATOMIC_RELAXED);
    return b;
}

int rt_isa_env(void)
{
    int lvl = __atomic_load_n(&isa_env, __ATOMIC_RELAXED);
    if (lvl >= 0) return lvl;
    lvl = rt_isa_best();
    const char *e = rt_env_str(RT_ENV_ISA);
    if (e) {
        int want = rt_isa_parse(e);
        if (want < 0)
            rt_warn("DDPRT_ISA=%s: expected one of %s; using %s", e, RT_ISA_CHOICES, rt_isa_name(lvl));
        else if (want > lvl)
            rt_warn("DDPRT_ISA=%s: this CPU lacks it; using %s", e, rt_isa_name(lvl));
        else
            lvl = want;
    }
    __atomic_store_n(&isa_env, lvl, __ATOMIC_RELAXED);
    return lvl;
}
