/* Device tests as processes on one device (the executor's shared memory, or a GPU's):
 * the runner the cuda_ipc tests share (test_gpu_ipc.c, test_gpu_ipc_hier.c). */
#ifndef TEST_GPU_PROCS_H
#define TEST_GPU_PROCS_H
#include <stddef.h>

/* One rank's body: its exit status. */
typedef int (*g_rank_fn)(const char *dir, int rank, int world, const void *arg);
/* Runs `world` (at most 8) ranks as processes in a fresh folder named by tag, each
 * fn(dir, rank, world, arg), with env ("VAR=value") set in rank env_rank only; each
 * one's output concatenated in out (rank order), its exit status in rcs (127: killed
 * after cap_s seconds, so no test hangs). */
void g_run_ranks(g_rank_fn fn, const void *arg, const char *tag, int world, const char *env, int env_rank, int cap_s,
                 char *out, size_t n, int *rcs);
/* The executor shares device memory between processes only outside ASan builds: 1 (and
 * a note) when this test must skip. */
int g_ipc_skip(void);
#endif
