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
#include "test/simt/simt_int.h"
#include "rt/half.h"
#include <stdio.h>
#include <string.h>
#include <string>
#include <vector>

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
int committed[1024];      // per thread: the groups it has committed

const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

std::string where(const char *op, const char *file, int line)
{
    char b[256];
    snprintf(b, sizeof b, "%s at %s:%d", op, base_name(file), line);
    return b;
}

// [p, p + n) inside one of the running kernel's static shared arrays. Unknown (no
// symbol table) counts as inside: the check needs the kernel's variables.
bool in_shared(const void *p, size_t n)
{
    simt::kinfo *k = simt::running_kinfo();
    if (!k || k->sym.empty()) return true;
    for (auto &v : k->vars)
        if ((const char *)p >= v.first && (const char *)p + n <= v.first + v.second) return true;
    return false;
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
} // namespace

int simt::tc_complete(int kind, int arg, void *const lanes[32], const char *file, int line, int warp, char *why,
                      size_t len)
{
    if (kind == W_MMA) {
        mma(arg, lanes);
        return 0;
    }
    int num = arg & 7, base = warp * 32;
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
    (void)base;
    return 0;
}

void simt::tc_block_start(int nthr)
{
    copies.clear();
    memset(committed, 0, sizeof(int) * (size_t)nthr);
}

void simt::tc_thread_exit(int lin)
{
    for (copy &c : copies)
        if (c.thr == lin && c.state == PENDING) perform(c); // the hardware finishes them
}

void simt::tc_barrier_done()
{
    // Completed before this barrier: every thread sees them now.
    size_t n = 0;
    for (const copy &c : copies)
        if (c.state == PENDING || c.round >= barrier_round()) copies[n++] = c;
    copies.resize(n);
}

void simt::cp_async(const char *file, int line, void *dst, const void *src, int bytes, int src_bytes)
{
    int t = cur_lin();
    std::string op = where("cp.async", file, line);
    char b[320];
    if (t < 0) die("%s called outside a kernel", op.c_str());
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
    for (const copy &c : copies)
        if (c.state == PENDING && overlaps(c, (const char *)dst, (size_t)bytes)) {
            snprintf(b, sizeof b, "%s: writes shared bytes that a pending cp.async at %s:%d (thread %d) also writes",
                     op.c_str(), base_name(c.file), c.line, c.thr);
            return thread_fail(b);
        }
    memset(dst, 0xff, (size_t)bytes); // NaN until its wait_group
    copies.push_back({t, 0, PENDING, 0, (char *)dst, (const char *)src, bytes, src_bytes, file, line});
}

void simt::cp_async_commit(const char *file, int line)
{
    int t = cur_lin();
    if (t < 0) die("cp.async.commit_group at %s:%d called outside a kernel", base_name(file), line);
    committed[t]++;
    for (copy &c : copies)
        if (c.thr == t && !c.group) c.group = committed[t];
}

void simt::cp_async_wait(const char *file, int line, int n)
{
    int t = cur_lin();
    if (t < 0) die("cp.async.wait_group at %s:%d called outside a kernel", base_name(file), line);
    for (copy &c : copies)
        if (c.thr == t && c.state == PENDING && c.group && c.group <= committed[t] - n) perform(c);
}
