/* The kernels' settings (kernels/k.h: k_settings): the one copy in force. A program
 * builds a k_settings (the trainer from its options, a benchmark from its flags) and
 * applies it as a whole; the kernels read the fields here and nowhere else. A field
 * left at -1 takes its environment variable's value (DDPRT_ISA, DDPRT_CONV,
 * DDPRT_BF16_GEMM) when first read, so tests and embedders that apply nothing get
 * what the environment asks for. The single-field setters below serve tests and
 * benchmarks that switch one path. */
#include "kernels/k.h"
#include "kernels/cpu/k_int.h"
#include "rt/env.h"
#include "rt/isa.h"
#include <stdio.h>
#include <string.h>

static const char *const conv_names[] = {"auto", "direct", "winograd", "winograd4", "winograd4c", NULL};
static const char *const gemm_names[] = {"auto", "dpbf16", "fma", "amx", NULL};
static const char *const precision_names[] = {"highest", "high", NULL};

/* In force: -1 = not read from the environment yet. Relaxed atomics: a field changes
 * only between kernels (k.h: not thread-safe with kernels running). */
static struct {
    _Atomic int isa, conv_algo, bf16_gemm, matmul_high;
} cur = {-1, -1, -1, 0};

static int name_index(const char *const *names, const char *name)
{
    for (int i = 0; name && names[i]; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

int k_conv_algo_parse(const char *name) { return name_index(conv_names, name); }
int k_bf16_gemm_parse(const char *name) { return name_index(gemm_names, name); }
int k_matmul_precision_parse(const char *name) { return name ? name_index(precision_names, name) : 0; }
const char *k_conv_algo_name(int a) { return a >= 0 && a < 5 ? conv_names[a] : "?"; }

void k_settings_default(k_settings *s)
{
    *s = (k_settings){.threads = 1, .isa = rt_isa_env(), .conv_algo = rt_env_choice(RT_ENV_CONV, 0),
                      .bf16_gemm = rt_env_choice(RT_ENV_BF16_GEMM, 0), .matmul_high = 0};
}

int k_settings_apply(const k_settings *s, char *err, size_t errlen)
{
    if (s->isa > rt_isa_best() || s->isa < -1) {
        snprintf(err, errlen, "kernels: ISA level %s is not supported by this CPU (best: %s)", rt_isa_name(s->isa),
                 rt_isa_name(rt_isa_best()));
        return -1;
    }
    if (s->conv_algo < -1 || s->conv_algo > 4 || s->bf16_gemm < -1 || s->bf16_gemm > 3 || s->matmul_high < 0 ||
        s->matmul_high > 1) {
        snprintf(err, errlen, "kernels: a setting is out of range (conv algorithm %d, bf16 GEMM %d, matmul "
                 "precision %d)", s->conv_algo, s->bf16_gemm, s->matmul_high);
        return -1;
    }
    k_set_threads(s->threads);
    cur.isa = s->isa;
    cur.conv_algo = s->conv_algo;
    cur.bf16_gemm = s->bf16_gemm;
    cur.matmul_high = s->matmul_high;
    return 0;
}

k_settings k_settings_now(void)
{
    return (k_settings){.threads = k_threads(), .isa = k_isa_raw(), .conv_algo = k_conv_algo_now(),
                        .bf16_gemm = k_bf16_gemm_now(), .matmul_high = cur.matmul_high};
}

/* ---- what the kernels read */
int k_isa_raw(void)
{
    int l = cur.isa;
    return l >= 0 ? l : (cur.isa = rt_isa_env());
}

/* The ISA: rt/isa.c's level (detected once, DDPRT_ISA may lower it) unless the settings
 * pick another. "avx512bf16" is the AVX-512 path plus vdpbf16ps for the bf16 (--amp)
 * kernels; the fp32 kernels see it as avx512 (k_isa_level), so naming avx512 only turns
 * bf16's native path off. */
int k_isa_level(void)
{
    int l = k_isa_raw();
    return l > K_ISA_AVX512 ? K_ISA_AVX512 : l;
}
int k_isa_bf16(void) { return k_isa_raw() == K_ISA_AVX512BF16; }
const char *k_isa(void) { return rt_isa_name(k_isa_raw()); }

int k_conv_algo_now(void)
{
    int a = cur.conv_algo;
    return a >= 0 ? a : (cur.conv_algo = rt_env_choice(RT_ENV_CONV, 0));
}

int k_bf16_gemm_now(void)
{
    int f = cur.bf16_gemm;
    return f >= 0 ? f : (cur.bf16_gemm = rt_env_choice(RT_ENV_BF16_GEMM, 0));
}

int k_matmul_high_now(void) { return cur.matmul_high; }

/* ---- one field at a time (tests, benchmarks) */
int k_set_isa(const char *name)
{
    int want = name ? rt_isa_parse(name) : rt_isa_best();
    if (want < 0 || want > rt_isa_best()) return -1;
    cur.isa = want;
    return 0;
}

int k_conv_set_algo(const char *name)
{
    int a = name ? k_conv_algo_parse(name) : -1;
    if (name && a < 0) return -1;
    cur.conv_algo = a;
    return 0;
}

int k_bf16_set_gemm(const char *name)
{
    int f = name ? k_bf16_gemm_parse(name) : -1;
    if (name && f < 0) return -1;
    cur.bf16_gemm = f;
    return 0;
}

int k_set_matmul_precision(const char *name)
{
    int p = k_matmul_precision_parse(name);
    if (p < 0) return -1;
    cur.matmul_high = p;
    return 0;
}
