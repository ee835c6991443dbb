// How one kernel launch runs on the SIMT executor (see simt.h). Blocks run one after
// another; a block's threads run in rounds, each round in the configured order: a
// thread runs until it exits or blocks (barrier, warp intrinsic). Threads and stacks
// are apart: a thread that exits leaves its stack to the next thread of the round (no
// switch at all, so a kernel without barriers runs its threads as a plain loop); a
// thread that blocks keeps its stack and switches straight to the next one (one
// switch per thread and barrier). When a round ends the scheduler completes what can
// complete (a barrier all threads reached, a warp intrinsic all its lanes reached) or
// says why nothing can, and starts the next round.
//
// Sanitizers: ASan is told about every stack switch. In TSan builds this file is not
// instrumented (SIMT_TSAN, see the Makefile): every GPU thread is a TSan fiber, entered
// without synchronisation, so the only happens-before edges between threads are the
// ones CUDA promises: barriers, warp intrinsics, block and launch boundaries (blocks are
// ordered too, as their shared memory is the same static storage).
#include "test/simt/simt_int.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <mutex>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#endif
#ifdef SIMT_TSAN
extern "C" {
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
}
#define TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#define TSAN_RELEASE(p) __tsan_release((void *)(p))
#define TSAN_ENTER(f) __tsan_switch_to_fiber((f), 1 /* no synchronisation */)
#else
#define TSAN_ACQUIRE(p) ((void)(p))
#define TSAN_RELEASE(p) ((void)(p))
#define TSAN_ENTER(f) ((void)(f))
#endif

namespace simt {
uint3 *cur_tid;
uint3 block_idx;
dim3 block_dim, grid_dim;
}

namespace {
enum { T_RUN, T_BAR, T_WARP, T_EXIT, T_MBAR };
#define MAX_THREADS 1024

struct thr;
struct stk { // a stack: a thread's while it runs or waits, or a free one
    void *sp;
    char *mem;
    size_t size;
    void *asan_fake;
    thr *start; // the thread to start when switched to idle
    stk *next_free;
    size_t color;
};
struct thr { // a GPU thread of the running block
    uint3 tid;
    int lin, state;
    stk *st;          // its stack while started and not exited
    const char *file; // where it waits
    int line, kind, arg, width;
    unsigned mask;
    unsigned long long val, res;
    void *tsan;
};

std::mutex dev_mu; // one kernel at a time: static shared memory exists once per process
thr T[MAX_THREADS];
stk sched;         // the OS thread running the kernel
stk stacks[MAX_THREADS + 1], *free_stk;
int nstacks, nthr, pos, nord, order[MAX_THREADS]; // this round's threads: order[0, nord)
int nbar, nwarp, nexit, nmbar; // nmbar: threads waiting on an mbarrier phase
stk *cur_stk; // the stack running now
thr *cur;     // the GPU thread running now (NULL: the scheduler, or an idle stack)
[[maybe_unused]] void *sched_tsan;
const simt::launch_rec *cur_L;
simt::kinfo *cur_k;
unsigned bar_round, warp_round[MAX_THREADS / 32];
// TSan sync addresses. A block's threads acquire block_sync (the scheduler's release
// before the block) and release exit_sync (the scheduler's acquire after it): one object
// for both made every thread's exit happen before the next thread's start, and TSan
// stopped seeing a missing barrier (test simt_missing_barrier_shows).
char bar_sync[2], warp_sync[MAX_THREADS / 32][2], block_sync, exit_sync;
unsigned long long rng;
std::string thread_why; // a check failed on a thread's own call (cp.async): reported at the round's end
// Dynamic shared memory: one area outside the static arrays' section (whose NaN fill
// before every block would otherwise cover it all), and the running launch's kernel
// facts with it added as one more variable (NaN fill, shared-memory checks, descriptors).
alignas(1024) char dyn_area[SIMT_DYN_MAX];
simt::kinfo dyn_k;
#if !defined(SIMT_ASAN)
// simt.h's section of static shared arrays; the tail links after every kernel's.
extern "C" char __start_simt_shared[] __attribute__((weak)), __stop_simt_shared[] __attribute__((weak));
__attribute__((section("simt_shared"), used)) char shared_tail[1024];
#endif
} // namespace

// ---- context switch: callee-saved registers on the old stack, then the new stack.
extern "C" void simt_ctx_switch(void **save_sp, void *to_sp);
extern "C" void simt_ctx_start(void);
extern "C" void simt_stack_main(stk *s);
#if defined(__x86_64__)
asm(".text\n"
    ".globl simt_ctx_switch\n.type simt_ctx_switch,@function\n"
    "simt_ctx_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size simt_ctx_switch,.-simt_ctx_switch\n"
    // A new stack 'returns' here: r12 holds the stack, r13 its entry function.
    ".globl simt_ctx_start\n.type simt_ctx_start,@function\n"
    "simt_ctx_start:\n  movq %r12, %rdi\n  callq *%r13\n  ud2\n"
    ".size simt_ctx_start,.-simt_ctx_start\n");
#else
#error "test/simt: the stack switch is written for x86-64 only (add the target's registers here)"
#endif

namespace {
void frame_init(stk *s)
{
    // Each stack's top at another offset in its page (cache colouring): otherwise the
    // hot frames of all threads fall in the same few L1 sets.
    void **sp = (void **)(((uintptr_t)s->mem + s->size - s->color) & ~(uintptr_t)15);
    *--sp = (void *)simt_ctx_start; // the first switch returns here
    *--sp = 0;                      // rbp
    *--sp = 0;                      // rbx
    *--sp = s;                      // r12
    *--sp = (void *)simt_stack_main; // r13
    *--sp = 0;                      // r14
    *--sp = 0;                      // r15
    s->sp = sp;
#ifdef SIMT_ASAN
    __asan_unpoison_memory_region(s->mem, s->size); // frames of a failed block may remain
#endif
}

// All stacks in one region of transparent huge pages: a round touches every thread's
// stack, and 4 KiB pages would cost a TLB miss per switch. No guard pages (they would
// split the huge pages): a canary at each stack's bottom is checked after each launch.
#if defined(SIMT_ASAN) || defined(SIMT_TSAN)
const size_t STACK = 256 << 10; // sanitizer frames are larger
#else
const size_t STACK = 32 << 10;
#endif
const unsigned long long CANARY = 0x5354414b5354414bULL;
char *stack_region;

stk *new_stack()
{
    if (!stack_region) {
        size_t n = STACK * (MAX_THREADS + 1);
        void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) die("cannot map %zu MiB of thread stacks", n >> 20);
        madvise(m, n, MADV_HUGEPAGE);
        stack_region = (char *)m;
    }
    stk *s = &stacks[nstacks++];
    s->mem = stack_region + STACK * (size_t)(s - stacks), s->size = STACK;
    s->color = (size_t)(nstacks * 37 % 64) * 64;
    memcpy(s->mem, &CANARY, sizeof CANARY);
    frame_init(s);
    return s;
}

stk *pop_free()
{
    stk *s = free_stk;
    if (!s) return new_stack();
    free_stk = s->next_free;
    return s;
}

void push_free(stk *s)
{
    s->next_free = free_stk;
    free_stk = s;
}

// From the running stack to `to` (saving where this one is).
void jump(stk *to)
{
    stk *from = cur_stk;
    cur_stk = to;
#ifdef SIMT_ASAN
    __sanitizer_start_switch_fiber(&from->asan_fake, to->mem, to->size);
#endif
    simt_ctx_switch(&from->sp, to->sp);
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(from->asan_fake, NULL, NULL);
#endif
}

void enter(thr *t)
{
    cur = t;
    simt::cur_tid = &t->tid;
    TSAN_ENTER(t->tsan);
}

// The next thread of this round that can run; NULL when the round is over.
thr *next_runnable()
{
    while (pos < nord) {
        thr *t = &T[order[pos++]];
        if (t->state != T_RUN) continue;
        // The thread after it: its saved registers are a cache miss otherwise.
        if (pos < nord && T[order[pos]].st) {
            __builtin_prefetch(T[order[pos]].st->sp);
            __builtin_prefetch((char *)T[order[pos]].st->sp + 64);
        }
        return t;
    }
    return NULL;
}

// Leaves the running stack for what runs next: a waiting thread's stack, a free stack
// for a thread that has not started, or the scheduler when the round is over.
void run_next_elsewhere()
{
    thr *t = next_runnable();
    if (!t) return jump(&sched);
    if (t->st) return jump(t->st);
    stk *s = pop_free();
    s->start = t;
    jump(s);
}

// The running thread waits (its partners decide when it resumes).
void block_here(thr *t)
{
    cur = NULL;
    run_next_elsewhere();
    enter(t); // resumed
}
} // namespace

// Every stack runs this: threads one after another while the next of the round has
// not started yet; otherwise the stack goes idle until it is given a thread to start.
extern "C" void simt_stack_main(stk *s)
{
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    for (;;) {
        thr *t = s->start;
        s->start = NULL;
        while (t) {
            t->st = s;
            enter(t);
            TSAN_ACQUIRE(&block_sync);
            cur_L->invoke(cur_L->kernel, cur_L->args);
            simt::tc_thread_exit(t->lin);
            TSAN_RELEASE(&exit_sync);
            t->state = T_EXIT, t->st = NULL, nexit++;
            cur = NULL;
            t = next_runnable();
            if (t && t->st) break; // a waiting thread: its own stack
        }
        push_free(s);
        if (!t) jump(&sched);
        else jump(t->st);
    }
}

// ---- what the scheduler does between rounds
namespace {
const char *bar_name(int k)
{
    static const char *n[] = {"__syncthreads", "__syncthreads_or", "__syncthreads_and", "__syncthreads_count"};
    return n[k];
}
const char *warp_name(int k)
{
    static const char *n[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                              "__ballot_sync", "__any_sync", "__all_sync", "mma.sync", "ldmatrix",
                              "wgmma.mma_async", "setmaxnreg"};
    return n[k];
}

// "0-127, 130" for the threads in state st in [first, end) (and, for waits, at this site).
std::string thread_set(int st, const char *file = NULL, int line = 0, int first = 0, int end = -1)
{
    std::string out;
    int shown = 0;
    if (end < 0) end = nthr;
    auto in = [&](int i) { return T[i].state == st && (!file || (T[i].file == file && T[i].line == line)); };
    for (int i = first; i < end; i++) {
        if (!in(i)) continue;
        int j = i;
        while (j + 1 < end && in(j + 1)) j++;
        if (shown++ == 6) { out += ", ..."; break; }
        char b[32];
        snprintf(b, sizeof b, i == j ? "%s%d" : "%s%d-%d", out.empty() ? "" : ", ", i, j);
        out += b;
        i = j;
    }
    return out;
}

int fail(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int fail(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -1;
}

// The lanes of mask m in warp w (lanes from `base`) all wait at the same intrinsic:
// every participant's result, then they run again.
int complete_warp(int w, int base, unsigned m, char *why, size_t len)
{
    if (T[base].kind == simt::W_MMA || T[base].kind == simt::W_LDMATRIX) {
        void *lanes[32];
        for (int j = 0; j < 32; j++) lanes[j] = (void *)T[base + j].val;
        if (simt::tc_complete(T[base].kind, T[base].arg, lanes, T[base].file, T[base].line, w, why, len)) return -1;
        for (int j = 0; j < 32; j++) T[base + j].state = T_RUN;
        nwarp -= 32;
        warp_round[w]++;
        return 0;
    }
    unsigned long long bits = 0;
    for (int j = 0; j < 32; j++)
        if (m >> j & 1 && T[base + j].val) bits |= 1ull << j;
    for (int j = 0; j < 32; j++) {
        if (!(m >> j & 1)) continue;
        thr *f = &T[base + j];
        int src = j, wd = f->width, seg;
        switch (f->kind) {
        case simt::W_SYNC: f->res = 0; continue;
        case simt::W_BALLOT: f->res = bits; continue;
        case simt::W_ANY: f->res = bits != 0; continue;
        case simt::W_ALL: f->res = bits == m; continue;
        }
        if (wd <= 0 || wd > 32 || (wd & (wd - 1)))
            return fail(why, len, "%s at %s:%d: width %d is not a power of 2 up to 32", warp_name(f->kind),
                        base_name(f->file), f->line, wd);
        seg = j & ~(wd - 1);
        switch (f->kind) {
        case simt::W_SHFL: src = seg + (f->arg & (wd - 1)); break;
        case simt::W_UP: src = j - seg >= f->arg ? j - f->arg : j; break;
        case simt::W_DOWN: src = j - seg + f->arg < wd ? j + f->arg : j; break;
        case simt::W_XOR: src = j ^ f->arg; if (src >= seg + wd || src > 31) src = j; break;
        }
        if (src < 0 || src > 31 || !(m >> src & 1))
            return fail(why, len, "%s at %s:%d: lane %d of warp %d reads lane %d, which is not in the mask 0x%08x",
                        warp_name(f->kind), base_name(f->file), f->line, j, w, src, m);
        f->res = T[base + src].val;
    }
    for (int j = 0; j < 32; j++)
        if (m >> j & 1) T[base + j].state = T_RUN;
    nwarp -= __builtin_popcount(m);
    warp_round[w]++;
    return 0;
}

// wgmma: the 128 threads of warp w's warpgroup all at f's site complete together; a
// partial warpgroup, an exited thread or another site in it (another warpgroup collective,
// or warp w's own lanes elsewhere) is a failure. 1 completed, 0 not yet, -1 failure.
int resolve_warpgroup(int w, const thr *f, char *why, size_t len)
{
    int base = w / 4 * 128;
    const char *op = warp_name(f->kind), *fn = base_name(f->file);
    if (nthr < base + 128)
        return fail(why, len, "%s at %s:%d issued by a partial warpgroup: threads %d-%d of a block of %d (a warpgroup is "
                    "128 threads, 4 aligned warps)", op, fn, f->line, base, nthr - 1, nthr);
    int ready = 1;
    for (int i = base; i < base + 128; i++) {
        const thr *g = &T[i];
        if (g->state == T_EXIT)
            return fail(why, len, "%s at %s:%d issued by a partial warpgroup: threads %s reach it, threads %s exited",
                        op, fn, f->line, thread_set(T_WARP, f->file, f->line, base, base + 128).c_str(),
                        thread_set(T_EXIT, NULL, 0, base, base + 128).c_str());
        // another warp at its own warp intrinsic (its softmax's shuffles) is only behind: the
        // wgmma waits for it; another warpgroup collective, or warp w's lanes elsewhere, diverge
        bool group_op = g->kind == simt::W_WGMMA || g->kind == simt::W_SETMAXNREG;
        if (g->state == T_WARP && (g->file != f->file || g->line != f->line || g->kind != f->kind) &&
            (group_op || i / 32 == w))
            return fail(why, len, "divergent warpgroup: threads %s at %s (%s:%d), threads %s at %s (%s:%d)",
                        thread_set(T_WARP, f->file, f->line, base, base + 128).c_str(), op, fn, f->line,
                        thread_set(T_WARP, g->file, g->line, base, base + 128).c_str(), warp_name(g->kind),
                        base_name(g->file), g->line);
        if (g->state != T_WARP || g->file != f->file || g->line != f->line || g->kind != f->kind) ready = 0;
    }
    if (!ready) return 0;
    void *lanes[128];
    for (int j = 0; j < 128; j++) lanes[j] = (void *)T[base + j].val;
    if (f->kind == simt::W_SETMAXNREG) {
        int r = simt::regs_setmaxnreg(f->arg, w / 4, f->file, f->line, why, len);
        if (r <= 0) return r; // an inc waits until a dec has filled the pool
    } else if (simt::tc_wgmma(f->arg, lanes, base, f->file, f->line, why, len)) return -1;
    for (int j = 0; j < 128; j++) T[base + j].state = T_RUN;
    nwarp -= 128;
    for (int k = 0; k < 4; k++) warp_round[w / 4 * 4 + k]++;
    return 1;
}

// Warp intrinsics whose lanes have all arrived complete; a mask that cannot be met is a
// failure. 1 some completed, 0 none, -1 failure.
int resolve_warps(char *why, size_t len)
{
    int progress = 0;
    for (int w = 0; w * 32 < nthr; w++) {
        int base = w * 32, lanes = nthr - base < 32 ? nthr - base : 32;
        for (int l = 0; l < lanes; l++) {
            thr *f = &T[base + l];
            if (f->state != T_WARP) continue;
            unsigned m = f->mask;
            const char *op = warp_name(f->kind), *fn = base_name(f->file);
            if (f->kind == simt::W_WGMMA || f->kind == simt::W_SETMAXNREG) {
                int r = resolve_warpgroup(w, f, why, len);
                if (r < 0) return -1;
                progress |= r;
                continue;
            }
            if ((f->kind == simt::W_MMA || f->kind == simt::W_LDMATRIX) && lanes < 32)
                return fail(why, len, "%s at %s:%d issued by a partial warp: warp %d has %d threads (block of %d); "
                            ".sync.aligned needs all 32 lanes", op, fn, f->line, w, lanes, nthr);
            if ((f->kind == simt::W_MMA || f->kind == simt::W_LDMATRIX) && thread_set(T_EXIT, NULL, 0, base,
                                                                                       base + 32).size())
                return fail(why, len, "%s at %s:%d issued by a partial warp: lanes %s of warp %d reach it, lanes %s "
                            "exited; .sync.aligned needs all 32 lanes", op, fn, f->line,
                            thread_set(T_WARP, f->file, f->line, base, base + 32).c_str(), w,
                            thread_set(T_EXIT, NULL, 0, base, base + 32).c_str());
            if (!(m >> l & 1))
                return fail(why, len, "%s at %s:%d: lane %d of warp %d passes mask 0x%08x, which does not name it", op,
                            fn, f->line, l, w, m);
            int ready = 1;
            for (int j = 0; j < 32; j++) {
                if (!(m >> j & 1)) continue;
                if (j >= lanes)
                    return fail(why, len, "%s at %s:%d: mask 0x%08x names lane %d of warp %d, which does not exist "
                                "(%d threads in the block)", op, fn, f->line, m, j, w, nthr);
                thr *g = &T[base + j];
                if (g->state == T_EXIT)
                    return fail(why, len, "%s at %s:%d (lanes %s of warp %d): mask 0x%08x names lane %d, which has "
                                "exited", op, fn, f->line, thread_set(T_WARP, f->file, f->line, base, base + lanes).c_str(),
                                w, m, j);
                if (g->state == T_BAR) ready = 0;
                if (g->state == T_WARP && (g->file != f->file || g->line != f->line || g->kind != f->kind))
                    return fail(why, len, "divergent warp intrinsics in warp %d: lanes %s at %s (%s:%d), lanes %s at %s "
                                "(%s:%d), mask 0x%08x", w, thread_set(T_WARP, f->file, f->line, base, base + lanes).c_str(),
                                op, fn, f->line, thread_set(T_WARP, g->file, g->line, base, base + lanes).c_str(),
                                warp_name(g->kind), base_name(g->file), g->line, m);
                if (g->state == T_WARP && g->mask != m)
                    return fail(why, len, "%s at %s:%d in warp %d: lane %d passes mask 0x%08x, lane %d 0x%08x", op, fn,
                                f->line, w, l, m, j, g->mask);
            }
            if (!ready) continue;
            if (complete_warp(w, base, m, why, len)) return -1;
            progress = 1;
        }
    }
    return progress;
}

// Threads waiting on an mbarrier phase that has completed run again. 1 some did, 0 none,
// -1 failure.
int resolve_mbars(char *why, size_t len)
{
    int progress = 0;
    for (int i = 0; i < nthr; i++) {
        thr *t = &T[i];
        if (t->state != T_MBAR) continue;
        int r = simt::tma_wait_ready((const void *)(uintptr_t)t->val, (unsigned)t->arg, i, why, len);
        if (r < 0) return -1;
        if (r) t->state = T_RUN, nmbar--, progress = 1;
    }
    return progress;
}

// Every thread waits or has exited, some on mbarrier phases that nothing can complete now.
int mbar_stuck(char *why, size_t len)
{
    const thr *m = NULL;
    for (int i = 0; i < nthr && !m; i++)
        if (T[i].state == T_MBAR) m = &T[i];
    std::string others;
    for (int i = 0; i < nthr; i++) {
        const thr *g = &T[i];
        if (g->state != T_BAR && g->state != T_WARP && g->state != T_MBAR) continue;
        if (g->file == m->file && g->line == m->line) continue;
        if (others.find(std::string(base_name(g->file)) + ":" + std::to_string(g->line) + ")") != std::string::npos)
            continue;
        others += "; threads " + thread_set(g->state, g->file, g->line) + " wait at " +
                  (g->state == T_BAR ? bar_name(g->kind) : g->state == T_WARP ? warp_name(g->kind) : "mbarrier") +
                  " (" + base_name(g->file) + ":" + std::to_string(g->line) + ")";
    }
    return fail(why, len, "mbarrier phase never completes: threads %s wait at %s:%d on %s%s%s", 
                thread_set(T_MBAR, m->file, m->line).c_str(), base_name(m->file), m->line,
                simt::tma_describe((const void *)(uintptr_t)m->val, (unsigned)m->arg).c_str(), others.c_str(),
                nexit ? (", threads " + thread_set(T_EXIT) + " exited").c_str() : "");
}

// Nothing can run: complete what can, or say why nothing can. 1 progress, 0 all
// threads exited, -1 failure.
int resolve(char *why, size_t len)
{
    if (!thread_why.empty()) {
        snprintf(why, len, "%s", thread_why.c_str());
        thread_why.clear();
        return -1;
    }
    if (nexit == nthr) return 0;
    if (nwarp) {
        int r = resolve_warps(why, len);
        if (r) return r;
    }
    if (nmbar) {
        int r = resolve_mbars(why, len);
        if (r) return r;
    }
    // Warp by warp: threads that have not run this far yet are next, not a deadlock.
    if (nbar + nwarp + nexit + nmbar < nthr) return 1;
    if (nmbar) return mbar_stuck(why, len);
    for (int i = 0; i < nthr; i++) // an inc that no dec can meet any more
        if (T[i].state == T_WARP && T[i].kind == simt::W_SETMAXNREG)
            return fail(why, len, "setmaxnreg.inc at %s:%d (threads %s) never completes: %s%s%s", base_name(T[i].file),
                        T[i].line, thread_set(T_WARP, T[i].file, T[i].line).c_str(),
                        simt::regs_describe(T[i].arg, i / 128).c_str(), nexit ? "; threads exited: " : "",
                        nexit ? thread_set(T_EXIT).c_str() : "");
    thr *b = NULL, *w = NULL;
    for (int i = 0; i < nthr && !(b && w); i++) {
        if (T[i].state == T_BAR && !b) b = &T[i];
        if (T[i].state == T_WARP && !w) w = &T[i];
    }
    if (b && !w) {
        for (int i = 0; i < nthr; i++) {
            thr *g = &T[i];
            if (g->state == T_BAR && (g->file != b->file || g->line != b->line || g->kind != b->kind))
                return fail(why, len, "barrier divergence: threads %s wait at %s (%s:%d), threads %s at %s (%s:%d)",
                            thread_set(T_BAR, b->file, b->line).c_str(), bar_name(b->kind), base_name(b->file),
                            b->line, thread_set(T_BAR, g->file, g->line).c_str(), bar_name(g->kind),
                            base_name(g->file), g->line);
        }
        if (nexit)
            return fail(why, len, "%s (%s:%d) reached by threads %s after threads %s exited", bar_name(b->kind),
                        base_name(b->file), b->line, thread_set(T_BAR).c_str(), thread_set(T_EXIT).c_str());
        unsigned long long any = 0, all = 1, count = 0;
        for (int i = 0; i < nthr; i++) any |= T[i].val, all &= T[i].val != 0, count += T[i].val != 0;
        unsigned long long res = b->kind == simt::BAR_OR ? any != 0 : b->kind == simt::BAR_AND ? all
                                 : b->kind == simt::BAR_COUNT ? count : 0;
        for (int i = 0; i < nthr; i++) T[i].res = res, T[i].state = T_RUN;
        nbar = 0;
        bar_round++;
        simt::tc_barrier_done();
        return 1;
    }
    // Lanes at a warp intrinsic wait for lanes that wait at a barrier.
    if (!b || !w) return fail(why, len, "no thread can run (internal: %d at barriers, %d at warp intrinsics)", nbar, nwarp);
    return fail(why, len, "deadlock: threads %s wait at %s (%s:%d) while threads %s wait at %s (%s:%d) for them",
                thread_set(T_BAR).c_str(), bar_name(b->kind), base_name(b->file), b->line, thread_set(T_WARP).c_str(),
                warp_name(w->kind), base_name(w->file), w->line);
}

unsigned long long rng_next(unsigned long long *x)
{
    unsigned long long z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void shuffle(int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next(&rng) % (unsigned long long)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

// Warp by warp (mode 3): a round is the lowest warp that can run, so it runs on alone
// to the next barrier (its warp intrinsics complete between its rounds) while the
// other warps wait where they are: a warp that overwrites shared memory another warp
// has yet to read, or reads what another has yet to write, with no barrier between,
// now sees the wrong values. Rounds of all threads kept every warp in step between
// warp intrinsics, which hid those races.
int one_warp()
{
    nord = 0;
    for (int w = 0; w * 32 < nthr && !nord; w++)
        for (int i = w * 32; i < nthr && i < w * 32 + 32; i++)
            if (T[i].state == T_RUN) order[nord++] = i;
    return nord;
}

int run_block(int mode, char *why, size_t len)
{
    for (int i = 0; i < nthr; i++) {
        T[i].state = T_RUN, T[i].st = NULL;
        order[i] = mode == 1 ? nthr - 1 - i : i;
    }
    nord = nthr;
    nbar = nwarp = nexit = nmbar = 0;
    for (;;) {
        if (mode == 2) shuffle(nthr);
        pos = 0;
        if (mode != 3 || one_warp()) run_next_elsewhere(); // back here when the round is over
        TSAN_ENTER(sched_tsan);
        int r = resolve(why, len);
        if (r <= 0) return r;
    }
}

// After a failed block: every stack idle again, every thread's TSan fiber new (their
// shadow call stacks hold the abandoned frames).
void reset_after_failure()
{
    free_stk = NULL;
    for (int i = 0; i < nstacks; i++) {
        frame_init(&stacks[i]);
        stacks[i].start = NULL;
        push_free(&stacks[i]);
    }
    for (int i = 0; i < nthr; i++) {
        T[i].st = NULL;
#ifdef SIMT_TSAN
        __tsan_destroy_fiber(T[i].tsan);
        T[i].tsan = __tsan_create_fiber(0);
#endif
    }
}

unsigned long long gcd(unsigned long long a, unsigned long long b)
{
    while (b) { unsigned long long t = a % b; a = b; b = t; }
    return a;
}
} // namespace

// ---- the intrinsics, on the calling thread's stack
int simt::barrier(const char *file, int line, int kind, int pred)
{
    thr *t = cur;
    if (!t) die("%s called outside a kernel (%s:%d)", bar_name(kind), file, line);
    t->state = T_BAR, t->file = file, t->line = line, t->kind = kind, t->val = (unsigned long long)pred;
    nbar++;
    unsigned r = bar_round;
    TSAN_RELEASE(&bar_sync[r & 1]);
    block_here(t);
    TSAN_ACQUIRE(&bar_sync[r & 1]);
    return (int)t->res;
}

unsigned long long simt::warp(const char *file, int line, int kind, unsigned mask, unsigned long long v, int arg,
                              int width)
{
    thr *t = cur;
    if (!t) die("%s called outside a kernel (%s:%d)", warp_name(kind), file, line);
    t->state = T_WARP, t->file = file, t->line = line, t->kind = kind, t->mask = mask, t->val = v, t->arg = arg;
    t->width = width;
    nwarp++;
    int w = t->lin >> 5;
    unsigned r = warp_round[w];
    TSAN_RELEASE(&warp_sync[w][r & 1]);
    block_here(t);
    TSAN_ACQUIRE(&warp_sync[w][r & 1]);
    return t->res;
}

void simt::block_on_mbar(const char *file, int line, const void *bar, unsigned parity)
{
    thr *t = cur;
    if (!t) die("mbarrier.try_wait called outside a kernel (%s:%d)", file, line);
    t->state = T_MBAR, t->file = file, t->line = line, t->val = (unsigned long long)(uintptr_t)bar;
    t->arg = (int)parity;
    nmbar++;
    block_here(t);
    TSAN_ACQUIRE(bar); // the arrivals' release (simt_tma.cc)
}

void simt::warp_coll(const char *file, int line, int kind, void *lane, int arg)
{
    warp(file, line, kind, 0xffffffffu, (unsigned long long)(uintptr_t)lane, arg, 32);
}

int simt::lane_id()
{
    if (!cur) die("a warp instruction called outside a kernel");
    return cur->lin & 31;
}

int simt::cur_lin() { return cur ? cur->lin : -1; }
const char *simt::stack_top() { return cur && cur->st ? cur->st->mem + cur->st->size : NULL; }
void *simt::dyn_shared() { return cur_L && cur_L->c.shmem ? dyn_area : NULL; }
unsigned simt::barrier_round() { return bar_round; }
simt::kinfo *simt::running_kinfo() { return cur_k; }

void simt::thread_fail(const std::string &what)
{
    if (!thread_why.empty()) return; // the first one
    char b[128];
    snprintf(b, sizeof b, " (thread %d)", cur ? cur->lin : -1);
    thread_why = what + b;
}

unsigned simt::activemask()
{
    thr *t = cur;
    if (!t) die("__activemask called outside a kernel");
    int base = t->lin & ~31;
    unsigned m = 0;
    for (int j = 0; j < 32 && base + j < nthr; j++)
        if (T[base + j].state != T_EXIT) m |= 1u << j;
    return m;
}

// ---- a launch
int simt::run_kernel(const launch_rec *L, char *why, size_t len)
{
    std::lock_guard<std::mutex> g(dev_mu);
    kinfo *k = info_of(L->kernel);
    if (L->c.shmem) {
        dyn_k = *k;
        dyn_k.vars.push_back({dyn_area, L->c.shmem});
        k = &dyn_k;
    }
    cur_k = k;
    int mode = sched_order();
    grid_dim = L->c.grid, block_dim = L->c.block;
    nthr = (int)(block_dim.x * block_dim.y * block_dim.z);
    for (int i = 0; i < nthr; i++) {
        T[i].lin = i;
        T[i].tid = {i % block_dim.x, i / block_dim.x % block_dim.y, i / (block_dim.x * block_dim.y)};
#ifdef SIMT_TSAN
        if (!T[i].tsan) T[i].tsan = __tsan_create_fiber(0);
#endif
    }
    // The scheduler's own stack, for ASan's switch annotations.
    pthread_attr_t at;
    if (!pthread_getattr_np(pthread_self(), &at)) {
        void *lo;
        pthread_attr_getstack(&at, &lo, &sched.size);
        sched.mem = (char *)lo;
        pthread_attr_destroy(&at);
    }
    cur_stk = &sched;
#ifdef SIMT_TSAN
    sched_tsan = __tsan_get_current_fiber();
#endif
    cur_L = L;
    rng = sched_seed() * 0x2545F4914F6CDD1DULL + L->seq;
    // Block order: forward, reversed, or an affine permutation (a coprime to nb).
    unsigned long long nb = (unsigned long long)grid_dim.x * grid_dim.y * grid_dim.z, a = 1, c = 0;
    if (mode == 2 && nb > 1) {
        a = rng_next(&rng) % nb | 1;
        while (gcd(a, nb) != 1) a++;
        c = rng_next(&rng) % nb;
    }
    int rc = 0;
    for (unsigned long long i = 0; i < nb && !rc; i++) {
        unsigned long long bl = mode == 1 ? nb - 1 - i : mode == 2 ? (a * i + c) % nb : i; // warps: forward
        block_idx = {(unsigned)(bl % grid_dim.x), (unsigned)(bl / grid_dim.x % grid_dim.y),
                     (unsigned)(bl / ((unsigned long long)grid_dim.x * grid_dim.y))};
        TSAN_ACQUIRE(&exit_sync); // the previous block's shared memory writes come first
        for (auto &v : k->vars) memset(v.first, 0xff, v.second);
#if !defined(SIMT_ASAN)
        if (!k->vars.empty() && __start_simt_shared)
            memset(__start_simt_shared, 0xff, (size_t)(__stop_simt_shared - __start_simt_shared));
#endif
        TSAN_RELEASE(&block_sync);
        simt::tc_block_start(nthr);
        simt::tma_block_start(nthr);
        simt::regs_block_start(nthr, k->bound);
        char what[768];
        if (run_block(mode, what, sizeof what)) {
            snprintf(why, len, "%s (launched at %s:%d) block (%u,%u,%u) of grid (%u,%u,%u), %d threads: %s",
                     L->c.name, base_name(L->c.file), L->c.line, block_idx.x, block_idx.y, block_idx.z, grid_dim.x,
                     grid_dim.y, grid_dim.z, nthr, what);
            reset_after_failure();
            rc = -1;
        }
    }
    TSAN_ACQUIRE(&exit_sync);
    simt::tc_launch_done();
    for (int i = 0; i < nstacks; i++)
        if (memcmp(stacks[i].mem, &CANARY, sizeof CANARY))
            die("%s (launched at %s:%d): a thread overflowed its %zu KiB stack", L->c.name, base_name(L->c.file),
                L->c.line, STACK >> 10);
    cur_L = NULL;
    return rc;
}

const char *simt::running_where()
{
    static char buf[512];
    thr *t = cur;
    const launch_rec *L = cur_L;
    if (!t || !L) return "";
    snprintf(buf, sizeof buf, "%s (launched at %s:%d) block (%u,%u,%u) thread (%u,%u,%u)", L->c.name,
             base_name(L->c.file), L->c.line, block_idx.x, block_idx.y, block_idx.z, t->tid.x, t->tid.y, t->tid.z);
    return buf;
}
