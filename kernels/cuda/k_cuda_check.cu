// Launch checking for every kernels/cuda launch (see k_cuda.h, "Errors").
#include "kernels/cuda/k_cuda_common.cuh"
#include "rt/env.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

// Per host thread, as CUDA's error state is: ranks that share a process launch from
// their own threads (make tsan found them writing one variable).
static thread_local const char *last_kernel = "";
static thread_local int sync_each = -1; // DDPRT_CUDA_SYNC, read once per thread

const char *k_cuda_last_kernel(void) { return last_kernel; }

int k_cuda_check_launch(const char *kernel, const char *fmt, ...)
{
    last_kernel = kernel;
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        if (sync_each < 0) {
            sync_each = rt_env_flag(RT_ENV_CUDA_SYNC, 0);
        }
        // Debug mode: wait here so an execution fault is pinned to this launch.
        if (!sync_each) return 0;
        e = cudaDeviceSynchronize();
        if (e == cudaSuccess) return 0;
    }
    char shapes[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shapes, sizeof shapes, fmt, ap);
    va_end(ap);
    port_cuda_fail("%s(%s): %s", kernel, shapes, cudaGetErrorString(e));
    return -1;
}

// A hang on demand, for the tests of the host's deadlines (port_cuda.h): one thread that
// runs until the host sets *flag (a copy on another stream; the executor's test stores it).
namespace {
__global__ void spin_until(int *flag)
{
    while (atomicAdd(flag, 0) == 0) {
    }
}
} // namespace

int k_cuda_test_spin(int *flag, port_stream s)
{
    K_LAUNCH(spin_until, 1, 1, 0, (cudaStream_t)s)(flag);
    return k_cuda_check_launch("k_cuda_test_spin", "flag=%p", (void *)flag);
}
