/* DDP on the device graph (nn/ddp.h: nn_ddp_use_cuda): the trainer wires the two here,
 * so that the device graph (nn/graph_cuda.c) knows neither DDP nor the transport's
 * staging. The device graph's buckets go through a pinned staging on its compute
 * stream (tp_iallreduce_device); the step calls back through nn_cuda_dp.
 *
 * --grad-compress fp16|bf16: each bucket is rounded into a 16-bit device buffer by a
 * kernel on the compute stream (rt/half.h's rounding, as tp_f32_to_half on the host),
 * allreduced there in 16 bits with TP_AVG (the staging reduces it on the host as the
 * CPU path does; cuda_ipc's kernel chains in rank order with the same rounding and
 * division), and widened back into the f32 gradients: the host path's bits for the same
 * f32 gradients. No range handling, as on the host: an f16 sum past 65504 is inf (under
 * --amp fp16 the loss scaler then skips the step on every rank). */
#include "nn/ddp_int.h"
#include "nn/graph_cuda.h"
#include "ports/cuda/port_cuda.h"
#include "rt/log.h"
#include <stdio.h>

#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"
#endif

static int dp_sync_buffers(void *d) { return nn_ddp_sync_buffers(d); }
static int dp_finish_grads(void *d) { return nn_ddp_finish_grads(d); }
static const char *dp_errmsg(void *d) { return nn_ddp_errmsg(d); }

size_t nn_ddp_cuda_stage_bytes(const nn_ddp *d)
{
    return d && d->comm ? tp_staging_bytes(TP_STAGE_DEFAULT_CHUNK, TP_STAGE_DEFAULT_SLOTS) : 0;
}

int nn_ddp_use_cuda(nn_ddp *d, struct nn_cuda *c, rt_dtype wire, char *err, size_t errlen)
{
    if (!d || !d->comm) return 0;
    if (!c) {
        if (d->have_dc) tp_dev_cuda_destroy(&d->cuda_dc);
        d->have_dc = 0;
        port_dev_free(d->dwire);
        d->dwire = NULL;
        d->s.dev_wire_bytes = 0;
        return 0;
    }
    if (tp_dev_cuda_init(&d->cuda_dc, nn_cuda_device(c), nn_cuda_stream(c), TP_STAGE_DEFAULT_SLOTS)) goto fail;
    d->have_dc = 1;
    if (tp_staging_init(&d->cuda_st, &tp_dev_cuda_ops, &d->cuda_dc, nn_cuda_stage(c), TP_STAGE_DEFAULT_CHUNK,
                        TP_STAGE_DEFAULT_SLOTS))
        goto fail;
    /* What the ranks reduce is registered once for CUDA IPC between the ranks of one host
     * (collective; the device plan is chosen and logged there): the gradient buckets in
     * the device arena, or under --grad-compress their 16-bit copies (start-up). */
    size_t bytes;
    void *region = nn_cuda_arena(c, &bytes);
    d->wire = wire;
    if (wire != RT_F32) {
        size_t n = nn_cuda_graph(c)->nparams;
        bytes = (n ? n : 1) * rt_dtype_size(wire);
        if (port_dev_malloc(&d->dwire, bytes, "--grad-compress buckets")) goto fail;
        region = d->dwire;
        d->s.dev_wire_bytes = bytes;
        if (d->rank == 0)
            rt_info("--grad-compress %s on the device: the buckets are rounded to %s on the GPU (%zu bytes) and "
                    "allreduced in %s, then widened into the f32 gradients", rt_dtype_names[wire],
                    rt_dtype_names[wire], bytes, rt_dtype_names[wire]);
    }
    int rc = tp_staging_ipc(d->comm, &d->cuda_st, nn_cuda_device(c), region, bytes, nn_cuda_stream(c));
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

/* A kernel launch that failed: every rank stops with its line (the comm's message). */
static void kernel_failed(nn_ddp *d)
{
    char why[300];
    snprintf(why, sizeof why, "rank %d: %s", d->rank, port_cuda_errmsg());
    nn_ddp_fail(d, why);
}

void *nn_ddp_cuda_pack(nn_ddp *d, const nn_bucket *bk)
{
    uint16_t *w = (uint16_t *)d->dwire + bk->off;
#if DDPRT_CUDA
    const float *g = d->dev->grads + bk->off;
    port_stream s = d->cuda_dc.compute;
    if ((d->wire == RT_BF16 ? k_cuda_f32_to_bf16 : k_cuda_f32_to_f16)(bk->count, g, w, s)) kernel_failed(d);
#else
    nn_ddp_fail(d, "--grad-compress: this build has no CUDA kernels");
#endif
    return w;
}

int nn_ddp_cuda_unpack(nn_ddp *d, const nn_bucket *bk)
{
#if DDPRT_CUDA
    const uint16_t *w = (const uint16_t *)d->dwire + bk->off;
    float *g = d->dev->grads + bk->off;
    port_stream s = d->cuda_dc.compute;
    if (!(d->wire == RT_BF16 ? k_cuda_bf16_to_f32 : k_cuda_f16_to_f32)(bk->count, w, g, s)) return 0;
    kernel_failed(d);
#else
    (void)bk;
    nn_ddp_fail(d, "--grad-compress: this build has no CUDA kernels");
#endif
    return TP_EIO;
}

/* DDPRT_COMPRESS_CHECK on the device, every step as on the host: the f32 gradients
 * (still there: no bucket unpacked yet) averaged by one more allreduce, in place and
 * downloaded; then the buckets unpacked over them and downloaded too; compared. The
 * f32 block lies outside the registered 16-bit buffer, so every rank stages it. */
int nn_ddp_cuda_check(nn_ddp *d)
{
    size_t n = d->dev->nparams;
    port_stream s = d->cuda_dc.compute;
    int rc = tp_allreduce_device(d->comm, d->dev->grads, n, RT_F32, TP_AVG, d->st);
    if (rc) return rc;
    if (port_memcpy_d2h(d->cref, d->dev->grads, n * sizeof(float), s, "--grad-compress check")) goto fail;
    for (int i = 0; i < d->nbuckets; i++)
        if ((rc = nn_ddp_cuda_unpack(d, &d->b[i]))) return rc;
    if (port_memcpy_d2h(d->cgot, d->dev->grads, n * sizeof(float), s, "--grad-compress check") ||
        port_stream_sync(s, "--grad-compress check"))
        goto fail;
    nn_ddp_compress_measure(d, d->cgot, d->cref, n);
    return 0;
fail:
    kernel_failed(d);
    return TP_EIO;
}
