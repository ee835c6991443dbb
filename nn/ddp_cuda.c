/* DDP on the device graph (nn/ddp.h: nn_ddp_use_cuda): the trainer wires the two here,
 * so that the device graph (nn/graph_cuda.c) knows neither DDP nor the transport's
 * staging. The device graph's buckets go through a pinned staging on its compute
 * stream (tp_iallreduce_device); the step calls back through nn_cuda_dp. */
#include "nn/ddp_int.h"
#include "nn/graph_cuda.h"
#include "ports/cuda/port_cuda.h"
#include <stdio.h>

static int dp_sync_buffers(void *d) { return nn_ddp_sync_buffers(d); }
static int dp_finish_grads(void *d) { return nn_ddp_finish_grads(d); }
static const char *dp_errmsg(void *d) { return nn_ddp_errmsg(d); }

size_t nn_ddp_cuda_stage_bytes(const nn_ddp *d)
{
    return d && d->comm ? tp_staging_bytes(TP_STAGE_DEFAULT_CHUNK, TP_STAGE_DEFAULT_SLOTS) : 0;
}

int nn_ddp_use_cuda(nn_ddp *d, struct nn_cuda *c, char *err, size_t errlen)
{
    if (!d || !d->comm) return 0;
    if (!c) {
        if (d->have_dc) tp_dev_cuda_destroy(&d->cuda_dc);
        d->have_dc = 0;
        return 0;
    }
    if (tp_dev_cuda_init(&d->cuda_dc, nn_cuda_device(c), nn_cuda_stream(c), TP_STAGE_DEFAULT_SLOTS)) goto fail;
    d->have_dc = 1;
    if (tp_staging_init(&d->cuda_st, &tp_dev_cuda_ops, &d->cuda_dc, nn_cuda_stage(c), TP_STAGE_DEFAULT_CHUNK,
                        TP_STAGE_DEFAULT_SLOTS))
        goto fail;
    /* The gradient buckets live in the device arena: registered once for CUDA IPC between
     * the ranks of one host (collective; the device plan is chosen and logged there). */
    size_t arena_bytes;
    void *arena = nn_cuda_arena(c, &arena_bytes);
    int rc = tp_staging_ipc(d->comm, &d->cuda_st, nn_cuda_device(c), arena, arena_bytes, nn_cuda_stream(c));
    if (rc) {
        snprintf(err, errlen, "--device cuda: CUDA IPC setup: %s", tp_errmsg(d->comm));
        return -1;
    }
    nn_ddp_set_device(d, nn_cuda_graph(c), &d->cuda_st); /* the same buckets and hook as the host's */
    nn_cuda_set_dp(c, &(nn_cuda_dp){.ctx = d, .sync_buffers = dp_sync_buffers, .finish_grads = dp_finish_grads,
                                    .errmsg = dp_errmsg, .rank = d->rank});
    return 0;
fail:
    snprintf(err, errlen, "--device cuda: %s", port_cuda_errmsg());
    return -1;
}
