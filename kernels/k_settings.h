/* The kernels' settings (kernels/cpu/k_settings.c), in a header of their own: the
 * trainer's settings object (nn/settings.h) carries them without the kernels' API. */
#ifndef K_SETTINGS_H
#define K_SETTINGS_H
#include <stddef.h>

/* The kernels' settings as one object: a program builds it (the trainer's set-up from
 * its options: nn/settings.h; a benchmark from its flags) and applies it as a whole
 * before its kernels run; nothing else changes them (not thread-safe with kernels
 * running). -1 in isa, conv_algo or bf16_gemm: the environment's (DDPRT_ISA,
 * DDPRT_CONV, DDPRT_BF16_GEMM), read when first needed. */
typedef struct k_settings {
    int threads;     /* the pool: threads including the caller (1: the caller alone) */
    int isa;         /* rt/isa.h's level; at most the CPU's best */
    int conv_algo;   /* k_conv_algo_parse's index: auto, direct, winograd, winograd4, winograd4c */
    int bf16_gemm;   /* k_bf16_gemm_parse's index: auto, dpbf16, fma, amx (--amp bf16) */
    int matmul_high; /* fp32 linear layers' products: 0 highest, 1 high (bf16x3 on AMX) */
} k_settings;
/* One thread, and the rest from the environment, resolved. */
void k_settings_default(k_settings *s);
/* 0, or -1 with a one-line error (an ISA the CPU lacks, a field out of range). */
int k_settings_apply(const k_settings *s, char *err, size_t errlen);
k_settings k_settings_now(void);
/* The names' indexes (-1: unknown): DDPRT_CONV's and --conv-algo's, DDPRT_BF16_GEMM's,
 * --matmul-precision's (NULL: highest). */
int k_conv_algo_parse(const char *name);
int k_bf16_gemm_parse(const char *name);
int k_matmul_precision_parse(const char *name);
const char *k_conv_algo_name(int algo);
#endif
