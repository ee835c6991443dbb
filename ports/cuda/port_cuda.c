/* ports/cuda: the CUDA runtime behind port_cuda.h. Every runtime call goes through
 * CK(), which turns a failure into one line naming the call, what it was for and the
 * sizes, and keeps the first such line (later errors are usually its consequences). */
#include "ports/cuda/port_cuda.h"
#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static char first_err[512];
static int have_err;
/* Per thread, as CUDA's current device is: ranks that share a process (threads, each with
 * its port_cuda_init) would otherwise write one buffer at once (make tsan). */
static _Thread_local char dev_desc[400];

void port_cuda_fail(const char *fmt, ...)
{
    if (have_err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first_err, sizeof first_err, fmt, ap);
    va_end(ap);
    have_err = 1;
}

const char *port_cuda_errmsg(void) { return have_err ? first_err : ""; }
static _Atomic int timed_out; /* a deadline has run out (port_cuda_timed_out) */
void port_cuda_clear_error(void)
{
    have_err = 0, first_err[0] = 0, atomic_store(&timed_out, 0);
    (void)cudaGetLastError();
}
int port_cuda_built(void) { return 1; }

static int check(cudaError_t e, const char *call, const char *what, size_t bytes)
{
    if (e == cudaSuccess) return 0;
    if (bytes) port_cuda_fail("%s(%s, %.1f MiB): %s", call, what, bytes / 1048576.0, cudaGetErrorString(e));
    else port_cuda_fail("%s(%s): %s", call, what, cudaGetErrorString(e));
    return -1;
}
#define CK(call, what, bytes) check((call), #call, (what), (bytes))

int port_cuda_use_device(int device) { return CK(cudaSetDevice(device), "select the GPU in this thread", 0); }

int port_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: "no GPU" is an answer here */
        return 0;
    }
    return n;
}

int port_cuda_init(int device, char *err, size_t errlen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    /* No driver / no device comes back as an error from the first runtime call, not
     * as a crash: say so plainly, with CUDA's own words for the details. */
    if (e != cudaSuccess || n == 0) {
        /* cudart says "driver version is insufficient" when there is no driver at all. */
        const char *why = e == cudaSuccess ? "0 devices"
                          : e == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one older than this build's CUDA runtime"
                          : cudaGetErrorString(e);
        snprintf(err, errlen, "--device cuda: no CUDA GPU is available on this machine (%s); use --device cpu", why);
        (void)cudaGetLastError();
        return -1;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "--device cuda: device %d requested but only %d GPU(s) are visible", device, n);
        return -1;
    }
    struct cudaDeviceProp prop;
    if (CK(cudaSetDevice(device), "select the GPU", 0) ||
        CK(cudaGetDeviceProperties(&prop, device), "describe the GPU", 0)) {
        snprintf(err, errlen, "--device cuda: %s", port_cuda_errmsg());
        return -1;
    }
    /* The kernels are built for sm_80/sm_90 plus PTX; older GPUs cannot run them. */
    if (prop.major < 8) {
        snprintf(err, errlen, "--device cuda: %s is sm_%d%d; this build needs sm_80 or newer", prop.name,
                 prop.major, prop.minor);
        return -1;
    }
    snprintf(dev_desc, sizeof dev_desc, "%.256s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             prop.totalGlobalMem / 1073741824.0);
    return 0;
}

const char *port_cuda_device_desc(void) { return dev_desc; }

int port_dev_malloc(void **p, size_t bytes, const char *what)
{
    *p = NULL;
    return CK(cudaMalloc(p, bytes ? bytes : 1), what, bytes);
}

int port_ipc_get(void *handle, void *dev_base, const char *what)
{
    _Static_assert(sizeof(cudaIpcMemHandle_t) == PORT_IPC_HANDLE_BYTES, "the handle's size");
    cudaIpcMemHandle_t h;
    if (CK(cudaIpcGetMemHandle(&h, dev_base), what, 0)) return -1;
    memcpy(handle, &h, sizeof h);
    return 0;
}

int port_ipc_open(void **p, const void *handle, const char *what)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    *p = NULL;
    return CK(cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess), what, 0);
}

int port_ipc_close(void *p, const char *what) { return CK(cudaIpcCloseMemHandle(p), what, 0); }

int port_event_create_ipc(port_event *e, const char *what)
{
    *e = NULL;
    return CK(cudaEventCreateWithFlags((cudaEvent_t *)e, cudaEventInterprocess | cudaEventDisableTiming), what, 0);
}

int port_ipc_event_get(void *handle, port_event e, const char *what)
{
    _Static_assert(sizeof(cudaIpcEventHandle_t) == PORT_IPC_HANDLE_BYTES, "the event handle's size");
    cudaIpcEventHandle_t h;
    if (CK(cudaIpcGetEventHandle(&h, (cudaEvent_t)e), what, 0)) return -1;
    memcpy(handle, &h, sizeof h);
    return 0;
}

int port_ipc_event_open(port_event *e, const void *handle, const char *what)
{
    cudaIpcEventHandle_t h;
    memcpy(&h, handle, sizeof h);
    *e = NULL;
    return CK(cudaIpcOpenEventHandle((cudaEvent_t *)e, h), what, 0);
}

int port_cuda_bus_id(int device, char *id, size_t n)
{
    return CK(cudaDeviceGetPCIBusId(id, (int)n, device), "the device's PCI bus id", 0);
}

int port_cuda_reach(int device, const char *peer_bus, int *how)
{
    char mine[32];
    int peer, can = 0;
    *how = 0;
    if (port_cuda_bus_id(device, mine, sizeof mine)) return -1;
    if (!strcmp(mine, peer_bus)) return *how = 2, 0;
    /* A device this process cannot see: no peer access from here (not an error). */
    if (cudaDeviceGetByPCIBusId(&peer, peer_bus) != cudaSuccess) return (void)cudaGetLastError(), 0;
    if (CK(cudaDeviceCanAccessPeer(&can, device, peer), "peer access query", 0)) return -1;
    *how = can ? 1 : 0;
    return 0;
}

void port_dev_free(void *p)
{
    if (p) (void)cudaFree(p);
}

int port_pinned_malloc(void **p, size_t bytes, const char *what)
{
    *p = NULL;
    /* Portable: usable by every device and stream; the DMA engines read it directly. */
    return CK(cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable), what, bytes);
}

void port_pinned_free(void *p)
{
    if (p) (void)cudaFreeHost(p);
}

int port_stream_create(port_stream *s, const char *what)
{
    /* Non-blocking: no implicit ordering with the legacy default stream. */
    return CK(cudaStreamCreateWithFlags((cudaStream_t *)s, cudaStreamNonBlocking), what, 0);
}

void port_stream_destroy(port_stream s)
{
    if (s) (void)cudaStreamDestroy((cudaStream_t)s);
}

/* Every host wait on the device has a deadline (port_cuda.h): a kernel that never ends (a
 * barrier phase or register hand-off gone wrong) would otherwise hold cudaStreamSynchronize
 * for ever. The waits poll: spinning (with yields) for the first 10 ms, as the runtime's own
 * default spins, then sleeping 100 us between queries. Process-wide, in milliseconds (ranks
 * in threads each set the same value: atomic). */
static _Atomic long long wait_ms = 300000;

double port_cuda_set_wait_s(double s)
{
    long long old = atomic_exchange(&wait_ms, s > 0 ? (long long)(s * 1e3 + 0.5) : 300000);
    return old / 1e3;
}
double port_cuda_wait_s(void) { return atomic_load(&wait_ms) / 1e3; }
int port_cuda_timed_out(void) { return atomic_load(&timed_out); }

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* q(h): cudaStreamQuery or cudaEventQuery. */
static int wait_done(cudaError_t (*q)(void *), void *h, double limit_s, const char *call, const char *what)
{
    const double t0 = now_s();
    for (;;) {
        cudaError_t e = q(h);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady) return check(e, call, what, 0);
        (void)cudaGetLastError(); /* "not ready" is an answer, not an error */
        double waited = now_s() - t0;
        if (waited > limit_s) {
            atomic_store(&timed_out, 1);
            port_cuda_fail("%s(%s): the device did not finish within %.3g s (a kernel that never ends; "
                           "DDPRT_TIMEOUT sets this deadline)", call, what, limit_s);
            return -1;
        }
        if (waited < 0.01) sched_yield();
        else nanosleep(&(struct timespec){0, 100000}, NULL);
    }
}
static cudaError_t stream_query(void *s) { return cudaStreamQuery((cudaStream_t)s); }
static cudaError_t event_query(void *e) { return cudaEventQuery((cudaEvent_t)e); }

int port_stream_sync(port_stream s, const char *what)
{
    return wait_done(stream_query, s, port_cuda_wait_s(), "cudaStreamSynchronize", what);
}

int port_event_create(port_event *e, int timing, const char *what)
{
    unsigned flags = timing ? cudaEventDefault : cudaEventDisableTiming;
    return CK(cudaEventCreateWithFlags((cudaEvent_t *)e, flags), what, 0);
}

void port_event_destroy(port_event e)
{
    if (e) (void)cudaEventDestroy((cudaEvent_t)e);
}

int port_event_record(port_event e, port_stream s)
{
    return CK(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "event", 0);
}

int port_stream_wait_event(port_stream s, port_event e)
{
    return CK(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "stream dependency", 0);
}

int port_event_sync(port_event e, const char *what)
{
    return wait_done(event_query, e, port_cuda_wait_s(), "cudaEventSynchronize", what);
}

int port_event_query(port_event e)
{
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaSuccess) return 1;
    if (r == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return 0;
    }
    return check(r, "cudaEventQuery", "event", 0);
}

int port_event_elapsed_ms(port_event a, port_event b, float *ms)
{
    return CK(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b), "timing", 0);
}

int port_memcpy_h2d(void *dev, const void *host, size_t bytes, port_stream s, const char *what)
{
    if (!bytes) return 0;
    return CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, (cudaStream_t)s), what, bytes);
}

int port_memcpy_d2h(void *host, const void *dev, size_t bytes, port_stream s, const char *what)
{
    if (!bytes) return 0;
    return CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)s), what, bytes);
}

int port_memcpy_d2d(void *dst, const void *src, size_t bytes, port_stream s, const char *what)
{
    if (!bytes) return 0;
    return CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)s), what, bytes);
}

int port_memset_dev(void *dev, int byte, size_t bytes, port_stream s, const char *what)
{
    if (!bytes) return 0;
    return CK(cudaMemsetAsync(dev, byte, bytes, (cudaStream_t)s), what, bytes);
}

int port_dev_sync_within(double limit_s, const char *what)
{
    /* The legacy stream under the deadline (the probes' and tests' work), then the rest:
     * ddprt's own streams are waited for by port_stream_sync / port_event_sync. */
    if (wait_done(stream_query, NULL, limit_s > 0 ? limit_s : port_cuda_wait_s(), "cudaDeviceSynchronize", what))
        return -1;
    return CK(cudaDeviceSynchronize(), what, 0);
}

int port_dev_sync(const char *what) { return port_dev_sync_within(0, what); }
