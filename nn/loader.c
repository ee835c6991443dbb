#include "nn/loader.h"
#include "rt/log.h"
#include <errno.h>
#include <string.h>

/* The producer is local and fast; a wait this long means a bug, not a slow disk. */
#define LOADER_DEADLINE_NS (120LL * 1000000000LL)

void nn_loader_plan(nn_loader *L, rt_arena *a, int max_batch, int plane)
{
    memset(L, 0, sizeof *L);
    L->max_batch = max_batch;
    L->plane = plane;
    for (int s = 0; s < 2; s++) {
        L->x[s] = rt_arena_alloc(a, (size_t)max_batch * plane * sizeof(float), RT_MEM_DATA, "loader images");
        L->y[s] = rt_arena_alloc(a, (size_t)max_batch * sizeof(int32_t), RT_MEM_DATA, "loader labels");
        L->nb[s] = -1;
    }
}

/* What one batch needs, copied under the lock so nn_loader_begin can change the pass
 * while a fill of the previous one finishes. */
typedef struct pass { const nn_dataset *d; const int32_t *indices; int first, count, batch, plane; } pass;

static int fill(const pass *p, int b, float *x, int32_t *y)
{
    const nn_dataset *d = p->d;
    int start = b * p->batch, n = p->count - start < p->batch ? p->count - start : p->batch;
    float scale = 1.0f / (255.0f * NN_MNIST_STD), shift = NN_MNIST_MEAN / NN_MNIST_STD;
    for (int i = 0; i < n; i++) {
        int idx = p->indices ? p->indices[start + i] : p->first + start + i;
        const uint8_t *src = d->images + (size_t)idx * p->plane;
        float *dst = x + (size_t)i * p->plane;
        /* ToTensor (/255) then Normalize((0.1307,), (0.3081,)), folded into one FMA. */
        for (int j = 0; j < p->plane; j++) dst[j] = src[j] * scale - shift;
        y[i] = d->labels[idx];
    }
    return n;
}

static void *loader_main(void *arg)
{
    nn_loader *L = arg;
    port_mutex_lock(&L->mu);
    while (!L->stop) {
        int b = L->produced, slot = b & 1;
        if (L->d && b < L->nbatches && L->nb[slot] < 0) {
            int gen = L->generation;
            pass p = {L->d, L->indices, L->first, L->count, L->batch, L->plane};
            port_mutex_unlock(&L->mu);
            int n = fill(&p, b, L->x[slot], L->y[slot]);
            port_mutex_lock(&L->mu);
            if (gen == L->generation) {
                L->nb[slot] = n;
                L->produced++;
            }
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
    if (port_thread_start(&L->thread, loader_main, L)) rt_fatal("cannot start the data loader thread");
    L->running = 1;
}

void nn_loader_begin(nn_loader *L, const nn_dataset *d, const int32_t *indices, int first,
                     int count, int batch)
{
    if (batch > L->max_batch) rt_fatal("loader: batch %d exceeds the planned %d", batch, L->max_batch);
    port_mutex_lock(&L->mu);
    L->generation++;
    L->d = d;
    L->indices = indices;
    L->first = first;
    L->count = count;
    L->batch = batch;
    L->nbatches = batch ? (count + batch - 1) / batch : 0;
    L->produced = L->consumed = 0;
    L->nb[0] = L->nb[1] = -1;
    L->wait_s = 0;
    port_cond_broadcast(&L->cv);
    port_mutex_unlock(&L->mu);
}

int nn_loader_next(nn_loader *L, const float **x, const int32_t **y)
{
    port_mutex_lock(&L->mu);
    /* Hand the previous slot back to the producer. */
    if (L->consumed > 0) {
        L->nb[(L->consumed - 1) & 1] = -1;
        port_cond_broadcast(&L->cv);
    }
    if (L->consumed >= L->nbatches) {
        port_mutex_unlock(&L->mu);
        return 0;
    }
    int slot = L->consumed & 1;
    int64_t t0 = port_now_ns(), deadline = t0 + LOADER_DEADLINE_NS;
    while (L->produced <= L->consumed)
        if (port_cond_wait_until(&L->cv, &L->mu, deadline) == ETIMEDOUT)
            rt_fatal("data loader: batch %d not ready after 120 s", L->consumed);
    L->wait_s += (port_now_ns() - t0) * 1e-9;
    int n = L->nb[slot];
    L->consumed++;
    port_mutex_unlock(&L->mu);
    *x = L->x[slot];
    *y = L->y[slot];
    return n;
}

void nn_loader_stop(nn_loader *L)
{
    if (!L->running) return;
    port_mutex_lock(&L->mu);
    L->stop = 1;
    port_cond_broadcast(&L->cv);
    port_mutex_unlock(&L->mu);
    port_thread_join(L->thread);
    L->running = 0;
}
