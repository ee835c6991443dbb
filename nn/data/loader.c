#include "nn/data/loader.h"
#include "rt/log.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Workers are local; a batch this late means a hung file system or a bug. */
#define LOADER_DEADLINE_NS (300LL * 1000000000LL)

void nn_loader_plan(nn_loader *L, rt_arena *a, const nn_dataset *d, int max_batch, int workers)
{
    memset(L, 0, sizeof *L);
    if (workers < 1) workers = 1;
    if (workers > NN_LOADER_MAX_WORKERS) workers = NN_LOADER_MAX_WORKERS;
    L->max_batch = max_batch;
    L->nworkers = workers;
    L->nslots = workers + 1; /* every worker busy while the trainer holds one batch */
    L->sample_bytes = nn_data_sample_bytes(d);
    L->scratch_bytes = d->scratch_bytes;
    L->x = rt_arena_alloc(a, L->nslots * sizeof *L->x, RT_MEM_DATA, "loader ring");
    L->y = rt_arena_alloc(a, L->nslots * sizeof *L->y, RT_MEM_DATA, "loader ring");
    L->slot_n = rt_arena_alloc(a, L->nslots * sizeof *L->slot_n, RT_MEM_DATA, "loader ring");
    L->scratch = rt_arena_alloc(a, workers * sizeof *L->scratch, RT_MEM_DATA, "loader scratch");
    L->threads = rt_arena_alloc(a, workers * sizeof *L->threads, RT_MEM_DATA, "loader threads");
    L->wargs = rt_arena_alloc(a, workers * sizeof *L->wargs, RT_MEM_DATA, "loader threads");
    for (int s = 0; s < L->nslots; s++) {
        unsigned char *x = rt_arena_alloc(a, (size_t)max_batch * L->sample_bytes, RT_MEM_DATA, "loader batches");
        int32_t *y = rt_arena_alloc(a, (size_t)max_batch * sizeof(int32_t), RT_MEM_DATA, "loader labels");
        if (!a->planning) L->x[s] = x, L->y[s] = y, L->slot_n[s] = -1;
    }
    for (int w = 0; w < workers; w++) {
        unsigned char *b = L->scratch_bytes ? rt_arena_alloc(a, L->scratch_bytes, RT_MEM_WORKSPACE, "decode scratch") : NULL;
        if (!a->planning) L->scratch[w] = (nn_data_scratch){b, L->scratch_bytes};
    }
}

typedef struct pass {
    const nn_dataset *d;
    const int32_t *indices, *bounds;
    int first, count, batch, epoch, train;
} pass;

/* Fills one batch; bad samples are dropped (skip) or end the batch with the error. */
static int fill(nn_loader *L, const pass *p, int b, int w, unsigned char *x, int32_t *y, char *err, size_t errlen)
{
    int start = b * p->batch, n = p->count - start < p->batch ? p->count - start : p->batch, k = 0;
    if (p->bounds) start = p->bounds[b], n = p->bounds[b + 1] - start;
    for (int i = 0; i < n; i++) {
        int idx = p->indices ? p->indices[start + i] : p->first + start + i;
        if (nn_data_sample(p->d, idx, p->epoch, p->train, x + (size_t)k * L->sample_bytes, &y[k], &L->scratch[w], err,
                           errlen) == 0) {
            k++;
            continue;
        }
        if (!p->d->bad_skip) return -1;
        port_mutex_lock(&L->mu);
        if (L->skipped < NN_LOADER_SKIP_NAMES) snprintf(L->skip_names[L->skipped], sizeof L->skip_names[0], "%.399s", err);
        L->skipped++;
        port_mutex_unlock(&L->mu);
    }
    if (k == 0) {
        snprintf(err, errlen, "every sample of batch %d was bad (the last: see above)", b);
        return -1;
    }
    return k;
}

typedef struct nn_loader_warg warg;

static void *worker_main(void *arg)
{
    nn_loader *L = ((warg *)arg)->L;
    int w = ((warg *)arg)->w;
    char err[1024];
    port_mutex_lock(&L->mu);
    while (!L->stop) {
        int b = L->claimed, slot = b % L->nslots;
        if (L->d && b < L->nbatches && L->slot_n[slot] == -1) {
            pass p = {L->d, L->indices, L->bounds, L->first, L->count, L->batch, L->epoch, L->train};
            L->claimed++;
            L->slot_n[slot] = -2;
            L->busy++;
            port_mutex_unlock(&L->mu);
            int n = fill(L, &p, b, w, L->x[slot], L->y[slot], err, sizeof err);
            port_mutex_lock(&L->mu);
            L->busy--;
            if (n < 0 && !L->fail[0]) snprintf(L->fail, sizeof L->fail, "%s", err);
            L->slot_n[slot] = n < 0 ? -3 : n;
            port_cond_broadcast(&L->cv);
            continue;
        }
        port_cond_wait(&L->cv, &L->mu);
    }
    port_mutex_unlock(&L->mu);
    return NULL;
}

void nn_loader_start_thread(nn_loader *L)
{
    port_mutex_init(&L->mu);
    port_cond_init(&L->cv);
    L->started = 1;
    for (int w = 0; w < L->nworkers; w++) {
        warg *a = &L->wargs[w];
        *a = (warg){L, w};
        if (port_thread_start(&L->threads[w], worker_main, a)) rt_fatal("cannot start data loader worker %d", w);
        L->running++;
    }
}

static void wait_idle(nn_loader *L)
{
    int64_t deadline = port_now_ns() + LOADER_DEADLINE_NS;
    while (L->busy > 0)
        if (port_cond_wait_until(&L->cv, &L->mu, deadline) == ETIMEDOUT)
            rt_fatal("data loader: a worker is still decoding after 300 s");
}

static void begin(nn_loader *L, const nn_dataset *d, const int32_t *indices, const int32_t *bounds, int first,
                  int count, int batch, int nbatches, int epoch, int train);

void nn_loader_begin(nn_loader *L, const nn_dataset *d, const int32_t *indices, int first, int count, int batch,
                     int epoch, int train)
{
    if (batch > L->max_batch) rt_fatal("loader: batch %d exceeds the planned %d", batch, L->max_batch);
    begin(L, d, indices, NULL, first, count, batch, batch ? (count + batch - 1) / batch : 0, epoch, train);
}

void nn_loader_begin_plan(nn_loader *L, const nn_dataset *d, const int32_t *indices, int first, const int32_t *bounds,
                          int nbatches, int epoch, int train)
{
    for (int b = 0; b < nbatches; b++)
        if (bounds[b + 1] - bounds[b] > L->max_batch || bounds[b + 1] < bounds[b])
            rt_fatal("loader: batch %d of the plan has %d samples, the planned maximum is %d", b,
                     bounds[b + 1] - bounds[b], L->max_batch);
    begin(L, d, indices, bounds, first, nbatches ? bounds[nbatches] : 0, L->max_batch, nbatches, epoch, train);
}

static void begin(nn_loader *L, const nn_dataset *d, const int32_t *indices, const int32_t *bounds, int first,
                  int count, int batch, int nbatches, int epoch, int train)
{
    if (nn_data_sample_bytes(d) > L->sample_bytes || d->scratch_bytes > L->scratch_bytes)
        rt_fatal("loader: %s samples are larger than the planned ones", d->dir);
    port_mutex_lock(&L->mu);
    L->d = NULL; /* no new claims; fills of the old pass finish first */
    wait_idle(L);
    L->d = d;
    L->indices = indices;
    L->bounds = bounds;
    L->first = first;
    L->count = count;
    L->batch = batch;
    L->epoch = epoch;
    L->train = train;
    L->nbatches = nbatches;
    L->claimed = L->consumed = 0;
    for (int s = 0; s < L->nslots; s++) L->slot_n[s] = -1;
    L->wait_s = 0;
    L->skipped = 0;
    L->fail[0] = 0;
    port_cond_broadcast(&L->cv);
    port_mutex_unlock(&L->mu);
}

void nn_loader_end(nn_loader *L)
{
    port_mutex_lock(&L->mu);
    L->d = NULL; /* no new claims; fills already running finish */
    wait_idle(L);
    L->nbatches = L->consumed;
    port_mutex_unlock(&L->mu);
}

int nn_loader_next(nn_loader *L, const void **x, const int32_t **y)
{
    port_mutex_lock(&L->mu);
    if (L->consumed > 0) { /* hand the previous slot back */
        L->slot_n[(L->consumed - 1) % L->nslots] = -1;
        port_cond_broadcast(&L->cv);
    }
    if (L->consumed >= L->nbatches) {
        port_mutex_unlock(&L->mu);
        return 0;
    }
    int slot = L->consumed % L->nslots;
    int64_t t0 = port_now_ns(), deadline = t0 + LOADER_DEADLINE_NS;
    while (L->slot_n[slot] < 0 && L->slot_n[slot] != -3)
        if (port_cond_wait_until(&L->cv, &L->mu, deadline) == ETIMEDOUT)
            rt_fatal("data loader: batch %d not ready after 300 s", L->consumed);
    L->wait_s += (port_now_ns() - t0) * 1e-9;
    int n = L->slot_n[slot];
    if (n == -3) {
        port_mutex_unlock(&L->mu);
        return -1; /* the message: nn_loader_error */
    }
    L->consumed++;
    port_mutex_unlock(&L->mu);
    *x = L->x[slot];
    *y = L->y[slot];
    return n;
}

const char *nn_loader_error(nn_loader *L)
{
    port_mutex_lock(&L->mu);
    if (L->fail[0] && !strstr(L->fail, "--bad-sample skip"))
        snprintf(L->fail + strlen(L->fail), sizeof L->fail - strlen(L->fail), "%s",
                 L->d && L->d->bad_skip ? "" : " (--bad-sample skip skips bad samples)");
    port_mutex_unlock(&L->mu);
    return L->fail;
}

void nn_loader_skips(nn_loader *L, char *out, size_t outlen)
{
    port_mutex_lock(&L->mu);
    out[0] = 0;
    if (L->skipped) {
        size_t o = (size_t)snprintf(out, outlen, "%d bad sample(s) skipped", L->skipped);
        for (int i = 0; i < L->skipped && i < NN_LOADER_SKIP_NAMES && o < outlen; i++)
            o += (size_t)snprintf(out + o, outlen - o, "%s%s", i ? "; " : ": ", L->skip_names[i]);
        if (L->skipped > NN_LOADER_SKIP_NAMES && o < outlen) snprintf(out + o, outlen - o, "; ...");
    }
    port_mutex_unlock(&L->mu);
}

void nn_loader_stop(nn_loader *L)
{
    if (!L->started) return;
    port_mutex_lock(&L->mu);
    L->stop = 1;
    port_cond_broadcast(&L->cv);
    port_mutex_unlock(&L->mu);
    for (int w = 0; w < L->running; w++) port_thread_join(L->threads[w]);
    L->running = 0;
    L->started = 0;
}
