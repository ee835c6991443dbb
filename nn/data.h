/* Data: MNIST-format IDX files (plain or gzip), validated; the samples stay as bytes
 * (60000x28x28 = 45 MiB) in the host arena and are normalised per batch. */
#ifndef NN_DATA_H
#define NN_DATA_H
#include "rt/arena.h"
#include <stddef.h>
#include <stdint.h>

#define NN_MNIST_MEAN 0.1307f
#define NN_MNIST_STD 0.3081f

typedef struct nn_idx_header {
    int ndims;
    int dims[3];
    size_t count, item_bytes; /* dims[0], product of the rest */
} nn_idx_header;

typedef struct nn_dataset {
    char images_path[512], labels_path[512];
    nn_idx_header ih, lh;
    int n, rows, cols;
    uint8_t *images; /* n * rows * cols */
    uint8_t *labels; /* n */
} nn_dataset;

/* Finds the directory holding the four Fashion-MNIST/MNIST files: `dir` if given,
 * else $DDPRT_DATA, ./data, then Debian's dataset-fashion-mnist location.
 * Returns 0, or -1 with an error that says how to get the data. */
int nn_data_locate(const char *dir, char *out, size_t outlen, char *err, size_t errlen);

/* Opens "train" or "t10k" in dir and validates both headers (magic, element type,
 * dimensions, matching counts). Nothing is allocated. */
int nn_dataset_open(nn_dataset *d, const char *dir, const char *split, char *err, size_t errlen);
/* Reads the payloads into the arena and validates them (file length, label range). */
int nn_dataset_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen);

/* Reads and validates one IDX header; exposed for tests. */
int nn_idx_read_header(const char *path, int want_ndims, nn_idx_header *h, char *err, size_t errlen);
#endif
