/* Prefetching loader: a thread prepares batch b+1 (gather + normalise to float)
 * while batch b trains, in two arena buffers (the pin_memory/num_workers idea of
 * seed 004, on the host). The thread is started once; nothing is allocated per batch. */
#ifndef NN_LOADER_H
#define NN_LOADER_H
#include "nn/data.h"
#include "ports/posix/port.h"

typedef struct nn_loader {
    int max_batch, plane;      /* plane = rows * cols */
    float *x[2];
    int32_t *y[2];
    int nb[2];                 /* samples in each slot; -1 = empty */
    /* current pass */
    const nn_dataset *d;
    const int32_t *indices;    /* NULL = sequential */
    int first, count, batch, nbatches;
    int produced, consumed;    /* batches filled / handed out this pass */
    int generation, stop, running;
    double wait_s;             /* time the trainer spent waiting for data this pass */
    port_thread thread;
    port_mutex mu;
    port_cond cv;
} nn_loader;

void nn_loader_plan(nn_loader *L, rt_arena *a, int max_batch, int plane);
void nn_loader_start_thread(nn_loader *L);
/* Starts a pass over indices[0..count) (or samples first..first+count when indices is
 * NULL) in batches of `batch`; the thread begins filling at once. */
void nn_loader_begin(nn_loader *L, const nn_dataset *d, const int32_t *indices, int first,
                     int count, int batch);
/* The next batch (returns its size, 0 at the end of the pass). The buffers stay valid
 * until the following call. */
int nn_loader_next(nn_loader *L, const float **x, const int32_t **y);
void nn_loader_stop(nn_loader *L);
#endif
