/* The device platform of t-cuda-emu: ports/cuda's interface on host memory (device
 * and pinned memory are malloc'd, every copy is a memcpy done at once, streams and
 * events are tokens), so the graph executor's device code (nn/exec_cuda.c,
 * nn/ops/cuda.c, nn/graph_cuda.c, the staged allreduce) runs unchanged on a machine
 * without a GPU. Linked before libddprt.a, it replaces ports/cuda there.
 *
 * Beside it, the kernels whose .cu files have no host emulation (k_cuda_elementwise.cu,
 * k_cuda_pool_softmax.cu: relu, max pool without padding, dropout, log_softmax, NLL,
 * SGD) run as the CPU kernels they are specified to equal bit for bit (k_cuda.h); their
 * device code is checked against those on a GPU only (test/gpu/test_gpu_kernels.c). */
#include "kernels/cuda/k_cuda.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char first_err[512];
static int token; /* streams and events point here */

int port_cuda_built(void) { return 1; }
int port_cuda_init(int device, char *err, size_t errlen) { (void)device; (void)err; (void)errlen; return 0; }
int port_cuda_device_count(void) { return 1; }
int port_cuda_use_device(int device) { (void)device; return 0; }
const char *port_cuda_device_desc(void) { return "emulated device (host memory)"; }
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

static int alloc(void **p, size_t bytes, const char *what)
{
    /* Garbage, not zeros: code that reads memory it never wrote shows up. */
    if (!(*p = aligned_alloc(256, (bytes + 255) & ~(size_t)255))) {
        port_cuda_fail("emulated malloc(%s, %zu bytes) failed", what, bytes);
        return -1;
    }
    memset(*p, 0xA5, bytes);
    return 0;
}

int port_dev_malloc(void **p, size_t bytes, const char *what) { return alloc(p, bytes, what); }
void port_dev_free(void *p) { free(p); }
int port_pinned_malloc(void **p, size_t bytes, const char *what) { return alloc(p, bytes, what); }
void port_pinned_free(void *p) { free(p); }

int port_stream_create(port_stream *s, const char *what) { (void)what; *s = (port_stream)(void *)&token; return 0; }
void port_stream_destroy(port_stream s) { (void)s; }
int port_stream_sync(port_stream s, const char *what) { (void)s; (void)what; return first_err[0] ? -1 : 0; }
int port_event_create(port_event *e, int timing, const char *what)
{
    (void)timing; (void)what;
    *e = (port_event)(void *)&token;
    return 0;
}
void port_event_destroy(port_event e) { (void)e; }
int port_event_record(port_event e, port_stream s) { (void)e; (void)s; return 0; }
int port_stream_wait_event(port_stream s, port_event e) { (void)s; (void)e; return 0; }
int port_event_sync(port_event e, const char *what) { (void)e; (void)what; return 0; }
int port_event_query(port_event e) { (void)e; return 1; }
int port_event_elapsed_ms(port_event a, port_event b, float *ms) { (void)a; (void)b; *ms = 0; return 0; }

int port_memcpy_h2d(void *dev, const void *host, size_t bytes, port_stream s, const char *what)
{
    (void)s; (void)what;
    memmove(dev, host, bytes);
    return 0;
}
int port_memcpy_d2h(void *host, const void *dev, size_t bytes, port_stream s, const char *what)
{
    return port_memcpy_h2d(host, dev, bytes, s, what);
}
int port_memcpy_d2d(void *dst, const void *src, size_t bytes, port_stream s, const char *what)
{
    return port_memcpy_h2d(dst, src, bytes, s, what);
}
int port_memset_dev(void *dev, int byte, size_t bytes, port_stream s, const char *what)
{
    (void)s; (void)what;
    memset(dev, byte, bytes);
    return 0;
}
int port_dev_sync(const char *what) { (void)what; return first_err[0] ? -1 : 0; }

/* ---- kernels without a host emulation: their CPU twins (see above). */
const char *k_cuda_last_kernel(void) { return "(emulated)"; }

int k_cuda_relu_fwd(size_t n, const float *x, float *y, port_stream s) { (void)s; k_relu_fwd(n, x, y); return 0; }
int k_cuda_relu_bwd(size_t n, const float *y, const float *dy, float *dx, port_stream s)
{
    (void)s;
    k_relu_bwd(n, y, dy, dx);
    return 0;
}
int k_cuda_maxpool2d_fwd(int n, int c, int h, int w, int ks, int st, const float *x, float *y, int32_t *idx,
                         port_stream s)
{
    (void)s;
    k_maxpool2d_fwd(n, c, h, w, ks, st, x, y, idx);
    return 0;
}
int k_cuda_maxpool2d_bwd(int n, int c, int h, int w, int ks, int st, const float *dy, const int32_t *idx,
                         float *dx, port_stream s)
{
    (void)s;
    k_maxpool2d_bwd(n, c, h, w, ks, st, dy, idx, dx);
    return 0;
}
int k_cuda_dropout_fwd(size_t n, float p, uint64_t seed, uint64_t offset, const float *x, float *y,
                       uint8_t *mask, port_stream s)
{
    (void)s;
    k_dropout_fwd(n, p, seed, offset, x, y, mask);
    return 0;
}
int k_cuda_dropout_bwd(size_t n, float p, const uint8_t *mask, const float *dy, float *dx, port_stream s)
{
    (void)s;
    k_dropout_bwd(n, p, mask, dy, dx);
    return 0;
}
int k_cuda_dropout2d_fwd(int n, int c, int hw, float p, uint64_t seed, uint64_t offset, const float *x,
                         float *y, uint8_t *mask, port_stream s)
{
    (void)s;
    k_dropout2d_fwd(n, c, hw, p, seed, offset, x, y, mask);
    return 0;
}
int k_cuda_dropout2d_bwd(int n, int c, int hw, float p, const uint8_t *mask, const float *dy, float *dx,
                         port_stream s)
{
    (void)s;
    k_dropout2d_bwd(n, c, hw, p, mask, dy, dx);
    return 0;
}
int k_cuda_log_softmax_fwd(int n, int classes, const float *x, float *y, port_stream s)
{
    (void)s;
    k_log_softmax_fwd(n, classes, x, y);
    return 0;
}
int k_cuda_nll_loss_sum(int n, int classes, const float *logp, const int32_t *labels, double *out,
                        port_stream s)
{
    (void)s;
    long correct = 0;
    out[0] = k_nll_loss_sum(n, classes, logp, labels, &correct);
    out[1] = (double)correct;
    return 0;
}
int k_cuda_log_softmax_nll_bwd(int n, int classes, const float *logp, const int32_t *labels, float scale,
                               float *dx, port_stream s)
{
    (void)s;
    k_log_softmax_nll_bwd(n, classes, logp, labels, scale, dx);
    return 0;
}
int k_cuda_sgd_step(size_t n, const k_sgd_cfg *cfg, int first_step, float *p, const float *g, float *v,
                    port_stream s)
{
    (void)s;
    k_sgd_step(n, cfg, first_step, p, g, v);
    return 0;
}
