/* ddprt-bench-kernels internals: the GPU table (k_cuda_bench.c, CUDA builds only). */
#ifndef APPS_BENCH_KERNELS_H
#define APPS_BENCH_KERNELS_H
/* Times the CUDA kernels at batch (0: 64), each the median of iters launches (0: 50);
 * smoke: the tensor-core rows only, once each at tiny shapes. 0, or 1 after printing why. */
int k_cuda_bench_run(int batch, int iters, int smoke);
#endif
