/* leaky_relu's CUDA kernels (kernels/cuda/k_cuda_act.cu) against the CPU ones, bit for
 * bit (a NaN's payload excepted: a GPU returns its own), on sizes around the grid's edges,
 * with NaN, zeros and negative slopes. */
#include "test/gpu/g.h"
#include <math.h>

TEST(gpu_leaky_relu_bit_exact)
{
    g_init();
    static const size_t sizes[] = {1, 255, 256, 257, 100003};
    static const float slopes[] = {0.01f, 0.2f, -0.5f, 0.0f};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t k = 0; k < sizeof slopes / sizeof slopes[0]; k++) {
            size_t n = sizes[si];
            float sl = slopes[k], *x = g_rand(n, 41), *dy = g_rand(n, 42);
            x[0] = 0.0f;
            if (n > 3) x[3] = NAN, x[2] = -0.0f;
            float *y = malloc(n * 4), *dx = malloc(n * 4);
            k_leaky_relu_fwd(n, sl, x, y);
            k_leaky_relu_bwd(n, sl, x, dy, dx);
            float *gx = g_up(x, n * 4), *gdy = g_up(dy, n * 4), *gy = g_dev(n * 4);
            g_need(k_cuda_leaky_relu_fwd(n, sl, gx, gy, NULL) == 0, "leaky relu fwd");
            /* x[3]'s NaN must stay NaN; which NaN is the float unit's (g_ndiff_nan) */
            CHECKF(g_ndiff_nan(g_result(gy, n), y, n, 'f') == 0, "fwd n=%zu slope %g", n, sl);
            g_need(k_cuda_leaky_relu_bwd(n, sl, gx, gdy, gdy, NULL) == 0, "leaky relu bwd"); /* dx over dy */
            CHECKF(g_ndiff(g_result(gdy, n), dx, n, 4) == 0, "bwd n=%zu slope %g", n, sl);
        }
}
