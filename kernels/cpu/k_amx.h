/* bf16 GEMM on Intel AMX tiles (Sapphire Rapids and later: tdpbf16ps, 16x16 fp32
 * accumulators over 32-long bf16 K runs), for --amp bf16's linear layers. Operands are
 * rounded to bf16 as the other bf16 forms do (vcvtne2ps2bf16: round to nearest even),
 * products summed in fp32. Internal to kernels/cpu. */
#ifndef K_AMX_H
#define K_AMX_H

/* 1 when this CPU has AMX-BF16 and the kernel granted this process the tile data
 * state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once); 0 otherwise. */
int k_amx_ok(void);
/* C[m x n] = (acc ? C : cbias[j] or 0) + A B, A(i, k) = a[i*ars + k*acs] (ars or acs
 * must be 1), B(k, j) = bt ? b[j*ldb + k] : b[k*ldb + j]. Only when k_amx_ok(). The
 * bits depend on m, n, kk only, not on how callers split rows or columns into calls
 * on whole 32-row / 32-column blocks. */
void k_amx_gemm(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt, float *c,
                long ldc, const float *cbias, int acc);
/* The same product to ~2^-16 relative (bf16x3: PyTorch's "high" float32 matmul
 * precision), three tile products per C tile; only when k_amx_ok(). */
void k_amx_gemm_x3(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt,
                   float *c, long ldc, const float *cbias, int acc);
#endif
