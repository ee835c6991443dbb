/* ddprt-bench-kernels' GPU table, shared between its files (k_cuda_bench.c: the fp32
 * kernels and the reference libraries; k_cuda_bench_tc.c: the tensor cores). CUDA builds only. */
#ifndef APPS_K_CUDA_BENCH_H
#define APPS_K_CUDA_BENCH_H
#include "kernels/cuda/k_cuda.h"
#include "ports/cuda/port_cuda.h"
#include <stddef.h>

/* ---- the reference libraries, by hand-declared entry points (no headers needed) */
typedef int (*fn_cublas_create)(void **);
typedef int (*fn_cublas_set_stream)(void *, port_stream);
typedef int (*fn_cublas_sgemm)(void *, int, int, int, int, int, const float *, const float *, int, const float *,
                               int, const float *, float *, int);
typedef int (*fn_cublas_gemm_ex)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *,
                                 int, int, const void *, void *, int, int, int, int);
typedef int (*fn_cublas_set_math)(void *, int);
typedef int (*fn_cudnn_create)(void **);
typedef int (*fn_cudnn_set_stream)(void *, port_stream);
typedef int (*fn_cudnn_create_desc)(void **);
typedef int (*fn_cudnn_set_tensor4d)(void *, int, int, int, int, int, int);
typedef int (*fn_cudnn_set_filter4d)(void *, int, int, int, int, int, int);
typedef int (*fn_cudnn_set_conv2d)(void *, int, int, int, int, int, int, int, int);
typedef int (*fn_cudnn_set_math)(void *, int);
typedef int (*fn_cudnn_ws)(void *, void *, void *, void *, void *, int, size_t *);
typedef int (*fn_cudnn_fwd)(void *, const float *, void *, const void *, void *, const void *, void *, int, void *,
                            size_t, const float *, void *, void *);
typedef int (*fn_cudnn_bwd_filter)(void *, const float *, void *, const void *, void *, const void *, void *, int,
                                   void *, size_t, const float *, void *, void *);
/* cudnnGetConvolution{Forward,BackwardData,BackwardFilter}Algorithm_v7 */
typedef int (*fn_cudnn_algo)(void *, void *, void *, void *, void *, int, int *, void *);

struct kb_ref {
    void *blas, *h_blas;
    fn_cublas_sgemm sgemm;
    fn_cublas_gemm_ex gemm_ex;
    fn_cublas_set_math set_math_blas;
    void *dnn, *h_dnn;
    fn_cudnn_create_desc tensor, filter, conv;
    fn_cudnn_set_tensor4d set_tensor;
    fn_cudnn_set_filter4d set_filter;
    fn_cudnn_set_conv2d set_conv;
    fn_cudnn_set_math set_math;
    fn_cudnn_ws fwd_ws, bwdf_ws;
    fn_cudnn_fwd fwd;
    fn_cudnn_bwd_filter bwdf;
    /* the bf16 rows' (optional: NULL leaves those rows without a reference) */
    fn_cudnn_algo fwd_algo, bwdd_algo, bwdf_algo;
    fn_cudnn_ws bwdd_ws;
    fn_cudnn_fwd bwdd; /* cudnnConvolutionBackwardData: the forward's argument shapes */
};
extern struct kb_ref kb_ref;
extern port_stream kb_S;

typedef int (*kb_fn)(void *ctx);
/* Median microseconds of one call (events on kb_S), or -1 when it failed. */
double kb_time_us(kb_fn fn, void *ctx);
/* A table row: rate from work (FLOPs, or bytes when is_bytes), the reference's time and ratio. */
void kb_row(const char *name, const char *shape, double us, double work, int is_bytes, double ref_us);
/* n fp32 values on the device, uniform in [-1, 1). */
float *kb_dbuf(size_t n);
/* The tensor cores' rows (k_cuda_bench_tc.c); smoke: tiny shapes. */
void kb_tensor_cores(int wgmma, int smoke);
/* A tensor-core row: kb_row's, then TFLOP/s and the % of the card's dense peak at mm. */
void kb_tc_row(const char *name, const char *shape, double us, double flop, double ref_us, int mm);
/* cuBLAS on the product k_tc_gemm describes (bf16 / f16, either operand's major): 0, or -1. */
int kb_tc_blas(const k_tc_gemm *g);
/* wt_gemm's tiles, each product at each (k_cuda_bench_gemms.c); TMA on only. */
void kb_gemm_tiles(int smoke);
#endif
