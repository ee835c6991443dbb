/* The device platform layer: one GPU, its memory, streams and events. Implemented by
 * ports/cuda (CUDA runtime) and by ports/nocuda (CPU-only builds: every call fails
 * with "this build has no CUDA port"). Plain C, no CUDA headers: stream and event
 * handles are the CUDA runtime's opaque pointer types, forward-declared here.
 *
 * Errors: every call returns 0, or -1 after recording one line that names the CUDA
 * call, what it was for and the sizes ("cudaMalloc(device arena, 512.0 MiB): out of
 * memory"). The first failure sticks (port_cuda_errmsg) so a later error caused by it
 * does not overwrite the root cause; port_cuda_clear_error forgets it (tests). */
#ifndef PORT_CUDA_H
#define PORT_CUDA_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *port_stream;
typedef struct CUevent_st *port_event;

/* 1 when this build has the CUDA port (ports/cuda), 0 for ports/nocuda. */
int port_cuda_built(void);
/* Checks that a GPU is present and makes `device` current. 0, or -1 with a one-line
 * reason in err: no CUDA in this build, no GPU / no driver, device out of range. */
int port_cuda_init(int device, char *err, size_t errlen);
/* Makes `device` (already checked by port_cuda_init) current in the calling thread:
 * a runtime's current device is per thread (a comm thread copying for a GPU). */
int port_cuda_use_device(int device);
/* Number of visible GPUs (0 when none, no driver, or no CUDA port). Never fails. */
int port_cuda_device_count(void);
/* "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" of the current device, after init. */
const char *port_cuda_device_desc(void);

const char *port_cuda_errmsg(void);     /* "" while healthy */
void port_cuda_clear_error(void);
/* Records a failure (kernels/cuda use it for launch errors); printf-style, one line. */
void port_cuda_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Memory. The runtime calls each once at start-up for its arenas: device memory with
 * one cudaMalloc, pinned (page-locked, mapped for DMA) host memory with one
 * cudaHostAlloc. `what` names the arena in errors. */
int port_dev_malloc(void **p, size_t bytes, const char *what);
void port_dev_free(void *p);
/* CUDA IPC between the processes of one node: the handle (PORT_IPC_HANDLE_BYTES, opaque)
 * of a port_dev_malloc allocation's base, mapped by another process with port_ipc_open
 * (not by the owner) and unmapped with port_ipc_close. 0, or -1 with the port's line. */
#define PORT_IPC_HANDLE_BYTES 64
int port_ipc_get(void *handle, void *dev_base, const char *what);
int port_ipc_open(void **p, const void *handle, const char *what);
int port_ipc_close(void *p, const char *what);
/* Interprocess events (cudaEventInterprocess, no timing): the owner creates one and
 * takes its handle (PORT_IPC_HANDLE_BYTES); a peer process opens it, and its
 * port_stream_wait_event / port_event_sync / port_event_query then follow the owner's
 * latest record. Destroy both with port_event_destroy. */
int port_event_create_ipc(port_event *e, const char *what);
int port_ipc_event_get(void *handle, port_event e, const char *what);
int port_ipc_event_open(port_event *e, const void *handle, const char *what);
/* The device's PCI bus id ("0000:3b:00.0"; n >= 16). */
int port_cuda_bus_id(int device, char *id, size_t n);
/* Whether `device` reaches the device at peer_bus: *how 2 the same device, 1 peer
 * access (cudaDeviceCanAccessPeer), 0 not (or not visible to this process). */
int port_cuda_reach(int device, const char *peer_bus, int *how);
int port_pinned_malloc(void **p, size_t bytes, const char *what);
void port_pinned_free(void *p);

/* Streams and events (events are created without timing unless `timing`). */
int port_stream_create(port_stream *s, const char *what);
void port_stream_destroy(port_stream s);
int port_stream_sync(port_stream s, const char *what);
int port_event_create(port_event *e, int timing, const char *what);
void port_event_destroy(port_event e);
int port_event_record(port_event e, port_stream s);
/* Later work on s waits for e (no host blocking). */
int port_stream_wait_event(port_stream s, port_event e);
int port_event_sync(port_event e, const char *what);
/* 1 complete, 0 pending, -1 error. */
int port_event_query(port_event e);
/* Milliseconds between two timing events (both complete). */
int port_event_elapsed_ms(port_event a, port_event b, float *ms);

/* Asynchronous copies on stream s (host pointers should be pinned for overlap). */
int port_memcpy_h2d(void *dev, const void *host, size_t bytes, port_stream s, const char *what);
int port_memcpy_d2h(void *host, const void *dev, size_t bytes, port_stream s, const char *what);
int port_memcpy_d2d(void *dst, const void *src, size_t bytes, port_stream s, const char *what);
int port_memset_dev(void *dev, int byte, size_t bytes, port_stream s, const char *what);
/* Waits for all device work (tests, shutdown). */
int port_dev_sync(const char *what);

/* Deadlines. port_stream_sync, port_event_sync and port_dev_sync (its legacy-stream part)
 * give up after port_cuda_wait_s() seconds (300 until port_cuda_set_wait_s; the runtime
 * sets DDPRT_TIMEOUT's value) with one line: "cudaStreamSynchronize(step): the device did
 * not finish within 300 s ...". A kernel that never ends cannot be stopped from the host:
 * the caller reports it and exits. port_dev_sync_within takes its own limit (the start-up
 * probes: seconds, not minutes; <= 0: the default). set returns the previous value;
 * port_cuda_timed_out says whether a wait has run out in this process (the probes tell a
 * hang, which must end the job, from a wrong result, which only turns the path off;
 * port_cuda_clear_error resets it). */
double port_cuda_set_wait_s(double seconds);
double port_cuda_wait_s(void);
int port_cuda_timed_out(void);
int port_dev_sync_within(double seconds, const char *what);
#ifdef __cplusplus
}
#endif
#endif
