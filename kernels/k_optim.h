/* Optimizer kernels beyond k_sgd_step (kernels/k.h): Adam / AdamW as torch.optim's
 * single-tensor path, in its order of operations, and the sum of squares for
 * clip_grad_norm_. Results do not depend on the ISA path or the thread count. */
#ifndef K_OPTIM_H
#define K_OPTIM_H
#include <stddef.h>

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
/* sum of x[i]^2 in double (fixed order: chunked, chunks summed in order). */
double k_sumsq(size_t n, const float *x);
/* x *= s */
void k_scale_inplace(size_t n, float s, float *x);
#endif
