// t-simt-checks' wgmma cases (test/simt/simt_tc.cc), included by simt_checks.cu: the
// descriptor form on K- and M/N-major tiles, the register-A form (wgmma_rs), tf32 (K-major
// m64n128k8 in each layout type kernels use; transposed refused), and the
// misuse each check reports (operands written under the op, fences missing or early).

// wgmma m64n128k16 on a 64x16 A and 128x16 B (K-major core matrices: 8 rows x 16 bytes,
// the next 8 rows 128 bytes on, the second 8 k 64 * 16 (A) / 128 * 16 (B) bytes on).
// OVERWRITE: a thread writes the operand between the mma_async and its wait. FENCE: where
// the fence.proxy.async that shows the generic stores to wgmma's async proxy is (1: after
// them, right; 0: none; 2: before them; 3: after them, but no barrier before the wgmma).
template <int OVERWRITE, int FENCE = 1> __global__ void wgmma_case(const float *in, float *out)
{
    __shared__ __attribute__((aligned(16))) unsigned short A[64 * 16], B[128 * 16];
    int t = threadIdx.x;
    if (FENCE == 2) K_FENCE_PROXY_ASYNC();
    for (int i = t; i < 64 * 16; i += blockDim.x) { // element (r, k) of A = in[r * 16 + k]
        int r = i / 16, k = i % 16;
        A[(k / 8) * 64 * 8 + (r / 8) * 64 + (r % 8) * 8 + k % 8] = rt_f32_to_bf16(in[i]);
    }
    for (int i = t; i < 128 * 16; i += blockDim.x) { // element (k, n) of B = in[1024 + n * 16 + k]
        int n = i / 16, k = i % 16;
        B[(k / 8) * 128 * 8 + (n / 8) * 64 + (n % 8) * 8 + k % 8] = rt_f32_to_bf16(in[1024 + i]);
    }
    if (FENCE == 1 || FENCE == 3) K_FENCE_PROXY_ASYNC();
    if (FENCE != 3) __syncthreads();
    float d[64];
    for (int e = 0; e < 64; e++) d[e] = 0.0f;
    K_WGMMA_FENCE();
    K_WGMMA_BF16_128(d, k_wgmma_desc(A, 64 * 16, 128, K_WGMMA_NOSWZ), k_wgmma_desc(B, 128 * 16, 128, K_WGMMA_NOSWZ),
                     1);
    K_WGMMA_COMMIT();
    if (OVERWRITE && t == 5) A[3] = 0;
    K_WGMMA_WAIT(0);
    int w = (t & 127) >> 5, g = (t & 31) >> 2, q = t & 3;
    for (int e = 0; e < 64; e++) out[(16 * w + g + 8 * ((e >> 1) & 1)) * 128 + 8 * (e >> 2) + 2 * q + (e & 1)] = d[e];
}

// The same product from swizzled tiles: rows of W bytes (the W-byte swizzle), 8 rows 8 W
// apart, the 16 k at byte OFF of a row, the tiles SHIFT bytes past a 1 KiB boundary.
// Byte b of a tile holds what the hardware reads there: b ^ (((b >> 7) & (W / 16 - 1)) << 4)
// (CUTLASS's Swizzle<log2(W/16), 4, 3>, on the address, which is b mod 1 KiB here).
template <int W, int SHIFT, int OFF> __global__ void wgmma_swz_case(const float *in, float *out)
{
    __shared__ __attribute__((aligned(1024))) unsigned short A[64 * 64 + 1024], B[128 * 64 + 1024];
    int t = threadIdx.x;
    auto at = [](int r, int k) {
        int b = SHIFT + (r % 8) * W + (r / 8) * 8 * W + OFF + 2 * k;
        return (b ^ (((b >> 7) & (W / 16 - 1)) << 4)) / 2;
    };
    for (int i = t; i < 64 * 16; i += blockDim.x) A[at(i / 16, i % 16)] = rt_f32_to_bf16(in[i]);
    for (int i = t; i < 128 * 16; i += blockDim.x) B[at(i / 16, i % 16)] = rt_f32_to_bf16(in[1024 + i]);
    K_FENCE_PROXY_ASYNC();
    __syncthreads();
    float d[64];
    for (int e = 0; e < 64; e++) d[e] = 0.0f;
    const int swz = W == 128 ? K_WGMMA_SW128 : W == 64 ? K_WGMMA_SW64 : K_WGMMA_SW32;
    K_WGMMA_FENCE();
    K_WGMMA_BF16_128(d, k_wgmma_desc((char *)A + SHIFT + OFF, 16, 8 * W, swz),
                     k_wgmma_desc((char *)B + SHIFT + OFF, 16, 8 * W, swz), 1);
    K_WGMMA_COMMIT();
    K_WGMMA_WAIT(0);
    int w = (t & 127) >> 5, g = (t & 31) >> 2, q = t & 3;
    for (int e = 0; e < 64; e++) out[(16 * w + g + 8 * ((e >> 1) & 1)) * 128 + 8 * (e >> 2) + 2 * q + (e & 1)] = d[e];
}

// The same product with M/N-major operands (TA / TB: imm-trans-a / -b), in the layouts of
// the PTX ISA / CUTLASS's make_gmma_desc<Major::MN> (element (r, k), r the m or n index):
//   W = 0 (no swizzle): 16-byte core matrices of 8 r at one k, 8 k-rows (128 bytes) each;
//     the next 8 r SBO = 128 bytes on, the next 8 k LBO = R * 16 bytes on (R = 64 / 128);
//   W-byte swizzle: a row holds one k's W / 2 consecutive r, 8 k-rows a pattern of 8 W
//     bytes; the next W / 2 r LBO = 8 W on, the next 8 k SBO = R / (W / 2) * 8 W on;
//     byte b holds what the hardware reads at b ^ (((b >> 7) & (W / 16 - 1)) << 4).
// A K-major operand beside it (TA or TB 0) keeps the K-major layout of the same swizzle
// (wgmma_case's / wgmma_swz_case's). SHIFT: the operands' start SHIFT bytes past 1 KiB.
template <int W, int SHIFT, int TA, int TB> __global__ void wgmma_mn_case(const float *in, float *out)
{
    __shared__ __attribute__((aligned(1024))) unsigned short A[64 * 64 + 1024], B[128 * 64 + 1024];
    int t = threadIdx.x;
    auto swz = [](int b) { return W ? b ^ (((b >> 7) & (W / 16 - 1)) << 4) : b; };
    auto at = [&](int R, int mn, int r, int k) { // element index of (r, k) in an R-row operand
        int b;
        if (mn && W) b = SHIFT + (r / (W / 2)) * 8 * W + (r % (W / 2)) * 2 + (k / 8) * (R / (W / 2)) * 8 * W + (k % 8) * W;
        else if (mn) b = SHIFT + (r / 8) * 128 + (r % 8) * 2 + (k / 8) * R * 16 + (k % 8) * 16;
        else if (W) b = SHIFT + (r % 8) * W + (r / 8) * 8 * W + 2 * k;
        else b = SHIFT + (k / 8) * R * 16 + (r / 8) * 128 + (r % 8) * 16 + (k % 8) * 2;
        return swz(b) / 2;
    };
    for (int i = t; i < 64 * 16; i += blockDim.x) A[at(64, TA, i / 16, i % 16)] = rt_f32_to_bf16(in[i]);
    for (int i = t; i < 128 * 16; i += blockDim.x) B[at(128, TB, i / 16, i % 16)] = rt_f32_to_bf16(in[1024 + i]);
    K_FENCE_PROXY_ASYNC();
    __syncthreads();
    float d[64];
    for (int e = 0; e < 64; e++) d[e] = 0.0f;
    const int lay = W == 128 ? K_WGMMA_SW128 : W == 64 ? K_WGMMA_SW64 : W == 32 ? K_WGMMA_SW32 : K_WGMMA_NOSWZ;
    auto desc = [&](const unsigned short *p, int R, int mn) {
        if (mn && W) return k_wgmma_desc((const char *)p + SHIFT, 8 * W, R / (W / 2) * 8 * W, lay);
        if (mn) return k_wgmma_desc((const char *)p + SHIFT, R * 16, 128, lay);
        return W ? k_wgmma_desc((const char *)p + SHIFT, 16, 8 * W, lay) : k_wgmma_desc((const char *)p + SHIFT, R * 16, 128, lay);
    };
    K_WGMMA_FENCE();
    K_WGMMA_BF16_128T(d, desc(A, 64, TA), desc(B, 128, TB), 1, TA, TB);
    K_WGMMA_COMMIT();
    K_WGMMA_WAIT(0);
    int w = (t & 127) >> 5, g = (t & 31) >> 2, q = t & 3;
    for (int e = 0; e < 64; e++) out[(16 * w + g + 8 * ((e >> 1) & 1)) * 128 + 8 * (e >> 2) + 2 * q + (e & 1)] = d[e];
}

// wgmma_case's product with A from registers (simt::wgmma_rs, FlashAttention-3's P V):
// each thread packs its fragment (warp w rows 16w + g, + 8; k 2q, 2q + 1, then + 8).
// MODE 1: a thread changes an A register between the op and its wait_group; 2: after its
// wgmma.fence, before the op; 3: imm-trans-a 1 (PTX has none for register A).
template <int MODE> __global__ void wgmma_rs_case(const float *in, float *out)
{
    __shared__ __attribute__((aligned(16))) unsigned short B[128 * 16];
    int t = threadIdx.x, w = t >> 5, g = (t & 31) >> 2, q = t & 3;
    for (int i = t; i < 128 * 16; i += blockDim.x) { // as wgmma_case's B
        int n = i / 16, k = i % 16;
        B[(k / 8) * 128 * 8 + (n / 8) * 64 + (n % 8) * 8 + k % 8] = rt_f32_to_bf16(in[1024 + i]);
    }
    K_FENCE_PROXY_ASYNC();
    __syncthreads();
    unsigned a[4];
    for (int i = 0; i < 4; i++) {
        int r = 16 * w + g + 8 * (i & 1), k = 2 * q + 8 * (i >> 1);
        a[i] = k_pack_bf16x2(in[r * 16 + k], in[r * 16 + k + 1]);
    }
    float d[64];
    for (int e = 0; e < 64; e++) d[e] = 0.0f;
    K_WGMMA_FENCE();
    if (MODE == 2 && t == 5) a[2] ^= 1;
    simt::wgmma_rs(__FILE__, __LINE__, simt::MMA_BF16, 128, d, a, k_wgmma_desc(B, 128 * 16, 128, K_WGMMA_NOSWZ), 1, 0,
                   MODE == 3);
    K_WGMMA_COMMIT();
    if (MODE == 1 && t == 5) a[2] ^= 1;
    K_WGMMA_WAIT(0);
    for (int e = 0; e < 64; e++) out[(16 * w + g + 8 * ((e >> 1) & 1)) * 128 + 8 * (e >> 2) + 2 * q + (e & 1)] = d[e];
}

// imm-trans-a 1 on a tf32 wgmma: PTX has no transpose for 32-bit types.
__global__ void wgmma_mn_tf32(float *out)
{
    __shared__ __attribute__((aligned(1024))) unsigned A[64 * 8], B[128 * 8];
    float d[64];
    for (int e = 0; e < 64; e++) d[e] = 0.0f;
    K_WGMMA_FENCE();
    simt::wgmma(__FILE__, __LINE__, simt::MMA_TF32, 128, d, k_wgmma_desc(A, 1024, 128, K_WGMMA_NOSWZ),
                k_wgmma_desc(B, 2048, 128, K_WGMMA_NOSWZ), 1, 1, 0);
    K_WGMMA_COMMIT();
    K_WGMMA_WAIT(0);
    out[threadIdx.x] = d[0];
}

// m64n128k8 tf32 (K-major only) on a 64x8 A and 128x8 B rounded by k_tf32 (cvt.rna):
// W = 0, no swizzle: core matrices of 8 rows x 16 bytes (4 k), the next 8 rows SBO = 128
// bytes on, the next 4 k LBO = R * 16 bytes on; W-byte swizzle: rows of W bytes, the 8 k
// (32 bytes) at byte OFF of a row, byte b holding what the hardware reads at
// b ^ (((b >> 7) & (W / 16 - 1)) << 4). The executor reads 4-byte elements there.
template <int W, int OFF> __global__ void wgmma_tf32_case(const float *in, float *out)
{
    __shared__ __attribute__((aligned(1024))) unsigned A[64 * 32], B[128 * 32];
    int t = threadIdx.x;
    auto at = [](int R, int r, int k) {
        int b = W ? (r % 8) * W + (r / 8) * 8 * W + OFF + 4 * k : (k / 4) * R * 16 + (r / 8) * 128 + (r % 8) * 16 + (k % 4) * 4;
        return (W ? b ^ (((b >> 7) & (W / 16 - 1)) << 4) : b) / 4;
    };
    for (int i = t; i < 64 * 8; i += blockDim.x) A[at(64, i / 8, i % 8)] = k_tf32(in[i]);
    for (int i = t; i < 128 * 8; i += blockDim.x) B[at(128, i / 8, i % 8)] = k_tf32(in[1024 + i]);
    K_FENCE_PROXY_ASYNC();
    __syncthreads();
    float d[64];
    for (int e = 0; e < 64; e++) d[e] = 0.0f;
    const int lay = W == 128 ? K_WGMMA_SW128 : W == 64 ? K_WGMMA_SW64 : K_WGMMA_NOSWZ;
    K_WGMMA_FENCE();
    K_WGMMA_TF32_128(d, W ? k_wgmma_desc((char *)A + OFF, 16, 8 * W, lay) : k_wgmma_desc(A, 64 * 16, 128, lay),
                     W ? k_wgmma_desc((char *)B + OFF, 16, 8 * W, lay) : k_wgmma_desc(B, 128 * 16, 128, lay), 1);
    K_WGMMA_COMMIT();
    K_WGMMA_WAIT(0);
    int w = (t & 127) >> 5, g = (t & 31) >> 2, q = t & 3;
    for (int e = 0; e < 64; e++) out[(16 * w + g + 8 * ((e >> 1) & 1)) * 128 + 8 * (e >> 2) + 2 * q + (e & 1)] = d[e];
}

static int check_wgmma_tf32(const float *in, const float *o)
{
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 128; n++) {
            double s = 0;
            for (int k = 0; k < 8; k++)
                s += (double)__uint_as_float(k_tf32(in[m * 8 + k])) * __uint_as_float(k_tf32(in[1024 + n * 8 + k]));
            if (o[m * 128 + n] != (float)s) {
                printf("result: wgmma tf32 D[%d][%d] is %g, the product %g\n", m, n, o[m * 128 + n], s);
                return 1;
            }
        }
    printf("result: wgmma tf32 ok\n");
    return 0;
}

static int check_wgmma(const float *in, const float *o)
{
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 128; n++) {
            double s = 0;
            for (int k = 0; k < 16; k++)
                s += (double)rt_bf16_to_f32(rt_f32_to_bf16(in[m * 16 + k])) *
                     rt_bf16_to_f32(rt_f32_to_bf16(in[1024 + n * 16 + k]));
            if (fabs(o[m * 128 + n] - s) > 1e-5 * (1 + fabs(s))) {
                printf("result: wgmma D[%d][%d] is %g, the product %g\n", m, n, o[m * 128 + n], s);
                return 1;
            }
        }
    printf("result: wgmma ok\n");
    return 0;
}

