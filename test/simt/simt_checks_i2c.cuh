// t-simt-checks' TMA im2col cases (test/simt/simt_tma.cc), included by simt_checks.cu
// after simt_checks_tma.cuh: a column of a strided, padded 3x3 conv's pixels copied by
// cp.async.bulk.tensor.4d.im2col (one tap, 128-byte swizzle) and read back against the
// conv's indices (zero in the padding and past the batch); the encode's checks; misuse.

// NHWC x [2][5][6][64] bf16; a 3x3 conv, stride 2, padding 1 (3 x 3 outputs an image).
enum { I2C_N = 2, I2C_H = 5, I2C_W = 6, I2C_C = 64, I2C_PPC = 32, I2C_J0 = 4, I2C_R = 0, I2C_S = 2 };
static float i2c_v(int n, int h, int w, int c) { return (float)((n * 31 + h * 7 + w * 3 + c * 5) % 97 - 48) / 8.0f; }

// I2C_PPC pixels from output pixel I2C_J0 (n 0, p 1, q 1: start (1, 1)), tap (I2C_R,
// I2C_S), read back through the swizzle into out. BUG 1: the start one pixel off the
// traversal's lattice (w + 1: stride 2).
template <int BUG> __global__ void i2c_case(const K_GRID_CONST k_tmap map, float *out)
{
    __shared__ __attribute__((aligned(1024))) unsigned short tile[I2C_PPC * 64];
    __shared__ __attribute__((aligned(8))) unsigned long long bar;
    int t = threadIdx.x;
    if (t == 0) K_MBAR_INIT(&bar, 1), K_FENCE_MBAR_INIT();
    __syncthreads();
    if (t == 0) {
        K_MBAR_ARRIVE_TX(&bar, I2C_PPC * 128);
        K_TMA_LOAD_IM2COL_4D(tile, &map, 0, 1 + (BUG == 1), 1, 0, I2C_S, I2C_R, &bar);
    }
    K_MBAR_WAIT(&bar, 0);
    for (int i = t; i < I2C_PPC * 64; i += blockDim.x) {
        int off = i * 2;
        off ^= ((off >> 7) & 7) << 4;
        out[i] = rt_bf16_to_f32(tile[off / 2]);
    }
}

// Case names i2c_*: 0 done (its report and result printed), 1 unknown.
static int i2c_cases(const char *c, float *d)
{
    const size_t nx = (size_t)I2C_N * I2C_H * I2C_W * I2C_C;
    unsigned short *h = (unsigned short *)malloc(nx * 2), *x;
    for (int n = 0; n < I2C_N; n++)
        for (int y = 0; y < I2C_H; y++)
            for (int w = 0; w < I2C_W; w++)
                for (int ch = 0; ch < I2C_C; ch++)
                    h[((n * I2C_H + y) * I2C_W + w) * I2C_C + ch] = rt_f32_to_bf16(i2c_v(n, y, w, ch));
    if (cudaMalloc((void **)&x, nx * 2) || cudaMemcpy(x, h, nx * 2, cudaMemcpyHostToDevice)) exit(2);
    free(h);
    bufs[nbufs++] = (float *)x;
    k_tmap m;
    const char *why;
    if (!strcmp(c, "i2c_encode")) { // the driver's checks, each refused
        printf("report: encode misaligned: %s\n",
               k_tmap_encode_im2col(&m, x + 1, I2C_N, I2C_H, I2C_W, I2C_C, 3, 3, 2, 1, 64, 32, 128, &why) ? why : "ok");
        printf("report: encode corner: %s\n",
               k_tmap_encode_im2col(&m, x, I2C_N, I2C_H, I2C_W, I2C_C, 3, 3, 2, 200, 64, 32, 128, &why) ? why : "ok");
        printf("report: encode wide: %s\n",
               k_tmap_encode_im2col(&m, x, I2C_N, I2C_H, I2C_W, I2C_C, 3, 3, 2, 1, 128, 32, 128, &why) ? why : "ok");
        printf("report: encode pixels: %s\n",
               k_tmap_encode_im2col(&m, x, I2C_N, I2C_H, I2C_W, I2C_C, 3, 3, 2, 1, 64, 2048, 128, &why) ? why : "ok");
        printf("report: encode stride: %s\n",
               k_tmap_encode_im2col(&m, x, I2C_N, I2C_H, I2C_W, I2C_C, 3, 3, 9, 1, 64, 32, 128, &why) ? why : "ok");
        printf("report: encode box: %s\n",
               k_tmap_encode_im2col(&m, x, I2C_N, I2C_H, I2C_W, I2C_C, 9, 9, 1, 0, 64, 32, 128, &why) ? why : "ok");
        return 0;
    }
    if (!strcmp(c, "i2c_tiled_map")) { // a tiled map in im2col mode
        if (k_tmap_encode_2d(&m, x, I2C_N * I2C_H * I2C_W, I2C_C, I2C_C, 64, 32, 128, &why)) exit(2);
        SIMT_LAUNCH(i2c_case<0>, 1, 64, 0, 0)(m, d);
        report();
        return 0;
    }
    if (k_tmap_encode_im2col(&m, x, I2C_N, I2C_H, I2C_W, I2C_C, 3, 3, 2, 1, 64, I2C_PPC, 128, &why)) {
        printf("report: encode: %s\n", why);
        return 0;
    }
    if (!strcmp(c, "i2c_ok")) SIMT_LAUNCH(i2c_case<0>, 1, 64, 0, 0)(m, d);
    else if (!strcmp(c, "i2c_off_lattice")) SIMT_LAUNCH(i2c_case<1>, 1, 64, 0, 0)(m, d);
    else return 1;
    report();
    float *o = (float *)malloc(I2C_PPC * 64 * sizeof(float));
    if (cudaMemcpy(o, d, I2C_PPC * 64 * sizeof(float), cudaMemcpyDeviceToHost)) exit(2);
    int bad = 0, zeros = 0;
    for (int i = 0; i < I2C_PPC; i++) {
        int j = I2C_J0 + i, n = j / 9, p = j % 9 / 3, q = j % 3, y = 2 * p - 1 + I2C_R, w = 2 * q - 1 + I2C_S;
        int in = n < I2C_N && y >= 0 && y < I2C_H && w >= 0 && w < I2C_W;
        zeros += !in;
        for (int ch = 0; ch < 64; ch++) bad += o[i * 64 + ch] != (in ? i2c_v(n, y, w, ch) : 0.0f);
    }
    free(o);
    printf("result: i2c %d wrong (%d pixels zero)\n", bad, zeros);
    return 0;
}
