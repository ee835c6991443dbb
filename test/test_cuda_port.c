/* The CUDA port where there is no GPU (this machine, CI): asking for the GPU gives a
 * clear one-line error, never a crash, in both builds (ports/cuda without a GPU or
 * driver, ports/nocuda). On a machine with a GPU these tests skip; make test-gpu
 * covers it there. */
#include "test/t.h"
#include "test/t_util.h"
#include "test/t_data.h"
#include "ports/cuda/port_cuda.h"
#include "transport/tp_staged.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"
#endif

TEST(cuda_port_matches_the_build)
{
#if DDPRT_CUDA
    CHECK(port_cuda_built() == 1);
#else
    CHECK(port_cuda_built() == 0);
#endif
}

TEST(cuda_init_without_gpu_is_a_clear_error)
{
    if (port_cuda_device_count() > 0) return; /* a GPU: make test-gpu's business */
    char err[512] = "";
    CHECK(port_cuda_init(0, err, sizeof err) == -1);
    CHECKF(strstr(err, "--device cuda") && (strstr(err, "no CUDA GPU") || strstr(err, "no CUDA port")) &&
           strstr(err, "use --device cpu") && !strchr(err, '\n'), "%s", err);
    /* Memory and streams fail with a message naming the call and the sizes. */
    void *p = (void *)1;
    CHECK(port_dev_malloc(&p, 3u << 20, "device arena") == -1 && p == NULL);
    CHECKF(strstr(port_cuda_errmsg(), "device arena"), "%s", port_cuda_errmsg());
#if DDPRT_CUDA
    CHECKF(strstr(port_cuda_errmsg(), "cudaMalloc") && strstr(port_cuda_errmsg(), "3.0 MiB"), "%s", port_cuda_errmsg());
#endif
    port_cuda_clear_error();
    tp_dev_cuda dc;
    CHECK(tp_dev_cuda_init(&dc, 0, NULL, 4) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "staging D2H stream"), "%s", port_cuda_errmsg());
    tp_dev_cuda_destroy(&dc);
}

#if DDPRT_CUDA
TEST(cuda_kernel_launch_error_names_kernel_and_shapes)
{
    if (port_cuda_device_count() > 0) return;
    /* No device: the launch itself fails; the check after it must say which kernel,
     * with which shapes, and CUDA's reason. */
    port_cuda_clear_error();
    k_conv_shape sh = {.n = 2, .c = 3, .h = 9, .w = 9, .k = 4, .r = 3, .s = 3, .stride = 2, .pad = 1};
    k_conv_shape_init(&sh);
    float *fake = (float *)64;
    CHECK(k_cuda_conv2d_fwd(&sh, fake, fake, fake, fake, NULL, NULL) == -1);
    const char *m = port_cuda_errmsg();
    CHECKF(strstr(m, "k_cuda_conv2d_fwd(") && strstr(m, "n=2 c=3 h=9 w=9 k=4 r=3 s=3 stride=2 pad=1"), "%s", m);
    port_cuda_clear_error();
    CHECK(k_cuda_relu_fwd(1000, fake, fake, NULL) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "k_cuda_relu_fwd(n=1000)"), "%s", port_cuda_errmsg());
    /* The layer-graph kernels too: a block reduction, a functor launch, embedding. */
    port_cuda_clear_error();
    CHECK(k_cuda_bn_stats(4, 64, 49, fake, fake, fake, NULL) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "k_cuda_bn_stats(n=4 c=64 hw=49)"), "%s", port_cuda_errmsg());
    port_cuda_clear_error();
    CHECK(k_cuda_max_time_fwd(64, 100, 62, fake, fake, (int32_t *)fake, NULL) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "k_cuda_max_time_fwd(n=64 c=100 len=62)"), "%s", port_cuda_errmsg());
    port_cuda_clear_error();
    CHECK(k_cuda_embedding_bwd(64, 64, 128, 20000, (int32_t *)fake, fake, fake, NULL) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "k_cuda_embedding_bwd(n=64 len=64 dim=128 vocab=20000)"), "%s",
           port_cuda_errmsg());
    port_cuda_clear_error();
}

TEST(cuda_maxpool_pad_rejects_padding_over_half_the_kernel)
{
    /* Checked on the host before any launch, so it holds with or without a GPU. */
    port_cuda_clear_error();
    float *fake = (float *)64;
    CHECK(k_cuda_maxpool2d_pad_fwd(2, 3, 8, 8, 3, 2, 2, fake, fake, (int32_t *)fake, NULL) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "k_cuda_maxpool2d_pad_fwd(n=2 c=3 h=8 w=8 ks=3 st=2 pad=2)") &&
           strstr(port_cuda_errmsg(), "pad <= ks/2"), "%s", port_cuda_errmsg());
    port_cuda_clear_error();
    CHECK(k_cuda_maxpool2d_pad_bwd(2, 3, 8, 8, 3, 0, 1, fake, (int32_t *)fake, fake, NULL) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "k_cuda_maxpool2d_pad_bwd(") && strstr(port_cuda_errmsg(), "st=0"), "%s",
           port_cuda_errmsg());
    port_cuda_clear_error();
}
#endif

TEST(train_device_cuda_without_gpu_fails_in_one_line)
{
    if (port_cuda_device_count() > 0) return;
    const char *dir = t_tmpdir("cudaport");
    t_write_synthetic_dataset(dir, 64, 32, 0);
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s --device cuda --epochs 1 --data %s 2>&1", t_prog("ddprt-train"), dir);
    CHECK(t_sh(cmd, out, sizeof out) == 1);
    CHECKF(strstr(out, "--device cuda") && (strstr(out, "no CUDA GPU") || strstr(out, "no CUDA port")), "%s", out);
    CHECKF(!strstr(out, "Train Epoch"), "trained anyway: %s", out);
    /* --no-cuda (the seed's flag) wins over --device cuda and trains on the CPU. */
    snprintf(cmd, sizeof cmd, "%s --device cuda --no-cuda --epochs 1 --max-steps 2 --data %s 2>&1",
             t_prog("ddprt-train"), dir);
    CHECKF(t_sh(cmd, out, sizeof out) == 0, "%s", out);
}
