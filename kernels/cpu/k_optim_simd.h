/* k_optim.c's vector kernels, one template per ISA level (rt/isa_each.h). */

#include "kernels/cpu/k_kv.h"

/* Lane-wise square root: the instruction where the level has one (IEEE, as sqrtf). */
ISA_TARGET static inline kvf ISA_FN(ko_sqrt)(kvf x)
{
#if ISA_X86 && ISA_VB == 64
    return (kvf)_mm512_sqrt_ps((__m512)x);
#elif ISA_X86 && ISA_VB == 32
    return (kvf)_mm256_sqrt_ps((__m256)x);
#elif ISA_X86
    return (kvf)_mm_sqrt_ps((__m128)x);
#else
    for (int k = 0; k < ISA_VB / 4; k++) x[k] = sqrtf(x[k]);
    return x;
#endif
}

/* adam_one on whole vectors, the same operations in the same order (separate multiplies
 * and adds: no FMA), then adam_generic for the tail. */
ISA_TARGET static void ISA_FN(adam_vec)(size_t n, const k_adam_cfg *c, float *p, const float *g, float *m, float *v)
{
    typedef kvf vf;
    const vf z = {0};
    vf b1c = z + (1.0f - c->beta1), b2 = z + c->beta2, b2c = z + (1.0f - c->beta2), wd = z + c->weight_decay;
    vf dm = z + c->decay_mul, bc2 = z + c->bc2_sqrt, eps = z + c->eps, nss = z + -c->step_size;
    int dec = c->decoupled, l2 = !dec && c->weight_decay != 0.0f;
    size_t i = 0;
    for (; i + ISA_VB / 4 <= n; i += ISA_VB / 4) {
        vf gi, pi, mi, vi;
        memcpy(&gi, g + i, ISA_VB), memcpy(&pi, p + i, ISA_VB), memcpy(&mi, m + i, ISA_VB), memcpy(&vi, v + i, ISA_VB);
        if (dec) pi = pi * dm;
        else if (l2) gi = gi + wd * pi;
        mi = mi + b1c * (gi - mi);
        vi = vi * b2 + (b2c * gi) * gi;
        vf den = ISA_FN(ko_sqrt)(vi) / bc2 + eps;
        memcpy(m + i, &mi, ISA_VB), memcpy(v + i, &vi, ISA_VB);
        pi = pi + nss * (mi / den);
        memcpy(p + i, &pi, ISA_VB);
    }
    adam_generic(n - i, c, p + i, g + i, m + i, v + i);
}

#include "kernels/cpu/k_optim8_simd.h"
#include "kernels/cpu/k_kv_undef.h"
