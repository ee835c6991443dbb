/* <cuda_runtime.h> for the SIMT executor: the runtime API (cuda_runtime_api.h) and, in
 * C++, the device side (test/simt/simt.h) that lets g++ compile the kernels/cuda sources. */
#ifndef SIMT_CUDA_RUNTIME_H
#define SIMT_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "test/simt/simt.h"
#endif
#endif
