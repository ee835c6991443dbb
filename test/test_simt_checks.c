/* The SIMT executor's checks (test/simt), each on a small kernel broken on purpose
 * (test/simt/simt_checks.cu): what a CUDA developer expects from compute-sanitizer is a
 * report that names the check, the kernel and the threads. Plus the intrinsics' results
 * against CUDA's definitions under every thread order. */
#include "test/t.h"
#include "test/t_proc.h"
#include "test/t_util.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/* Between warps, a warp intrinsic is no barrier: threads in rounds (forward) hide the
 * race, each warp alone up to the next barrier (warps) shows it (test/gpu's kernels run
 * in that order too, and the attention kernel's key-tile barrier, removed, fails there). */
TEST(simt_missing_barrier_between_warps_shows_warp_by_warp)
{
    static char fwd[sizeof out];
    run_case("missing_barrier_across_warps", "forward");
    memcpy(fwd, out, sizeof out);
    run_case("missing_barrier_across_warps", "warps");
    CHECKF(strstr(fwd, "result: 0 of 64 NaN") && strstr(out, "result: 32 of 64 NaN"), "forward: %s\nwarps: %s", fwd,
           out);
    if (tsan()) CHECKF(strstr(out, "data race") && strstr(out, "missing_barrier_across_warps"), "%s", out);
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
    static const char *orders[] = {"forward", "reversed", "random", "warps"};
    for (int i = 0; i < 4; i++) {
        run_case("intrinsics", orders[i]);
        CHECKF(strstr(out, "report: none") && strstr(out, "result: intrinsics ok"), "%s threads:\n%s", orders[i], out);
    }
}

/* mma.sync / ldmatrix / cp.async (test/simt/simt_tc.cc): each misuse named, and the
 * fragment layouts against a plain product under every thread order. */
TEST(simt_tensor_core_checks)
{
    expect("mma_partial_warp", "mma.sync at simt_checks.cu:", "issued by a partial warp: warp 1 has 16 threads", NULL);
    expect("mma_after_exit", "issued by a partial warp", "lanes 7 exited", NULL);
    expect("ldmatrix_misaligned", "ldmatrix at simt_checks.cu:", "lane 0 of warp 0 gives row address",
           "not 16-byte aligned", NULL);
    expect("ldmatrix_not_shared", "outside the kernel's shared memory", NULL);
    expect("cp_async_misaligned", "cp.async at simt_checks.cu:", "shared address", "is not 16-byte aligned",
           "(thread 0)", NULL);
    expect("cp_async_no_wait", "ldmatrix at simt_checks.cu:", "reads a row that cp.async at simt_checks.cu:",
           "before that thread's cp.async.wait_group covered it", NULL);
    expect("cp_async_no_barrier", "its wait_group was not followed by a __syncthreads", NULL);
    expect("cp_async_ok", "report: none", NULL);
    expect("wgmma_partial", "wgmma.mma_async at simt_checks_wgmma.cuh:", "issued by a partial warpgroup: threads 0-63 of a "
           "block of 64", NULL);
    expect("wgmma_overwritten", "wgmma.wait_group at simt_checks_wgmma.cuh:", "the shared-memory operands of "
           "wgmma.mma_async at simt_checks_wgmma.cuh:", "were written before this wait_group covered it", NULL);
    expect("wgmma_ok", "report: none", "result: wgmma ok", NULL);
    /* A from registers (FlashAttention-3's P V): the product under every order; the
     * registers changed before the wait, written after the fence, imm-trans-a 1 */
    static const char *rs_orders[] = {"forward", "reversed", "warps"};
    for (int i = 0; i < 3; i++) {
        run_case("wgmma_rs_ok", rs_orders[i]);
        CHECKF(strstr(out, "report: none") && strstr(out, "result: wgmma ok"), "%s:\n%s", rs_orders[i], out);
    }
    expect("wgmma_rs_overwritten", "wgmma.wait_group at simt_checks_wgmma.cuh:", "the A registers (at",
           "were written before this wait_group covered it", NULL);
    expect("wgmma_rs_after_fence", "wgmma.mma_async at simt_checks_wgmma.cuh:", "thread 5's A registers (at",
           "were written after its last wgmma.fence", NULL);
    expect("wgmma_rs_trans_a", "wgmma.mma_async at simt_checks_wgmma.cuh:", "imm-trans-a 1 with A in registers", NULL);
    expect("wgmma_no_proxy_fence", "wgmma.mma_async at simt_checks_wgmma.cuh:", "operand A row 0-0, k 0-7 at",
           "written by the generic proxy (a store or cp.async) since the last fence.proxy.async", NULL);
    expect("wgmma_proxy_fence_early", "wgmma.mma_async at simt_checks_wgmma.cuh:", "written by the generic proxy", NULL);
    expect("wgmma_no_barrier", "wgmma.mma_async at simt_checks_wgmma.cuh:", "stored since the last __syncthreads", NULL);
    expect("wgmma_ok_sw128", "report: none", "result: wgmma ok", NULL);
    expect("wgmma_ok_sw64", "report: none", "result: wgmma ok", NULL);
    expect("wgmma_ok_sw32", "report: none", "result: wgmma ok", NULL);
    expect("wgmma_swz_unaligned", "wgmma.mma_async at simt_checks_wgmma.cuh:", "operand A at", "64-byte swizzle: its "
           "swizzle pattern is not aligned to 8 rows of its width", NULL);
    expect("wgmma_swz_row_crossed", "operand A at", "64-byte swizzle: its 16 k cross the end of a swizzle row", NULL);
    /* M/N-major operands (imm-trans 1): every layout type against the plain product, and
     * a transposed A or B beside a K-major one; a pattern off its alignment and a
     * transposed tf32 named. */
    static const char *mn_ok[] = {"wgmma_mn_ok", "wgmma_mn_ok_sw32", "wgmma_mn_ok_sw64", "wgmma_mn_ok_sw128",
                                  "wgmma_mn_ok_a", "wgmma_mn_ok_b", "wgmma_mn_ok_b_noswz"};
    for (size_t i = 0; i < sizeof mn_ok / sizeof *mn_ok; i++) expect(mn_ok[i], "report: none", "result: wgmma ok", NULL);
    expect("wgmma_mn_unaligned", "wgmma.mma_async at simt_checks_wgmma.cuh:", "operand A at", "128-byte swizzle (M/N-major): "
           "its swizzle pattern (8 k-rows of its width) does not start at the operand's address", NULL);
    expect("wgmma_mn_tf32", "wgmma.mma_async at simt_checks_wgmma.cuh:", "imm-trans-a 1 (an M/N-major operand) with type 2: "
           "PTX allows the transpose only for 16-bit types", NULL);
    /* tf32 (m64n128k8, 4-byte elements) from K-major tiles: bitwise the product of the
     * rounded operands with no swizzle and the 64- / 128-byte swizzles; 8 k off a row named */
    static const char *tf_ok[] = {"wgmma_tf32_ok", "wgmma_tf32_ok_sw64", "wgmma_tf32_ok_sw128"};
    for (size_t i = 0; i < sizeof tf_ok / sizeof *tf_ok; i++) expect(tf_ok[i], "report: none", "result: wgmma tf32 ok", NULL);
    expect("wgmma_tf32_row_crossed", "operand A at", "64-byte swizzle: its 8 k cross the end of a swizzle row", NULL);
}

/* TMA and mbarriers (test/simt/simt_tma.cc): a tile copied in each swizzle and read back,
 * out-of-bounds elements zero, under every thread order; TMA tiles fed to wgmma through
 * swizzled descriptors (the two swizzles pair); the encode's checks; each misuse named. */
TEST(simt_tma_checks)
{
    const char *orders[] = {"forward", "reversed", "warps"};
    const char *ok[] = {"tma_ok_sw128", "tma_ok_sw64", "tma_ok_noswz"};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            run_case(ok[j], orders[i]);
            CHECKF(strstr(out, "report: none") && strstr(out, "result: tma tile 0 of"), "%s %s:\n%s", ok[j], orders[i],
                   out);
        }
    for (int i = 0; i < 3; i++) {
        run_case("tma_wgmma_sw128", orders[i]);
        CHECKF(strstr(out, "report: none") && strstr(out, "result: tma wgmma ok"), "%s:\n%s", orders[i], out);
        run_case("tma_wgmma_sw64", orders[i]);
        CHECKF(strstr(out, "report: none") && strstr(out, "result: tma wgmma ok"), "%s:\n%s", orders[i], out);
    }
    expect("tma_encode", "encode misaligned: the global address is not 16-byte aligned",
           "encode stride: the global stride is not a multiple of 16", "encode box: a box dimension is 0 or over 256",
           "encode wide: the box's inner dimension is wider than the swizzle", NULL);
    expect("tma_no_wait", "ldmatrix at simt_checks_tma.cuh:", "reads shared bytes that cp.async.bulk.tensor at "
           "simt_checks_tma.cuh:", "has not waited for their phase 0 of the mbarrier at shared offset", NULL);
    expect("tma_expect_tx_wrong", "mbarrier phase never completes: threads 0-127 wait at simt_checks_tma.cuh:",
           "phase 0 has 0 of 1 arrivals pending and 16 transaction bytes still expected", NULL);
    expect("tma_misaligned", "cp.async.bulk.tensor.2d at simt_checks_tma.cuh:", "is not 1024-byte aligned (the "
           "swizzle's 8-row pattern)", NULL);
    expect("mbar_uninit", "is used uninitialised (no mbarrier.init in this block)", NULL);
    expect("tma_overwrite_unwaited", "writes shared bytes of a TMA copy whose mbarrier phase completed but that no "
           "thread has waited for", NULL);
    expect("mbar_init_no_sync", "was initialised by thread 0 with no __syncthreads since", NULL);
    expect("mbar_phase_skipped", "completed 3 phases since the thread last saw it (0): a parity wait cannot tell them "
           "apart", NULL);
    expect("dyn_shared", "65536 bytes of dynamic shared memory: over the kernel's 49152", "report: attribute 0\n"
           "report: none\nresult: dynamic shared memory 0 wrong", NULL);
    expect("mbar_extra_arrive", "1 arrival(s) on the mbarrier at shared offset", "whose phase 0 has 0 of 1 arrivals "
           "left (8192 transaction bytes pending)", NULL);
}

/* TMA's im2col mode (test/simt/simt_tma.cc): a strided, padded 3x3 conv's column of pixels
 * (one tap) read back against the conv's indices in every thread order, zeros in the
 * padding and past the batch; cuTensorMapEncodeIm2col's checks; misuse named. */
TEST(simt_tma_im2col_checks)
{
    const char *orders[] = {"forward", "reversed", "warps"};
    for (int i = 0; i < 3; i++) {
        run_case("i2c_ok", orders[i]);
        CHECKF(strstr(out, "report: none") && strstr(out, "result: i2c 0 wrong (21 pixels zero)"), "%s:\n%s",
               orders[i], out);
    }
    expect("i2c_encode", "encode misaligned: the global address is not 16-byte aligned",
           "encode corner: a pixel box corner is outside [-128, 127] (rank 4)",
           "encode wide: channelsPerPixel's bytes are wider than the swizzle",
           "encode pixels: pixelsPerColumn is 0 or over 1024", "encode stride: an element stride is 0 or over 8",
           "encode box: the pixel bounding box has no area", NULL);
    expect("i2c_tiled_map", "cp.async.bulk.tensor.4d.im2col at simt_checks_i2c.cuh:", "the tensor map was not encoded "
           "(cuTensorMapEncodeIm2col): a tiled map in im2col mode", NULL);
    expect("i2c_off_lattice", "cp.async.bulk.tensor.4d.im2col at simt_checks_i2c.cuh:", "start pixel (w 2, h 1) is not "
           "on the bounding box's traversal (w -1..4 step 2, h -1..3 step 2)", NULL);
}

/* setmaxnreg (test/simt/simt_regs.cc): a producer warpgroup's dec and two consumers' inc
 * complete in every thread order (the incs wait for the dec); each misuse named. */
TEST(simt_setmaxnreg_checks)
{
    const char *orders[] = {"forward", "reversed", "warps"};
    for (int i = 0; i < 3; i++) {
        run_case("setmaxnreg_ok", orders[i]);
        CHECKF(strstr(out, "report: none") && strstr(out, "result: setmaxnreg 0 wrong"), "%s:\n%s", orders[i], out);
    }
    expect("setmaxnreg_pool", "setmaxnreg.inc at simt_checks_tma.cuh:", "(threads 256-383) never completes: warpgroup 2 "
           "asks for 9216 more registers (to 240 a thread), the block's pool holds 7168", "given 64512 at launch (168 a "
           "thread x 384 threads", NULL);
    expect("setmaxnreg_count", "setmaxnreg.inc at simt_checks_tma.cuh:", "register count 228 is not a multiple of 8 in "
           "[24, 256]", NULL);
    expect("setmaxnreg_dec_raises", "setmaxnreg.dec at simt_checks_tma.cuh:", "to 176 registers a thread: warp 0 holds "
           "168 (dec only lowers the count", NULL);
    expect("setmaxnreg_partial", "setmaxnreg at simt_checks_tma.cuh:", "issued by a partial warpgroup: threads 0-63 "
           "reach it, threads 64-127 exited", NULL);
    expect("setmaxnreg_inc_lowers", "setmaxnreg.inc at simt_checks_tma.cuh:", "to 160 registers a thread: warp 4 holds "
           "168 (inc only raises the count", NULL);
}

/* CUDA IPC across processes (issue 42's first step): the owner's device buffer, filled
 * by its kernel, is mapped by a peer process through cudaIpcOpenMemHandle, whose kernel
 * writes it; the owner sees the writes. cudaFree of the mapping is refused, a handle of
 * a process that has exited is named as gone. */
PTEST(simt_cuda_ipc_between_processes)
{
    const char *d = t_proc_tmpdir(), *p = t_prog("t-simt-checks");
    char cmd[2048];
    static char o[8192];
    if (asan()) {
        snprintf(cmd, sizeof cmd, "%s ipc_owner %s/h 2>&1", p, d);
        t_sh(cmd, o, sizeof o);
        CHECKF(strstr(o, "only outside ASan builds"), "%s", o);
        return;
    }
    snprintf(cmd, sizeof cmd, "%s ipc_owner %s/h >%s/o 2>&1 & %s ipc_peer %s/h 2>&1; wait; cat %s/o", p, d, d, p, d, d);
    int rc = t_sh(cmd, o, sizeof o);
    CHECKF(rc == 0 && strstr(o, "report: cudaFree on it: invalid argument") &&
           strstr(o, "result: peer kernel no error, close no error") &&
           strstr(o, "result: owner sees the peer's writes: 0 of 1000 wrong"), "exit %d:\n%s", rc, o);
    snprintf(cmd, sizeof cmd, "%s ipc_owner_gone %s/g && %s ipc_peer %s/g 2>&1", p, d, p, d);
    rc = t_sh(cmd, o, sizeof o);
    CHECKF(strstr(o, "cudaIpcOpenMemHandle: the allocation of process") && strstr(o, "is gone"), "exit %d:\n%s", rc, o);
}

/* Interprocess events (issue 42): the peer's cudaStreamWaitEvent on the opened event
 * waits for the owner's latest record (queued behind 40 kernels that fill the shared
 * buffer), cudaEventQuery / cudaEventSynchronize there see the owner's records, and a
 * plain event has no handle. */
PTEST(simt_cuda_ipc_events_between_processes)
{
    if (asan()) { t_note("IPC memory is shared only outside ASan builds"); return; }
    const char *d = t_proc_tmpdir(), *p = t_prog("t-simt-checks");
    char cmd[2048];
    static char o[8192];
    snprintf(cmd, sizeof cmd, "%s ipc_event_owner %s/e >%s/o 2>&1 & %s ipc_event_peer %s/e 2>&1; wait $!; r=$?; "
             "cat %s/o; exit $r", p, d, d, p, d, d);
    int rc = t_sh(cmd, o, sizeof o);
    CHECKF(rc == 0 && strstr(o, "report: first record seen done: no error") &&
           strstr(o, "result: event sync no error; the peer's kernel after the owner's fills: 0 of 16384 wrong") &&
           strstr(o, "report: handle of a plain event: invalid resource handle"), "exit %d:\n%s", rc, o);
}

/* The bank count (DDPRT_SIMT_BANKS) sees the conflicts of a plain 128-byte-row tile and
 * none once its chunks are XOR-swizzled. */
TEST(simt_ldmatrix_bank_conflicts_counted)
{
    char path[512], cmd[1024];
    snprintf(path, sizeof path, "%s/banks.txt", t_proc_tmpdir());
    snprintf(cmd, sizeof cmd, "DDPRT_SIMT_BANKS=%s %s ldmatrix_banks 2>&1", path, t_prog("t-simt-checks"));
    static char o[4096];
    int rc = t_sh(cmd, o, sizeof o);
    const char *b = t_slurp(path);
    CHECKF(rc == 0 && b && strstr(b, "ldmatrix banks: ldmatrix_banks: 4 phases, 4 conflicted (worst 8-way)\n"
                                     "ldmatrix banks: ldmatrix_banks: 4 phases, 0 conflicted (worst 1-way)\n"),
           "exit %d: %s\n%s", rc, o, b ? b : "(no report)");
}

TEST(simt_mma_layouts_match_the_ptx_isa)
{
    static const char *orders[] = {"forward", "reversed", "random", "warps"};
    for (int i = 0; i < 4; i++) {
        run_case("mma_layouts", orders[i]);
        CHECKF(strstr(out, "report: none") && strstr(out, "result: mma layouts ok"), "%s threads:\n%s", orders[i], out);
    }
}

/* Every injected bug's pattern still matches its kernel file exactly once (INJECT_DRY:
 * nothing built): make test rebuilds only the "tensor-core" rows, and a kernel edit once
 * broke another row's pattern unseen (the im2col tap's offsets, after padh / padw came). */
TEST(simt_injected_bugs_all_apply)
{
    static char o[65536];
    int rc = t_sh("INJECT_DRY=1 test/simt/inject_bugs.sh build - - - - 2>&1", o, sizeof o);
    const char *s = strstr(o, " mutations apply");
    while (s && s > o && s[-1] != '\n') s--;
    int n = 0, of = -1;
    CHECKF(rc == 0 && s && sscanf(s, "%d of %d", &n, &of) == 2 && n == of && n > 50, "exit %d:\n%s", rc, o);
    CHECKF(!strstr(o, "(mutation did not apply)"), "%s", o);
}

/* The injected tensor-core bugs (test/simt/inject_bugs.sh, the real kernel rebuilt with
 * each): a wrong fragment index fails the comparison with the reference, a missing
 * cp.async.wait_group (the 16-bit entry's and the mixed pipeline's of conv / linear with
 * the 16-bit weights), a missing barrier between pipeline stages and a missing
 * wgmma.fence (the 16-bit entry's and conv's / linear's) are named by the executor; a
 * wgmma descriptor without the tiles' 64-byte swizzle fails the comparison; the
 * attention kernel's barrier before the next key tile, removed, fails the comparison
 * when warps run one by one (DDPRT_SIMT_SCHED=warps). Rebuilding under a sanitizer takes minutes: make simt-inject SAN=... does. */
PTEST(simt_injected_tensor_core_bugs_are_reported)
{
    if (asan() || tsan() || t_san("undefined")) {
        t_note("skipped under a sanitizer (make simt-inject SAN=... INJECT=tensor-core runs it)");
        return;
    }
    /* some 27 rebuilt kernel files and their runs: over 10 minutes on a quiet 2-core
     * machine, more when it is busy */
    alarm(1800);
    unsetenv("MAKEFLAGS"), unsetenv("MFLAGS"), unsetenv("MAKELEVEL");
    const char *b = getenv("DDPRT_BUILD");
    char cmd[512];
    static char o[32768];
    snprintf(cmd, sizeof cmd, "make -s --no-print-directory simt-inject BUILD='%s' INJECT=tensor-core 2>&1",
             b ? b : "build");
    int rc = t_sh(cmd, o, sizeof o);
    CHECKF(rc == 0, "exit %d:\n%s", rc, o);
    CHECKF(strstr(o, "| tensor-core GEMM: wrong A fragment rows in ldmatrix | k_cuda_tc_gemm.cuh | only the comparison"),
           "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM: cp.async.wait_group removed | k_cuda_tc_gemm.cuh | simt: ") &&
           strstr(o, "before that thread's cp.async.wait_group covered it"), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90): wgmma.fence removed | k_cuda_tc_wgmma.cuh | simt: ") &&
           strstr(o, "has not executed wgmma.fence since its accumulators were last its own"), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM: barrier between pipeline stages removed | k_cuda_tc_gemm.cuh | simt: ") &&
           strstr(o, "its wait_group was not followed by a __syncthreads"), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, conv and linear): wgmma.fence removed | k_cuda_tc_wgmma.cuh | simt: "),
           "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90): B's wgmma descriptor without the 64-byte swizzle | k_cuda_tc_wgmma.cuh | "
                     "only the comparison"), "%s", o);
    /* M/N-major wgmma (conv's weight gradient): a wrong transpose immediate reads past its
     * tile (into a stage cp.async is writing: named by the executor), a wrong LBO fails the
     * comparison, and the start-up probe's m/n-major product (which would turn wgmma off) */
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, M/N-major): imm-trans-b 0 on the N-major tile | k_cuda_tc_wgmma.cuh | "
                     "simt: "), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, M/N-major): imm-trans-a 0 on the M-major tile | k_cuda_tc_wgmma.cuh | "
                     "simt: "), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, M/N-major): B's descriptor LBO (the second 64 rows) wrong | "
                     "k_cuda_tc_wgmma.cuh | only the comparison"), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, M/N-major): B's descriptor LBO wrong, seen by the start-up probe | "
                     "k_cuda_tc_wgmma.cuh | only the comparison") &&
           strstr(o, "the probe's wgmma result") && strstr(o, "differs from mma.sync's"), "%s", o);
    /* the async proxy: wgmma's operands written by stores or cp.async with no fence.proxy.async
     * after them; and fw_fwd's V descriptor broken, seen by its start-up probe */
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90): fence.proxy.async after cp.async's writes removed | "
                     "k_cuda_tc_wgmma.cuh | simt: ") && strstr(o, "since the last fence.proxy.async"), "%s", o);
    /* fw_fwd's P V with P in registers: the fence before the registers are written, and
     * the registers changed before the wait_group (both named by the executor) */
    CHECKF(strstr(o, "| tensor-core attention (sm_90): wgmma.fence before P V placed before P's registers are "
                     "written | k_cuda_attn_wg.cuh | simt: ") && strstr(o, "were written after its last wgmma.fence"),
           "%s", o);
    CHECKF(strstr(o, "| tensor-core attention (sm_90): P's registers changed before the P V wait_group | "
                     "k_cuda_attn_wg.cuh | simt: ") && strstr(o, "the A registers (at"), "%s", o);
    CHECKF(strstr(o, "| tensor-core attention backward (sm_90): wgmma.fence before dV, dK placed before P^T / dS^T "
                     "are packed | k_cuda_attn_wgb.cuh | simt: ") && strstr(o, "were written after its last wgmma.fence"),
           "%s", o);
    CHECKF(strstr(o, "| tensor-core attention (sm_90): V's descriptor LBO 4 KiB, seen by the start-up probe | "
                     "k_cuda_attn_wg.cuh | only the comparison") && strstr(o, "the wgmma attention (hd 128) differs"),
           "%s", o);
    /* TMA (k_cuda_tc_tma.cuh): the mbarrier checks name each */
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, TMA): the consumers' wait on the full barrier removed | "
                     "k_cuda_tc_tma.cuh | simt: ") && strstr(o, "reads shared bytes that cp.async.bulk.tensor at"),
           "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, TMA): the producer's wait on the empty barrier removed | "
                     "k_cuda_tc_tma.cuh | simt: ") && strstr(o, "that no thread has waited for"), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, TMA): expect_tx 16 bytes short | k_cuda_tc_tma.cuh | simt: ") &&
           strstr(o, "mbarrier phase never completes"), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, TMA, M/N-major): B's descriptor LBO (the next 64 rows) 4 KiB, not the "
                     "boxes' 8 KiB | k_cuda_tc_tma.cuh | only the comparison"), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (sm_90, TMA): the consumers take more registers than the producer gives "
                     "(setmaxnreg.inc 240) | k_cuda_tc_tma.cuh | simt: ") && strstr(o, "setmaxnreg"), "%s", o);
    CHECKF(strstr(o, "| tensor-core GEMM (one 16-bit operand, one gathered): cp.async.wait_group removed | "
                     "k_cuda_tc_gemm.cuh | simt: "), "%s", o);
    CHECKF(strstr(o, "| tensor-core attention: barrier before the next key tile's loads removed | k_cuda_attn_tc.cu | "
                     "only the comparison"), "%s", o);
    CHECKF(strstr(o, "| tensor-core attention: P's C fragments reused as A in the wrong order | k_cuda_attn_tc.cuh | "
                     "only the comparison"), "%s", o);
    CHECKF(strstr(o, "| tensor-core attention: cp.async.wait_group removed | k_cuda_attn_tc.cuh | simt: (fa_"), "%s", o);
    /* named by the executor since dO goes by cp.async too (the next tile's copies land on
     * rows another warp's ldmatrix still reads); before, only the comparison saw it */
    CHECKF(strstr(o, "| tensor-core attention: barrier before overwriting the other K/V buffer removed | "
                     "k_cuda_attn_tc.cuh | simt: "), "%s", o);
}

TEST(simt_failure_sticks)
{
    expect("sticky", "report: unspecified launch failure (simt: barrier_after_exit", "result: memcpy 719", NULL);
}
#endif
