/* Finite checks (the trainer's NaN guard): one pass over a block, no branches per
 * element; the exact position is found only when something is wrong. */
#include "kernels/k.h"
#include <math.h>

long k_first_nonfinite(size_t n, const float *x)
{
    /* x - x is 0 for finite x and NaN for inf or NaN, so the sum stays 0 only when
     * every element is finite; 8 partial sums keep the loop vectorisable. */
    float acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[i + k] - x[i + k];
    float s = 0;
    for (int k = 0; k < 8; k++) s += acc[k];
    for (; i < n; i++) s += x[i] - x[i];
    if (s == 0.0f) return -1;
    for (size_t j = 0; j < n; j++)
        if (!isfinite(x[j])) return (long)j;
    return -1;
}
