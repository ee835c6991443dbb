/* The loader: `workers` threads turn samples into whole batches (gather, decode,
 * transform, normalise) into a ring of workers + 1 batch slots carved from the arena,
 * while the trainer consumes them in order (PyTorch's DataLoader num_workers, on the
 * host). A batch is a function of its indices, the epoch and the seed only, so the
 * worker count never changes the data. Threads start once; nothing is allocated per
 * batch by the loader itself (libjpeg/libpng allocate their decoder state per image). */
#ifndef NN_DATA_LOADER_H
#define NN_DATA_LOADER_H
#include "nn/data/dataset.h"
#include "ports/posix/port.h"

#define NN_LOADER_MAX_WORKERS 64
#define NN_LOADER_SKIP_NAMES 3

typedef struct nn_loader {
    int max_batch, nslots, nworkers;
    size_t sample_bytes, scratch_bytes;
    unsigned char **x;
    int32_t **y;
    int *slot_n;               /* -1 free, -2 being filled, -3 failed, >= 0 ready with n samples */
    nn_data_scratch *scratch;  /* one per worker */
    port_thread *threads;
    struct nn_loader_warg { struct nn_loader *L; int w; } *wargs;
    /* current pass */
    const nn_dataset *d;
    const int32_t *indices;    /* NULL = sequential */
    const int32_t *bounds;     /* NULL: batches of `batch`; else batch b is [bounds[b], bounds[b+1]) */
    int first, count, batch, nbatches, epoch, train;
    int claimed, consumed, busy, stop, running, started;
    double wait_s;             /* time the trainer spent waiting for data this pass */
    int skipped;               /* bad samples skipped this pass (--bad-sample skip) */
    char skip_names[NN_LOADER_SKIP_NAMES][400];
    char fail[1024];           /* the first bad sample in fail mode */
    port_mutex mu;
    port_cond cv;
} nn_loader;

/* Carves the ring and per-worker scratch for batches of up to max_batch samples of d. */
void nn_loader_plan(nn_loader *L, rt_arena *a, const nn_dataset *d, int max_batch, int workers);
void nn_loader_start_thread(nn_loader *L); /* starts the workers */
/* Starts a pass over indices[0..count) (or samples first..first+count when indices is
 * NULL) in batches of `batch`; epoch seeds the augmentation, train picks the train or
 * eval transforms. A pass still running is abandoned. */
void nn_loader_begin(nn_loader *L, const nn_dataset *d, const int32_t *indices, int first, int count, int batch,
                     int epoch, int train);
/* The same with batches of any sizes (each at most the planned max): batch b is
 * positions [bounds[b], bounds[b + 1]) of indices (or of first.. when NULL). bounds
 * must stay untouched until the next begin. */
void nn_loader_begin_plan(nn_loader *L, const nn_dataset *d, const int32_t *indices, int first, const int32_t *bounds,
                          int nbatches, int epoch, int train);
/* The next batch (returns its size, 0 at the end of the pass): x is samples of
 * nn_data_sample_bytes (floats, or int32 tokens). Valid until the following call. -1
 * when a bad sample (fail mode), or a batch of bad samples only, stopped the pass:
 * nn_loader_error gives the one line. */
int nn_loader_next(nn_loader *L, const void **x, const int32_t **y);
const char *nn_loader_error(nn_loader *L);
/* Ends the pass early (--max-steps): nothing more is decoded; the batches handed out
 * stay valid until the next begin. */
void nn_loader_end(nn_loader *L);
/* "N bad sample(s) skipped: FILE: problem; ..." for the pass so far, or "" when none. */
void nn_loader_skips(nn_loader *L, char *out, size_t outlen);
void nn_loader_stop(nn_loader *L);
#endif
