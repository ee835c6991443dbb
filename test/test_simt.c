/* The CUDA kernels on the CPU: the device suite (test/gpu, the same tests make test-gpu
 * runs on a GPU) on the SIMT executor (test/simt), every kernel against the CPU
 * kernels or naive references, under two thread orders (a kernel whose result depends
 * on the order in which its threads run has a race). Built when the executor is
 * (g++ present, SIMT not 0). */
#include "test/t.h"
#include "test/t_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DDPRT_HAVE_SIMT
/* The device suite's tests whose name or file holds one of `filter`'s words. */
static void suite(const char *filter, const char *order)
{
    static char out[1 << 20];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "DDPRT_SIMT_SCHED=%s %s %s 2>&1", order, t_prog("test-gpu-simt"), filter);
    int rc = t_sh(cmd, out, sizeof out);
    const char *s = strstr(out, " passed, 0 failed");
    /* at least one test ran: a filter that matches nothing would pass as "0 passed" */
    while (s && s > out && s[-1] >= '0' && s[-1] <= '9') s--;
    CHECKF(rc == 0 && s && atoi(s) > 0, "%s (threads %s): exit %d\n%s", filter, order, rc, out);
}

/* The second order of a pair is the race check of builds without TSan; under make tsan
 * the annotations report a race from either order, and each suite takes 5-15 minutes. */
static int second_order(void)
{
    if (!t_san("thread")) return 1;
    t_note("under TSan one thread order per suite: TSan itself reports the races");
    return 0;
}

TEST(simt_device_kernels_forward_order) { suite("test_gpu_kernels", "forward"); }
TEST(simt_device_kernels_random_order) { if (second_order()) suite("test_gpu_kernels", "random"); }
TEST(simt_device_graph_ops_forward_order) { suite("test_gpu_graph_ops", "forward"); }
TEST(simt_device_graph_ops_reversed_order) { if (second_order()) suite("test_gpu_graph_ops", "reversed"); }
TEST(simt_device_transformer_forward_order) { suite("test_gpu_tfm", "forward"); }
TEST(simt_device_transformer_random_order) { if (second_order()) suite("test_gpu_tfm", "random"); }
/* The tensor-core GEMM: mma.sync, ldmatrix and cp.async on the executor's emulation. */
TEST(simt_device_tensor_cores_forward_order) { suite("test_gpu_tc", "forward"); }
TEST(simt_device_tensor_cores_reversed_order) { if (second_order()) suite("test_gpu_tc", "reversed"); }
TEST(simt_device_act16_forward_order) { suite("test_gpu_act16", "forward"); }
TEST(simt_device_act16_random_order) { if (second_order()) suite("test_gpu_act16", "random"); }
/* One file per op's device test (test/gpu/test_gpu_op_KIND.c, docs/adding-an-op.md). */
TEST(simt_device_op_files_random_order) { suite("test_gpu_op_", "random"); }
/* Whole models, DDP, the staged allreduce and the trainer: the kernels above again, in
 * the order training calls them, with streams and events really concurrent. */
/* One test each: under make tsan the five in one process ran past the 900 s deadline. */
TEST(simt_device_model_steps_random_order) { suite("gpu_graph_steps_match_cpu", "random"); }
TEST(simt_device_model_ddp_one_gpu_random_order) { suite("gpu_graph_ddp_2_ranks_one_gpu", "random"); }
TEST(simt_device_train_resnet20_textcnn_random_order) { suite("gpu_train_resnet20_textcnn", "random"); }
TEST(simt_device_train_gpt_random_order) { suite("gpu_train_gpt_matches_cpu", "random"); }
TEST(simt_device_amp_bf16_random_order) { suite("gpu_amp_bf16_2_processes", "random"); }
TEST(simt_device_amp_act16_random_order) { suite("gpu_amp_act16", "random"); }
TEST(simt_device_amp_fp16_random_order) { suite("gpu_amp_fp16_", "random"); }
TEST(simt_device_tf32_random_order) { suite("gpu_tf32_", "random"); }
TEST(simt_device_ddp_2_processes_random_order) { suite("gpu_ddp_resnet20_2_processes", "random"); }
TEST(simt_device_staged_train_forward_order) { suite("test_gpu_staged_train", "forward"); }
/* The cuda_ipc device allreduce: 2 and 4 processes against the host's bits, DDPRT_P2P=0,
 * a killed rank (test/gpu/test_gpu_ipc.c); the hierarchical allreduce on fake hosts and
 * the broadcast (test/gpu/test_gpu_ipc_hier.c). */
TEST(simt_device_ipc_collectives_forward_order) { suite("test_gpu_ipc", "forward"); }
#endif
