/* libFuzzer target: the checkpoint reader (nn/stio_read.c) on arbitrary bytes: open
 * (header length, JSON header, offsets) and, when that passes, reading every tensor
 * it lists with its own dtype and shape (copies, CRC checks). Every byte it touches
 * must be inside the input: ASan checks. Build and run: make fuzz. */
#include "nn/stio.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    stio_file *f;
    char err[512];
    if (stio_open_mem(&f, d, n, "fuzz.st", err, sizeof err)) {
        if (strncmp(err, "fuzz.st: ", 9)) abort(); /* every error names the file */
        return 0;
    }
    int nt = stio_count(f);
    stio_tensor *t = calloc((size_t)nt + 1, sizeof *t);
    size_t total = 0;
    for (int i = 0; i < nt; i++) {
        if (stio_info(f, i, &t[i])) abort();
        size_t b = stio_dtype_size(t[i].dtype);
        for (int k = 0; k < t[i].ndim; k++) b *= (size_t)t[i].shape[k];
        if (b > n) abort(); /* the reader checked that the data lies inside the file */
        t[i].data = malloc(b ? b : 1);
        total += b;
    }
    if (total > n) abort();
    stio_read(f, t, nt, err, sizeof err);
    (void)stio_meta_get(f, "format");
    for (int i = 0; i < nt; i++) free(t[i].data);
    free(t);
    stio_close(f);
    return 0;
}
