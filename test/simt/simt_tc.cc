// The SIMT executor's tensor-core and asynchronous-copy instructions (see simt.h):
// mma.sync (m16n8k16 bf16 / f16, m16n8k8 tf32, fp32 accumulators), ldmatrix (x1, x2,
// x4, .trans) and cp.async with commit_group / wait_group, from the PTX ISA's fragment
// layouts (groupID = lane / 4, threadID_in_group = lane % 4).
//
// cp.async is modelled at its latest: the destination is poisoned (NaN bytes) when the
// copy is issued and written when the issuing thread's wait_group covers its group, so
// a kernel that reads too early reads NaN. The checks report it where they can see it:
//   - ldmatrix reading bytes of a copy whose group has not been waited for, or that
//     was waited for by its thread with no __syncthreads since (the other lanes cannot
//     see it yet);
//   - a cp.async into bytes another pending cp.async writes;
//   - misaligned addresses (ldmatrix rows: 16 bytes; cp.async: its size), an ldmatrix
//     or cp.async destination outside the kernel's shared memory, a cp.async source
//     outside device memory;
//   - (simt_exec.cc) mma.sync / ldmatrix issued by a partial warp or at different sites.
//
// wgmma (sm_90; m64nNk16 bf16 / f16 and m64nNk8 tf32 (32-bit elements, K-major only: the
// same 32 bytes of a row an op), both operands in shared memory, K-major or, with
// imm-trans 1, M/N-major; no swizzle or the 32 / 64 / 128-byte swizzles) is computed when its warpgroup has arrived, into a shadow copy; each lane's
// accumulators read NaN until its wgmma.wait_group covers the op (a chained op on the same
// accumulators starts from the shadow). Its checks: an mma_async by a thread that has not
// executed wgmma.fence since its accumulators were last its own (the kernel's start or a
// wait_group); descriptors that differ across the warpgroup, or an operand outside shared
// memory; a swizzled operand whose pattern is not aligned (base offset 0 is all we
// emulate) or whose 16 k cross its swizzle row (M/N-major: that does not start at a
// pattern); a transposed operand of a 32-bit type (PTX: 16-bit types only); an operand's bytes written between the
// mma_async and the wait_group that covers it; rows a pending cp.async writes; operand bytes
// written by the generic proxy (stores, cp.async) after the last fence.proxy.async, or stored
// after the last __syncthreads. With A from registers (wgmma_rs: FlashAttention-3's P V) the
// warpgroup's fragments are gathered at the op; imm-trans-a 1 is refused, and A registers
// written after the thread's last wgmma.fence (its stack as of the fence) or changed before
// the wait_group that covers the op (a copy at the op) are reported.
#include "test/simt/simt_int.h"
#include "rt/env.h"
#include "rt/half.h"
#include <algorithm>
#include <atomic>
#include <cxxabi.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <map>
#include <tuple>
#include <string>
#include <unordered_map>
#include <vector>

// The executor's own bookkeeping (these vectors, the shadows, NaN poison, the copies)
// runs on whichever GPU thread's fiber calls in: under TSan it is hidden, as the rest of
// the executor is, or TSan would report the fibers racing on the executor's state.
#ifdef SIMT_TSAN
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
struct tsan_hide {
    tsan_hide() { __tsan_ignore_thread_begin(); }
    ~tsan_hide() { __tsan_ignore_thread_end(); }
};
#else
struct tsan_hide {
    tsan_hide() {} // (user-provided: no unused-variable warning)
};
#endif

const char *simt::base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int simt::calling_thread(const char *op, const char *file, int line)
{
    int t = simt::cur_lin();
    if (t < 0) die("%s at %s:%d called outside a kernel", op, base_name(file), line);
    return t;
}

const char *simt::shared_base()
{
    simt::kinfo *k = simt::running_kinfo();
    const char *b = NULL;
    if (k)
        for (auto &v : k->vars)
            if (!b || v.first < b) b = v.first;
    return b;
}

bool simt::in_shared(const void *p, size_t n)
{
    simt::kinfo *k = simt::running_kinfo();
    if (!k || k->sym.empty()) return true;
    for (auto &v : k->vars)
        if ((const char *)p >= v.first && (const char *)p + n <= v.first + v.second) return true;
    return false;
}

namespace {
enum { PENDING, DONE };
struct copy {
    int thr, group, state; // group 0: not committed yet
    unsigned round;        // barrier round in which its wait_group wrote it
    char *dst;
    const char *src;
    int bytes, src_bytes;
    const char *file;
    int line;
};
std::vector<copy> copies; // this block's copies not yet visible to every thread
// How many of `copies` write each 16-byte granule (a copy of 4, 8 or 16 aligned bytes
// lies in one): the checks of every cp.async, ldmatrix and wgmma row skip the scan of
// `copies` where none does (a conv on NHWC copies keeps some 1500 of them in flight).
std::unordered_map<uintptr_t, int> live;
uintptr_t gran(const void *p) { return (uintptr_t)p >> 4; }
bool any_copy_at(const void *p) { return live.count(gran(p)) != 0; }
int committed[1024];      // per thread: the groups it has committed

struct wg_op { // one wgmma.mma_async of a warpgroup
    std::vector<float> res; // 128 lanes x n/2 accumulators
    int n, base;
    const char *a, *b; // the operands' first bytes
    unsigned long long da, db, sum; // descriptors; checksum of the operand bytes read
    int ta, tb;                     // imm-trans-a / -b: the operand is M / N-major
    const char *file;
    int line;
    int rs; // A from registers
    int es; // the operands' element bytes (4: tf32)
};
struct wg_pend { // a lane's part of an op not yet waited for
    int thr, op, group;
    float *d;
    const unsigned *a; // register A (NULL: by descriptor) and its value at the op
    unsigned a_was[4];
};
std::vector<wg_op> wg_ops;
std::vector<wg_pend> wg_pending;
int wg_committed[1024];
unsigned char wg_fenced[1024];
// Register A (wgmma_rs): a thread's stack from its last wgmma.fence's frame up (the
// caller's frames, where the kernel's registers live here), as of that fence: an A
// register whose bytes differ from it at the op was written after the fence (PTX: the
// fence must order the op after every write of its registers). A register outside it
// (a frame made after the fence, an ASan fake stack) goes unchecked.
std::vector<char> wg_fstack[1024];
const char *wg_flo[1024];

// Reads of the thread's own stack outside the frames ASan / TSan know to be live.
__attribute__((no_sanitize("address", "thread"), noinline)) void raw_copy(void *dst, const void *src, size_t n)
{
    for (size_t i = 0; i < n; i++) ((char *)dst)[i] = ((const volatile char *)src)[i];
}
// Whether thread t's 16 bytes at a are in its last fence's snapshot and differ from it.
bool written_since_fence(int t, const unsigned *a)
{
    const char *p = (const char *)a, *lo = wg_flo[t];
    if (!lo || p < lo || p + 16 > lo + wg_fstack[t].size()) return false;
    unsigned now[4];
    raw_copy(now, a, 16);
    return memcmp(now, wg_fstack[t].data() + (p - lo), 16) != 0;
}


// The async proxy's view of shared memory (fence.proxy.async). wgmma reads its operands
// through the async proxy, which sees the generic proxy's writes (stores, cp.async) only
// after a fence.proxy.async that follows them (then a barrier to the issuing threads).
// The view is the memory as of the latest fence by any thread (on the hardware a fence
// covers its own thread's writes; our kernels fence in every thread), plus the async
// proxy's own writes (TMA); a wgmma operand byte that differs from it was written after
// the last fence. A fence copies the block's shared memory: the view is kept for the
// first PROXY_BLOCKS blocks of a launch and PROXY_BYTES of copies a block, where a missing
// or misplaced fence shows as it would in any block.
//
// Beside it, the memory as of the last __syncthreads (bviews; TMA's writes included): a
// wgmma operand byte that differs from it was stored since the barrier, by a thread whose
// store the warpgroup's other warps are not ordered after (a wgmma is issued warp by warp;
// here it runs when all four arrived, so their stores would always seem to be in).
const int PROXY_BLOCKS = 2;
const size_t PROXY_BYTES = (size_t)64 << 20;
struct pview {
    char *p;
    size_t n;
    std::vector<char> v;
};
std::vector<pview> pviews, bviews; // empty: no views kept in this block
int proxy_blocks;          // blocks of this launch started
size_t proxy_copied;       // bytes the block's fences copied

const char *pview_at(std::vector<pview> &vs, const void *q)
{
    for (pview &w : vs)
        if ((const char *)q >= w.p && (const char *)q < w.p + w.n) return w.v.data() + ((const char *)q - w.p);
    return NULL;
}

void pview_sync(std::vector<pview> &vs, const void *q, size_t n) // the view of [q, q + n) := the memory
{
    for (pview &w : vs) {
        const char *lo = std::max((const char *)q, (const char *)w.p), *hi = std::min((const char *)q + n, (const char *)w.p + w.n);
        if (lo < hi) memcpy(w.v.data() + (lo - w.p), lo, (size_t)(hi - lo));
    }
}

std::string where(const char *op, const char *file, int line)
{
    char b[256];
    snprintf(b, sizeof b, "%s at %s:%d", op, base_name(file), line);
    return b;
}


bool overlaps(const copy &c, const char *p, size_t n) { return p < c.dst + c.bytes && c.dst < p + n; }

void perform(copy &c)
{
    if (c.src_bytes) memcpy(c.dst, c.src, (size_t)c.src_bytes);
    memset(c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes)); // the zero fill
    c.state = DONE;
    c.round = simt::barrier_round();
}

float operand(int kind, unsigned bits16or32)
{
    if (kind == simt::MMA_BF16) return rt_bf16_to_f32((uint16_t)bits16or32);
    if (kind == simt::MMA_F16) return rt_f16_to_f32((uint16_t)bits16or32);
    return rt_bits_f32(bits16or32 & 0xffffe000u); // tf32: the top 19 bits
}

// The 16-bit element e (0 low, 1 high) of register r.
unsigned half_of(unsigned r, int e) { return e ? r >> 16 : r & 0xffff; }

void mma(int kind, void *const lanes[32])
{
    float A[16][16], B[16][8], C[16][8];
    int K = kind == simt::MMA_TF32 ? 8 : 16;
    for (int l = 0; l < 32; l++) {
        const simt::mma_lane *x = (const simt::mma_lane *)lanes[l];
        int g = l >> 2, t = l & 3;
        if (K == 16) {
            for (int i = 0; i < 8; i++) { // a_i: rows g (i < 2, 4 <= i < 6) or g + 8, columns 2t + (i & 1) (+8 from 4)
                int row = g + ((i >> 1) & 1) * 8, col = 2 * t + (i & 1) + (i >= 4) * 8;
                A[row][col] = operand(kind, half_of(x->a[i >> 1], i & 1));
            }
            for (int i = 0; i < 4; i++) // b_i: rows 2t + (i & 1) (+8 from 2), column g
                B[2 * t + (i & 1) + (i >= 2) * 8][g] = operand(kind, half_of(x->b[i >> 1], i & 1));
        } else {
            for (int i = 0; i < 4; i++) // a_i: rows g (a0, a2) or g + 8 (a1, a3), columns t (a0, a1) or t + 4
                A[g + (i & 1) * 8][t + (i >> 1) * 4] = operand(kind, x->a[i]);
            for (int i = 0; i < 2; i++) B[t + i * 4][g] = operand(kind, x->b[i]);
        }
        for (int i = 0; i < 4; i++) C[g + (i >> 1) * 8][2 * t + (i & 1)] = x->c[i];
    }
    // Products exact, the sum in double, one rounding to fp32 (the hardware's order and
    // rounding inside the unit are its own; the tests allow for fp32 accumulation).
    float D[16][8];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double s = C[m][n];
            for (int k = 0; k < K; k++) s += (double)A[m][k] * B[k][n];
            D[m][n] = (float)s;
        }
    for (int l = 0; l < 32; l++) {
        const simt::mma_lane *x = (const simt::mma_lane *)lanes[l];
        int g = l >> 2, t = l & 3;
        for (int i = 0; i < 4; i++) x->d[i] = D[g + (i >> 1) * 8][2 * t + (i & 1)];
    }
}


// Byte offset of element (r, k) of a K-major, no-swizzle operand of es-byte elements:
// core matrices of 8 rows x 16 bytes (16 / es k), the next 8 rows SBO bytes on, the next
// 16 / es k LBO bytes on.
size_t kmajor_off(int r, int k, size_t lbo, size_t sbo, int es)
{
    int c = 16 / es;
    return (r % 8) * 16 + (r / 8) * sbo + (size_t)(k % c) * es + (k / c) * lbo;
}

// mn: the operand is M / N-major (imm-trans 1); es: its element's bytes (2, or 4: tf32)
struct desc { const char *p; size_t lbo, sbo; int swz, mn, es; };
desc decode(unsigned long long d, int mn, int es)
{
    const char *b = shared_base();
    return {b + ((d & 0x3fff) << 4), (size_t)((d >> 16) & 0x3fff) << 4, (size_t)((d >> 32) & 0x3fff) << 4, (int)(d >> 62),
            mn, es};
}
// An op's k: 32 bytes of a K-major row (16 bf16 / f16, 8 tf32).
int op_k(const desc &d) { return 32 / d.es; }

// Row width of a swizzle mode (PTX layout type: 1 = 128-byte, 2 = 64-byte, 3 = 32-byte).
size_t swz_width(int swz) { return swz == 1 ? 128 : swz == 2 ? 64 : 32; }

// Element (r, k) of a K-major operand. No swizzle: kmajor_off. Swizzled (CUTLASS's
// Swizzle<B,4,3> on the byte address): rows of W bytes, 8 rows a pattern, the next 8
// rows SBO on (LBO unused: the 16 k lie in one row); the 16-byte chunk bits [4, 4+B) of
// the address are XORed with its bits [7, 7+B) (B = log2(W / 16)). The hardware swizzles
// shared addresses: its patterns sit where the host's do when the tiles are aligned as
// swz_check demands (the static shared arrays keep their declared alignment here).
//
// M / N-major operands (imm-trans 1, 16-bit types), element (r, k) with r the m (A) or
// n (B) index, from the PTX ISA's "Shared Memory Matrix Layout" and CUTLASS's canonical
// layouts (cute/atom/mma_traits_sm90_gmma.hpp, make_gmma_desc<Major::MN>, in 16-byte
// units: no swizzle ((1,n),(8,k)):((X,SBO),(1,LBO)); the W-byte swizzles
// ((W/16,n),(8,k)):((1,LBO),(W/16,SBO)); Layout_MN_SW*_Atom: W/2 elements x 8 k):
//   - no swizzle: core matrices of 8 k-rows x 16 bytes (8 consecutive r at one k), the
//     next 8 r SBO bytes on, the next 8 k LBO bytes on (the K-major roles of the offsets,
//     the core matrix transposed): mnmajor_off;
//   - swizzled: a row is one k's W / 2 consecutive r (W bytes), 8 k-rows a pattern, the
//     next W / 2 r LBO bytes on, the next 8 k SBO bytes on (the roles swapped against the
//     no-swizzle layout), then the same XOR of the address bits.
size_t mnmajor_off(int r, int k, size_t lbo, size_t sbo) { return (k % 8) * 16 + (k / 8) * lbo + (r % 8) * 2 + (r / 8) * sbo; }

const char *elem_at(const desc &d, int r, int k)
{
    if (!d.swz) return d.p + (d.mn ? mnmajor_off(r, k, d.lbo, d.sbo) : kmajor_off(r, k, d.lbo, d.sbo, d.es));
    size_t w = swz_width(d.swz), e = w / 2;
    uintptr_t a = d.mn ? (uintptr_t)d.p + (r / e) * d.lbo + (r % e) * 2 + (k / 8) * d.sbo + (k % 8) * w
                       : (uintptr_t)d.p + (r / 8) * d.sbo + (r % 8) * w + (size_t)k * d.es;
    return (const char *)(a ^ (((a >> 7) & (w / 16 - 1)) << 4));
}

// A swizzled operand's start: its pattern (8 rows of W bytes) aligned to 8 W bytes, and
// (K-major) its 16 k (32 bytes) inside one W-byte row; an M / N-major operand starts at a
// pattern's start (its rows hold r, not k: no offset into them is a canonical layout).
// NULL if fine, else why.
const char *swz_check(const desc &d)
{
    if (!d.swz) return NULL;
    size_t w = swz_width(d.swz), in_row = (uintptr_t)d.p % w;
    if (d.mn && (uintptr_t)d.p % (8 * w)) return "its swizzle pattern (8 k-rows of its width) does not start at the "
                                                 "operand's address, aligned to 8 rows of its width";
    if (((uintptr_t)d.p - in_row) % (8 * w)) return "its swizzle pattern is not aligned to 8 rows of its width";
    if (in_row + 32 > w) return d.es == 4 ? "its 8 k cross the end of a swizzle row" : "its 16 k cross the end of a swizzle row";
    return NULL;
}

unsigned long long operand_sum(const desc *a, const desc &b, int n) // a NULL: A in registers
{
    unsigned long long h = 1469598103934665603ULL;
    auto mix = [&](const char *p) { for (int i = 0; i < b.es; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL; };
    for (int r = 0; a && r < 64; r++)
        for (int k = 0; k < op_k(*a); k++) mix(elem_at(*a, r, k));
    for (int c = 0; c < n; c++)
        for (int k = 0; k < op_k(b); k++) mix(elem_at(b, c, k));
    return h;
}
} // namespace

// wgmma.mma_async ops (one a warpgroup) issued since the process started, by imm-trans-a
// and -b (simt_wgmma_count): the device tests' evidence that a product really runs on
// wgmma with M/N-major tiles (test_gpu_tc.c).
// Register-A ops count as imm-trans-a 0, and also in simt_wgmma_rs_count.
// tf32 ops (imm-trans 0 0) also in simt_wgmma_tf32_count: TF32's evidence (test_gpu_tc_tf32_wgmma.c).
static std::atomic<unsigned long long> wgmma_issued[4], wgmma_rs_issued, wgmma_tf32_issued;
extern "C" unsigned long long simt_wgmma_count(int ta, int tb) { return wgmma_issued[(ta & 1) << 1 | (tb & 1)].load(); }
extern "C" unsigned long long simt_wgmma_rs_count(void) { return wgmma_rs_issued.load(); }
extern "C" unsigned long long simt_wgmma_tf32_count(void) { return wgmma_tf32_issued.load(); }

int simt::tc_wgmma(int arg, void *const lanes[128], int base, const char *file, int line, char *why, size_t len)
{
    tsan_hide hide;
    int kind = arg & 15, n = (arg >> 4) & 0xffff, ta = (arg >> 20) & 1, tb = (arg >> 21) & 1, rs = (arg >> 22) & 1;
    std::string op = where("wgmma.mma_async", file, line);
    const wgmma_lane *l0 = (const wgmma_lane *)lanes[0];
    if (rs && ta) {
        snprintf(why, len, "%s: imm-trans-a 1 with A in registers: PTX has imm-trans-a only for A by descriptor (a "
                 "register fragment is K-major by definition)", op.c_str());
        return -1;
    }
    if ((ta || tb) && kind != MMA_BF16 && kind != MMA_F16) {
        snprintf(why, len, "%s: imm-trans-%s 1 (an M/N-major operand) with type %d: PTX allows the transpose only for "
                 "16-bit types (bf16 / f16)", op.c_str(), ta ? "a" : "b", kind);
        return -1;
    }
    if (n < 8 || n > 256 || n % 8 || (kind != MMA_BF16 && kind != MMA_F16 && (kind != MMA_TF32 || rs))) {
        snprintf(why, len, "%s: m64n%dk%d of type %d%s is not emulated (n: 8..256 by 8; bf16, f16, or tf32 with A by "
                 "descriptor)", op.c_str(), n, kind == MMA_TF32 ? 8 : 16, kind, rs ? " with A in registers" : "");
        return -1;
    }
    for (int j = 0; j < 128; j++) {
        const wgmma_lane *x = (const wgmma_lane *)lanes[j];
        if (!wg_fenced[base + j]) {
            snprintf(why, len, "%s: thread %d has not executed wgmma.fence since its accumulators were last its own "
                     "(the kernel's start or a wgmma.wait_group): the registers are not fenced", op.c_str(), base + j);
            return -1;
        }
        if (x->da != l0->da || x->db != l0->db || x->scale_d != l0->scale_d) {
            snprintf(why, len, "%s: thread %d gives other descriptors or scale-d than thread %d (they must be the same "
                     "across the warpgroup)", op.c_str(), base + j, base);
            return -1;
        }
        if (rs && written_since_fence(base + j, x->a)) {
            snprintf(why, len, "%s: thread %d's A registers (at %p) were written after its last wgmma.fence; the fence "
                     "must come after every write of the registers the op reads (PTX: undefined otherwise)", op.c_str(),
                     base + j, (const void *)x->a);
            return -1;
        }
    }
    const int es = kind == MMA_TF32 ? 4 : 2, kd = 32 / es; // element bytes; the op's k
    desc a = decode(l0->da, ta, es), b = decode(l0->db, tb, es);
    for (int pass = rs; pass < 2; pass++) {
        const desc &d = pass ? b : a;
        if (const char *bad = swz_check(d)) {
            snprintf(why, len, "%s: operand %c at %p, %zu-byte swizzle%s: %s", op.c_str(), pass ? 'B' : 'A',
                     (const void *)d.p, swz_width(d.swz), d.mn ? " (M/N-major)" : "", bad);
            return -1;
        }
    }
    // every 16-byte row of both operands (8 k of a row; M/N-major: 8 rows at one k): in
    // shared memory, aligned, not a pending cp.async's
    for (int pass = rs; pass < 2; pass++) {
        const desc &d = pass ? b : a;
        int rows = pass ? n : 64;
        for (int r = 0; r < rows; r += d.mn ? 8 : 1)
            for (int k = 0; k < kd; k += d.mn ? 1 : 16 / es) {
                const char *p = elem_at(d, r, k);
                if ((uintptr_t)p & 15 || !in_shared(p, 16)) {
                    snprintf(why, len, "%s: operand %c row %d-%d, k %d-%d at %p: %s", op.c_str(), pass ? 'B' : 'A', r,
                             d.mn ? r + 7 : r, k, d.mn ? k : k + 16 / es - 1, (const void *)p, (uintptr_t)p & 15 ? "not 16-byte aligned" : "outside the kernel's shared memory");
                    return -1;
                }
                if (tma_read_check(p, 16, base, 128, (op + (pass ? ": operand B" : ": operand A")).c_str(), why, len))
                    return -1;
                const char *bv = pview_at(bviews, p), *v = pview_at(pviews, p);
                if (bv && memcmp(bv, p, 16)) {
                    snprintf(why, len, "%s: operand %c row %d-%d, k %d-%d at %p: stored since the last __syncthreads; "
                             "the warpgroup's warps issue wgmma one by one, and one may start before another warp's "
                             "stores are in (a barrier between the stores and the wgmma)", op.c_str(), pass ? 'B' : 'A',
                             r, d.mn ? r + 7 : r, k, d.mn ? k : k + 16 / es - 1, (const void *)p);
                    return -1;
                }
                if (v && memcmp(v, p, 16)) {
                    snprintf(why, len, "%s: operand %c row %d-%d, k %d-%d at %p: written by the generic proxy (a store "
                             "or cp.async) since the last fence.proxy.async; wgmma reads shared memory through the async "
                             "proxy, which those writes reach only through a fence after them (then the barrier)",
                             op.c_str(), pass ? 'B' : 'A', r, d.mn ? r + 7 : r, k, d.mn ? k : k + 16 / es - 1,
                             (const void *)p);
                    return -1;
                }
                if (any_copy_at(p))
                for (const copy &c : copies)
                    if (overlaps(c, p, 16) && (c.state == PENDING || c.round == barrier_round())) {
                        snprintf(why, len, "%s: operand %c row %d reads bytes that cp.async at %s:%d (thread %d) writes, "
                                 "%s", op.c_str(), pass ? 'B' : 'A', r, base_name(c.file), c.line, c.thr,
                                 c.state == PENDING ? "before that thread's cp.async.wait_group covered it"
                                                    : "with no __syncthreads after its wait_group");
                        return -1;
                    }
            }
    }
    wg_op o = {std::vector<float>((size_t)128 * (n / 2)), n, base, rs ? NULL : a.p, b.p, l0->da, l0->db,
               operand_sum(rs ? NULL : &a, b, n), ta, tb, file, line, rs, es};
    auto elem = [&](const desc &d, int r, int k) {
        unsigned h = 0; // (little-endian: a 16-bit element in the low half)
        memcpy(&h, elem_at(d, r, k), es);
        return operand(kind, h);
    };
    // Register A: the warpgroup's fragments gathered (warp w rows 16w..; a[0] row g, k 2t
    // and 2t + 1; a[1] row g + 8; a[2], a[3] the same at k + 8: mma.sync's m16n8k16 A)
    std::vector<float> ra(rs ? 64 * 16 : 0);
    for (int j = 0; rs && j < 128; j++) {
        unsigned r[4];
        raw_copy(r, ((const wgmma_lane *)lanes[j])->a, 16);
        int w = j / 32, g = (j % 32) >> 2, t = j & 3;
        for (int i = 0; i < 8; i++)
            ra[(16 * w + g + 8 * ((i >> 1) & 1)) * 16 + 2 * t + (i & 1) + 8 * (i >> 2)] = operand(kind, half_of(r[i >> 1], i & 1));
    }
    auto elem_a = [&](int r, int k) { return rs ? ra[r * 16 + k] : elem(a, r, k); };
    for (int j = 0; j < 128; j++) {
        const wgmma_lane *x = (const wgmma_lane *)lanes[j];
        // the accumulators' input: the latest pending op on these registers, else the registers
        const float *in = x->d;
        for (const wg_pend &p : wg_pending)
            if (p.thr == base + j && p.d == x->d) in = &wg_ops[p.op].res[(size_t)j * (n / 2)];
        int w = j / 32, g = (j % 32) >> 2, t = j & 3;
        for (int e = 0; e < n / 2; e++) {
            int row = 16 * w + g + 8 * ((e >> 1) & 1), col = 8 * (e / 4) + 2 * t + (e & 1);
            double s = l0->scale_d ? in[e] : 0.0;
            for (int k = 0; k < kd; k++) s += (double)elem_a(row, k) * elem(b, col, k);
            o.res[(size_t)j * (n / 2) + e] = (float)s;
        }
    }
    wg_ops.push_back(std::move(o));
    wgmma_issued[ta << 1 | tb]++;
    if (rs) wgmma_rs_issued++;
    if (kind == MMA_TF32) wgmma_tf32_issued++;
    for (int j = 0; j < 128; j++) {
        const wgmma_lane *x = (const wgmma_lane *)lanes[j];
        for (int e = 0; e < n / 2; e++) x->d[e] = __builtin_nanf(""); // the registers belong to the op now
        wg_pend p = {base + j, (int)wg_ops.size() - 1, 0, x->d, rs ? x->a : NULL, {0, 0, 0, 0}};
        if (rs) raw_copy(p.a_was, x->a, 16);
        wg_pending.push_back(p);
    }
    return 0;
}

void simt::wgmma_fence(const char *file, int line)
{
    tsan_hide hide;
    int t = calling_thread("wgmma.fence", file, line);
    wg_fenced[t] = 1;
    const char *lo = (const char *)__builtin_frame_address(0), *hi = stack_top();
    wg_flo[t] = NULL;
    if (!hi || lo >= hi || hi - lo > (64 << 10)) return; // not a fiber's stack: register A unchecked
    wg_fstack[t].resize((size_t)(hi - lo));
    raw_copy(wg_fstack[t].data(), lo, (size_t)(hi - lo));
    wg_flo[t] = lo;
}

void simt::fence_proxy_async(const char *file, int line)
{
    tsan_hide hide;
    calling_thread("fence.proxy.async", file, line);
    size_t n = 0;
    for (const pview &w : pviews) n += w.n;
    if (proxy_copied + n > PROXY_BYTES) { // enough of this block seen
        pviews.clear();
        bviews.clear();
        return;
    }
    proxy_copied += n;
    for (pview &w : pviews) memcpy(w.v.data(), w.p, w.n);
}

void simt::async_proxy_wrote(const void *p, size_t n)
{
    tsan_hide hide;
    pview_sync(pviews, p, n);
    pview_sync(bviews, p, n);
}

void simt::wgmma_commit(const char *file, int line)
{
    tsan_hide hide;
    int t = calling_thread("wgmma.commit_group", file, line);
    wg_committed[t]++;
    for (wg_pend &p : wg_pending)
        if (p.thr == t && !p.group) p.group = wg_committed[t];
}

void simt::wgmma_wait(const char *file, int line, int n)
{
    tsan_hide hide;
    int t = calling_thread("wgmma.wait_group", file, line);
    size_t keep = 0;
    for (size_t i = 0; i < wg_pending.size(); i++) {
        wg_pend p = wg_pending[i];
        if (p.thr != t || !p.group || p.group > wg_committed[t] - n) {
            wg_pending[keep++] = p;
            continue;
        }
        const wg_op &o = wg_ops[p.op];
        desc a = decode(o.da, o.ta, o.es), b = decode(o.db, o.tb, o.es);
        unsigned a_now[4];
        if (p.a) raw_copy(a_now, p.a, 16);
        if (p.a && memcmp(a_now, p.a_was, 16)) {
            char m[320];
            snprintf(m, sizeof m, "wgmma.wait_group at %s:%d: the A registers (at %p) of wgmma.mma_async at %s:%d were "
                     "written before this wait_group covered it (PTX: undefined)", base_name(file), line,
                     (const void *)p.a, base_name(o.file), o.line);
            thread_fail(m);
        }
        if (operand_sum(o.rs ? NULL : &a, b, o.n) != o.sum) {
            char m[320];
            snprintf(m, sizeof m, "wgmma.wait_group at %s:%d: the shared-memory operands of wgmma.mma_async at %s:%d "
                     "were written before this wait_group covered it", base_name(file), line, base_name(o.file), o.line);
            thread_fail(m);
        }
        int j = t - o.base;
        // the latest op on these registers wins (a chained op's shadow holds the earlier ones)
        int latest = 1;
        for (size_t q = i + 1; q < wg_pending.size(); q++)
            if (wg_pending[q].thr == t && wg_pending[q].d == p.d && wg_pending[q].group && wg_pending[q].group <= wg_committed[t] - n)
                latest = 0;
        if (latest) memcpy(p.d, &o.res[(size_t)j * (o.n / 2)], sizeof(float) * (o.n / 2));
    }
    wg_pending.resize(keep);
    wg_fenced[t] = 0; // the accumulators are the thread's again
}

unsigned long long simt::smem_desc(const void *p, int lbo, int sbo, int swz)
{
    const char *b = shared_base();
    size_t off = b ? (size_t)((const char *)p - b) : 0;
    if (!b || (const char *)p < b || off >= (1u << 18) || (lbo | sbo) & 15 || lbo >= (1 << 18) || sbo >= (1 << 18) ||
        swz < 0 || swz > 3)
        die("wgmma descriptor for %p (lbo %d, sbo %d, layout %d): not 16-byte offsets within the kernel's first 256 KiB "
            "of shared memory, or no layout type", p, lbo, sbo, swz);
    return (off >> 4) | (unsigned long long)(lbo >> 4) << 16 | (unsigned long long)(sbo >> 4) << 32 |
           (unsigned long long)swz << 62;
}

// ldmatrix's shared-memory banks (DDPRT_SIMT_BANKS=file): each matrix's 8 rows of 16
// bytes are one phase of 32 four-byte words; a phase whose distinct words fall twice in
// one of the 32 banks is an n-way conflict (n phases on the GPU). Banks follow from
// the address modulo 128, and every row of a phase lies in one shared array, so the
// host's placement of that array shifts all of them alike: the count is the GPU's.
namespace {
struct bank_stat { unsigned long long phases, conflicted; int worst; };
std::map<std::string, bank_stat> bank_stats; // this launch's, by kernel (its name without template arguments)

std::string kernel_name(const std::string &sym)
{
    int st = 0;
    char *d = abi::__cxa_demangle(sym.c_str(), NULL, NULL, &st);
    std::string n = st == 0 && d ? d : sym;
    free(d);
    const std::string anon = "(anonymous namespace)::";
    for (size_t a; (a = n.find(anon)) != std::string::npos;) n.erase(a, anon.size());
    if (n.compare(0, 5, "void ") == 0) n.erase(0, 5);
    size_t cut = n.find_first_of("<(");
    if (cut != std::string::npos) n.resize(cut);
    size_t ns = n.rfind("::");
    return ns == std::string::npos ? n : n.substr(ns + 2);
}

// One line per launch with ldmatrix phases, appended at the launch's end (the test
// runner's children leave by _exit: no atexit).
void bank_flush()
{
    const char *path = rt_env_str(RT_ENV_SIMT_BANKS);
    if (!path) return;
    // one append of whole lines: tests run side by side (the runner's T_JOBS) share the file
    std::string text;
    char line[512];
    for (auto &k : bank_stats) {
        snprintf(line, sizeof line, "%s: %llu phases, %llu conflicted (worst %d-way)\n", k.first.c_str(),
                 k.second.phases, k.second.conflicted, k.second.worst);
        text += line;
    }
    bank_stats.clear();
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    if (write(fd, text.data(), text.size()) < 0) {}
    close(fd);
}

bool banks_on()
{
    static int on = -1;
    if (on < 0) on = rt_env_str(RT_ENV_SIMT_BANKS) != NULL;
    return on;
}

// One phase: up to 128 bytes, as `per` accesses of `bytes` each (NULL: a lane not taking part).
void count_phase(bank_stat &st, const void *const *a, int per, int bytes)
{
    int in_bank[32] = {0}, ways = 1, any = 0;
    for (int r = 0; r < per; r++) {
        if (!a[r]) continue;
        int dup = 0; // the same address twice is one access (a broadcast), not a conflict
        for (int q = 0; q < r; q++) dup |= a[q] == a[r];
        if (dup) continue;
        any = 1;
        uintptr_t w = (uintptr_t)a[r] >> 2;
        for (int i = 0; i < bytes / 4; i++)
            if (++in_bank[(w + i) & 31] > ways) ways = in_bank[(w + i) & 31];
    }
    if (!any) return;
    st.phases++;
    st.conflicted += ways > 1;
    if (ways > st.worst) st.worst = ways;
}

void count_banks(const void *const rows[32], int num)
{
    if (!banks_on()) return;
    simt::kinfo *k = simt::running_kinfo();
    bank_stat &st = bank_stats["ldmatrix banks: " + (k ? kernel_name(k->sym) : std::string("?"))];
    for (int m = 0; m < num; m++) count_phase(st, rows + 8 * m, 8, 16);
}

// cp.async's shared-memory stores (DDPRT_SIMT_BANKS): a warp's n-th copy at one site is
// one instruction; its 32 lanes' destinations go in phases of 128 bytes (8 lanes of 16
// bytes), as a 128-bit shared store's. Gathered per block, counted at its end.
struct cp_inst { const void *dst[32]; int bytes; };
std::map<std::tuple<int, const char *, int, unsigned>, cp_inst> cp_insts; // warp, site, n-th
std::map<std::tuple<int, const char *, int>, unsigned> cp_seq;             // thread, site -> copies so far

void cp_note(int t, const char *file, int line, const void *dst, int bytes)
{
    if (!banks_on()) return;
    unsigned n = cp_seq[std::make_tuple(t, file, line)]++;
    cp_inst &c = cp_insts[std::make_tuple(t / 32, file, line, n)];
    c.dst[t % 32] = dst, c.bytes = bytes;
}

void cp_count()
{
    if (cp_insts.empty()) return;
    simt::kinfo *k = simt::running_kinfo();
    bank_stat &st = bank_stats["cp.async banks: " + (k ? kernel_name(k->sym) : std::string("?"))];
    for (auto &i : cp_insts) {
        int per = 128 / i.second.bytes;
        for (int p = 0; p < 32; p += per) count_phase(st, i.second.dst + p, per, i.second.bytes);
    }
    cp_insts.clear(), cp_seq.clear();
}
} // namespace

int simt::tc_complete(int kind, int arg, void *const lanes[32], const char *file, int line, int warp, char *why,
                      size_t len)
{
    tsan_hide hide;
    if (kind == W_MMA) {
        mma(arg, lanes);
        return 0;
    }
    int num = arg & 7;
    std::string op = where("ldmatrix", file, line);
    if (num != 1 && num != 2 && num != 4) {
        snprintf(why, len, "%s: .x%d (1, 2 or 4 matrices)", op.c_str(), num);
        return -1;
    }
    for (int j = 0; j < 32; j++) {
        ldm_lane *x = (ldm_lane *)lanes[j];
        if (j >= 8 * num) continue; // lanes past the matrices give no address
        const char *p = (const char *)x->addr;
        if ((uintptr_t)p & 15) {
            snprintf(why, len, "%s: lane %d of warp %d gives row address %p, not 16-byte aligned", op.c_str(), j,
                     warp, (const void *)p);
            return -1;
        }
        if (!in_shared(p, 16)) {
            snprintf(why, len, "%s: lane %d of warp %d gives row address %p, outside the kernel's shared memory",
                     op.c_str(), j, warp, (const void *)p);
            return -1;
        }
        if (tma_read_check(p, 16, 32 * warp, 32, op.c_str(), why, len)) return -1;
        if (any_copy_at(p))
        for (const copy &c : copies) {
            if (!overlaps(c, p, 16)) continue;
            if (c.state == PENDING) {
                snprintf(why, len, "%s: lane %d of warp %d reads a row that cp.async at %s:%d (thread %d) writes, "
                         "before that thread's cp.async.wait_group covered it", op.c_str(), j, warp,
                         base_name(c.file), c.line, c.thr);
                return -1;
            }
            if (c.round == barrier_round()) {
                snprintf(why, len, "%s: lane %d of warp %d reads a row that cp.async at %s:%d (thread %d) wrote; "
                         "its wait_group was not followed by a __syncthreads before this read", op.c_str(), j, warp,
                         base_name(c.file), c.line, c.thr);
                return -1;
            }
        }
    }
    for (int j = 0; j < 32; j++) {
        ldm_lane *x = (ldm_lane *)lanes[j];
        for (int r = 0; r < 32; r++) x->rows[r] = r < 8 * num ? ((ldm_lane *)lanes[r])->addr : NULL;
    }
    count_banks(((ldm_lane *)lanes[0])->rows, num);
    return 0;
}

void simt::tc_launch_done()
{
    tsan_hide hide;
    cp_count();
    if (!bank_stats.empty()) bank_flush();
    proxy_blocks = 0;
}

void simt::tc_block_start(int nthr)
{
    tsan_hide hide;
    cp_count(); // the block before's
    copies.clear();
    live.clear();
    memset(committed, 0, sizeof(int) * (size_t)nthr);
    wg_ops.clear();
    wg_pending.clear();
    memset(wg_committed, 0, sizeof(int) * (size_t)nthr);
    memset(wg_fenced, 0, (size_t)nthr);
    memset(wg_flo, 0, sizeof(wg_flo[0]) * (size_t)nthr);
    pviews.clear();
    bviews.clear();
    proxy_copied = 0;
    simt::kinfo *k = simt::running_kinfo();
    if (k && proxy_blocks++ < PROXY_BLOCKS)
        for (auto &v : k->vars) pviews.push_back({v.first, v.second, std::vector<char>(v.first, v.first + v.second)});
    bviews = pviews;
}

void simt::tc_thread_exit(int lin)
{
    tsan_hide hide;
    for (copy &c : copies)
        if (c.thr == lin && c.state == PENDING) perform(c); // the hardware finishes them
}

void simt::tc_barrier_done()
{
    tsan_hide hide;
    size_t nb = 0;
    for (const pview &w : bviews) nb += w.n;
    if (proxy_copied + nb > PROXY_BYTES) pviews.clear(), bviews.clear();
    proxy_copied += nb;
    for (pview &w : bviews) memcpy(w.v.data(), w.p, w.n);
    // Completed before this barrier: every thread sees them now.
    size_t n = 0;
    live.clear();
    for (const copy &c : copies)
        if (c.state == PENDING || c.round >= barrier_round()) copies[n++] = c, live[gran(c.dst)]++;
    copies.resize(n);
}

// cp.async copies issued since the process started (simt_cp_async_count): the device tests'
// evidence that a kernel's path really copies its tiles asynchronously, and how many
// (test_gpu_tc_w16.c, test_gpu_tc_attn_async.c).
static std::atomic<unsigned long long> cp_async_issued;
extern "C" unsigned long long simt_cp_async_count(void) { return cp_async_issued.load(); }

void simt::cp_async(const char *file, int line, void *dst, const void *src, int bytes, int src_bytes)
{
    tsan_hide hide;
    int t = calling_thread("cp.async", file, line);
    std::string op = where("cp.async", file, line);
    char b[320];
    if (bytes != 4 && bytes != 8 && bytes != 16) {
        snprintf(b, sizeof b, "%s: a copy of %d bytes (4, 8 or 16)", op.c_str(), bytes);
        return thread_fail(b);
    }
    if (src_bytes < 0 || src_bytes > bytes) {
        snprintf(b, sizeof b, "%s: src-size %d outside 0..%d", op.c_str(), src_bytes, bytes);
        return thread_fail(b);
    }
    if ((uintptr_t)dst % bytes || (src_bytes && (uintptr_t)src % bytes)) {
        snprintf(b, sizeof b, "%s: %s address %p is not %d-byte aligned", op.c_str(),
                 (uintptr_t)dst % bytes ? "shared" : "global", (uintptr_t)dst % bytes ? dst : src, bytes);
        return thread_fail(b);
    }
    if (!in_shared(dst, (size_t)bytes)) {
        snprintf(b, sizeof b, "%s: destination %p is outside the kernel's shared memory", op.c_str(), dst);
        return thread_fail(b);
    }
    if (src_bytes && mem_kind(src, (size_t)src_bytes) != 1) {
        snprintf(b, sizeof b, "%s: source %p (%d bytes) is not device memory", op.c_str(), src, src_bytes);
        return thread_fail(b);
    }
    if (any_copy_at(dst))
    for (const copy &c : copies)
        if (c.state == PENDING && overlaps(c, (const char *)dst, (size_t)bytes)) {
            snprintf(b, sizeof b, "%s: writes shared bytes that a pending cp.async at %s:%d (thread %d) also writes",
                     op.c_str(), base_name(c.file), c.line, c.thr);
            return thread_fail(b);
        }
    memset(dst, 0xff, (size_t)bytes); // NaN until its wait_group
    cp_async_issued++;
    cp_note(t, file, line, dst, bytes);
    copies.push_back({t, 0, PENDING, 0, (char *)dst, (const char *)src, bytes, src_bytes, file, line});
    live[gran(dst)]++;
}

void simt::cp_async_commit(const char *file, int line)
{
    tsan_hide hide;
    int t = calling_thread("cp.async.commit_group", file, line);
    committed[t]++;
    for (copy &c : copies)
        if (c.thr == t && !c.group) c.group = committed[t];
}

void simt::cp_async_wait(const char *file, int line, int n)
{
    tsan_hide hide;
    int t = calling_thread("cp.async.wait_group", file, line);
    for (copy &c : copies)
        if (c.thr == t && c.state == PENDING && c.group && c.group <= committed[t] - n) perform(c);
}
