// The CUDA runtime of the SIMT executor (cuda_runtime_api.h): one simulated GPU whose
// memory is host memory, streams that really run in order on their own threads,
// events that order streams and the host, and CUDA's error model (a launch error for
// the next cudaGetLastError; an execution failure sticks and every later call returns
// it). ports/cuda/port_cuda.c runs on it unchanged.
//
// Memory. Device allocations are filled with NaN bytes (0xff), as cudaMalloc's garbage
// would be, and guarded: under ASan they are malloc'd (ASan knows their bounds to the
// byte); otherwise each sits between PROT_NONE pages with its end at the upper one, and
// the slack below 256-byte alignment is a canary checked at cudaFree and at device
// synchronisation. Pinned host memory is recorded so that copies from pageable memory
// get CUDA's semantics (they return only when the host buffer is done with), and so a
// kernel argument can be checked to be device-reachable.
#include "test/simt/simt_int.h"
#include "rt/env.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <cxxabi.h>
#include <map>
#include <new>
#include <set>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

namespace simt {
[[noreturn]] void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("simt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}
} // namespace simt

namespace {
const int WAIT_S = 900;  // a stream or event not done by then is wedged (every wait has a deadline)
const int RING = 256;    // queued operations per stream (launches wait for room beyond it)

const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

double now_ms()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// ---- errors: one sticky execution failure per process, launch errors per thread.
std::mutex err_mu;
std::atomic<int> sticky{0};
char sticky_msg[1024];
thread_local cudaError_t last_err = cudaSuccess;
thread_local char last_msg[1024], str_buf[1200];

cudaError_t set_sticky(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t set_sticky(cudaError_t e, const char *fmt, ...)
{
    std::lock_guard<std::mutex> g(err_mu);
    if (sticky.load()) return (cudaError_t)sticky.load();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sticky_msg, sizeof sticky_msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "simt: %s\n", sticky_msg); // as compute-sanitizer would, at once
    sticky.store(e);
    return e;
}

cudaError_t set_last(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t set_last(cudaError_t e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    last_err = e;
    return e;
}

cudaError_t status() { return (cudaError_t)sticky.load(); }

// ---- memory
struct alloc {
    char *base;
    size_t bytes, seq;
    char *map;       // the mapping (guard pages included); NULL when malloc'd
    size_t map_len;
    int kind;        // 1 device, 2 pinned
    int memfd1;      // memfd + 1 once an IPC handle was taken (the pages are shared); 0 none
    int ipc;         // 1: a peer's allocation mapped by cudaIpcOpenMemHandle
};
std::mutex mem_mu;
std::map<uintptr_t, alloc> allocs; // by base
size_t alloc_seq;

#if defined(__SANITIZE_ADDRESS__)
const bool use_asan = true;
#else
const bool use_asan = false;
#endif

size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The canary: bytes [bytes, round_up(bytes, 256)) of a guarded allocation.
int canary_broken(const alloc &a)
{
    if (a.map)
        for (size_t i = a.bytes; i < round_up(a.bytes, 256); i++)
            if ((unsigned char)a.base[i] != 0xff) return 1;
    return 0;
}

const alloc *find(const void *p)
{
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it == allocs.begin()) return NULL;
    --it;
    const alloc &a = it->second;
    return (uintptr_t)p <= (uintptr_t)a.base + a.bytes ? &a : NULL;
}

void segv(int sig, siginfo_t *si, void *)
{
    const void *base;
    size_t bytes;
    char msg[900];
    const char *where = simt::running_where();
    if (simt::guard_hit(si->si_addr, &base, &bytes)) {
        long off = (long)((const char *)si->si_addr - (const char *)base);
        snprintf(msg, sizeof msg, "simt: %s%sout-of-bounds access at %p: %ld bytes %s device allocation %p of %zu bytes\n",
                 where, *where ? ": " : "", si->si_addr, off < 0 ? -off : off - (long)bytes,
                 off < 0 ? "before" : "past the end of", base, bytes);
    } else {
        snprintf(msg, sizeof msg, "simt: %s%ssegmentation fault at %p\n", where, *where ? ": " : "", si->si_addr);
    }
    if (write(2, msg, strlen(msg)) < 0) {}
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_segv()
{
    if (use_asan) return; // ASan's own report is better
    static std::once_flag once;
    std::call_once(once, [] {
        static char altstack[64 << 10];
        stack_t ss = {};
        ss.ss_sp = altstack, ss.ss_size = sizeof altstack;
        sigaltstack(&ss, NULL); // a fiber's stack overflow must still be reported
        struct sigaction sa = {};
        sa.sa_sigaction = segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
    });
}

cudaError_t mem_alloc(void **p, size_t bytes, int kind)
{
    *p = NULL;
    install_segv();
    alloc a = {};
    a.bytes = bytes, a.kind = kind;
    size_t ps = page();
    if (kind == 2) {
        a.base = (char *)aligned_alloc(ps, round_up(bytes ? bytes : 1, ps));
        if (!a.base) return cudaErrorMemoryAllocation;
    } else if (use_asan) { // exactly `bytes`: ASan's redzone starts at the first byte past the end
        void *q;
        if (posix_memalign(&q, 256, bytes ? bytes : 1)) return cudaErrorMemoryAllocation;
        a.base = (char *)q;
    } else {
        size_t data = round_up(round_up(bytes ? bytes : 1, 256), ps);
        a.map_len = data + 2 * ps;
        a.map = (char *)mmap(NULL, a.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (a.map == MAP_FAILED) return cudaErrorMemoryAllocation;
        if (mprotect(a.map, ps, PROT_NONE) || mprotect(a.map + ps + data, ps, PROT_NONE)) die("mprotect failed");
        a.base = a.map + ps + data - round_up(bytes ? bytes : 1, 256);
        memset(a.map + ps, 0xff, data);
    }
    if (kind == 1 && use_asan) memset(a.base, 0xff, bytes);
    std::lock_guard<std::mutex> g(mem_mu);
    a.seq = ++alloc_seq;
    allocs[(uintptr_t)a.base] = a;
    *p = a.base;
    return cudaSuccess;
}

cudaError_t mem_free(void *p, int kind)
{
    if (!p) return cudaSuccess;
    alloc a;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        auto it = allocs.find((uintptr_t)p);
        if (it == allocs.end() || it->second.kind != kind)
            return set_last(cudaErrorInvalidValue, "%s(%p): not a pointer that %s returned", kind == 1 ? "cudaFree" : "cudaFreeHost", p,
                            kind == 1 ? "cudaMalloc" : "cudaHostAlloc");
        if (it->second.ipc)
            return set_last(cudaErrorInvalidValue, "cudaFree(%p): another process's allocation, opened by "
                            "cudaIpcOpenMemHandle (close it with cudaIpcCloseMemHandle)", p);
        a = it->second;
        allocs.erase(it);
    }
    if (canary_broken(a))
        set_sticky(cudaErrorIllegalAddress, "device allocation %p of %zu bytes: the bytes after its end were "
                   "overwritten (a kernel or copy wrote out of bounds)", (void *)a.base, a.bytes);
    if (a.map) munmap(a.map, a.map_len);
    else free(a.base);
    if (a.memfd1) close(a.memfd1 - 1);
    return cudaSuccess;
}

// ---- IPC: the handle names the owner's process and memfd; a peer maps the same pages
// (data region, whole pages) between guard pages of its own, as cudaMalloc does.
struct ipc_handle {
    char magic[8];
    int pid, fd;
    unsigned long long data, off, bytes; // mapped length, base's offset in it, the allocation's size
};
static_assert(sizeof(ipc_handle) <= 64, "an IPC handle is 64 bytes");

cudaError_t ipc_get(cudaIpcMemHandle_t *h, void *p)
{
    // The pages move into shared memory: no kernel or copy may be writing them meanwhile
    // (on a GPU taking a handle changes nothing; here it copies).
    cudaError_t e = cudaDeviceSynchronize();
    if (e) return e;
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = allocs.find((uintptr_t)p);
    if (!h || it == allocs.end() || it->second.kind != 1 || it->second.ipc)
        return set_last(cudaErrorInvalidValue, "cudaIpcGetMemHandle(%p): not the base of a cudaMalloc allocation of "
                        "this process", p);
    alloc &a = it->second;
    if (!a.map)
        return set_last(cudaErrorNotSupported, "cudaIpcGetMemHandle(%p): the executor shares device memory between "
                        "processes only outside ASan builds (their allocations are malloc'd)", p);
    size_t ps = page(), data = a.map_len - 2 * ps;
    if (!a.memfd1) { // the private pages become a memfd's, content kept
        int fd = memfd_create("simt-ipc", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)data) || pwrite(fd, a.map + ps, data, 0) != (ssize_t)data ||
            mmap(a.map + ps, data, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
            if (fd >= 0) close(fd);
            return set_last(cudaErrorMemoryAllocation, "cudaIpcGetMemHandle(%p): cannot move %zu bytes into shared "
                            "memory", p, data);
        }
        a.memfd1 = fd + 1;
    }
    ipc_handle x = {{'S', 'I', 'M', 'T', 'I', 'P', 'C', '1'}, (int)getpid(), a.memfd1 - 1, data,
                    (unsigned long long)(a.base - (a.map + ps)), a.bytes};
    memset(h, 0, sizeof *h);
    memcpy(h, &x, sizeof x);
    return cudaSuccess;
}

cudaError_t ipc_open(void **p, const cudaIpcMemHandle_t *h)
{
    ipc_handle x;
    memcpy(&x, h, sizeof x);
    *p = NULL;
    if (memcmp(x.magic, "SIMTIPC1", 8) || x.off >= x.data || x.off + x.bytes > x.data)
        return set_last(cudaErrorInvalidValue, "cudaIpcOpenMemHandle: not a handle cudaIpcGetMemHandle made");
    if (x.pid == (int)getpid())
        return set_last(cudaErrorInvalidValue, "cudaIpcOpenMemHandle: the handle is this process's own allocation "
                        "(CUDA opens handles of other processes only)");
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", x.pid, x.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return set_last(cudaErrorMapBufferObjectFailed, "cudaIpcOpenMemHandle: the allocation of process %d is gone "
                        "(%s: %s)", x.pid, path, strerror(errno));
    install_segv();
    size_t ps = page();
    alloc a = {};
    a.kind = 1, a.ipc = 1, a.bytes = (size_t)x.bytes, a.map_len = (size_t)x.data + 2 * ps;
    a.map = (char *)mmap(NULL, a.map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a.map == MAP_FAILED ||
        mmap(a.map + ps, (size_t)x.data, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        close(fd);
        return set_last(cudaErrorMapBufferObjectFailed, "cudaIpcOpenMemHandle: cannot map %llu bytes of process %d",
                        x.data, x.pid);
    }
    close(fd); // the mapping holds the pages
    a.base = a.map + ps + x.off;
    std::lock_guard<std::mutex> g(mem_mu);
    a.seq = ++alloc_seq;
    allocs[(uintptr_t)a.base] = a;
    *p = a.base;
    return cudaSuccess;
}

cudaError_t ipc_close(void *p)
{
    alloc a;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        auto it = allocs.find((uintptr_t)p);
        if (it == allocs.end() || !it->second.ipc)
            return set_last(cudaErrorInvalidValue, "cudaIpcCloseMemHandle(%p): not a pointer cudaIpcOpenMemHandle "
                            "returned", p);
        a = it->second;
        allocs.erase(it);
    }
    munmap(a.map, a.map_len);
    return cudaSuccess;
}

// After every kernel (so the report names it) and at device synchronisation.
void check_canaries(const simt::launch_rec *L)
{
    std::lock_guard<std::mutex> g(mem_mu);
    for (auto &kv : allocs)
        if (kv.second.kind == 1 && canary_broken(kv.second)) {
            memset(kv.second.base + kv.second.bytes, 0xff, round_up(kv.second.bytes, 256) - kv.second.bytes);
            if (L)
                set_sticky(cudaErrorIllegalAddress, "%s (launched at %s:%d): wrote past the end of device allocation "
                           "%p of %zu bytes (the bytes after its end were overwritten)", L->c.name, base_name(L->c.file),
                           L->c.line, (void *)kv.second.base, kv.second.bytes);
            else
                set_sticky(cudaErrorIllegalAddress, "device allocation %p of %zu bytes: the bytes after its end were "
                           "overwritten (a kernel or copy wrote out of bounds)", (void *)kv.second.base, kv.second.bytes);
            return;
        }
}

// ---- streams: a worker thread runs each stream's operations in order.
enum { OP_KERNEL, OP_COPY, OP_SET, OP_RECORD, OP_WAIT };
struct op {
    int type;
    void *dst;
    const void *src;
    size_t bytes;
    int byte;
    CUevent_st *ev;
    unsigned long long gen;
};
} // namespace

// CUDA lets an event be destroyed while a stream still has a record of it or a wait
// on it queued: it is freed once the device is done with it. So each queued op holds a
// reference (the handle holds one) and the last to drop it frees the event.
//
// An interprocess event (cudaEventInterprocess) keeps its two counters in a shared page
// (a memfd that cudaIpcOpenEventHandle maps in another process): a wait there polls
// the page, as a condition variable cannot cross processes.
struct ev_shared {
    std::atomic<unsigned long long> recorded, done;
    int owner; // the creating process: a wait gives up once it has died (no record will come)
};
struct CUevent_st {
    std::mutex mu;
    std::condition_variable cv;
    unsigned long long recorded = 0, done = 0; // records issued / executed
    double t_ms = 0;
    unsigned flags = 0;
    std::atomic<int> refs{1};
    ev_shared *sh = nullptr; // interprocess: the shared counters (recorded, done above unused)
    int fd = -1;             // the shared page's memfd (the owner's; -1 in an opener)
};

namespace {
void ev_unref(CUevent_st *e)
{
    if (!e || e->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (e->sh) munmap(e->sh, page());
    if (e->fd >= 0) close(e->fd);
    delete e;
}

// The interprocess counters: a record issued (its generation), executed (the highest
// generation done: records of several streams may finish out of order), waited for.
unsigned long long ev_issue(CUevent_st *e)
{
    if (e->sh) return e->sh->recorded.fetch_add(1) + 1;
    std::lock_guard<std::mutex> g(e->mu);
    return ++e->recorded;
}

unsigned long long ev_latest(CUevent_st *e)
{
    if (e->sh) return e->sh->recorded.load();
    std::lock_guard<std::mutex> g(e->mu);
    return e->recorded;
}

// Interprocess events count in shared memory with atomics this file's TSan build does
// not instrument: a record releases, a wait or query that sees it acquires, as CUDA
// orders them (within one process; TSan sees no other).
#ifdef SIMT_TSAN
extern "C" void __tsan_acquire(void *addr);
extern "C" void __tsan_release(void *addr);
#define EV_RELEASE(sh) __tsan_release((void *)(sh))
#define EV_ACQUIRE(sh) __tsan_acquire((void *)(sh))
#else
#define EV_RELEASE(sh) ((void)(sh))
#define EV_ACQUIRE(sh) ((void)(sh))
#endif

void ev_reach(ev_shared *sh, unsigned long long gen)
{
    EV_RELEASE(sh);
    unsigned long long d = sh->done.load();
    while (d < gen && !sh->done.compare_exchange_weak(d, gen)) {}
}

// Whether process pid has exited (gone, or a zombie not yet reaped).
bool proc_dead(int pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return true;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    const char *p = strrchr(buf, ')');
    return !p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X';
}

// Polls until the shared counter reaches gen (or `stop` says give up): 1 reached.
template <class F> bool ev_poll(ev_shared *sh, unsigned long long gen, F stop)
{
    double t0 = now_ms();
    for (int i = 0; sh->done.load() < gen; i++) {
        if (stop() || now_ms() - t0 > WAIT_S * 1e3) return false;
        usleep(i < 100 ? 20 : 500);
    }
    EV_ACQUIRE(sh);
    return true;
}
} // namespace

struct CUstream_st {
    std::mutex mu;
    std::condition_variable cv;
    unsigned long long head = 0, tail = 0; // issued, finished
    bool stop = false;
    op ring[RING];
    simt::launch_rec *recs = new simt::launch_rec[RING];
    std::thread th;
    void run();
};

namespace {
std::mutex streams_mu;
std::vector<CUstream_st *> streams;
std::atomic<unsigned long long> launches{0};
CUstream_st *legacy; // the NULL stream

void exec(CUstream_st *s, const op &o, const simt::launch_rec *L)
{
    // After a failure CUDA runs nothing more; events still complete so nobody waits
    // on them to the deadline.
    if (status() && o.type != OP_RECORD) return;
    switch (o.type) {
    case OP_KERNEL: {
        char why[1024];
        if (simt::run_kernel(L, why, sizeof why)) set_sticky(cudaErrorLaunchFailure, "%s", why);
        else if (!use_asan) check_canaries(L);
        break;
    }
    case OP_COPY: memmove(o.dst, o.src, o.bytes); break;
    case OP_SET: memset(o.dst, o.byte, o.bytes); break;
    case OP_RECORD: {
        if (o.ev->sh) { ev_reach(o.ev->sh, o.gen); break; }
        std::lock_guard<std::mutex> g(o.ev->mu);
        if (o.gen > o.ev->done) o.ev->done = o.gen, o.ev->t_ms = now_ms();
        o.ev->cv.notify_all();
        break;
    }
    case OP_WAIT: {
        if (o.ev->sh) { // another process records it: a dead one never will (the host's waits name it)
            ev_shared *sh = o.ev->sh;
            int n = 0;
            if (!ev_poll(sh, o.gen, [&] { return ++n % 200 == 0 && sh->owner != getpid() && proc_dead(sh->owner); }))
                set_sticky(cudaErrorLaunchTimeout, sh->owner != getpid() && proc_dead(sh->owner)
                           ? "cudaStreamWaitEvent: process %d, which records the interprocess event, exited"
                           : "cudaStreamWaitEvent: the interprocess event was not reached within 900 s (process %d's)",
                           sh->owner);
            break;
        }
        std::unique_lock<std::mutex> g(o.ev->mu);
        if (!o.ev->cv.wait_for(g, std::chrono::seconds(WAIT_S), [&] { return o.ev->done >= o.gen; }))
            set_sticky(cudaErrorLaunchTimeout, "cudaStreamWaitEvent: the event was not reached within %d s "
                       "(streams waiting on each other?)", WAIT_S);
        break;
    }
    }
    (void)s;
}
} // namespace

void CUstream_st::run()
{
    for (;;) {
        std::unique_lock<std::mutex> g(mu);
        cv.wait(g, [&] { return head > tail || stop; });
        if (head == tail) return;
        int slot = (int)(tail % RING);
        op o = ring[slot];
        g.unlock();
        exec(this, o, &recs[slot]);
        ev_unref(o.ev); // the op's reference (cudaEventRecord, cudaStreamWaitEvent)
        g.lock();
        tail++;
        cv.notify_all();
    }
}

namespace {
CUstream_st *stream_new(void)
{
    CUstream_st *s = new CUstream_st;
    s->th = std::thread(&CUstream_st::run, s);
    std::lock_guard<std::mutex> g(streams_mu);
    streams.push_back(s);
    return s;
}

CUstream_st *S(cudaStream_t s)
{
    if (s) return s;
    static std::once_flag once;
    std::call_once(once, [] { legacy = stream_new(); });
    return legacy;
}

// Queues o (and a launch record) on s; waits for room.
cudaError_t enqueue(CUstream_st *s, const op &o, const simt::launch_rec *L)
{
    std::unique_lock<std::mutex> g(s->mu);
    if (!s->cv.wait_for(g, std::chrono::seconds(WAIT_S), [&] { return s->head - s->tail < RING; }))
        return set_sticky(cudaErrorLaunchTimeout, "stream %p: no room in its queue within %d s", (void *)s, WAIT_S);
    int slot = (int)(s->head % RING);
    s->ring[slot] = o;
    if (L) s->recs[slot] = *L;
    s->head++;
    s->cv.notify_all();
    return cudaSuccess;
}

// An op on an event: queued with a reference to it, dropped if it could not be queued.
cudaError_t enqueue_ev(CUstream_st *s, const op &o)
{
    o.ev->refs.fetch_add(1, std::memory_order_relaxed);
    cudaError_t rc = enqueue(s, o, NULL);
    if (rc) ev_unref(o.ev);
    return rc;
}

cudaError_t drain(CUstream_st *s, const char *call)
{
    std::unique_lock<std::mutex> g(s->mu);
    unsigned long long want = s->head;
    if (!s->cv.wait_for(g, std::chrono::seconds(WAIT_S), [&] { return s->tail >= want; }))
        return set_sticky(cudaErrorLaunchTimeout, "%s: the stream's work did not finish within %d s", call, WAIT_S);
    return status();
}

const char *kind_name(int k)
{
    static const char *n[] = {"host to host", "host to device", "device to host", "device to device", "default"};
    return k >= 0 && k <= 4 ? n[k] : "?";
}

// [p, p + n) must be (dev 1) device memory of one allocation, or (dev 0) not device memory.
int range_ok(const void *p, size_t n, int dev)
{
    return dev ? simt::mem_kind(p, n) == 1 : simt::mem_kind(p, 0) != 1;
}
} // namespace

int simt::mem_kind(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> g(mem_mu);
    const alloc *a = find(p);
    if (!a) return 0;
    if ((uintptr_t)p + bytes > (uintptr_t)a->base + a->bytes) return 0;
    return a->kind;
}

int simt::guard_hit(const void *p, const void **base, size_t *bytes)
{
    // In a signal handler: no lock (the process is about to die).
    size_t ps = page();
    for (auto &kv : allocs) {
        const alloc &a = kv.second;
        if (a.map && (const char *)p >= a.map && (const char *)p < a.map + a.map_len &&
            ((const char *)p < a.map + ps || (const char *)p >= a.map + a.map_len - ps)) {
            *base = a.base, *bytes = a.bytes;
            return 1;
        }
    }
    return 0;
}

// DDPRT_SIMT_TRACE=file: the name of every kernel launched, once per process
// (test/simt/kernel_table.sh builds the table of kernels and the tests that run them).
static void trace_kernel(void *kernel, const char *name)
{
    static const char *path = rt_env_str(RT_ENV_SIMT_TRACE);
    static std::mutex mu;
    static std::set<void *> seen;
    if (!path) return;
    std::lock_guard<std::mutex> g(mu);
    if (!seen.insert(kernel).second) return;
    const std::string &sym = simt::info_of(kernel)->sym;
    int st = -1;
    char *d = abi::__cxa_demangle(sym.c_str(), NULL, NULL, &st);
    if (FILE *f = fopen(path, "a")) {
        fprintf(f, "%s\n", st == 0 && d ? d : sym.empty() ? name : sym.c_str());
        fclose(f);
    }
    free(d);
}

void simt::launch(const cfg *c, void *kernel, invoke_fn inv, const void *args, size_t bytes, const int *ptr_idx,
                  const void *const *ptrs, int nptrs)
{
    trace_kernel(kernel, c->name);
    static thread_local launch_rec L; // 1 KiB of arguments: not on the caller's stack twice
    L.kernel = kernel, L.invoke = inv, L.c = *c;
    memcpy(L.args, args, bytes);
    L.seq = ++launches;
    char why[600];
    cudaError_t e = check_launch(&L, why, sizeof why);
    if (e) {
        set_last(e, "%s (launched at %s:%d): %s", c->name, base_name(c->file), c->line, why);
        return;
    }
    for (int i = 0; i < nptrs; i++)
        if (ptrs[i] && !mem_kind(ptrs[i], 0)) {
            set_last(cudaErrorInvalidValue, "%s (launched at %s:%d): argument %d is %p, which is not device memory "
                     "(nor pinned host memory)", c->name, base_name(c->file), c->line, ptr_idx[i] + 1, ptrs[i]);
            return;
        }
    if (status()) return;
    op o = {};
    o.type = OP_KERNEL;
    enqueue(S(c->stream), o, &L);
}

// ---- the runtime API
extern "C" {
cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_err;
    last_err = cudaSuccess;
    return e ? e : status();
}
cudaError_t cudaPeekAtLastError(void) { return last_err ? last_err : status(); }

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchTimeout: return "cudaErrorLaunchTimeout";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
    }
}

// CUDA's words, then the executor's details for the error this thread last saw.
const char *cudaGetErrorString(cudaError_t e)
{
    const char *s;
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: s = "invalid argument"; break;
    case cudaErrorMemoryAllocation: s = "out of memory"; break;
    case cudaErrorInvalidConfiguration: s = "invalid configuration argument"; break;
    case cudaErrorInvalidDevice: s = "invalid device ordinal"; break;
    case cudaErrorInvalidResourceHandle: s = "invalid resource handle"; break;
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: s = "an illegal memory access was encountered"; break;
    case cudaErrorLaunchOutOfResources: s = "too many resources requested for launch"; break;
    case cudaErrorLaunchTimeout: s = "the launch timed out and was terminated"; break;
    case cudaErrorLaunchFailure: s = "unspecified launch failure"; break;
    default: s = "unknown error"; break;
    }
    const char *detail = sticky.load() == (int)e ? sticky_msg : last_msg;
    snprintf(str_buf, sizeof str_buf, "%s%s%s%s", s, *detail ? " (simt: " : "", detail, *detail ? ")" : "");
    return str_buf;
}

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d)
{
    return d == 0 ? cudaSuccess : set_last(cudaErrorInvalidDevice, "device %d: the executor is device 0", d);
}
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    if (d) return set_last(cudaErrorInvalidDevice, "device %d: the executor is device 0", d);
    memset(p, 0, sizeof *p);
    static const char *const order[] = {"forward", "reversed", "random", "warps"};
    snprintf(p->name, sizeof p->name, "ddprt SIMT executor on the CPU (%s threads)", order[simt::sched_order()]);
    p->totalGlobalMem = (size_t)sysconf(_SC_PHYS_PAGES) * page();
    p->sharedMemPerBlock = 48 << 10;
    p->warpSize = 32, p->maxThreadsPerBlock = 1024, p->regsPerBlock = 65536;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 8, p->minor = 0, p->multiProcessorCount = 1;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    *total_bytes = (size_t)sysconf(_SC_PHYS_PAGES) * page();
    *free_bytes = (size_t)sysconf(_SC_AVPHYS_PAGES) * page();
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    std::vector<CUstream_st *> all;
    {
        std::lock_guard<std::mutex> g(streams_mu);
        all = streams;
    }
    for (CUstream_st *s : all)
        if (cudaError_t e = drain(s, "cudaDeviceSynchronize")) return e;
    check_canaries(NULL);
    return status();
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (status()) return status();
    return mem_alloc(p, bytes, 1);
}
cudaError_t cudaFree(void *p) { return mem_free(p, 1); }
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) { return ipc_get(h, p); }
cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned) { return ipc_open(p, &h); }
cudaError_t cudaIpcCloseMemHandle(void *p) { return ipc_close(p); }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    return mem_alloc(p, bytes, 2);
}
cudaError_t cudaMallocHost(void **p, size_t bytes) { return mem_alloc(p, bytes, 2); }
cudaError_t cudaFreeHost(void *p) { return mem_free(p, 2); }

// Streams are independent of the NULL stream whatever their flags (ddprt creates
// non-blocking ones only).
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = stream_new();
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s) return set_last(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(NULL)");
    {
        std::lock_guard<std::mutex> g(streams_mu);
        for (size_t i = 0; i < streams.size(); i++)
            if (streams[i] == s) streams.erase(streams.begin() + (long)i);
    }
    {
        std::lock_guard<std::mutex> g(s->mu);
        s->stop = true; // the worker finishes what is queued, then returns
        s->cv.notify_all();
    }
    s->th.join();
    delete[] s->recs;
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return drain(S(s), "cudaStreamSynchronize"); }
cudaError_t cudaStreamQuery(cudaStream_t s)
{
    CUstream_st *t = S(s);
    std::lock_guard<std::mutex> g(t->mu);
    return status() ? status() : t->tail == t->head ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    op o = {};
    o.type = OP_WAIT, o.ev = e;
    o.gen = ev_latest(e); // the record issued last (in any process, for an interprocess event), as CUDA
    return o.gen ? enqueue_ev(S(s), o) : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    *e = NULL;
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
        return set_last(cudaErrorInvalidValue, "cudaEventCreateWithFlags: cudaEventInterprocess needs "
                        "cudaEventDisableTiming");
    CUevent_st *ev = new CUevent_st;
    ev->flags = flags;
    if (flags & cudaEventInterprocess) {
        int fd = memfd_create("simt-ipc-event", MFD_CLOEXEC);
        void *m = fd < 0 || ftruncate(fd, (off_t)page()) ? MAP_FAILED
                                                         : mmap(NULL, page(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            if (fd >= 0) close(fd);
            delete ev;
            return set_last(cudaErrorMemoryAllocation, "cudaEventCreateWithFlags: no shared page for an "
                            "interprocess event");
        }
        ev->sh = new (m) ev_shared(); // zero counters
        ev->sh->owner = (int)getpid();
        ev->fd = fd;
    }
    *e = ev;
    return cudaSuccess;
}

// The handle names the owner's process and the shared page's memfd (as the memory's).
struct ipc_ev_handle {
    char magic[8];
    int pid, fd;
};

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t e)
{
    if (!h || !e || !e->sh || e->fd < 0)
        return set_last(cudaErrorInvalidResourceHandle, "cudaIpcGetEventHandle: not an event of this process created "
                        "with cudaEventInterprocess | cudaEventDisableTiming");
    ipc_ev_handle x = {{'S', 'I', 'M', 'T', 'I', 'P', 'E', '1'}, (int)getpid(), e->fd};
    memset(h, 0, sizeof *h);
    memcpy(h, &x, sizeof x);
    return cudaSuccess;
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *e, cudaIpcEventHandle_t h)
{
    ipc_ev_handle x;
    memcpy(&x, &h, sizeof x);
    *e = NULL;
    if (memcmp(x.magic, "SIMTIPE1", 8))
        return set_last(cudaErrorInvalidValue, "cudaIpcOpenEventHandle: not a handle cudaIpcGetEventHandle made");
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", x.pid, x.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    void *m = fd < 0 ? MAP_FAILED : mmap(NULL, page(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd); // the mapping holds the page
    if (m == MAP_FAILED)
        return set_last(cudaErrorMapBufferObjectFailed, "cudaIpcOpenEventHandle: the event of process %d is gone "
                        "(%s: %s)", x.pid, path, strerror(errno));
    CUevent_st *ev = new CUevent_st;
    ev->flags = cudaEventInterprocess | cudaEventDisableTiming;
    ev->sh = (ev_shared *)m;
    *e = ev;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device)
{
    if (device) return set_last(cudaErrorInvalidDevice, "device %d: the executor is device 0", device);
    snprintf(id, (size_t)len, "0000:00:00.0");
    return cudaSuccess;
}
cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *id)
{
    if (strcmp(id, "0000:00:00.0")) return set_last(cudaErrorInvalidDevice, "bus id %s: the executor is 0000:00:00.0", id);
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    if (device || peer) return set_last(cudaErrorInvalidDevice, "device %d: the executor is device 0", device | peer);
    *can = 0; // a device is not its own peer (CUDA answers 0 too)
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    ev_unref(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    op o = {};
    o.type = OP_RECORD, o.ev = e;
    o.gen = ev_issue(e);
    return enqueue_ev(S(s), o);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (e->sh) {
        if (!ev_poll(e->sh, e->sh->recorded.load(), [] { return status() != 0; }) && !status())
            return set_sticky(cudaErrorLaunchTimeout, "cudaEventSynchronize: the event was not reached within %d s", WAIT_S);
        return status();
    }
    std::unique_lock<std::mutex> g(e->mu);
    unsigned long long want = e->recorded;
    if (!e->cv.wait_for(g, std::chrono::seconds(WAIT_S), [&] { return e->done >= want || status(); }))
        return set_sticky(cudaErrorLaunchTimeout, "cudaEventSynchronize: the event was not reached within %d s", WAIT_S);
    return status();
}
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (e->sh) {
        if (status()) return status();
        if (e->sh->done.load() < e->sh->recorded.load()) return cudaErrorNotReady;
        EV_ACQUIRE(e->sh);
        return cudaSuccess;
    }
    std::lock_guard<std::mutex> g(e->mu);
    return status() ? status() : e->done >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return set_last(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was created without timing");
    std::lock_guard<std::mutex> ga(a->mu);
    std::lock_guard<std::mutex> gb(b->mu);
    if (a->done < a->recorded || b->done < b->recorded || !a->done || !b->done) return cudaErrorNotReady;
    *ms = (float)(b->t_ms - a->t_ms);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s)
{
    if (status()) return status();
    if (!bytes) return cudaSuccess;
    int k = (int)kind;
    if (k == cudaMemcpyDefault)
        k = (simt::mem_kind(src, 0) == 1 ? 2 : 0) + (simt::mem_kind(dst, 0) == 1 ? 1 : 0);
    int dd = k == 1 || k == 3, sd = k == 2 || k == 3;
    if (k < 0 || k > 3 || !range_ok(dst, bytes, dd) || !range_ok(src, bytes, sd))
        return set_last(cudaErrorInvalidValue, "cudaMemcpyAsync(%s, %zu bytes): %s %p is %s", kind_name(k), bytes,
                        !range_ok(dst, bytes, dd) ? "destination" : "source", !range_ok(dst, bytes, dd) ? dst : src,
                        (!range_ok(dst, bytes, dd) ? dd : sd) ? "not device memory, or the copy runs past its allocation"
                                                              : "device memory");
    op o = {};
    o.type = OP_COPY, o.dst = dst, o.src = src, o.bytes = bytes;
    // Pageable host memory: CUDA returns only when the host buffer has been read (H2D,
    // after the stream's earlier work) or written (D2H).
    const void *host = k == 1 ? src : k == 2 ? dst : NULL;
    if (host && simt::mem_kind(host, bytes) != 2) {
        if (cudaError_t e = drain(S(s), "cudaMemcpyAsync")) return e;
        memmove(dst, src, bytes);
        return cudaSuccess;
    }
    return enqueue(S(s), o, NULL);
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, NULL);
    return e ? e : cudaStreamSynchronize(NULL);
}
cudaError_t cudaMemsetAsync(void *p, int byte, size_t bytes, cudaStream_t s)
{
    if (status()) return status();
    if (!bytes) return cudaSuccess;
    if (!range_ok(p, bytes, 1))
        return set_last(cudaErrorInvalidValue, "cudaMemsetAsync(%p, %zu bytes): not device memory, or past the end of "
                        "its allocation", p, bytes);
    op o = {};
    o.type = OP_SET, o.dst = p, o.bytes = bytes, o.byte = byte;
    return enqueue(S(s), o, NULL);
}
cudaError_t cudaMemset(void *p, int byte, size_t bytes)
{
    cudaError_t e = cudaMemsetAsync(p, byte, bytes, NULL);
    return e ? e : cudaStreamSynchronize(NULL);
}
} // extern "C"
