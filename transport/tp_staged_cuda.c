/* The CUDA side of the staging pipeline (tp_dev_ops over ports/cuda): the device made
 * current in whichever thread runs the op (the comm thread, usually), a D2H stream
 * and an H2D stream, one event per slot and direction so the host can wait for one
 * chunk's copy, and two events that order the copies after the compute stream's
 * producer work and the compute stream's later work after the last H2D. Everything is
 * created once (tp_dev_cuda_init); a call only records and waits. */
#include "transport/tp_staged.h"
#include <string.h>

static int bind(void *ctx)
{
    tp_dev_cuda *d = ctx;
    return port_cuda_use_device(d->device);
}

static int d2h(void *ctx, int slot, void *host, const void *dev, size_t bytes)
{
    tp_dev_cuda *d = ctx;
    if (port_memcpy_d2h(host, dev, bytes, d->d2h_s, "staging D2H")) return -1;
    return port_event_record(d->d2h_ev[slot], d->d2h_s);
}

static int h2d(void *ctx, int slot, void *dev, const void *host, size_t bytes)
{
    tp_dev_cuda *d = ctx;
    if (port_memcpy_h2d(dev, host, bytes, d->h2d_s, "staging H2D")) return -1;
    return port_event_record(d->h2d_ev[slot], d->h2d_s);
}

static int wait_d2h(void *ctx, int slot)
{
    tp_dev_cuda *d = ctx;
    return port_event_sync(d->d2h_ev[slot], "staging D2H");
}

static int wait_h2d(void *ctx, int slot)
{
    tp_dev_cuda *d = ctx;
    return port_event_sync(d->h2d_ev[slot], "staging H2D");
}

static int begin(void *ctx)
{
    tp_dev_cuda *d = ctx;
    if (port_event_record(d->begin_ev, d->compute)) return -1;
    return port_stream_wait_event(d->d2h_s, d->begin_ev);
}

static int end(void *ctx)
{
    tp_dev_cuda *d = ctx;
    if (port_event_record(d->end_ev, d->h2d_s)) return -1;
    return port_stream_wait_event(d->compute, d->end_ev);
}

static const char *errmsg(void *ctx)
{
    (void)ctx;
    return port_cuda_errmsg();
}

const tp_dev_ops tp_dev_cuda_ops = {bind, d2h, h2d, wait_d2h, wait_h2d, begin, end, errmsg};

int tp_dev_cuda_init(tp_dev_cuda *d, int device, port_stream compute, int nslots)
{
    memset(d, 0, sizeof *d);
    d->device = device;
    d->compute = compute;
    d->nslots = nslots;
    if (nslots < 1 || nslots > TP_STAGE_MAX_SLOTS) {
        port_cuda_fail("staging: %d slots (1 to %d)", nslots, TP_STAGE_MAX_SLOTS);
        return -1;
    }
    if (port_stream_create(&d->d2h_s, "staging D2H stream") || port_stream_create(&d->h2d_s, "staging H2D stream") ||
        port_event_create(&d->begin_ev, 0, "staging event") || port_event_create(&d->end_ev, 0, "staging event"))
        return -1;
    for (int s = 0; s < nslots; s++)
        if (port_event_create(&d->d2h_ev[s], 0, "staging event") || port_event_create(&d->h2d_ev[s], 0, "staging event"))
            return -1;
    return 0;
}

void tp_dev_cuda_destroy(tp_dev_cuda *d)
{
    for (int s = 0; s < d->nslots; s++) {
        port_event_destroy(d->d2h_ev[s]);
        port_event_destroy(d->h2d_ev[s]);
    }
    port_event_destroy(d->begin_ev);
    port_event_destroy(d->end_ev);
    port_stream_destroy(d->d2h_s);
    port_stream_destroy(d->h2d_s);
    memset(d, 0, sizeof *d);
}
