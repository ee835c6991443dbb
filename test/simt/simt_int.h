// Between the two halves of the executor: simt_rt.cc (the CUDA runtime: memory,
// streams, events, errors) and simt_exec.cc (fibers: how one kernel launch runs).
#pragma once
#define SIMT_RUNTIME 1 // the declarations only, not the device-side macros
#include "test/simt/simt.h"
#include <stddef.h>
#include <string>
#include <utility>
#include <vector>

namespace simt {
// "simt: MESSAGE" on stderr, then abort: a state the executor cannot go on from.
[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// One queued kernel launch; the arguments are a copy of the caller's (simt.h).
struct launch_rec {
    void *kernel;
    invoke_fn invoke;
    cfg c;
    unsigned long long seq; // launches so far in this process (random order's seed)
    alignas(16) unsigned char args[SIMT_ARG_BYTES];
};

// A kernel's __launch_bounds__ (0: none) and its static shared variables (simt_kernel.cc).
struct kinfo {
    int bound;
    size_t shared;
    std::vector<std::pair<char *, size_t>> vars;
    std::string sym; // the kernel's (mangled) symbol
    int max_dyn;     // its dynamic shared memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize; 0: 48 KiB)
};
kinfo *info_of(void *kernel);
#define SIMT_DYN_MAX (227 * 1024) // sm_90's opt-in shared memory per block
// Checks a launch configuration against the kernel (launch bounds, static shared
// memory): cudaSuccess, or the error with a line in why.
cudaError_t check_launch(const launch_rec *L, char *why, size_t len);
// Runs every block of L on the calling thread (one kernel at a time per process): 0,
// or -1 with the launch failure in why (the kernel, its block and threads, the check).
int run_kernel(const launch_rec *L, char *why, size_t len);

// Device (1) or pinned host (2) memory holding [p, p + bytes) (bytes 0: p may be one
// past the end), 0 otherwise. The name of the allocation for messages in *what.
int mem_kind(const void *p, size_t bytes);
// A device allocation's guard zone that holds p: its base, size and distance; 0 when
// p is in none (used by the SIGSEGV report).
int guard_hit(const void *p, const void **base, size_t *bytes);
// The running kernel's description for a fault report ("" outside kernels).
const char *running_where();
// Tensor cores and cp.async (simt_tc.cc) as seen by the scheduler (simt_exec.cc): a warp
// collective (W_MMA, W_LDMATRIX) whose 32 lanes arrived, with each lane's registers
// (0, or -1 with the failure in why); the hooks at block start, thread exit and barrier.
int tc_complete(int kind, int arg, void *const lanes[32], const char *file, int line, int warp, char *why,
                size_t len);
int tc_wgmma(int arg, void *const lanes[128], int base, const char *file, int line, char *why, size_t len);
void tc_block_start(int nthr);
void tc_launch_done(); // after a launch's last block (the bank counts' report)
// The async proxy wrote [p, p + n) of shared memory (a TMA copy, its NaN poison): its
// view of those bytes is the memory's (see fence_proxy_async).
void async_proxy_wrote(const void *p, size_t n);
void tc_thread_exit(int lin);
void tc_barrier_done();
// The running thread (-1: none), barrier rounds completed in this block, the running
// kernel; a check that fails on a thread's own call (reported when the round ends).
int cur_lin();
const char *stack_top(); // the end of the running thread's stack (NULL: none)
unsigned barrier_round();
kinfo *running_kinfo();
void thread_fail(const std::string &what);
// TMA and mbarriers (simt_tma.cc) as seen by the scheduler: the calling thread blocks
// until its mbarrier phase completes (simt_exec.cc); whether thread thr's wait on bar for
// parity is met (1; 0 not yet; -1 failure in why); why a wait can never be met; the
// block's reset; a read of [p, p + n) by threads [first, first + count) through op (0,
// or -1 with why: bytes of a TMA copy whose phase those threads have not waited for).
void block_on_mbar(const char *file, int line, const void *bar, unsigned parity);
int tma_wait_ready(const void *bar, unsigned parity, int thr, char *why, size_t len);
std::string tma_describe(const void *bar, unsigned parity);
void tma_block_start(int nthr);
int tma_read_check(const void *p, size_t n, int first, int count, const char *op, char *why, size_t len);
// setmaxnreg (simt_regs.cc) as seen by the scheduler: the block's per-warp register
// counts reset (the count a thread at launch: from __launch_bounds__, else the block's
// size); warpgroup wg's setmaxnreg with arg (simt.h) applied: 1, 0 an inc the pool cannot
// meet yet, -1 a misuse (why); why the waiting inc of warpgroup wg can never be met.
void regs_block_start(int nthr, int bound);
int regs_setmaxnreg(int arg, int wg, const char *file, int line, char *why, size_t len);
std::string regs_describe(int arg, int wg);
// The instruction checks' helpers (simt_tc.cc, simt_tma.cc): a path's file name; the GPU
// thread making a per-thread call (fatal outside a kernel); [p, p + n) inside one of the
// running kernel's shared arrays (true without its symbol table: the check needs them).
const char *base_name(const char *path);
int calling_thread(const char *op, const char *file, int line);
bool in_shared(const void *p, size_t n);
const char *shared_base(); // where the running kernel's shared memory starts (descriptors hold offsets)
// Environment: the thread order (0 forward, 1 reversed, 2 random, 3 warps) and its seed.
int sched_order();
unsigned long long sched_seed();
} // namespace simt
using simt::base_name;
using simt::calling_thread;
using simt::die;
using simt::in_shared;
using simt::shared_base;
