/* ports/nocuda: the device layer of a CPU-only build. Same interface as ports/cuda;
 * everything fails with one line saying why, so `--device cuda` on such a build is a
 * clear error rather than a link failure or a crash. */
#include "ports/cuda/port_cuda.h"
#include <stdarg.h>
#include <stdio.h>

#define NOCUDA "this build has no CUDA port (nvcc was not found at build time, or CUDA=0)"

static char first_err[256];
static int nocuda(const char *what);

int port_cuda_built(void) { return 0; }

int port_cuda_init(int device, char *err, size_t errlen)
{
    (void)device;
    snprintf(err, errlen, "--device cuda: %s; use --device cpu", NOCUDA);
    return -1;
}

int port_cuda_device_count(void) { return 0; }
int port_cuda_use_device(int device) { (void)device; return nocuda("select the GPU"); }
const char *port_cuda_device_desc(void) { return ""; }
const char *port_cuda_errmsg(void) { return first_err; }
void port_cuda_clear_error(void) { first_err[0] = 0; }

void port_cuda_fail(const char *fmt, ...)
{
    if (first_err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first_err, sizeof first_err, fmt, ap);
    va_end(ap);
}

static int nocuda(const char *what)
{
    port_cuda_fail("%s: %s", what, NOCUDA);
    return -1;
}

int port_dev_malloc(void **p, size_t bytes, const char *what) { (void)bytes; *p = NULL; return nocuda(what); }
void port_dev_free(void *p) { (void)p; }
int port_ipc_get(void *handle, void *dev_base, const char *what) { (void)handle, (void)dev_base; return nocuda(what); }
int port_ipc_open(void **p, const void *handle, const char *what) { (void)handle; *p = NULL; return nocuda(what); }
int port_ipc_close(void *p, const char *what) { (void)p; return nocuda(what); }
int port_event_create_ipc(port_event *e, const char *what) { *e = NULL; return nocuda(what); }
int port_ipc_event_get(void *handle, port_event e, const char *what) { (void)handle, (void)e; return nocuda(what); }
int port_ipc_event_open(port_event *e, const void *handle, const char *what) { (void)handle; *e = NULL; return nocuda(what); }
int port_cuda_bus_id(int device, char *id, size_t n) { (void)device; if (n) id[0] = 0; return nocuda("bus id"); }
int port_cuda_reach(int device, const char *peer_bus, int *how) { (void)device, (void)peer_bus; *how = 0; return nocuda("peer access"); }
int port_pinned_malloc(void **p, size_t bytes, const char *what) { (void)bytes; *p = NULL; return nocuda(what); }
void port_pinned_free(void *p) { (void)p; }
int port_stream_create(port_stream *s, const char *what) { *s = NULL; return nocuda(what); }
void port_stream_destroy(port_stream s) { (void)s; }
int port_stream_sync(port_stream s, const char *what) { (void)s; return nocuda(what); }
int port_event_create(port_event *e, int timing, const char *what) { (void)timing; *e = NULL; return nocuda(what); }
void port_event_destroy(port_event e) { (void)e; }
int port_event_record(port_event e, port_stream s) { (void)e; (void)s; return nocuda("event"); }
int port_stream_wait_event(port_stream s, port_event e) { (void)e; (void)s; return nocuda("stream dependency"); }
int port_event_sync(port_event e, const char *what) { (void)e; return nocuda(what); }
int port_event_query(port_event e) { (void)e; return nocuda("cudaEventQuery"); }
int port_event_elapsed_ms(port_event a, port_event b, float *ms) { (void)a; (void)b; *ms = 0; return nocuda("timing"); }

int port_memcpy_h2d(void *dev, const void *host, size_t bytes, port_stream s, const char *what)
{ (void)dev; (void)host; (void)bytes; (void)s; return nocuda(what); }
int port_memcpy_d2h(void *host, const void *dev, size_t bytes, port_stream s, const char *what)
{ (void)dev; (void)host; (void)bytes; (void)s; return nocuda(what); }
int port_memcpy_d2d(void *dst, const void *src, size_t bytes, port_stream s, const char *what)
{ (void)dst; (void)src; (void)bytes; (void)s; return nocuda(what); }
int port_memset_dev(void *dev, int byte, size_t bytes, port_stream s, const char *what)
{ (void)dev; (void)byte; (void)bytes; (void)s; return nocuda(what); }
int port_dev_sync(const char *what) { return nocuda(what); }
int port_dev_sync_within(double seconds, const char *what) { (void)seconds; return nocuda(what); }
double port_cuda_set_wait_s(double seconds) { (void)seconds; return 300; }
double port_cuda_wait_s(void) { return 300; }
int port_cuda_timed_out(void) { return 0; }
