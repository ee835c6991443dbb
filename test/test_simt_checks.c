/* The SIMT executor's checks (test/simt), each on a small kernel broken on purpose
 * (test/simt/simt_checks.cu): what a CUDA developer expects from compute-sanitizer is a
 * report that names the check, the kernel and the threads. Plus the intrinsics' results
 * against CUDA's definitions under every thread order. */
#include "test/t.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#if DDPRT_HAVE_SIMT
static char out[65536];

/* t-simt-checks CASE with thread order `order`; its output in out. */
static void run_case(const char *c, const char *order)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "DDPRT_SIMT_SCHED=%s %s %s 2>&1", order, t_prog("t-simt-checks"), c);
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) pclose(f);
}

static int asan(void) { return t_san("address"); }
static int tsan(void) { return t_san("thread"); }

/* The case's report holds every one of the words (NULL-terminated). */
static void expect(const char *c, ...)
{
    run_case(c, "forward");
    va_list ap;
    va_start(ap, c);
    for (const char *w; (w = va_arg(ap, const char *));)
        CHECKF(strstr(out, w), "%s: no \"%s\" in:\n%s", c, w, out);
    va_end(ap);
}

TEST(simt_barrier_checks)
{
    expect("barrier_divergence", "barrier divergence", "barrier_divergence (launched at simt_checks.cu:",
           "threads 0-15 wait at __syncthreads (simt_checks.cu:", "threads 16-63", NULL);
    expect("barrier_after_exit", "unspecified launch failure", "__syncthreads (simt_checks.cu:",
           "after threads 5 exited", NULL);
    expect("warp_barrier_deadlock", "deadlock: threads 0 wait at __syncthreads", "threads 1-31 wait at __syncwarp",
           NULL);
}

TEST(simt_warp_checks)
{
    expect("shfl_exited_lane", "__shfl_xor_sync", "names lane 3, which has exited", NULL);
    expect("shfl_divergent", "divergent warp intrinsics in warp 0: lanes 0-15 at __shfl_xor_sync",
           "lanes 16-31 at __shfl_xor_sync", NULL);
    expect("shfl_outside_mask", "lane 0 of warp 0 reads lane 20, which is not in the mask 0x0000ffff", NULL);
    expect("ballot_divergent", "divergent warp intrinsics", "__ballot_sync", "__syncwarp", NULL);
    expect("mask_nonexistent_lane", "names lane 16 of warp 1, which does not exist (48 threads in the block)", NULL);
}

TEST(simt_launch_checks)
{
    expect("launch_bounds", "too many resources requested for launch", "over the kernel's __launch_bounds__(128)",
           NULL);
    expect("launch_bounds_ok", "report: none", NULL);
    expect("bad_config", "invalid configuration argument", "block (2048,1,1)", NULL);
    expect("big_shared", "53248 bytes of static shared memory", NULL);
    expect("host_pointer", "argument 1 is", "not device memory", NULL);
}

TEST(simt_out_of_bounds_device_memory)
{
    if (asan()) { /* ASan owns device allocations' bounds to the byte */
        expect("write_past_end", "heap-buffer-overflow", "write_one_past", NULL);
        expect("write_into_guard", "heap-buffer-overflow", NULL);
        return;
    }
    expect("write_past_end", "device allocation", "the bytes after its end were overwritten", NULL);
    expect("write_into_guard", "write_one_past (launched at simt_checks.cu:", "block (16,0,0) thread (0,0,0)",
           "out-of-bounds access", "0 bytes past the end of device allocation", NULL);
}

/* A missing barrier: the result follows the thread order (NaN where a neighbour had not
 * yet written its shared slot), and TSan calls it a race. */
TEST(simt_missing_barrier_shows)
{
    static char fwd[sizeof out];
    run_case("missing_barrier", "forward");
    memcpy(fwd, out, sizeof out);
    run_case("missing_barrier", "reversed");
    CHECKF(strstr(fwd, "result: 255 of 256 NaN") && strstr(out, "result: 1 of 256 NaN"), "forward: %s\nreversed: %s",
           fwd, out);
    if (tsan()) CHECKF(strstr(out, "data race") && strstr(out, "missing_barrier"), "%s", out);
}

/* ASan sees it, and UBSan (the array's bound is in its type); otherwise the read lands
 * on NaN (the arrays are in one section with a NaN tail, filled before every block). */
TEST(simt_out_of_bounds_shared_read)
{
    if (asan()) expect("oob_shared_read", "global-buffer-overflow", "oob_shared_read", NULL);
    else if (t_san("undefined")) expect("oob_shared_read", "index 64 out of bounds", NULL);
    else expect("oob_shared_read", "result: 1 of 64 NaN", NULL);
}

TEST(simt_intrinsics_match_cuda_in_every_order)
{
    static const char *orders[] = {"forward", "reversed", "random"};
    for (int i = 0; i < 3; i++) {
        run_case("intrinsics", orders[i]);
        CHECKF(strstr(out, "report: none") && strstr(out, "result: intrinsics ok"), "%s threads:\n%s", orders[i], out);
    }
}

TEST(simt_failure_sticks)
{
    expect("sticky", "report: unspecified launch failure (simt: barrier_after_exit", "result: memcpy 719", NULL);
}
#endif
