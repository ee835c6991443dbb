/* The start-up probes of the sm_90a paths beyond the GEMMs (kernels/cuda/k_cuda_probe.cu):
 * the attention's wgmma forward (fw_fwd) against fa_fwd, 1x1 convs as plain products and
 * 3x3 / strided convs on TMA's im2col against the geometry loaders. Each agrees here, says so, leaves its switch on, and really
 * ran its path: wgmma ops (the attention) and TMA boxes (1x1 convs with TMA on) counted on
 * the executor, and the strided dx's grouped phase product (k_cuda_conv2d_phase_groups). On an sm_90 GPU, k_cuda_wgmma_setup in its auto mode runs them after the
 * GEMM probes and says what they found. A path that disagrees is named and turned off:
 * test/simt/inject_bugs.sh's rows "seen by the start-up probe" break each path and this
 * test fails with the probe's line. */
#include "test/gpu/g.h"
#include "kernels/cuda/k_cuda_probe.h"

unsigned long long k_cuda_conv2d_phase_groups(void); /* kernels/cuda/k_cuda_conv.cu */

#if G_SIMT
unsigned long long simt_wgmma_count(int ta, int tb); /* test/simt/simt_tc.cc */
static unsigned long long wg_ops(void) { return simt_wgmma_count(0, 0) + simt_wgmma_count(0, 1); }
#else
static unsigned long long wg_ops(void) { return 0; }
#endif

TEST(gpu_tc_path_probes_agree)
{
    if (!g_sm90()) return;
    char why[300];
    for (int tma = 0; tma < 2; tma++) {
        setenv("DDPRT_WGMMA", "1", 1);
        setenv("DDPRT_TMA", tma ? "1" : "0", 1);
        CHECKF(k_cuda_wgmma_setup(why, sizeof why) == 1 && k_cuda_tma_on() == tma, "%s", why);
        unsigned long long w0 = wg_ops();
        int rc = k_cuda_attention_probe(why, sizeof why);
        CHECKF(rc == 1 && strstr(why, "the probe agrees with mma.sync (hd 64, 128; forward and backward)"), "attention probe: %d %s", rc, why);
        CHECKF(k_cuda_attention_set_wgmma(1) == 1, "the attention probe left fw_fwd off");
        CHECKF(!G_SIMT || wg_ops() > w0, "the attention probe ran no wgmma op");
        unsigned long long t0 = g_tma_count();
        rc = k_cuda_conv1x1_probe(why, sizeof why);
        CHECKF(rc == 1 && strstr(why, "the probe agrees with the geometry path (y, dx, dw, db)"), "conv 1x1 probe "
               "(TMA %d): %d %s", tma, rc, why);
        CHECKF(k_cuda_conv2d_set_1x1(1) == 1, "the conv 1x1 probe left the plain products off");
        CHECKF(!G_SIMT || (g_tma_count() > t0) == tma, "TMA %d: the conv 1x1 probe copied %llu TMA boxes", tma,
               g_tma_count() - t0);
        t0 = g_tma_count();
        unsigned long long g0 = k_cuda_conv2d_phase_groups();
        rc = k_cuda_conv_im2col_probe(why, sizeof why);
        CHECKF(rc == 1 && strstr(why, "the probe agrees with the geometry path (stride 1 and 2; y, dx, dw, db)"),
               "conv im2col probe (TMA %d): %d %s", tma, rc, why);
        CHECKF(k_cuda_conv2d_set_im2col(1) == 1, "the conv im2col probe left the im2col convs off");
        CHECKF(!G_SIMT || (g_tma_count() > t0) == tma, "TMA %d: the conv im2col probe copied %llu TMA boxes", tma,
               g_tma_count() - t0);
        /* its stride-2 dx: the four phases in one grouped product (with TMA) */
        CHECKF(k_cuda_conv2d_phase_groups() - g0 == (unsigned)tma, "TMA %d: the conv im2col probe made %llu grouped "
               "phase products", tma, k_cuda_conv2d_phase_groups() - g0);
    }
    unsetenv("DDPRT_TMA");
    if (!G_SIMT) { /* the auto mode on an sm_90 GPU: the GEMM probes, then these */
        unsetenv("DDPRT_WGMMA");
        char w[1024];
        int rc = k_cuda_wgmma_setup(w, sizeof w);
        printf("wgmma setup: %d %s\n", rc, w);
        CHECKF(rc == 1 && strstr(w, "; attention: the probe agrees") && strstr(w, "; conv 1x1: the probe agrees") &&
                   strstr(w, "; conv im2col: the probe agrees") && strstr(w, "; tf32: the probe agrees"),
               "%d %s", rc, w);
    }
    g_wgmma_off();
}
