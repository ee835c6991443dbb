/* CIFAR-10 / CIFAR-100 binary: records of label byte(s) + 3072 pixel bytes (R, G, B
 * planes of 32x32). CIFAR-10: data_batch_1..5.bin, test_batch.bin; CIFAR-100:
 * train.bin, test.bin with (coarse, fine) labels, the fine one used. */
#include "nn/data/dataset.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static void file_name(const nn_dataset *d, int i, char *out, size_t outlen)
{
    if (d->fmt == NN_FMT_CIFAR100) snprintf(out, outlen, "%s/%s.bin", d->path[0], d->split_train ? "train" : "test");
    else if (d->split_train) snprintf(out, outlen, "%s/data_batch_%d.bin", d->path[0], i + 1);
    else snprintf(out, outlen, "%s/test_batch.bin", d->path[0]);
}

int nn_cifar_open(nn_dataset *d, const char *dir, char *err, size_t errlen)
{
    int c100 = d->fmt == NN_FMT_CIFAR100, rec = c100 ? 3074 : 3073;
    snprintf(d->path[0], sizeof d->path[0], "%s", dir);
    d->nfiles = !c100 && d->split_train ? 5 : 1;
    d->n = 0;
    for (int i = 0; i < d->nfiles; i++) {
        char p[800];
        struct stat st;
        file_name(d, i, p, sizeof p);
        if (stat(p, &st)) {
            snprintf(err, errlen, "%s: %s (the %s binary version has %s)", p, strerror(errno), c100 ? "CIFAR-100" : "CIFAR-10",
                     c100 ? "train.bin and test.bin" : "data_batch_1..5.bin and test_batch.bin");
            return -1;
        }
        if (st.st_size == 0 || st.st_size % rec) {
            snprintf(err, errlen, "%s: %lld bytes is not a whole number of %d-byte records (truncated?)", p,
                     (long long)st.st_size, rec);
            return -1;
        }
        d->n += (int)(st.st_size / rec);
    }
    d->src_c = 3, d->src_h = 32, d->src_w = 32;
    d->num_classes = c100 ? 100 : 10;
    return 0;
}

int nn_cifar_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen)
{
    int c100 = d->fmt == NN_FMT_CIFAR100, rec = c100 ? 3074 : 3073, k = 0;
    d->pixels = rt_arena_alloc(a, (size_t)d->n * 3072, RT_MEM_DATA, "cifar images");
    d->labels = rt_arena_alloc(a, (size_t)d->n * sizeof(int32_t), RT_MEM_DATA, "cifar labels");
    if (a->planning) return 0;
    for (int i = 0; i < d->nfiles; i++) {
        char p[800];
        file_name(d, i, p, sizeof p);
        FILE *f = fopen(p, "rb");
        if (!f) {
            snprintf(err, errlen, "%s: cannot open: %s", p, strerror(errno));
            return -1;
        }
        unsigned char lab[2];
        long r = 0;
        for (;; r++) {
            size_t got = fread(lab, 1, (size_t)(rec - 3072), f);
            if (got == 0 && feof(f)) break;
            if (k >= d->n || got != (size_t)(rec - 3072) || fread(d->pixels + (size_t)k * 3072, 1, 3072, f) != 3072) {
                snprintf(err, errlen, "%s: record %ld at offset %ld is truncated (the file changed since it was opened?)",
                         p, r, r * rec);
                fclose(f);
                return -1;
            }
            int y = lab[c100];
            if (y >= d->num_classes) {
                snprintf(err, errlen, "%s: label %d of record %ld at offset %ld is out of range 0-%d", p, y, r,
                         r * rec + c100, d->num_classes - 1);
                fclose(f);
                return -1;
            }
            d->labels[k++] = y;
        }
        fclose(f);
    }
    d->data_hash = crc32_z(crc32_z(0, d->pixels, (size_t)d->n * 3072), (const Bytef *)d->labels,
                           (size_t)d->n * sizeof(int32_t)) | 1ull << 41;
    return 0;
}
