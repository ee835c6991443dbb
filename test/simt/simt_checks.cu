// t-simt-checks CASE: one small kernel per check of the SIMT executor (test/simt), most
// of them broken on purpose; prints what the CUDA runtime reports ("report: ...") and
// what the kernel computed ("result: ..."). test/test_simt_checks.c runs every case
// and asserts on the words. Built for the executor only (never by nvcc).
#include "kernels/cuda/k_cuda_tc.cuh"
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FULL 0xffffffffu

// ---- broken kernels
__global__ void barrier_divergence(float *out)
{
    if (threadIdx.x < 16) __syncthreads();
    else __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void barrier_after_exit(float *out)
{
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void shfl_exited_lane(float *out)
{
    if (threadIdx.x == 3) return;
    out[threadIdx.x] = __shfl_xor_sync(FULL, (float)threadIdx.x, 1);
}

__global__ void shfl_divergent(float *out)
{
    float v = threadIdx.x;
    if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(FULL, v, 1);
    else v = __shfl_xor_sync(FULL, v, 2);
    out[threadIdx.x] = v;
}

__global__ void shfl_outside_mask(float *out)
{
    if (threadIdx.x % 32 < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, (float)threadIdx.x, 20);
}

__global__ void ballot_divergent(unsigned *out)
{
    unsigned b = 0;
    if (threadIdx.x % 2) b = __ballot_sync(FULL, threadIdx.x > 7);
    else __syncwarp();
    out[threadIdx.x] = b;
}

__global__ void warp_barrier_deadlock(float *out)
{
    if (threadIdx.x == 0) __syncthreads();
    else __syncwarp();
    out[threadIdx.x] = 1;
}

__global__ void mask_nonexistent_lane(float *out) // launched with 48 threads
{
    out[threadIdx.x] = __shfl_xor_sync(FULL, 1.0f, 1);
}

__global__ void __launch_bounds__(128) bounded(float *out) { out[threadIdx.x] = 1; }

__global__ void big_shared(float *out)
{
    __shared__ float big[13 * 1024]; // 52 KiB
    big[threadIdx.x] = 1;
    __syncthreads();
    out[threadIdx.x] = big[(threadIdx.x + 1) % blockDim.x];
}

__global__ void add_half(float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += 0.5f;
}

__global__ void plain(float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)i;
}

__global__ void write_one_past(float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = (float)i; // the guard should be i < n
}

// Each thread reads its right neighbour's value without a barrier in between: the
// result depends on the thread order (NaN where the neighbour had not yet run).
__global__ void missing_barrier(float *out)
{
    __shared__ float sh[256];
    sh[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x];
}

// Each warp reads the other's slots after only a warp barrier: in step (rounds of all
// threads) every slot is written by then; warp by warp, warp 0 reads before warp 1 ran.
__global__ void missing_barrier_across_warps(float *out)
{
    __shared__ float sh[64];
    sh[threadIdx.x] = (float)threadIdx.x;
    __syncwarp();
    out[threadIdx.x] = sh[(threadIdx.x + 32) % 64];
}

__global__ void oob_shared_read(float *out)
{
    __shared__ float sh[64];
    sh[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = sh[threadIdx.x + 1]; // thread 63 reads sh[64]
}

// ---- tensor cores and cp.async (simt_tc.cc), through kernels/cuda/k_cuda_tc.cuh
__global__ void mma_partial_warp(float *out) // launched with 48 threads: warp 1 has 16
{
    unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0, 0, 0, 0};
    K_MMA_BF16(d, a, b);
    out[threadIdx.x] = d[0];
}

__global__ void mma_after_exit(float *out)
{
    if (threadIdx.x == 7) return;
    unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0, 0, 0, 0};
    K_MMA_BF16(d, a, b);
    out[threadIdx.x] = d[0];
}

__global__ void ldmatrix_misaligned(float *out)
{
    __shared__ unsigned short sh[32 * 8 + 8];
    for (int i = threadIdx.x; i < 32 * 8 + 8; i += 32) sh[i] = (unsigned short)i;
    __syncthreads();
    unsigned r[4];
    K_LDMATRIX_X4(r, sh + 1 + threadIdx.x * 8); // 2 bytes past a 16-byte boundary
    out[threadIdx.x] = (float)r[0];
}

// A 32 x 64 tile of 16-bit values (128-byte rows), four 8x8 matrices down its first 16
// bytes: stored plainly every row of a matrix starts in bank 0 (8-way conflicts); with
// the 16-byte chunk XOR-swizzled by the row (row r's chunk c at c ^ (r % 8)) the 8 rows
// fall in 8 different bank quads.
template <int SWZ> __global__ void ldmatrix_banks(float *out)
{
    __shared__ unsigned short sh[32 * 64];
    for (int i = threadIdx.x; i < 32 * 64; i += 32) sh[i] = (unsigned short)i;
    __syncthreads();
    unsigned r[4];
    int row = threadIdx.x, chunk = SWZ ? 0 ^ (row & 7) : 0;
    K_LDMATRIX_X4(r, sh + row * 64 + chunk * 8);
    out[threadIdx.x] = (float)r[0];
}

__global__ void ldmatrix_not_shared(float *out)
{
    unsigned r[4];
    K_LDMATRIX_X4(r, out + threadIdx.x * 4); // device memory, not shared
    out[threadIdx.x] = (float)r[0];
}

__global__ void cp_async_misaligned(float *out)
{
    __shared__ float sh[64];
    K_CP_ASYNC16(sh + threadIdx.x * 4 + 1, out + threadIdx.x * 4, 16);
    K_CP_ASYNC_COMMIT();
    K_CP_ASYNC_WAIT(0);
    __syncthreads();
    out[threadIdx.x] = sh[threadIdx.x];
}

// Each thread copies one 16-byte row; the warp reads them all with ldmatrix.
template <int WAIT, int BARRIER> __global__ void cp_async_then_ldmatrix(float *out)
{
    __shared__ unsigned short sh[32 * 8];
    K_CP_ASYNC16(sh + threadIdx.x * 8, out + threadIdx.x * 4, 16);
    K_CP_ASYNC_COMMIT();
    if (WAIT) K_CP_ASYNC_WAIT(0);
    if (BARRIER) __syncthreads();
    unsigned r[4];
    K_LDMATRIX_X4(r, sh + threadIdx.x * 8);
    out[threadIdx.x] = (float)r[0];
}

#include "test/simt/simt_checks_wgmma.cuh"

// The fragment layouts: A (16 x 16), B (16 x 8) from shared memory through ldmatrix
// (A as stored, B transposed from its k x n rows), one bf16 and one f16 mma, and a tf32
// mma from registers; D written back by the PTX accumulator layout. The host compares
// with a plain product.
__global__ void mma_layouts(const float *in, float *out)
{
    __shared__ unsigned short A[16 * 16], B[16 * 8], A16[16 * 16], B16[16 * 8];
    int l = threadIdx.x, g = l >> 2, t = l & 3;
    for (int i = l; i < 256; i += 32) A[i] = rt_f32_to_bf16(in[i]), A16[i] = rt_f32_to_f16(in[i]);
    for (int i = l; i < 128; i += 32) B[i] = rt_f32_to_bf16(in[256 + i]), B16[i] = rt_f32_to_f16(in[256 + i]);
    __syncthreads();
    unsigned a[4], b[2], a16[4], b16[2];
    K_LDMATRIX_X4(a, A + (l & 15) * 16 + (l >> 4) * 8);   // rows of A, k halves
    K_LDMATRIX_X2_T(b, B + (l & 15) * 8);                 // rows k of B (n contiguous), transposed
    K_LDMATRIX_X4(a16, A16 + (l & 15) * 16 + (l >> 4) * 8);
    K_LDMATRIX_X2_T(b16, B16 + (l & 15) * 8);
    float d[4] = {0, 0, 0, 0}, d16[4] = {0, 0, 0, 0}, d32[4] = {0, 0, 0, 0};
    K_MMA_BF16(d, a, b);
    K_MMA_F16(d16, a16, b16);
    // tf32 m16n8k8: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (t, g), b1 (t + 4, g)
    unsigned ta[4] = {k_tf32(in[g * 16 + t]), k_tf32(in[(g + 8) * 16 + t]), k_tf32(in[g * 16 + t + 4]),
                      k_tf32(in[(g + 8) * 16 + t + 4])};
    unsigned tb[2] = {k_tf32(in[256 + t * 8 + g]), k_tf32(in[256 + (t + 4) * 8 + g])};
    K_MMA_TF32(d32, ta, tb);
    for (int e = 0; e < 4; e++) {
        int m = g + (e >> 1) * 8, n = 2 * t + (e & 1);
        out[m * 8 + n] = d[e], out[128 + m * 8 + n] = d16[e], out[256 + m * 8 + n] = d32[e];
    }
}

static int check_mma_layouts(const float *in, const float *o)
{
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double s = 0, s16 = 0, s32 = 0;
            for (int k = 0; k < 16; k++) {
                float a = in[m * 16 + k], b = in[256 + k * 8 + n];
                s += (double)rt_bf16_to_f32(rt_f32_to_bf16(a)) * rt_bf16_to_f32(rt_f32_to_bf16(b));
                s16 += (double)rt_f16_to_f32(rt_f32_to_f16(a)) * rt_f16_to_f32(rt_f32_to_f16(b));
                if (k < 8) s32 += (double)__uint_as_float(k_tf32(a)) * __uint_as_float(k_tf32(b));
            }
            double got[3] = {o[m * 8 + n], o[128 + m * 8 + n], o[256 + m * 8 + n]}, want[3] = {s, s16, s32};
            for (int j = 0; j < 3; j++)
                if (fabs(got[j] - want[j]) > 1e-5 * (1 + fabs(want[j]))) {
                    printf("result: %s D[%d][%d] is %g, the product %g\n", j == 0 ? "bf16" : j == 1 ? "f16" : "tf32",
                           m, n, got[j], want[j]);
                    return 1;
                }
        }
    printf("result: mma layouts ok\n");
    return 0;
}

// ---- the intrinsics, correct: their results against what CUDA specifies
__global__ void intrinsics(int *out)
{
    int t = threadIdx.x, lane = t % 32;
    int a = __shfl_sync(FULL, t, 5);                 // lane 5 of my warp
    int b = __shfl_up_sync(FULL, t, 3, 16);           // from lane - 3 within 16
    int c = __shfl_down_sync(FULL, t, 3, 16);
    int d = __shfl_xor_sync(FULL, t, 18);             // other half-warp
    unsigned e = __ballot_sync(FULL, lane % 3 == 0);
    int f = __any_sync(FULL, t == 40), g = __all_sync(FULL, lane < 32);
    int h = __syncthreads_count(t % 4 == 0), k = __syncthreads_or(t == 63), l = __syncthreads_and(t < 63);
    __shared__ int total;
    if (t == 0) total = 0;
    __syncthreads();
    atomicAdd(&total, t);
    __syncthreads();
    int *o = out + t * 11;
    o[0] = a, o[1] = b, o[2] = c, o[3] = d, o[4] = (int)e, o[5] = f, o[6] = g, o[7] = h, o[8] = k, o[9] = l;
    o[10] = total;
}

static int check_intrinsics(const int *o, int n)
{
    for (int t = 0; t < n; t++) {
        int lane = t % 32, w = t - lane, seg = lane & ~15;
        int want[11] = {w + 5, lane - seg >= 3 ? t - 3 : t, lane - seg + 3 < 16 ? t + 3 : t, w + (lane ^ 18),
                        (int)0x49249249u, t / 32 == 1, 1, n / 4, 1, 0, n * (n - 1) / 2};
        for (int j = 0; j < 11; j++)
            if (o[t * 11 + j] != want[j]) {
                printf("result: thread %d value %d is %d, CUDA says %d\n", t, j, o[t * 11 + j], want[j]);
                return 1;
            }
    }
    printf("result: intrinsics ok\n");
    return 0;
}

// Device buffers stay reachable from here until exit: a failed launch makes every
// later call fail (cudaFree too), and LeakSanitizer would report them otherwise.
static float *volatile bufs[8]; /* volatile: stores nothing reads are kept */
static int nbufs;
static float *dev(size_t n)
{
    float *p;
    if (cudaMalloc((void **)&p, n * sizeof(float))) exit(2);
    return bufs[nbufs++] = p;
}

// What the runtime says after the launch and after a device synchronisation.
static void report(void)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    printf("report: %s\n", e ? cudaGetErrorString(e) : "none");
}

static void result(const float *d, int n)
{
    float *h = (float *)malloc(n * sizeof(float));
    int nan = 0;
    if (cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost)) {
        printf("result: copy failed\n");
        free(h);
        return;
    }
    for (int i = 0; i < n; i++) nan += h[i] != h[i];
    printf("result: %d of %d NaN\n", nan, n);
    free(h);
}

#include "test/simt/simt_checks_tma.cuh"
#include "test/simt/simt_checks_i2c.cuh"

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    float *d = dev(4096);
    unsigned *u = (unsigned *)dev(4096);
    if (!strcmp(c, "barrier_divergence")) SIMT_LAUNCH(barrier_divergence, 1, 64, 0, 0)(d);
    else if (!strcmp(c, "barrier_after_exit")) SIMT_LAUNCH(barrier_after_exit, 1, 64, 0, 0)(d);
    else if (!strcmp(c, "shfl_exited_lane")) SIMT_LAUNCH(shfl_exited_lane, 1, 32, 0, 0)(d);
    else if (!strcmp(c, "shfl_divergent")) SIMT_LAUNCH(shfl_divergent, 1, 64, 0, 0)(d);
    else if (!strcmp(c, "shfl_outside_mask")) SIMT_LAUNCH(shfl_outside_mask, 1, 32, 0, 0)(d);
    else if (!strcmp(c, "ballot_divergent")) SIMT_LAUNCH(ballot_divergent, 1, 32, 0, 0)(u);
    else if (!strcmp(c, "warp_barrier_deadlock")) SIMT_LAUNCH(warp_barrier_deadlock, 1, 64, 0, 0)(d);
    else if (!strcmp(c, "mask_nonexistent_lane")) SIMT_LAUNCH(mask_nonexistent_lane, 1, 48, 0, 0)(d);
    else if (!strcmp(c, "launch_bounds")) SIMT_LAUNCH(bounded, 1, 256, 0, 0)(d);
    else if (!strcmp(c, "launch_bounds_ok")) SIMT_LAUNCH(bounded, 1, 128, 0, 0)(d);
    else if (!strcmp(c, "bad_config")) SIMT_LAUNCH(plain, 1, 2048, 0, 0)(d, 10);
    else if (!strcmp(c, "big_shared")) SIMT_LAUNCH(big_shared, 1, 32, 0, 0)(d);
    else if (!strcmp(c, "host_pointer")) {
        static float host[64];
        SIMT_LAUNCH(plain, 1, 64, 0, 0)(host, 64);
    } else if (!strcmp(c, "write_past_end")) {
        SIMT_LAUNCH(write_one_past, 4, 256, 0, 0)(dev(1000), 1000); // into the canary below 256-byte alignment
    } else if (!strcmp(c, "write_into_guard")) {
        SIMT_LAUNCH(write_one_past, 17, 256, 0, 0)(dev(4096), 4096); // into the guard page
    }
    else if (!strcmp(c, "missing_barrier")) {
        SIMT_LAUNCH(missing_barrier, 1, 256, 0, 0)(d);
        report();
        result(d, 256);
        return 0;
    } else if (!strcmp(c, "missing_barrier_across_warps")) {
        SIMT_LAUNCH(missing_barrier_across_warps, 1, 64, 0, 0)(d);
        report();
        result(d, 64);
        return 0;
    } else if (!strcmp(c, "oob_shared_read")) {
        SIMT_LAUNCH(oob_shared_read, 1, 64, 0, 0)(d);
        report();
        result(d, 64);
        return 0;
    } else if (!strcmp(c, "mma_partial_warp")) {
        SIMT_LAUNCH(mma_partial_warp, 1, 48, 0, 0)(d);
    } else if (!strcmp(c, "mma_after_exit")) {
        SIMT_LAUNCH(mma_after_exit, 1, 32, 0, 0)(d);
    } else if (!strcmp(c, "ldmatrix_banks")) {
        SIMT_LAUNCH((ldmatrix_banks<0>), 1, 32, 0, 0)(d);
        SIMT_LAUNCH((ldmatrix_banks<1>), 1, 32, 0, 0)(d);
    } else if (!strcmp(c, "ldmatrix_misaligned")) {
        SIMT_LAUNCH(ldmatrix_misaligned, 1, 32, 0, 0)(d);
    } else if (!strcmp(c, "ldmatrix_not_shared")) {
        SIMT_LAUNCH(ldmatrix_not_shared, 1, 32, 0, 0)(d);
    } else if (!strcmp(c, "cp_async_misaligned")) {
        SIMT_LAUNCH(cp_async_misaligned, 1, 16, 0, 0)(d);
    } else if (!strcmp(c, "cp_async_no_wait")) {
        SIMT_LAUNCH((cp_async_then_ldmatrix<0, 1>), 1, 32, 0, 0)(d);
    } else if (!strcmp(c, "cp_async_no_barrier")) {
        SIMT_LAUNCH((cp_async_then_ldmatrix<1, 0>), 1, 32, 0, 0)(d);
    } else if (!strcmp(c, "cp_async_ok")) {
        SIMT_LAUNCH((cp_async_then_ldmatrix<1, 1>), 1, 32, 0, 0)(d);
    } else if (!strcmp(c, "wgmma_partial")) {
        SIMT_LAUNCH((wgmma_case<0>), 1, 64, 0, 0)(d, d);
    } else if (!strcmp(c, "wgmma_mn_tf32")) {
        SIMT_LAUNCH(wgmma_mn_tf32, 1, 128, 0, 0)(d);
        report();
    } else if (!strcmp(c, "wgmma_overwritten") || !strncmp(c, "wgmma_ok", 8) || !strncmp(c, "wgmma_swz", 9) ||
               !strncmp(c, "wgmma_mn_", 9) || strstr(c, "proxy_fence") || !strcmp(c, "wgmma_no_barrier") ||
               !strncmp(c, "wgmma_rs_", 9) || !strncmp(c, "wgmma_tf32_", 11)) {
        static float in[1024 + 2048], o[64 * 128];
        for (int i = 0; i < 3072; i++) in[i] = (float)((i * 29 % 97) - 48) / 8.0f;
        float *din = dev(3072), *dout = dev(64 * 128);
        if (cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice)) return 1;
        if (!strcmp(c, "wgmma_ok")) SIMT_LAUNCH((wgmma_case<0>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_ok_sw128")) SIMT_LAUNCH((wgmma_swz_case<128, 0, 64>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_ok_sw64")) SIMT_LAUNCH((wgmma_swz_case<64, 0, 32>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_ok_sw32")) SIMT_LAUNCH((wgmma_swz_case<32, 0, 0>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_swz_unaligned")) SIMT_LAUNCH((wgmma_swz_case<64, 256, 0>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_swz_row_crossed")) SIMT_LAUNCH((wgmma_swz_case<64, 0, 48>), 1, 128, 0, 0)(din, dout);
        // M/N-major: both operands transposed in each layout type, one at a time, misaligned
        else if (!strcmp(c, "wgmma_mn_ok")) SIMT_LAUNCH((wgmma_mn_case<0, 0, 1, 1>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_mn_ok_sw32")) SIMT_LAUNCH((wgmma_mn_case<32, 0, 1, 1>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_mn_ok_sw64")) SIMT_LAUNCH((wgmma_mn_case<64, 0, 1, 1>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_mn_ok_sw128")) SIMT_LAUNCH((wgmma_mn_case<128, 0, 1, 1>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_mn_ok_a")) SIMT_LAUNCH((wgmma_mn_case<128, 0, 1, 0>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_mn_ok_b")) SIMT_LAUNCH((wgmma_mn_case<64, 0, 0, 1>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_mn_ok_b_noswz")) SIMT_LAUNCH((wgmma_mn_case<0, 0, 0, 1>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_mn_unaligned")) SIMT_LAUNCH((wgmma_mn_case<128, 128, 1, 1>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_no_proxy_fence")) SIMT_LAUNCH((wgmma_case<0, 0>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_proxy_fence_early")) SIMT_LAUNCH((wgmma_case<0, 2>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_no_barrier")) SIMT_LAUNCH((wgmma_case<0, 3>), 1, 128, 0, 0)(din, dout);
        // A from registers: right, changed before the wait, written after the fence, transposed
        else if (!strcmp(c, "wgmma_rs_ok")) SIMT_LAUNCH((wgmma_rs_case<0>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_rs_overwritten")) SIMT_LAUNCH((wgmma_rs_case<1>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_rs_after_fence")) SIMT_LAUNCH((wgmma_rs_case<2>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_rs_trans_a")) SIMT_LAUNCH((wgmma_rs_case<3>), 1, 128, 0, 0)(din, dout);
        // tf32 (K-major): no swizzle, the 64- and 128-byte swizzles, the 8 k across a 64-byte row
        else if (!strcmp(c, "wgmma_tf32_ok")) SIMT_LAUNCH((wgmma_tf32_case<0, 0>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_tf32_ok_sw64")) SIMT_LAUNCH((wgmma_tf32_case<64, 32>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_tf32_ok_sw128")) SIMT_LAUNCH((wgmma_tf32_case<128, 96>), 1, 128, 0, 0)(din, dout);
        else if (!strcmp(c, "wgmma_tf32_row_crossed")) SIMT_LAUNCH((wgmma_tf32_case<64, 48>), 1, 128, 0, 0)(din, dout);
        else SIMT_LAUNCH((wgmma_case<1>), 1, 128, 0, 0)(din, dout);
        report();
        if (cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost)) return 1;
        if (!strncmp(c, "wgmma_tf32_ok", 13)) return check_wgmma_tf32(in, o);
        return !strncmp(c, "wgmma_ok", 8) || !strncmp(c, "wgmma_mn_ok", 11) || !strcmp(c, "wgmma_rs_ok")
                   ? check_wgmma(in, o)
                   : 0;
    } else if (!strcmp(c, "ipc_owner_gone") && argc > 2) { // the handle, then exit
        float *buf;
        cudaIpcMemHandle_t h;
        if (cudaMalloc((void **)&buf, 4096) || cudaIpcGetMemHandle(&h, buf)) return 1;
        FILE *f = fopen(argv[2], "wb");
        return !f || fwrite(&h, sizeof h, 1, f) != 1 || fclose(f);
    } else if (!strcmp(c, "ipc_owner") && argc > 2) {
        // A device buffer (a kernel fills it with its indices), its IPC handle to argv[2];
        // then, once argv[2].done exists, the peer's additions must be there.
        int n = 1000, bad = 0;
        float *buf, host[1000];
        if (cudaMalloc((void **)&buf, n * sizeof(float))) return 1;
        SIMT_LAUNCH(plain, 4, 256, 0, 0)(buf, n);
        cudaIpcMemHandle_t h;
        cudaError_t e = cudaIpcGetMemHandle(&h, buf);
        if (e) { printf("report: %s\n", cudaGetErrorString(e)); return 0; }
        char tmp[600], done[600];
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]), snprintf(done, sizeof done, "%s.done", argv[2]);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&h, sizeof h, 1, f) != 1 || fclose(f) || rename(tmp, argv[2])) return 1;
        for (int i = 0; i < 3000 && access(done, F_OK); i++) usleep(10000); // 30 s deadline
        if (access(done, F_OK)) { printf("result: the peer did not finish within 30 s\n"); return 1; }
        if (cudaMemcpy(host, buf, sizeof host, cudaMemcpyDeviceToHost)) return 1;
        for (int i = 0; i < n; i++) bad += host[i] != (float)i + 0.5f;
        printf("result: owner sees the peer's writes: %d of %d wrong\n", bad, n);
        return cudaFree(buf) != cudaSuccess;
    } else if (!strcmp(c, "ipc_peer") && argc > 2) {
        cudaIpcMemHandle_t h;
        FILE *f = NULL;
        for (int i = 0; i < 3000 && !(f = fopen(argv[2], "rb")); i++) usleep(10000);
        if (!f || fread(&h, sizeof h, 1, f) != 1) return 1;
        fclose(f);
        float *p;
        cudaError_t e = cudaIpcOpenMemHandle((void **)&p, h, cudaIpcMemLazyEnablePeerAccess);
        if (e) { printf("report: %s\n", cudaGetErrorString(e)); return 0; }
        printf("report: cudaFree on it: %s\n", cudaGetErrorString(cudaFree(p)));
        cudaGetLastError();
        SIMT_LAUNCH(add_half, 4, 256, 0, 0)(p, 1000); // the owner's buffer, through this process's mapping
        e = cudaDeviceSynchronize();
        printf("result: peer kernel %s, close %s\n", cudaGetErrorString(e), cudaGetErrorString(cudaIpcCloseMemHandle(p)));
        char done[600];
        snprintf(done, sizeof done, "%s.done", argv[2]);
        fclose(fopen(done, "w"));
        return 0;
    } else if (!strcmp(c, "ipc_event_owner") && argc > 2) {
        // An interprocess event recorded once (done), its handle and the buffer's to
        // argv[2]; once the peer has opened them (argv[2].open), a second record queued
        // behind 40 slow kernels that fill the buffer: the peer's waits must see it.
        int n = 1 << 14;
        float *buf;
        cudaStream_t s;
        cudaEvent_t e, plain_ev;
        struct { cudaIpcMemHandle_t m; cudaIpcEventHandle_t ev; } h;
        if (cudaMalloc((void **)&buf, n * sizeof(float)) || cudaStreamCreate(&s) ||
            cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming) ||
            cudaEventCreateWithFlags(&plain_ev, cudaEventDisableTiming) || cudaEventRecord(e, s) ||
            cudaStreamSynchronize(s) || cudaIpcGetMemHandle(&h.m, buf) || cudaIpcGetEventHandle(&h.ev, e))
            return 1;
        cudaIpcEventHandle_t bad;
        printf("report: handle of a plain event: %s\n", cudaGetErrorString(cudaIpcGetEventHandle(&bad, plain_ev)));
        char tmp[600], done[600];
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]), snprintf(done, sizeof done, "%s.open", argv[2]);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&h, sizeof h, 1, f) != 1 || fclose(f) || rename(tmp, argv[2])) return 1;
        for (int i = 0; i < 3000 && access(done, F_OK); i++) usleep(10000);
        if (access(done, F_OK)) { printf("result: the peer did not open the handles within 30 s\n"); return 1; }
        for (int k = 0; k < 40; k++) SIMT_LAUNCH(plain, n / 256, 256, 0, s)(buf, n);
        if (cudaEventRecord(e, s)) return 1;
        snprintf(done, sizeof done, "%s.rec", argv[2]);
        fclose(fopen(done, "w"));
        snprintf(done, sizeof done, "%s.done", argv[2]);
        for (int i = 0; i < 6000 && access(done, F_OK); i++) usleep(10000);
        if (access(done, F_OK)) { printf("result: the peer did not finish within 60 s\n"); return 1; }
        return cudaDeviceSynchronize() != cudaSuccess;
    } else if (!strcmp(c, "ipc_event_peer") && argc > 2) {
        struct { cudaIpcMemHandle_t m; cudaIpcEventHandle_t ev; } h;
        FILE *f = NULL;
        for (int i = 0; i < 3000 && !(f = fopen(argv[2], "rb")); i++) usleep(10000);
        if (!f || fread(&h, sizeof h, 1, f) != 1) return 1;
        fclose(f);
        int n = 1 << 14, bad = 0;
        float *p, *host = (float *)malloc(n * sizeof(float));
        cudaEvent_t e;
        cudaStream_t s;
        if (cudaIpcOpenMemHandle((void **)&p, h.m, cudaIpcMemLazyEnablePeerAccess) || cudaIpcOpenEventHandle(&e, h.ev) ||
            cudaStreamCreate(&s))
            return 1;
        printf("report: first record seen done: %s\n", cudaGetErrorString(cudaEventQuery(e)));
        char path[600];
        snprintf(path, sizeof path, "%s.open", argv[2]);
        fclose(fopen(path, "w"));
        snprintf(path, sizeof path, "%s.rec", argv[2]);
        for (int i = 0; i < 3000 && access(path, F_OK); i++) usleep(10000);
        // The owner's latest record (behind its fills): this stream's kernel runs after it.
        if (cudaStreamWaitEvent(s, e, 0)) return 1;
        SIMT_LAUNCH(add_half, n / 256, 256, 0, s)(p, n);
        cudaError_t se = cudaEventSynchronize(e);
        if (cudaStreamSynchronize(s) || cudaMemcpy(host, p, n * sizeof(float), cudaMemcpyDeviceToHost)) return 1;
        for (int i = 0; i < n; i++) bad += host[i] != (float)i + 0.5f;
        printf("result: event sync %s; the peer's kernel after the owner's fills: %d of %d wrong\n",
               cudaGetErrorString(se), bad, n);
        free(host);
        if (cudaEventDestroy(e) || cudaIpcCloseMemHandle(p)) return 1;
        snprintf(path, sizeof path, "%s.done", argv[2]);
        fclose(fopen(path, "w"));
        return 0;
    } else if (!strcmp(c, "mma_layouts")) {
        float in[384], o[384];
        for (int i = 0; i < 384; i++) in[i] = (float)((i * 37 % 101) - 50) / 16.0f + (float)i / 4096.0f;
        float *din = dev(384);
        if (cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice)) return 1;
        SIMT_LAUNCH(mma_layouts, 1, 32, 0, 0)(din, d);
        report();
        if (cudaMemcpy(o, d, sizeof o, cudaMemcpyDeviceToHost)) return 1;
        return check_mma_layouts(in, o);
    } else if (!strcmp(c, "intrinsics")) {
        SIMT_LAUNCH(intrinsics, 1, 64, 0, 0)((int *)d);
        report();
        int o[64 * 11];
        if (cudaMemcpy(o, d, sizeof o, cudaMemcpyDeviceToHost)) return 1;
        return check_intrinsics(o, 64);
    } else if (!strncmp(c, "i2c_", 4)) {
        if (!i2c_cases(c, d)) return 0;
        fprintf(stderr, "t-simt-checks: unknown case '%s'\n", c);
        return 2;
    } else if (!strncmp(c, "tma_", 4) || !strncmp(c, "mbar_", 5) || !strcmp(c, "dyn_shared") ||
               !strncmp(c, "setmaxnreg_", 11)) {
        if (!(strncmp(c, "setmaxnreg_", 11) ? tma_cases(c, d) : setmaxnreg_cases(c, d))) return 0;
        fprintf(stderr, "t-simt-checks: unknown case '%s'\n", c);
        return 2;
    } else if (!strcmp(c, "sticky")) {
        // After an execution failure every later call fails with it, naming the kernel.
        SIMT_LAUNCH(barrier_after_exit, 1, 64, 0, 0)(d);
        cudaDeviceSynchronize();
        SIMT_LAUNCH(plain, 1, 64, 0, 0)(d, 64);
        cudaError_t e = cudaGetLastError();
        printf("report: %s\nresult: memcpy %d\n", e ? cudaGetErrorString(e) : "none",
               (int)cudaMemcpy(d, d + 64, 16, cudaMemcpyDeviceToDevice));
        return 0;
    } else {
        fprintf(stderr, "t-simt-checks: unknown case '%s'\n", c);
        return 2;
    }
    report();
    return 0;
}
