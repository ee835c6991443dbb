// The SIMT executor's TMA and mbarrier (sm_90, see simt.h): mbarrier.init / arrive /
// arrive.expect_tx / expect_tx / try_wait.parity, the tensor map (cuTensorMapEncodeTiled's
// checks) and cp.async.bulk.tensor.2d global -> shared with mbarrier::complete_tx::bytes;
// the im2col map (cuTensorMapEncodeIm2col's checks, rank 4: NHWC) and its
// cp.async.bulk.tensor.4d...im2col copy (a column of conv pixels, one filter tap).
//
// An mbarrier's phase completes when its pending arrivals and its transaction bytes are
// both zero; the next phase then starts with the init count. A TMA copy reads its box
// at the issue (out-of-bounds elements zero) and counts its bytes on the barrier's
// current phase at once; its destination is NaN until that phase completes, then
// written, in the 32 / 64 / 128-byte swizzle on the address bits as simt_tc.cc's elem_at
// reads it for wgmma. A thread waiting on a parity blocks in the scheduler (simt_exec.cc)
// and wakes when the phase completes; a wait nothing can meet is reported by the
// scheduler with the barrier's pending arrivals and bytes.
//
// Checks: an mbarrier used uninitialised, or by another thread with no __syncthreads
// since its init; an arrival on a phase that has all its arrivals; a parity wait on a
// barrier that moved on two phases since the thread last saw it (the parity cannot tell
// them apart); a TMA destination not 128-byte aligned (the swizzle's 8-row pattern for a
// swizzled map), outside shared memory, over bytes a pending TMA copy writes, or over a
// copy whose phase completed but that no thread waited for (its data lost); a read
// (ldmatrix rows, wgmma operands: simt_tc.cc) of a TMA destination by threads that have
// not waited for its phase, with no __syncthreads since one did.
#include "test/simt/simt_int.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef SIMT_TSAN
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
extern "C" void __tsan_release(void *addr);
struct tma_hide {
    tma_hide() { __tsan_ignore_thread_begin(); }
    ~tma_hide() { __tsan_ignore_thread_end(); }
};
#define TMA_RELEASE(p) __tsan_release((void *)(p))
#else
struct tma_hide {
    tma_hide() {}
};
#define TMA_RELEASE(p) ((void)(p))
#endif

namespace {
const unsigned long long MAP_MAGIC = 0x54454e534f524d50ULL;
struct map_rec { // what tensormap's opaque bytes hold here
    unsigned long long magic;
    const char *g;
    unsigned long long dim0, dim1, stride1;
    unsigned box0, box1, esize, swz;
};
static_assert(sizeof(map_rec) <= sizeof(simt::tensormap), "tensor map record");
// An im2col map (cuTensorMapEncodeIm2col, rank 4: dims {C, W, H, N}): the bounding box of
// the traversal's start pixels is [lo, dim - 1 + hi] in w and h, walked est apart.
const unsigned long long I2C_MAGIC = 0x494d32434f4c4d50ULL;
struct i2c_rec {
    unsigned long long magic;
    const char *g;
    unsigned long long dim[4], stride[3]; // stride[i]: bytes between steps of dim i + 1
    int lo[2], hi[2];                     // {w, h}
    unsigned est[2], cpp, ppc, esize, swz; // est: the traversal strides {w, h}
};
static_assert(sizeof(i2c_rec) <= sizeof(simt::tensormap), "im2col tensor map record");

struct mbar {
    unsigned count, pending, phase; // phase: how many have completed
    long long tx;                   // transaction bytes still to come (negative: came first)
    int init_thr;
    unsigned init_round;
    const char *file;
    int line;
    std::vector<unsigned> seen; // per thread: the phases it has seen complete
    unsigned max_seen;          // the most any thread has seen
    std::vector<int> open;      // copies counted on the current phase
};
struct tcopy {
    char *dst;
    std::vector<char> img; // the destination's bytes once the phase completes
    uintptr_t bar;
    unsigned phase, seen_round; // seen_round: barrier round when a thread first saw it (UINT_MAX: none)
    int done, thr;
    const char *file;
    int line;
};
std::unordered_map<uintptr_t, mbar> bars;
std::vector<tcopy> tcopies;
std::unordered_map<uintptr_t, int> tgran; // 16-byte granule -> the latest TMA copy writing it
int block_threads;
unsigned long long tma_issued;



// "the mbarrier at shared offset N (init at file:line)"
std::string bar_name(uintptr_t a)
{
    char b[160];
    const char *s = shared_base();
    auto it = bars.find(a);
    if (it == bars.end())
        snprintf(b, sizeof b, "the mbarrier at shared offset %ld", s ? (long)((const char *)a - s) : -1L);
    else
        snprintf(b, sizeof b, "the mbarrier at shared offset %ld (init at %s:%d)", s ? (long)((const char *)a - s) : -1L,
                 base_name(it->second.file), it->second.line);
    return b;
}

// The barrier thread t uses at op, checked: initialised, and its init visible to t.
mbar *use(void *bar, int t, const char *op, const char *file, int line)
{
    char b[400];
    auto it = bars.find((uintptr_t)bar);
    if (it == bars.end()) {
        snprintf(b, sizeof b, "%s at %s:%d: %s is used uninitialised (no mbarrier.init in this block)", op,
                 base_name(file), line, bar_name((uintptr_t)bar).c_str());
        simt::thread_fail(b);
        return NULL;
    }
    mbar &m = it->second;
    if (t != m.init_thr && m.init_round == simt::barrier_round()) {
        snprintf(b, sizeof b, "%s at %s:%d: %s was initialised by thread %d with no __syncthreads since (the init is "
                 "not visible to this thread)", op, base_name(file), line, bar_name((uintptr_t)bar).c_str(), m.init_thr);
        simt::thread_fail(b);
        return NULL;
    }
    return &m;
}

// The phase's arrivals and bytes are in: its copies land, the next phase starts.
void maybe_complete(mbar &m)
{
    if (m.pending || m.tx) return;
    for (int i : m.open) {
        tcopy &c = tcopies[(size_t)i];
        memcpy(c.dst, c.img.data(), c.img.size());
        simt::async_proxy_wrote(c.dst, c.img.size());
        std::vector<char>().swap(c.img);
        c.done = 1;
    }
    m.open.clear();
    m.phase++;
    m.pending = m.count;
}

// Thread t saw phases [0, n) of m complete: their copies are its to read.
void saw(mbar &m, uintptr_t a, int t, unsigned n)
{
    if (m.seen[(size_t)t] >= n) return;
    m.seen[(size_t)t] = n;
    if (m.max_seen >= n) return; // another thread saw them first
    m.max_seen = n;
    for (tcopy &c : tcopies)
        if (c.bar == a && c.done && c.phase < n && c.seen_round == UINT_MAX) c.seen_round = simt::barrier_round();
}
} // namespace

const char *simt::tensormap_encode(tensormap *m, int elem_bytes, unsigned rank, const void *gaddr,
                                   const unsigned long long *dims, const unsigned long long *strides,
                                   const unsigned *box, const unsigned *elem_strides, int swz)
{
    if (rank != 2) return "rank is not 2 (the executor emulates 2D tile maps)";
    if (elem_bytes != 2 && elem_bytes != 4) return "the element type is not 16-bit (bf16 / f16) or fp32";
    if ((uintptr_t)gaddr % 16) return "the global address is not 16-byte aligned";
    if (!dims[0] || !dims[1] || dims[0] > (1ull << 32) || dims[1] > (1ull << 32))
        return "a global dimension is 0 or over 2^32";
    if (strides[0] % 16 || strides[0] >= (1ull << 40)) return "the global stride is not a multiple of 16 under 2^40";
    if (strides[0] < dims[0] * (unsigned long long)elem_bytes) return "the global stride is shorter than a row";
    if (!box[0] || !box[1] || box[0] > 256 || box[1] > 256) return "a box dimension is 0 or over 256";
    if (elem_strides[0] != 1 || elem_strides[1] != 1) return "element strides other than 1 (not emulated)";
    if (swz != 0 && swz != 32 && swz != 64 && swz != 128) return "the swizzle is not none, 32, 64 or 128 bytes";
    unsigned inner = box[0] * (unsigned)elem_bytes;
    if (inner % 16) return "the box's inner dimension is not a multiple of 16 bytes";
    if (swz && inner > (unsigned)swz) return "the box's inner dimension is wider than the swizzle";
    if (swz && inner != (unsigned)swz) return "a box row narrower than its swizzle (not emulated)";
    map_rec r = {MAP_MAGIC, (const char *)gaddr, dims[0], dims[1], strides[0], box[0], box[1], (unsigned)elem_bytes,
                 (unsigned)swz};
    memset(m, 0, sizeof *m);
    memcpy(m, &r, sizeof r);
    return NULL;
}

const char *simt::tensormap_encode_im2col(tensormap *m, int elem_bytes, unsigned rank, const void *gaddr,
                                          const unsigned long long *dims, const unsigned long long *strides,
                                          const int *lower, const int *upper, unsigned channels_per_pixel,
                                          unsigned pixels_per_column, const unsigned *elem_strides, int swz)
{
    if (rank != 4) return "rank is not 4 (the executor emulates 2-D convs' NHWC maps)";
    if (elem_bytes != 2) return "the element type is not 16-bit (bf16 / f16)";
    if ((uintptr_t)gaddr % 16) return "the global address is not 16-byte aligned";
    for (int i = 0; i < 4; i++)
        if (!dims[i] || dims[i] > (1ull << 32)) return "a global dimension is 0 or over 2^32";
    for (int i = 0; i < 3; i++)
        if (strides[i] % 16 || strides[i] >= (1ull << 40)) return "a global stride is not a multiple of 16 under 2^40";
    if (strides[0] < dims[0] * (unsigned long long)elem_bytes) return "the global stride is shorter than a pixel";
    if (strides[1] < strides[0] * dims[1] || strides[2] < strides[1] * dims[2])
        return "a global stride is shorter than the dimension below it (overlapping pixels: not emulated)";
    for (int i = 0; i < 2; i++) {
        if (lower[i] < -128 || lower[i] > 127 || upper[i] < -128 || upper[i] > 127)
            return "a pixel box corner is outside [-128, 127] (rank 4)";
        if ((long long)dims[i + 1] - 1 + upper[i] < lower[i]) return "the pixel bounding box has no area";
    }
    if (!channels_per_pixel || channels_per_pixel > 256) return "channelsPerPixel is 0 or over 256";
    if (!pixels_per_column || pixels_per_column > 1024) return "pixelsPerColumn is 0 or over 1024";
    for (int i = 0; i < 4; i++)
        if (!elem_strides[i] || elem_strides[i] > 8) return "an element stride is 0 or over 8";
    if (elem_strides[0] != 1 || elem_strides[3] != 1) return "element strides in c or n other than 1 (not emulated)";
    if (swz != 0 && swz != 32 && swz != 64 && swz != 128) return "the swizzle is not none, 32, 64 or 128 bytes";
    unsigned inner = channels_per_pixel * (unsigned)elem_bytes;
    if (inner % 16) return "channelsPerPixel's bytes are not a multiple of 16";
    if (swz && inner > (unsigned)swz) return "channelsPerPixel's bytes are wider than the swizzle";
    if (swz && inner != (unsigned)swz) return "a pixel narrower than its swizzle (not emulated)";
    i2c_rec r;
    memset(&r, 0, sizeof r);
    r.magic = I2C_MAGIC, r.g = (const char *)gaddr;
    for (int i = 0; i < 4; i++) r.dim[i] = dims[i];
    for (int i = 0; i < 3; i++) r.stride[i] = strides[i];
    for (int i = 0; i < 2; i++) r.lo[i] = lower[i], r.hi[i] = upper[i], r.est[i] = elem_strides[i + 1];
    r.cpp = channels_per_pixel, r.ppc = pixels_per_column, r.esize = (unsigned)elem_bytes, r.swz = (unsigned)swz;
    memset(m, 0, sizeof *m);
    memcpy(m, &r, sizeof r);
    return NULL;
}

void simt::mbar_init(const char *file, int line, void *bar, unsigned count)
{
    tma_hide hide;
    int t = calling_thread("mbarrier.init", file, line);
    char b[320];
    if ((uintptr_t)bar % 8 || !in_shared(bar, 8)) {
        snprintf(b, sizeof b, "mbarrier.init at %s:%d: %p is not 8-byte aligned shared memory", base_name(file), line,
                 bar);
        return thread_fail(b);
    }
    if (!count || count >= (1u << 20)) {
        snprintf(b, sizeof b, "mbarrier.init at %s:%d: count %u outside 1..2^20-1", base_name(file), line, count);
        return thread_fail(b);
    }
    mbar &m = bars[(uintptr_t)bar];
    m = mbar();
    m.count = m.pending = count;
    m.init_thr = t, m.init_round = barrier_round(), m.file = file, m.line = line;
    m.seen.assign((size_t)block_threads, 0);
    memset(bar, 0, 8); // its state lives here, not in the 8 bytes
}

unsigned long long simt::mbar_arrive(const char *file, int line, void *bar, unsigned count, unsigned tx)
{
    tma_hide hide;
    const char *op = tx ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive";
    int t = calling_thread(op, file, line);
    mbar *m = use(bar, t, op, file, line);
    if (!m) return 0;
    unsigned long long state = m->phase;
    if (m->pending < count) {
        char b[400];
        snprintf(b, sizeof b, "%s at %s:%d: %u arrival(s) on %s, whose phase %u has %u of %u arrivals left (%lld "
                 "transaction bytes pending)", op, base_name(file), line, count, bar_name((uintptr_t)bar).c_str(),
                 m->phase, m->pending, m->count, m->tx);
        thread_fail(b);
        return state;
    }
    m->tx += tx;
    m->pending -= count;
    TMA_RELEASE(bar);
    maybe_complete(*m);
    return state;
}

void simt::mbar_expect_tx(const char *file, int line, void *bar, unsigned tx)
{
    tma_hide hide;
    int t = calling_thread("mbarrier.expect_tx", file, line);
    mbar *m = use(bar, t, "mbarrier.expect_tx", file, line);
    if (m) m->tx += tx;
}

void simt::mbar_wait(const char *file, int line, void *bar, unsigned parity)
{
    int t;
    {
        tma_hide hide;
        t = calling_thread("mbarrier.try_wait.parity", file, line);
        if (!use(bar, t, "mbarrier.try_wait.parity", file, line)) return;
        char why[400];
        int r = tma_wait_ready(bar, parity & 1, t, why, sizeof why);
        if (r < 0) return thread_fail(why);
        if (r) return;
    }
    block_on_mbar(file, line, bar, parity & 1);
}

int simt::tma_wait_ready(const void *bar, unsigned parity, int t, char *why, size_t len)
{
    tma_hide hide;
    auto it = bars.find((uintptr_t)bar);
    if (it == bars.end()) return 0; // (checked at the wait)
    mbar &m = it->second;
    if ((m.phase & 1) == parity) return 0; // the phase of that parity is the current one
    if (m.phase >= m.seen[(size_t)t] + 2 && m.phase >= 2) {
        snprintf(why, len, "mbarrier.try_wait.parity: thread %d waits on %s for parity %u, but it completed %u "
                 "phases since the thread last saw it (%u): a parity wait cannot tell them apart", t,
                 bar_name((uintptr_t)bar).c_str(), parity, m.phase - m.seen[(size_t)t], m.seen[(size_t)t]);
        return -1;
    }
    saw(m, (uintptr_t)bar, t, m.phase);
    return 1;
}

std::string simt::tma_describe(const void *bar, unsigned parity)
{
    tma_hide hide;
    auto it = bars.find((uintptr_t)bar);
    if (it == bars.end()) return bar_name((uintptr_t)bar) + " (uninitialised)";
    const mbar &m = it->second;
    char b[400];
    snprintf(b, sizeof b, "%s for parity %u: phase %u has %u of %u arrivals pending and %lld transaction bytes %s",
             bar_name((uintptr_t)bar).c_str(), parity, m.phase, m.pending, m.count, m.tx < 0 ? -m.tx : m.tx,
             m.tx < 0 ? "more than expect_tx announced" : "still expected");
    return b;
}

void simt::tma_block_start(int nthr)
{
    tma_hide hide;
    bars.clear();
    tcopies.clear();
    tgran.clear();
    block_threads = nthr;
}

// The checks every TMA copy passes: a map encoded in the mode op uses, the destination
// (aligned to swz's pattern, in shared memory, over no pending or unwaited copy) and the
// barrier: the barrier, or NULL (the thread failed).
static mbar *tma_begin(const char *op, const char *file, int line, int t, void *dst, size_t bytes, unsigned swz,
                       void *bar)
{
    char b[480];
    size_t align = swz ? 8 * (size_t)swz : 128;
    if ((uintptr_t)dst % align) {
        snprintf(b, sizeof b, "%s at %s:%d: destination %p is not %zu-byte aligned (%s)", op, base_name(file), line,
                 dst, align, swz ? "the swizzle's 8-row pattern" : "TMA's minimum");
        simt::thread_fail(b);
        return NULL;
    }
    if (!in_shared(dst, bytes)) {
        snprintf(b, sizeof b, "%s at %s:%d: destination %p (%zu bytes) is outside the kernel's shared memory", op,
                 base_name(file), line, dst, bytes);
        simt::thread_fail(b);
        return NULL;
    }
    mbar *m = use(bar, t, op, file, line);
    if (!m) return NULL;
    uintptr_t d = (uintptr_t)dst;
    for (uintptr_t g = d >> 4; g < (d + bytes) >> 4; g++) {
        auto it = tgran.find(g);
        if (it == tgran.end()) continue;
        const tcopy &o = tcopies[(size_t)it->second];
        const char *bad = !o.done ? "a pending TMA copy" : o.seen_round == UINT_MAX ? "a TMA copy whose mbarrier phase "
                          "completed but that no thread has waited for (its data is lost)" : NULL;
        if (bad) {
            snprintf(b, sizeof b, "%s at %s:%d: writes shared bytes of %s (%s:%d, thread %d, %s phase %u)", op,
                     base_name(file), line, bad, base_name(o.file), o.line, o.thr, bar_name(o.bar).c_str(), o.phase);
            simt::thread_fail(b);
            return NULL;
        }
    }
    return m;
}

// The copy c (its image filled) issued on m's current phase: the destination NaN until
// the phase completes, its bytes counted at once (complete_tx).
static void tma_commit(tcopy &c, mbar *m)
{
    const size_t bytes = c.img.size();
    uintptr_t d = (uintptr_t)c.dst;
    memset(c.dst, 0xff, bytes); // NaN until the phase completes
    simt::async_proxy_wrote(c.dst, bytes);
    tcopies.push_back(std::move(c));
    int idx = (int)tcopies.size() - 1;
    for (uintptr_t g = d >> 4; g < (d + bytes) >> 4; g++) tgran[g] = idx;
    m->open.push_back(idx);
    m->tx -= (long long)bytes;
    tma_issued++;
    maybe_complete(*m);
}

// Byte x of box row y at its address in the swz-byte swizzle (0: none), from the box's start.
static size_t swz_off(uintptr_t d, size_t row, unsigned y, size_t x, unsigned swz)
{
    uintptr_t a = d + y * row + x;
    if (swz) a ^= ((a >> 7) & (swz / 16 - 1)) << 4;
    return a - d;
}

void simt::tma_load_2d(const char *file, int line, void *dst, const tensormap *map, int c0, int c1, void *bar)
{
    tma_hide hide;
    const char *op = "cp.async.bulk.tensor.2d";
    int t = calling_thread(op, file, line);
    char b[480];
    map_rec r;
    memcpy(&r, map, sizeof r);
    if (r.magic != MAP_MAGIC) {
        snprintf(b, sizeof b, "%s at %s:%d: the tensor map was not encoded (cuTensorMapEncodeTiled)%s", op,
                 base_name(file), line, r.magic == I2C_MAGIC ? ": an im2col map in tile mode" : "");
        return thread_fail(b);
    }
    size_t row = (size_t)r.box0 * r.esize, bytes = row * r.box1;
    mbar *m = tma_begin(op, file, line, t, dst, bytes, r.swz, bar);
    if (!m) return;
    tcopy c;
    c.dst = (char *)dst, c.bar = (uintptr_t)bar, c.phase = m->phase, c.seen_round = UINT_MAX, c.done = 0, c.thr = t;
    c.file = file, c.line = line;
    c.img.assign(bytes, 0);
    for (unsigned y = 0; y < r.box1; y++) {
        long long gy = (long long)c1 + y;
        if (gy < 0 || gy >= (long long)r.dim1) continue; // zero fill
        long long lo = c0 < 0 ? -(long long)c0 : 0, hi = (long long)r.dim0 - c0;
        if (hi > (long long)r.box0) hi = r.box0;
        if (lo >= hi) continue;
        const char *src = r.g + (size_t)gy * r.stride1 + (size_t)((long long)c0 + lo) * r.esize;
        size_t n = (size_t)(hi - lo) * r.esize;
        if (simt::mem_kind(src, n) != 1) {
            snprintf(b, sizeof b, "%s at %s:%d: box row %u reads %p (%zu bytes), not device memory", op,
                     base_name(file), line, y, (const void *)src, n);
            return thread_fail(b);
        }
        for (long long x = lo; x < hi; x++) // element x of box row y, at its swizzled address
            memcpy(&c.img[swz_off((uintptr_t)dst, row, y, (size_t)x * r.esize, r.swz)],
                   src + (size_t)(x - lo) * r.esize, r.esize);
    }
    tma_commit(c, m);
}

// im2col: pixels_per_column pixels from the start pixel (w, h, n), w fastest, est apart,
// wrapping within the bounding box (w to lo past dim - 1 + hi, then h, then n on); each
// read at (w + offw, h + offh, n), its channels [c, c + cpp): zero outside the tensor.
void simt::tma_load_im2col_4d(const char *file, int line, void *dst, const tensormap *map, int c, int w, int h, int n,
                              unsigned short offw, unsigned short offh, void *bar)
{
    tma_hide hide;
    const char *op = "cp.async.bulk.tensor.4d.im2col";
    int t = calling_thread(op, file, line);
    char b[480];
    i2c_rec r;
    memcpy(&r, map, sizeof r);
    if (r.magic != I2C_MAGIC) {
        snprintf(b, sizeof b, "%s at %s:%d: the tensor map was not encoded (cuTensorMapEncodeIm2col)%s", op,
                 base_name(file), line, r.magic == MAP_MAGIC ? ": a tiled map in im2col mode" : "");
        return thread_fail(b);
    }
    const long long wlo = r.lo[0], whi = (long long)r.dim[1] - 1 + r.hi[0], hlo = r.lo[1],
                    hhi = (long long)r.dim[2] - 1 + r.hi[1];
    // A start off the traversal's lattice or outside the box walks pixels no conv meant
    // (a wrong coordinate order, say): the hardware's result there is not emulated.
    if (w < wlo || w > whi || h < hlo || h > hhi || (w - wlo) % r.est[0] || (h - hlo) % r.est[1]) {
        snprintf(b, sizeof b, "%s at %s:%d: start pixel (w %d, h %d) is not on the bounding box's traversal (w %lld..%lld "
                 "step %u, h %lld..%lld step %u)", op, base_name(file), line, w, h, wlo, whi, r.est[0], hlo, hhi,
                 r.est[1]);
        return thread_fail(b);
    }
    size_t row = (size_t)r.cpp * r.esize, bytes = row * r.ppc;
    mbar *m = tma_begin(op, file, line, t, dst, bytes, r.swz, bar);
    if (!m) return;
    tcopy cp;
    cp.dst = (char *)dst, cp.bar = (uintptr_t)bar, cp.phase = m->phase, cp.seen_round = UINT_MAX, cp.done = 0, cp.thr = t;
    cp.file = file, cp.line = line;
    cp.img.assign(bytes, 0);
    long long cw = w, ch = h, cn = n;
    for (unsigned y = 0; y < r.ppc; y++) {
        long long pw = cw + offw, ph = ch + offh;
        if (pw >= 0 && pw < (long long)r.dim[1] && ph >= 0 && ph < (long long)r.dim[2] && cn >= 0 &&
            cn < (long long)r.dim[3]) {
            long long lo = c < 0 ? -(long long)c : 0, hi = (long long)r.dim[0] - c;
            if (hi > (long long)r.cpp) hi = r.cpp;
            if (lo < hi) {
                const char *src = r.g + (size_t)cn * r.stride[2] + (size_t)ph * r.stride[1] + (size_t)pw * r.stride[0] +
                                  (size_t)((long long)c + lo) * r.esize;
                size_t nb = (size_t)(hi - lo) * r.esize;
                if (mem_kind(src, nb) != 1) {
                    snprintf(b, sizeof b, "%s at %s:%d: pixel %u reads %p (%zu bytes), not device memory", op,
                             base_name(file), line, y, (const void *)src, nb);
                    return thread_fail(b);
                }
                for (long long x = lo; x < hi; x++)
                    memcpy(&cp.img[swz_off((uintptr_t)dst, row, y, (size_t)x * r.esize, r.swz)],
                           src + (size_t)(x - lo) * r.esize, r.esize);
            }
        }
        if ((cw += r.est[0]) > whi) {
            cw = wlo;
            if ((ch += r.est[1]) > hhi) ch = hlo, cn++;
        }
    }
    tma_commit(cp, m);
}

int simt::tma_read_check(const void *p, size_t n, int first, int count, const char *op, char *why, size_t len)
{
    if (tgran.empty()) return 0;
    tma_hide hide;
    for (uintptr_t g = (uintptr_t)p >> 4; g <= ((uintptr_t)p + n - 1) >> 4; g++) {
        auto it = tgran.find(g);
        if (it == tgran.end()) continue;
        const tcopy &c = tcopies[(size_t)it->second];
        if (c.done && c.seen_round != UINT_MAX && barrier_round() > c.seen_round) continue;
        const mbar &m = bars[c.bar];
        for (int t = first; t < first + count; t++) {
            if (c.done && m.seen[(size_t)t] > c.phase) continue;
            snprintf(why, len, "%s reads shared bytes that cp.async.bulk.tensor at %s:%d (thread %d) writes, but "
                     "thread %d has not waited for their phase %u of %s%s", op, base_name(c.file), c.line, c.thr, t,
                     c.phase, bar_name(c.bar).c_str(), c.done ? " (it completed; no __syncthreads since a thread "
                     "waited for it)" : " (not completed)");
            return -1;
        }
    }
    return 0;
}

// TMA copies issued since the process started: the device tests' evidence that a path
// copies its tiles with TMA.
extern "C" unsigned long long simt_tma_count(void) { return tma_issued; }
