/* What nvcc emits for the tensor-core kernels (bench/tc_ptx.sh): their PTX holds
 * mma.sync, ldmatrix (.trans too) and cp.async (and wgmma on sm_90a: the 16-bit entry's, with M/N-major
 * operands too, and the gathering kernel's, wgg_gemm, in linear), and ptxas -v
 * reports no spills for any instance, on sm_80 and sm_90a. The raw 16-bit entry (cp.async), linear's gathering
 * loaders and the attention's kernels (k_cuda_attn_tc.cu: mma.sync, ldmatrix, .trans; one
 * row per instance); the script prints the whole table for every file. Skipped without nvcc. */
#include "test/t.h"
#include "test/t_util.h"
#include <string.h>
#include <unistd.h>

TEST(cuda_tensor_core_ptx_has_mma_and_no_spills)
{
    static char out[32768];
    alarm(900); /* six nvcc runs: 2-4 minutes on a quiet 2-core machine, past the runner's 300 s under load */
    int rc = t_sh("bash bench/tc_ptx.sh kernels/cuda/k_cuda_tc_gemm.cu kernels/cuda/k_cuda_linear.cu "
                    "kernels/cuda/k_cuda_attn_tc.cu 2>&1", out,
                  sizeof out);
    if (rc == 2 && strstr(out, "no nvcc")) {
        t_note("skipped: no nvcc here (the CUDA Toolkit)");
        return;
    }
    CHECKF(rc == 0, "exit %d:\n%s", rc, out);
    CHECKF(strstr(out, "| k_cuda_tc_gemm.cu | sm_80 |") && strstr(out, "| k_cuda_linear.cu | sm_90a |"), "%s", out);
    /* wg_gemm on M/N-contiguous 16-bit arrays (M/N-major tiles, imm-trans 1), no spills */
    CHECKF(strstr(out, "| wg_gemm | k_cuda_tc_gemm.cu | bf16 | TcRawMN | TcRawMN |") &&
           strstr(out, "| wg_gemm | k_cuda_tc_gemm.cu | f16 | TcRawK | TcRawMN |"), "%s", out);
    /* TMA's GEMM (wt_gemm, k_cuda_tc_tma.cuh): bulk tensor copies and mbarrier waits in the
     * 16-bit entry's sm_90a PTX; its instances' registers and spills in their own table */
    CHECKF(strstr(out, "| file (sm_90a) | cp.async.bulk.tensor | mbarrier ops |") &&
           strstr(out, "| k_cuda_tc_gemm.cu | "), "%s", out);
    /* the attention's 36 instances (3 kernels x bf16, f16 x heads 32, 64, 128 x qkv by
     * cp.async or read and rounded), each named */
    CHECKF(strstr(out, "| k_cuda_attn_tc.cu | sm_90a |") && strstr(out, "| fa_bwd_dkv<1,128,32,1> | sm_80 |") &&
           strstr(out, "| fa_fwd<2,64,0> | sm_90a |") && strstr(out, "| fa_fwd<2,64,1> | sm_90a |"), "%s", out);
}
