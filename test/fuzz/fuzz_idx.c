/* libFuzzer target: the IDX header reader (nn/data/idx.c) on arbitrary bytes, plain or
 * gzip-compressed (zlib reads both), through a memory file. Build and run: make fuzz. */
#include "nn/data/dataset.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("idx", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || pwrite(fd, d, n, 0) != (ssize_t)n) abort();
    char err[1024];
    for (int nd = 1; nd <= 3; nd += 2) {
        nn_idx_header h;
        memset(&h, 0, sizeof h);
        if (nn_idx_read_header(path, nd, &h, err, sizeof err) == 0) {
            if (h.ndims != nd || h.dims[0] <= 0 || h.count != (size_t)h.dims[0]) abort();
        } else if (!strstr(err, path)) {
            abort(); /* every error names the file */
        }
    }
    return 0;
}
