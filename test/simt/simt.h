// The SIMT executor: the real kernels/cuda/*.cu sources, compiled by g++ as C++ for the
// host (make test, no GPU), run here thread by thread. This header is the device side
// a .cu file sees (through <cuda_runtime.h> with -Itest/simt/include): the CUDA
// keywords, threadIdx/blockIdx/blockDim/gridDim, barriers, warp intrinsics, atomics,
// the __f*_rn arithmetic, device math and the launch (K_LAUNCH in k_cuda_common.cuh).
//
// How it runs (simt_exec.cc): each thread of a block is a fiber (its own stack, a
// six-register context switch, no system calls) that runs until it reaches a barrier
// or a warp intrinsic, or exits; blocks run one after another. The order in which the
// threads of a block run between two synchronisation points is DDPRT_SIMT_SCHED:
// forward (thread 0 first), reversed, or random (a new permutation every round; block
// order permuted too). A kernel that depends on that order has a race.
//
// What it checks (a failed check is a launch failure that names the kernel, the launch
// site, the block and the threads; the port reports it at the next synchronisation):
//   - a barrier reached at different call sites, of different kinds, or after some
//     threads of the block exited;
//   - a warp intrinsic whose mask names lanes that exited, do not exist, are at another
//     call site or with another mask, or that reads a lane outside the mask; deadlock
//     (threads waiting at a barrier for lanes waiting at a warp intrinsic);
//   - at launch: an invalid grid or block, more threads than __launch_bounds__ allows,
//     static shared memory over 48 KiB, a pointer argument that is not device (or
//     pinned host) memory.
// Static shared memory is filled with NaN bytes (0xff) before every block; device
// allocations are NaN-filled and guarded (ASan sees them byte-exact; otherwise guard
// pages and canaries, simt_rt.cc); under TSan every thread is a TSan fiber ordered
// only by barriers, warp intrinsics and block/launch boundaries, so a missing barrier
// is reported as a race.
//
// Not modelled: warp-synchronous code without *_sync intrinsics (lanes do not run in
// lock step), spin-waits on another thread of the same block (they never yield: hang),
// dynamic shared memory (extern __shared__), cooperative groups, __constant__ copies,
// half types, device printf formatting differences, and the GPU's own rounding of
// expf/logf (glibc's here: bit-exact contracts must avoid them).
//
// Adding a kernel: write it in kernels/cuda as for nvcc, launch it with
// K_LAUNCH(kernel, grid, block, shmem, stream)(args) (a template kernel in parentheses
// with its template arguments), and test it in test/gpu (docs/simt.md): that suite runs
// here in make test, under two thread orders, and on a GPU in make test-gpu.
#pragma once
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <cmath>
#include <new>
#include <type_traits>
#include <utility>

namespace simt {
extern uint3 *cur_tid; // the running thread's threadIdx
extern uint3 block_idx;
extern dim3 block_dim, grid_dim;

enum { BAR_SYNC, BAR_OR, BAR_AND, BAR_COUNT };
enum { W_SYNC, W_SHFL, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ANY, W_ALL, W_MMA, W_LDMATRIX, W_WGMMA, W_SETMAXNREG };
// Block barrier and warp intrinsics (simt_exec.cc): the calling fiber waits there
// until its partners arrive; the result is computed when they all have.
int barrier(const char *file, int line, int kind, int pred);
unsigned long long warp(const char *file, int line, int kind, unsigned mask, unsigned long long v, int arg,
                        int width);
unsigned activemask();
inline unsigned mask_or_all() { return 0xffffffffu; }
inline unsigned mask_or_all(unsigned m) { return m; }

template <class T> inline T shfl(const char *file, int line, int kind, unsigned mask, T v, int arg, int width = 32)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
    unsigned long long in = 0, out;
    memcpy(&in, &v, sizeof v);
    out = warp(file, line, kind, mask, in, arg, width);
    T r;
    memcpy(&r, &out, sizeof r);
    return r;
}

// ---- tensor cores and asynchronous copies (simt_tc.cc): what kernels/cuda/k_cuda_tc.cuh
// calls in place of the PTX instructions mma.sync, ldmatrix and cp.async. The two warp
// instructions are warp collectives of all 32 lanes (.aligned): each lane hands in its
// registers; mma's products are computed once the warp has arrived, ldmatrix hands
// every lane the 32 row addresses and each lane reads its own elements (its own reads,
// so TSan sees them).
enum { MMA_BF16, MMA_F16, MMA_TF32 };
struct mma_lane { const unsigned *a, *b; const float *c; float *d; };
struct ldm_lane { const void *addr; const void *rows[32]; };
void warp_coll(const char *file, int line, int kind, void *lane, int arg);
int lane_id();
void cp_async(const char *file, int line, void *dst, const void *src, int bytes, int src_bytes);
void cp_async_commit(const char *file, int line);
void cp_async_wait(const char *file, int line, int n);

// wgmma (sm_90): a warpgroup collective (128 threads, 4 aligned warps). Each lane hands in
// its accumulators d (n/2 fp32, the PTX D layout), both operands' shared-memory
// descriptors and scale-d; ta / tb are the instruction's imm-trans-a / imm-trans-b (1: the
// operand is M / N-major, 16-bit types only). The product is computed when the
// warpgroup has arrived; d is NaN until the lane's wgmma.wait_group covers it.
// a: A from registers (wgmma_rs), else NULL and A by the descriptor da.
struct wgmma_lane { float *d; unsigned long long da, db; int scale_d; const unsigned *a; };
void wgmma_fence(const char *file, int line);
// fence.proxy.async.shared::cta: the generic proxy's shared-memory writes so far (stores,
// cp.async) become visible to the async proxy (wgmma's operand reads). simt_tc.cc keeps
// the async proxy's view of the first blocks of a launch and reports a wgmma operand
// whose bytes differ from it.
void fence_proxy_async(const char *file, int line);
void wgmma_commit(const char *file, int line);
void wgmma_wait(const char *file, int line, int n);
// The descriptor's start address, leading and stride byte offsets and layout type (0 no
// swizzle, 1 / 2 / 3 the 128 / 64 / 32-byte swizzles) in PTX's encoding; the address is
// the offset into the running kernel's shared memory.
unsigned long long smem_desc(const void *p, int lbo, int sbo, int swz);
inline void wgmma(const char *file, int line, int kind, int n, float *d, unsigned long long da,
                  unsigned long long db, int scale_d, int ta = 0, int tb = 0)
{
    wgmma_lane l = {d, da, db, scale_d, NULL};
    warp_coll(file, line, W_WGMMA, &l, n << 4 | kind | !!ta << 20 | !!tb << 21);
}
// The register-A form (FlashAttention-3's P V): each lane hands in its four 32-bit A
// registers a[4] (two 16-bit elements each; warp w's rows 16w.. in mma.sync's m16n8k16 A
// fragment), B by descriptor. PTX has no imm-trans-a here: ta exists only for the check
// that refuses it. The registers must not change from the last wgmma.fence before the op
// until the wgmma.wait_group that covers it (the executor compares them: a snapshot of
// the thread's stack at the fence, a copy at the op).
inline void wgmma_rs(const char *file, int line, int kind, int n, float *d, const unsigned *a, unsigned long long db,
                     int scale_d, int tb, int ta = 0)
{
    wgmma_lane l = {d, 0, db, scale_d, a};
    warp_coll(file, line, W_WGMMA, &l, n << 4 | kind | !!ta << 20 | !!tb << 21 | 1 << 22);
}

// setmaxnreg.{inc,dec}.sync.aligned.u32 n (sm_90a; simt_regs.cc): a warpgroup collective
// that moves the warps' per-thread register count to n, through the block's pool (dec
// fills it, inc takes from it and waits until it holds enough).
inline void setmaxnreg(const char *file, int line, int n, int inc)
{
    warp_coll(file, line, W_SETMAXNREG, NULL, (n & 0xffff) | !!inc << 16);
}

// TMA and mbarrier (sm_90; simt_tma.cc). An mbarrier (8 bytes of shared memory) counts
// arrivals and transaction bytes per phase; a thread waiting on a phase's parity blocks
// in the scheduler until the phase completes. cp.async.bulk.tensor.2d copies a box of a
// tensor map into shared memory in the map's swizzle, its bytes counted on an mbarrier:
// the destination is NaN from the issue until that phase completes, and only threads
// that waited for the phase (or a __syncthreads since one did) may read it.
struct tensormap { alignas(16) unsigned long long opaque[16]; }; // CUtensorMap's 128 bytes
// cuTensorMapEncodeTiled with the driver's documented checks (rank 2, 16-bit or fp32 elements,
// interleave none, element strides 1; swizzle in bytes: 0, 32, 64 or 128): NULL, or why not.
const char *tensormap_encode(tensormap *m, int elem_bytes, unsigned rank, const void *gaddr,
                             const unsigned long long *dims, const unsigned long long *strides, const unsigned *box,
                             const unsigned *elem_strides, int swizzle_bytes);
// cuTensorMapEncodeIm2col with the driver's documented checks that matter here: rank 4
// (dims {C, W, H, N}), 16-bit elements, corners {w, h} in [-128, 127] with a non-empty
// bounding box, channelsPerPixel <= 256 (its bytes a multiple of 16, as wide as the
// swizzle), pixelsPerColumn <= 1024, element strides 1..8 (the traversal's in w and h;
// 1 in c and n): NULL, or why not.
const char *tensormap_encode_im2col(tensormap *m, int elem_bytes, unsigned rank, const void *gaddr,
                                    const unsigned long long *dims, const unsigned long long *strides,
                                    const int *lower, const int *upper, unsigned channels_per_pixel,
                                    unsigned pixels_per_column, const unsigned *elem_strides, int swizzle_bytes);
void mbar_init(const char *file, int line, void *bar, unsigned count);
// mbarrier.arrive (tx_bytes 0) or arrive.expect_tx: the phase's state (its index).
unsigned long long mbar_arrive(const char *file, int line, void *bar, unsigned count, unsigned tx_bytes);
void mbar_expect_tx(const char *file, int line, void *bar, unsigned tx_bytes);
// try_wait.parity in a loop: returns once the phase of that parity has completed.
void mbar_wait(const char *file, int line, void *bar, unsigned parity);
void tma_load_2d(const char *file, int line, void *dst, const tensormap *m, int c0, int c1, void *bar);
// cp.async.bulk.tensor.4d.im2col: coordinates {c, w, h, n}, offsets {w, h} (the filter tap).
void tma_load_im2col_4d(const char *file, int line, void *dst, const tensormap *m, int c, int w, int h, int n,
                        unsigned short offw, unsigned short offh, void *bar);
// The running launch's dynamic shared memory (extern __shared__): 1 KiB aligned, NaN
// before every block, as much as the launch asked for (cudaFuncSetAttribute past 48 KiB).
void *dyn_shared();

// d = a * b + c, m16n8k16 (bf16, f16) or m16n8k8 (tf32), fp32 accumulators.
inline void mma_sync(const char *file, int line, int kind, float d[4], const unsigned a[4], const unsigned b[2],
                     const float c[4])
{
    mma_lane l = {a, b, c, d};
    warp_coll(file, line, W_MMA, &l, kind);
}

// ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16: lanes 8i..8i+7 give the rows of
// matrix i; lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of each (transposed:
// rows 2(l%4) and 2(l%4)+1 of column l/4), the lower column in the low half.
inline void ldmatrix(const char *file, int line, unsigned *r, const void *addr, int num, int trans)
{
    ldm_lane l;
    l.addr = addr;
    warp_coll(file, line, W_LDMATRIX, &l, num | trans << 4);
    int lane = lane_id(), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < num; i++) {
        const unsigned char *const *rows = (const unsigned char *const *)l.rows + 8 * i;
        if (!trans) {
            memcpy(&r[i], rows[g] + 4 * t, 4);
        } else {
            unsigned short lo, hi;
            memcpy(&lo, rows[2 * t] + 2 * g, 2);
            memcpy(&hi, rows[2 * t + 1] + 2 * g, 2);
            r[i] = (unsigned)lo | (unsigned)hi << 16;
        }
    }
}
} // namespace simt

// ---- launch: SIMT_LAUNCH(kernel, grid, block, shmem, stream)(args) converts the
// arguments to the kernel's parameter types (as <<<>>> does), copies them into the
// stream's queue and returns; the stream's worker runs the grid (simt_rt.cc).
namespace simt {
#define SIMT_ARG_BYTES 4096 // per launch, in the queue: CUDA's 4 KiB (conv_phase_gemm's table of maps ~2 KiB)
typedef void (*invoke_fn)(void *kernel, const void *args);
struct cfg {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    const char *name, *file;
    int line;
};
// Queues the launch, or records a launch error (cudaGetLastError). ptrs: the pointer
// arguments (index, value), checked to point at device or pinned memory.
void launch(const cfg *c, void *kernel, invoke_fn inv, const void *args, size_t bytes, const int *ptr_idx,
            const void *const *ptrs, int nptrs);

template <size_t I, class T> struct leaf { T v; };
template <class S, class... T> struct pack_impl;
template <size_t... I, class... T> struct pack_impl<std::index_sequence<I...>, T...> : leaf<I, T>... {
    template <class... A> explicit pack_impl(A &&...a) : leaf<I, T>{T(std::forward<A>(a))}... {}
    template <class F> void call(F f) const { f(static_cast<const leaf<I, T> &>(*this).v...); }
    void pointers(int *idx, const void **p, int *n) const
    {
        (note(idx, p, n, (int)I, static_cast<const leaf<I, T> &>(*this).v), ...);
    }
    template <class U> static void note(int *idx, const void **p, int *n, int i, const U &v)
    {
        if constexpr (std::is_pointer<U>::value) idx[*n] = i, p[(*n)++] = (const void *)v;
    }
};
template <class... P> struct launcher {
    typedef pack_impl<std::index_sequence_for<P...>, typename std::decay<P>::type...> args_t;
    void (*fn)(P...);
    cfg c;
    template <class... A> void operator()(A &&...a) const
    {
        static_assert(sizeof...(A) == sizeof...(P), "wrong number of kernel arguments");
        static_assert(sizeof(args_t) <= SIMT_ARG_BYTES && alignof(args_t) <= 16, "kernel arguments too large");
        static_assert(std::is_trivially_copyable<args_t>::value, "kernel arguments must be trivially copyable");
        alignas(16) unsigned char buf[sizeof(args_t)];
        const args_t *t = new (buf) args_t(std::forward<A>(a)...);
        int idx[sizeof...(P) + 1] = {}, n = 0;
        const void *ptrs[sizeof...(P) + 1] = {};
        t->pointers(idx, ptrs, &n);
        launch(&c, (void *)fn, &invoke, buf, sizeof buf, idx, ptrs, n);
    }
    static void invoke(void *kernel, const void *args) { ((const args_t *)args)->call((void (*)(P...))kernel); }
};
template <class... P>
inline launcher<P...> make_launcher(void (*fn)(P...), const char *name, dim3 g, dim3 b, size_t sh, cudaStream_t s,
                                    const char *file, int line)
{
    return launcher<P...>{fn, {g, b, sh, s, name, file, line}};
}
} // namespace simt

// ---- the device side a .cu file sees (not the executor's own sources)
#ifndef SIMT_RUNTIME
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
// Static shared arrays: one section (non-template kernels; GCC puts a template's
// statics in its COMDAT group instead), NaN-filled with a NaN tail before every block,
// so a read past an array reads NaN. ASan builds keep them apart, each with a redzone.
#if defined(__SANITIZE_ADDRESS__)
#define __shared__ static
#else
#define __shared__ static __attribute__((section("simt_shared")))
#endif
#define __constant__
#define __restrict__ __restrict
// The bound travels with the kernel's code: n NOPs at its entry (simt_exec.cc counts
// them). Sections would be simpler but GCC drops them for template instantiations.
#define __launch_bounds__(...) SIMT_LB_(__VA_ARGS__, 0)
#define SIMT_LB_(n, ...) __attribute__((patchable_function_entry((n), 0)))

#define threadIdx (*(const uint3 *)simt::cur_tid)
#define blockIdx ((const uint3 &)simt::block_idx)
#define blockDim ((const dim3 &)simt::block_dim)
#define gridDim ((const dim3 &)simt::grid_dim)
#define warpSize 32

#define __syncthreads() ((void)simt::barrier(__FILE__, __LINE__, simt::BAR_SYNC, 0))
#define __syncthreads_or(p) simt::barrier(__FILE__, __LINE__, simt::BAR_OR, (p) != 0)
#define __syncthreads_and(p) simt::barrier(__FILE__, __LINE__, simt::BAR_AND, (p) != 0)
#define __syncthreads_count(p) simt::barrier(__FILE__, __LINE__, simt::BAR_COUNT, (p) != 0)
#define __syncwarp(...) ((void)simt::warp(__FILE__, __LINE__, simt::W_SYNC, simt::mask_or_all(__VA_ARGS__), 0, 0, 32))
#define __shfl_sync(m, v, l, ...) simt::shfl(__FILE__, __LINE__, simt::W_SHFL, (m), (v), (l), ##__VA_ARGS__)
#define __shfl_up_sync(m, v, d, ...) simt::shfl(__FILE__, __LINE__, simt::W_UP, (m), (v), (d), ##__VA_ARGS__)
#define __shfl_down_sync(m, v, d, ...) simt::shfl(__FILE__, __LINE__, simt::W_DOWN, (m), (v), (d), ##__VA_ARGS__)
#define __shfl_xor_sync(m, v, x, ...) simt::shfl(__FILE__, __LINE__, simt::W_XOR, (m), (v), (x), ##__VA_ARGS__)
#define __ballot_sync(m, p) ((unsigned)simt::warp(__FILE__, __LINE__, simt::W_BALLOT, (m), (p) != 0, 0, 32))
#define __any_sync(m, p) ((int)simt::warp(__FILE__, __LINE__, simt::W_ANY, (m), (p) != 0, 0, 32))
#define __all_sync(m, p) ((int)simt::warp(__FILE__, __LINE__, simt::W_ALL, (m), (p) != 0, 0, 32))
#define __activemask() simt::activemask()
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_block() __atomic_thread_fence(__ATOMIC_SEQ_CST)

// ---- bits and rounding-explicit arithmetic (compiled with -ffp-contract=off, so a
// product and a sum are rounded on their own, as __fmul_rn/__fadd_rn promise).
static __forceinline__ unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static __forceinline__ float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static __forceinline__ int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static __forceinline__ float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static __forceinline__ long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static __forceinline__ double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
static __forceinline__ float __fadd_rn(float a, float b) { return a + b; }
static __forceinline__ float __fsub_rn(float a, float b) { return a - b; }
static __forceinline__ float __fmul_rn(float a, float b) { return a * b; }
static __forceinline__ float __fdiv_rn(float a, float b) { return a / b; }
static __forceinline__ float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static __forceinline__ float __frcp_rn(float a) { return 1.0f / a; }
static __forceinline__ float __fsqrt_rn(float a) { return sqrtf(a); }
static __forceinline__ double __dadd_rn(double a, double b) { return a + b; }
static __forceinline__ double __dmul_rn(double a, double b) { return a * b; }
static __forceinline__ double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static __forceinline__ float __fdividef(float a, float b) { return a / b; }
// glibc declares these names itself: macros, not functions.
#define __expf(a) expf(a)
#define __logf(a) logf(a)
#define __sinf(a) sinf(a)
#define __cosf(a) cosf(a)
#define __powf(a, b) powf(a, b)
static __forceinline__ float __saturatef(float a) { return a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a; }
static __forceinline__ float rsqrtf(float a) { return 1.0f / sqrtf(a); }
static __forceinline__ int __ffs(int x) { return __builtin_ffs(x); }
static __forceinline__ int __ffsll(long long x) { return __builtin_ffsll(x); }
static __forceinline__ int __popc(unsigned x) { return __builtin_popcount(x); }
static __forceinline__ int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static __forceinline__ int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static __forceinline__ int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static __forceinline__ unsigned __brev(unsigned x)
{
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}

// CUDA's min/max: the integer ones compare in the common type; fminf/fmaxf for floats.
template <class A, class B> static __forceinline__ typename std::common_type<A, B>::type min(A a, B b)
{
    return b < a ? b : a;
}
template <class A, class B> static __forceinline__ typename std::common_type<A, B>::type max(A a, B b)
{
    return a < b ? b : a;
}
static __forceinline__ float min(float a, float b) { return fminf(a, b); }
static __forceinline__ float max(float a, float b) { return fmaxf(a, b); }
static __forceinline__ double min(double a, double b) { return fmin(a, b); }
static __forceinline__ double max(double a, double b) { return fmax(a, b); }
using std::isfinite;
using std::isinf;
using std::isnan;

// ---- atomics: relaxed, as CUDA's; real atomics so TSan sees them as such.
template <class T> static __forceinline__ T simt_atomic_rmw(T *p, T v, int op)
{
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 4 and 8 byte types");
    typedef typename std::conditional<sizeof(T) == 4, unsigned, unsigned long long>::type U;
    U *q = (U *)(void *)p, old = __atomic_load_n(q, __ATOMIC_RELAXED), nw;
    for (;;) {
        T o, n;
        memcpy(&o, &old, sizeof o);
        switch (op) {
        case 0: n = o + v; break;
        case 1: n = o - v; break;
        case 2: n = v; break;
        case 3: n = o < v ? v : o; break;
        default: n = v < o ? v : o; break;
        }
        memcpy(&nw, &n, sizeof nw);
        if (__atomic_compare_exchange_n(q, &old, nw, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return o;
    }
}
template <class T> static __forceinline__ T atomicAdd(T *p, T v) { return simt_atomic_rmw(p, v, 0); }
template <class T> static __forceinline__ T atomicSub(T *p, T v) { return simt_atomic_rmw(p, v, 1); }
template <class T> static __forceinline__ T atomicExch(T *p, T v) { return simt_atomic_rmw(p, v, 2); }
template <class T> static __forceinline__ T atomicMax(T *p, T v) { return simt_atomic_rmw(p, v, 3); }
template <class T> static __forceinline__ T atomicMin(T *p, T v) { return simt_atomic_rmw(p, v, 4); }
template <class T> static __forceinline__ T atomicCAS(T *p, T cmp, T v)
{
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
template <class T> static __forceinline__ T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }
template <class T> static __forceinline__ T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
template <class T> static __forceinline__ T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }

#define SIMT_LAUNCH(k, g, b, sh, s) simt::make_launcher(k, #k, (g), (b), (sh), (s), __FILE__, __LINE__)
#endif
