/* Optimizer kernels beyond k_sgd_step (kernels/k.h): Adam / AdamW as torch.optim's
 * single-tensor path, in its order of operations, and the sum of squares for
 * clip_grad_norm_. Results do not depend on the ISA path or the thread count. */
#ifndef K_OPTIM_H
#define K_OPTIM_H
#include <stddef.h>
#include <stdint.h>

/* step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t) (the caller computes
 * both in double, as PyTorch does on the host). decoupled = AdamW. Per element:
 *   Adam:  g += wd * p           AdamW: p *= 1 - lr * wd   (decay_mul below)
 *   m += (1 - beta1) * (g - m)   (torch.lerp)
 *   v  = v * beta2 + (1 - beta2) * g * g
 *   p += -step_size * (m / (sqrt(v) / bc2_sqrt + eps))            */
typedef struct k_adam_cfg {
    float beta1, beta2, eps, weight_decay;
    float step_size, bc2_sqrt, decay_mul; /* decay_mul = 1 - lr*wd (AdamW), else 1 */
    int decoupled;
} k_adam_cfg;
void k_adam_step(size_t n, const k_adam_cfg *cfg, float *p, const float *g, float *m, float *v);
/* The reference the kernel is tested against (one element at a time). */
void k_adam_step_ref(size_t n, const k_adam_cfg *cfg, float *p, const float *g, float *m, float *v);
/* 8-bit optimizer state (--optimizer adamw8bit): blocks of K_Q8_BLOCK floats, each
 * with a power-of-two scale (an int8 exponent: that of the block's largest magnitude);
 * Adam's m as sign + 4-bit exponent + 3-bit mantissa (15 binades below the largest;
 * smaller values are 0), v through its square root as a 4-bit exponent + 4-bit
 * mantissa (never 0 unless v is). Rounding is stochastic (up with probability the
 * dropped bits' share: unbiased, so the moments' small steps are not lost) from a
 * counter-based stream of (idx0 + element, t): the same bits on every ISA path and
 * thread count, and a value the format holds encodes to itself (decode + encode is
 * exact: checkpoints hold the decoded fp32). sq: the codes are v's. */
#define K_Q8_BLOCK 256
void k_q8_encode(size_t n, const float *x, uint8_t *codes, int8_t *scales, int sq, uint32_t idx0, uint32_t t);
void k_q8_decode(size_t n, const uint8_t *codes, const int8_t *scales, int sq, float *x);
void k_q8_encode_ref(size_t n, const float *x, uint8_t *codes, int8_t *scales, int sq, uint32_t idx0, uint32_t t);
void k_q8_decode_ref(size_t n, const uint8_t *codes, const int8_t *scales, int sq, float *x);
/* One Adam step on 8-bit state: per block, decode, k_adam_step's arithmetic, encode
 * (with step t's stream). m, v: n codes; sm, sv: a scale per block. */
void k_adam8_step(size_t n, const k_adam_cfg *cfg, float *p, const float *g, uint8_t *m, uint8_t *v, int8_t *sm,
                  int8_t *sv, uint32_t idx0, uint32_t t);
/* sum of x[i]^2 in double (fixed order: chunked, chunks summed in order). */
double k_sumsq(size_t n, const float *x);
/* x *= s */
void k_scale_inplace(size_t n, float s, float *x);
#endif
