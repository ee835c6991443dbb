/* The CUDA kernels on the CPU: the device suite (test/gpu, the same tests make test-gpu
 * runs on a GPU) on the SIMT executor (test/simt), every kernel against the CPU
 * kernels or naive references, under two thread orders (a kernel whose result depends
 * on the order in which its threads run has a race). Built when the executor is
 * (g++ present, SIMT not 0). */
#include "ports/posix/port.h"
#include "test/t.h"
#include "test/t_proc.h"
#include "test/t_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DDPRT_HAVE_SIMT
/* The words of the suites' filters below (suite() refuses another): every device test must
 * hold one (simt_device_every_test_in_a_suite), or a new test/gpu file no filter names
 * would never run in make test. */
static const char *const suite_words[] = {
    "gpu_amp_act16", "gpu_amp_bf16_2_processes", "gpu_amp_fp16_", "gpu_ddp_resnet20_2_processes",
    "gpu_graph_ddp_2_ranks_one_gpu", "gpu_graph_steps_match_cpu", "gpu_tf32_", "gpu_train_gpt_matches_cpu",
    "gpu_train_resnet20_textcnn", "test_gpu_act16", "test_gpu_graph_ops", "test_gpu_ipc", "test_gpu_kernels",
    "test_gpu_op_", "test_gpu_staged_train", "test_gpu_tc", "test_gpu_tfm", "test_gpu_nhwc", "gpu_nhwc_",
    "gpu_train_gpt_adamw_and_resnet20_adam", "gpu_amp_channels_last_resnet20"};
#define N_SUITE_WORDS (sizeof suite_words / sizeof suite_words[0])
/* The device suite's tests whose name or file holds one of `filter`'s words, `jobs` at a
 * time (the runner's T_JOBS). */
static void suite_jobs(const char *filter, const char *order, int jobs)
{
    static char out[1 << 20];
    char cmd[1024];
    /* each word among suite_words (simt_device_every_test_in_a_suite's list) */
    char f[256], *save = NULL;
    snprintf(f, sizeof f, "%s", filter);
    for (char *w = strtok_r(f, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        int known = 0;
        for (size_t i = 0; i < N_SUITE_WORDS && !known; i++) known = !strcmp(w, suite_words[i]);
        CHECKF(known, "suite filter \"%s\" is not in suite_words", w);
    }
    snprintf(cmd, sizeof cmd, "T_JOBS=%d DDPRT_SIMT_SCHED=%s %s %s 2>&1", jobs, order, t_prog("test-gpu-simt"), filter);
    int rc = t_sh(cmd, out, sizeof out);
    const char *s = strstr(out, " passed, 0 failed");
    /* at least one test ran: a filter that matches nothing would pass as "0 passed" */
    while (s && s > out && s[-1] >= '0' && s[-1] <= '9') s--;
    CHECKF(rc == 0 && s && atoi(s) > 0, "%s (threads %s): exit %d\n%s", filter, order, rc, out);
}

static void suite(const char *filter, const char *order) { suite_jobs(filter, order, 1); }
/* The suites of kernel tests (no processes, ports or files but their own temporary ones),
 * on as many cores as there are (up to 4; one under a sanitizer): each test runs the
 * executor on one core, and make test's runner runs one test at a time. */
static void kernels_suite(const char *filter, const char *order)
{
    const int n = port_ncpus();
    suite_jobs(filter, order, t_san("address") || t_san("thread") || n < 1 ? 1 : n > 4 ? 4 : n);
}

/* The second order of a pair is the race check of builds without TSan; under make tsan
 * the annotations report a race from either order, and each suite takes 5-15 minutes. */
static int second_order(void)
{
    if (!t_san("thread")) return 1;
    t_note("under TSan one thread order per suite: TSan itself reports the races");
    return 0;
}

TEST(simt_device_kernels_forward_order) { kernels_suite("test_gpu_kernels", "forward"); }
TEST(simt_device_kernels_random_order) { if (second_order()) kernels_suite("test_gpu_kernels", "random"); }
TEST(simt_device_graph_ops_forward_order) { kernels_suite("test_gpu_graph_ops", "forward"); }
TEST(simt_device_graph_ops_reversed_order) { if (second_order()) kernels_suite("test_gpu_graph_ops", "reversed"); }
TEST(simt_device_transformer_forward_order) { kernels_suite("test_gpu_tfm", "forward"); }
TEST(simt_device_transformer_random_order) { if (second_order()) kernels_suite("test_gpu_tfm", "random"); }
/* The tensor-core GEMM: mma.sync, ldmatrix and cp.async on the executor's emulation. */
/* ... and their ldmatrix reads and cp.async stores conflict-free: the executor counts each
 * phase's shared-memory banks (DDPRT_SIMT_BANKS), and every tensor-core kernel's swizzled
 * tiles give 8 rows in 8 bank quads, in every launch of the suite (wg_gemm's stores, in
 * the no-swizzle wgmma layout, were 4-way in every phase). */
TEST(simt_device_tensor_cores_forward_order)
{
    char env[512];
    snprintf(env, sizeof env, "%s/banks.txt", t_proc_tmpdir());
    setenv("DDPRT_SIMT_BANKS", env, 1);
    kernels_suite("test_gpu_tc", "forward");
    unsetenv("DDPRT_SIMT_BANKS");
    FILE *f = fopen(env, "r");
    CHECKF(f != NULL, "no bank report %s", env);
    if (!f) return;
    static const char *const kernels[] = {"ldmatrix banks: tc_gemm", "ldmatrix banks: tf_gemm",
                                          "ldmatrix banks: fa_fwd",  "ldmatrix banks: fa_bwd_dkv",
                                          "ldmatrix banks: fa_bwd_dq", "cp.async banks: tc_gemm",
                                          "cp.async banks: wg_gemm", "cp.async banks: fa_fwd",
                                          "cp.async banks: fw_fwd", "cp.async banks: fw_bwd_dkv",
                                          "cp.async banks: fw_bwd_dq"};
    enum { NK = sizeof kernels / sizeof kernels[0] };
    int seen[NK] = {0}, bad = 0;
    char l[256];
    while (fgets(l, sizeof l, f)) {
        const char *c = strstr(l, " phases, ");
        if (!c || atoi(c + 9)) bad++;
        if (bad == 1) CHECKF(0, "bank conflicts: %s", l);
        for (int i = 0; i < NK; i++) {
            char k[64];
            snprintf(k, sizeof k, "%s: ", kernels[i]);
            seen[i] |= !strncmp(l, k, strlen(k));
        }
    }
    fclose(f);
    for (int i = 0; i < NK; i++) CHECKF(seen[i], "%s: no phases counted", kernels[i]);
}
TEST(simt_device_tensor_cores_reversed_order) { if (second_order()) kernels_suite("test_gpu_tc", "reversed"); }
/* Each warp alone up to the next barrier: a warp that overwrites (or reads) shared memory
 * another warp has yet to read (or write) with only warp intrinsics between sees it. */
TEST(simt_device_kernels_warps_order) { if (second_order()) kernels_suite("test_gpu_kernels test_gpu_graph_ops", "warps"); }
TEST(simt_device_tensor_cores_warps_order) { if (second_order()) kernels_suite("test_gpu_tc test_gpu_act16 test_gpu_tfm", "warps"); }
TEST(simt_device_act16_forward_order) { kernels_suite("test_gpu_act16", "forward"); }
TEST(simt_device_act16_random_order) { if (second_order()) kernels_suite("test_gpu_act16", "random"); }
/* One file per op's device test (test/gpu/test_gpu_op_KIND.c, docs/adding-an-op.md). */
TEST(simt_device_op_files_random_order) { suite("test_gpu_op_", "random"); }
/* Whole models, DDP, the staged allreduce and the trainer: the kernels above again, in
 * the order training calls them, with streams and events really concurrent. */
/* One test each: under make tsan the five in one process ran past the 900 s deadline. */
TEST(simt_device_model_steps_random_order) { suite("gpu_graph_steps_match_cpu", "random"); }
TEST(simt_device_model_ddp_one_gpu_random_order) { suite("gpu_graph_ddp_2_ranks_one_gpu", "random"); }
TEST(simt_device_train_resnet20_textcnn_random_order) { suite("gpu_train_resnet20_textcnn", "random"); }
TEST(simt_device_train_gpt_random_order) { suite("gpu_train_gpt_matches_cpu", "random"); }
TEST(simt_device_train_adamw_adam_random_order) { suite("gpu_train_gpt_adamw_and_resnet20_adam", "random"); }
TEST(simt_device_amp_bf16_random_order) { suite("gpu_amp_bf16_2_processes", "random"); }
TEST(simt_device_amp_act16_random_order) { suite("gpu_amp_act16", "random"); }
TEST(simt_device_amp_fp16_random_order) { suite("gpu_amp_fp16_", "random"); }
TEST(simt_device_tf32_random_order) { suite("gpu_tf32_", "random"); }
TEST(simt_device_ddp_2_processes_random_order) { suite("gpu_ddp_resnet20_2_processes", "random"); }
TEST(simt_device_staged_train_forward_order) { suite("test_gpu_staged_train", "forward"); }
/* Channels-last (test/gpu/test_gpu_nhwc*.c): the kernels in three orders, the trained
 * graphs (ResNet-20, the ResNet-18 stem, DDP and SyncBN in 2 processes) in one. */
TEST(simt_device_channels_last_forward_order) { suite("test_gpu_nhwc gpu_amp_channels_last_resnet20", "forward"); }
TEST(simt_device_channels_last_reversed_order) { if (second_order()) suite("gpu_nhwc_", "reversed"); }
TEST(simt_device_channels_last_warps_order) { if (second_order()) suite("gpu_nhwc_", "warps"); }

/* Every device test is in a suite: suite_words against the device runner's list (T_LIST). */
TEST(simt_device_every_test_in_a_suite)
{
    static char out[1 << 18];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "T_LIST=1 %s 2>&1", t_prog("test-gpu-simt"));
    int rc = t_sh(cmd, out, sizeof out), n = 0, missed = 0;
    CHECKF(rc == 0, "exit %d:\n%.2000s", rc, out);
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save), n++) {
        int in = 0;
        for (size_t w = 0; w < N_SUITE_WORDS && !in; w++) in = strstr(l, suite_words[w]) != NULL;
        if (!in && missed++ < 5) CHECKF(0, "device test in no make-test suite: %s", l);
    }
    CHECKF(n > 50, "only %d device tests listed", n);
}
/* The cuda_ipc device allreduce: 2 and 4 processes against the host's bits, DDPRT_P2P=0,
 * a killed rank (test/gpu/test_gpu_ipc.c); the hierarchical allreduce on fake hosts and
 * the broadcast (test/gpu/test_gpu_ipc_hier.c). */
TEST(simt_device_ipc_collectives_forward_order) { suite("test_gpu_ipc", "forward"); }
#endif

#if DDPRT_HAVE_SIMT
/* ddprt-bench-kernels' tensor-core table (what bench/gpu_device.sh runs on a lent GPU) on
 * the executor at tiny shapes, on mma.sync and on wgmma: every row runs to the end (the
 * executor's checks pass on its launches) and prints its rate; the times mean nothing. */
TEST(simt_bench_kernels_tensor_core_rows_run)
{
    static char out[1 << 16];
    static const char *const rows[] = {"gemm bf16 (%s)", "gemm f16 (%s)", "gemm tf32 (mma)", "conv bf16 fwd",
                                       "conv bf16 bwd", "conv tf32 fwd", "conv tf32 bwd", "attention bf16 fwd",
                                       "attention bf16 bwd"};
    for (int wg = 0; wg < 3; wg++) { /* mma.sync, wgmma, wgmma with TMA (its GEMM rows, and wg_gemm's beside) */
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "DDPRT_WGMMA=%d DDPRT_TMA=%d %s --device cuda --smoke 2>&1", wg > 0, wg == 2,
                 t_prog("t-bench-kernels-simt"));
        int rc = t_sh(cmd, out, sizeof out);
        CHECKF(rc == 0 && strstr(out, wg ? "tensor cores on wgmma" : "tensor cores on mma.sync"), "exit %d:\n%s", rc,
               out);
        int n = 0;
        for (const char *p = out; (p = strstr(p, " TFLOP/s, ")); p++) n++;
        /* + wg_gemm's row beside TMA's and wt_gemm's tiles (128 x 128, 128 x 256) on one product; + mma.sync's
         * TF32 row beside wgmma's */
        int want = 11 + 3 * (wg == 2) + (wg > 0);
        CHECKF(n == want, "%d rates, not %d:\n%s", n, want, out);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            char r[64];
            snprintf(r, sizeof r, rows[i], wg == 2 ? "TMA" : wg ? "wgmma" : "mma");
            CHECKF(strstr(out, r), "no row \"%s\":\n%s", r, out);
        }
        CHECKF(wg < 2 || strstr(out, "gemm bf16 (wgmma)"), "no wg_gemm row beside TMA's:\n%s", out);
        const char *t128 = strstr(out, "smoke TMA 128x128"), *t256 = strstr(out, "smoke TMA 128x256");
        CHECKF(wg < 2 || (t128 && t256 && !strncmp(t128 + 17, " <-", 3) + !strncmp(t256 + 17, " <-", 3) == 1),
               "no tile rows, or not one marked as the rule's:\n%s", out);
        /* TF32 on wgmma: TMA's wt_gemm where TMA is on, else wgtf_gemm */
        CHECKF(!wg || strstr(out, wg == 2 ? "gemm tf32 (TMA)" : "gemm tf32 (wgmma)"), "no TF32 wgmma row:\n%s", out);
    }
}
#endif
