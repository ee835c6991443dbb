#include "nn/data/dataset.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* IDX: MNIST-format files (plain or gzip), validated; the samples stay as bytes
 * (60000x28x28 = 45 MiB) in the arena and are normalised per batch. */

/* Accepts "name" or "name.gz"; writes the one that exists into out. */
static int find_file(const char *dir, const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%s", dir, name);
    if (file_exists(out)) return 0;
    snprintf(out, outlen, "%s/%s.gz", dir, name);
    return file_exists(out) ? 0 : -1;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads exactly n bytes; returns bytes read, or -1 on a zlib error (message in err). */
static long gz_read_n(gzFile f, void *buf, size_t n, const char *path, char *err, size_t errlen)
{
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) {
            int zerr;
            const char *m = gzerror(f, &zerr), *tail = strrchr(m, ':');
            /* zlib prefixes its message with the path; keep only the reason. */
            snprintf(err, errlen, "%s: corrupt gzip data near compressed offset %ld: %s", path,
                     (long)gzoffset(f), tail ? tail + 2 : m);
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    /* zlib reports a truncated gzip stream as a short read plus Z_BUF_ERROR. */
    int zerr = Z_OK;
    gzerror(f, &zerr);
    if (got < n && zerr != Z_OK && zerr != Z_STREAM_END) {
        snprintf(err, errlen, "%s: gzip stream ends early at compressed offset %ld (%zu bytes decompressed): truncated download?",
                 path, (long)gzoffset(f), got);
        return -1;
    }
    return (long)got;
}

int nn_idx_read_header(const char *path, int want_ndims, nn_idx_header *h, char *err, size_t errlen)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    unsigned char b[16];
    size_t hlen = 4 + 4 * (size_t)want_ndims;
    long got = gz_read_n(f, b, hlen, path, err, errlen);
    gzclose(f);
    if (got < 0) return -1;
    if ((size_t)got < hlen) {
        snprintf(err, errlen, "%s: truncated header: %ld of %zu bytes", path, got, hlen);
        return -1;
    }
    if (b[0] != 0 || b[1] != 0) {
        snprintf(err, errlen, "%s: bad magic %02x%02x%02x%02x at offset 0: not an IDX file", path,
                 b[0], b[1], b[2], b[3]);
        return -1;
    }
    if (b[2] != 0x08) {
        snprintf(err, errlen, "%s: element type 0x%02x at offset 2, expected 0x08 (unsigned byte)", path, b[2]);
        return -1;
    }
    if (b[3] != want_ndims) {
        snprintf(err, errlen, "%s: %d dimensions at offset 3, expected %d", path, b[3], want_ndims);
        return -1;
    }
    h->ndims = want_ndims;
    h->item_bytes = 1;
    for (int i = 0; i < want_ndims; i++) {
        uint32_t d = be32(b + 4 + 4 * i);
        /* Bounds: no sane IDX dataset has dimensions past these; rejects garbage early. */
        if (d == 0 || d > (i == 0 ? 100000000u : 4096u)) {
            snprintf(err, errlen, "%s: dimension %d = %u at offset %d is out of range", path, i, d, 4 + 4 * i);
            return -1;
        }
        h->dims[i] = (int)d;
        if (i > 0) h->item_bytes *= d;
    }
    h->count = (size_t)h->dims[0];
    return 0;
}

/* The header's promise against the file, before anything is allocated for it: a plain
 * file holds exactly header + payload bytes; a gzip file cannot hold more than 1032
 * times its size (deflate's largest expansion). */
static int check_size(const char *path, size_t hlen, size_t payload, char *err, size_t errlen)
{
    struct stat st;
    unsigned char magic[2] = {0, 0};
    FILE *f = fopen(path, "rb");
    int ok = f && fstat(fileno(f), &st) == 0;
    if (ok && fread(magic, 1, 2, f) != 2) magic[0] = 0;
    if (f) fclose(f);
    if (!ok) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    uint64_t want = (uint64_t)hlen + payload, size = (uint64_t)st.st_size;
    int gz = magic[0] == 0x1f && magic[1] == 0x8b;
    if (gz && want > size * 1032)
        snprintf(err, errlen, "%s: truncated: the header promises %llu bytes, more than %llu compressed bytes can hold",
                 path, (unsigned long long)want, (unsigned long long)size);
    else if (!gz && want > size)
        snprintf(err, errlen, "%s: truncated: data ends at offset %llu, the header promises %llu bytes", path,
                 (unsigned long long)size, (unsigned long long)want);
    else if (!gz && want < size)
        snprintf(err, errlen, "%s: unexpected trailing bytes after offset %llu: the header says the data ends there",
                 path, (unsigned long long)want);
    else
        return 0;
    return -1;
}

int nn_idx_open(nn_dataset *d, const char *dir, const char *split, char *err, size_t errlen)
{
    char name[64];
    char *ip = d->path[0], *lp = d->path[1];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", split);
    if (find_file(dir, name, ip, sizeof d->path[0])) {
        snprintf(err, errlen, "%s/%s[.gz]: no such file", dir, name);
        return -1;
    }
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", split);
    if (find_file(dir, name, lp, sizeof d->path[1])) {
        snprintf(err, errlen, "%s/%s[.gz]: no such file", dir, name);
        return -1;
    }
    if (nn_idx_read_header(ip, 3, &d->ih, err, errlen)) return -1;
    if (nn_idx_read_header(lp, 1, &d->lh, err, errlen)) return -1;
    if (check_size(ip, 16, d->ih.count * d->ih.item_bytes, err, errlen) || check_size(lp, 8, d->lh.count, err, errlen))
        return -1;
    if (d->ih.count != d->lh.count) {
        snprintf(err, errlen, "%s has %zu images but %s has %zu labels", ip, d->ih.count, lp, d->lh.count);
        return -1;
    }
    d->n = (int)d->ih.count;
    d->src_c = 1;
    d->src_h = d->ih.dims[1];
    d->src_w = d->ih.dims[2];
    d->num_classes = 10;
    return 0;
}

/* Reads the payload after the header and insists the file ends exactly there. */
static int read_payload(const char *path, size_t hlen, void *dst, size_t n, char *err, size_t errlen)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    gzbuffer(f, 1 << 17);
    unsigned char hdr[16], extra;
    long got = gz_read_n(f, hdr, hlen, path, err, errlen);
    if (got == (long)hlen) got = gz_read_n(f, dst, n, path, err, errlen);
    else if (got >= 0) got = 0;
    if (got >= 0 && (size_t)got < n) {
        snprintf(err, errlen, "%s: truncated: data ends at offset %zu, the header promises %zu bytes", path,
                 hlen + (size_t)got, hlen + n);
        got = -1;
    }
    if (got >= 0) {
        long more = gz_read_n(f, &extra, 1, path, err, errlen);
        if (more > 0) {
            snprintf(err, errlen, "%s: %s after offset %zu: the header says the data ends there", path,
                     "unexpected trailing bytes", hlen + n);
            got = -1;
        } else if (more < 0)
            got = -1;
    }
    gzclose(f);
    return got < 0 ? -1 : 0;
}

int nn_idx_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen)
{
    size_t isz = (size_t)d->n * d->src_h * d->src_w;
    d->pixels = rt_arena_alloc(a, isz, RT_MEM_DATA, d->path[0]);
    d->labels = rt_arena_alloc(a, (size_t)d->n * sizeof(int32_t), RT_MEM_DATA, d->path[1]);
    if (a->planning) return 0;
    if (read_payload(d->path[0], 16, d->pixels, isz, err, errlen)) return -1;
    /* The bytes go to the tail of the int32 array, then widen front to back. */
    uint8_t *lb = (uint8_t *)d->labels + 3 * (size_t)d->n;
    if (read_payload(d->path[1], 8, lb, (size_t)d->n, err, errlen)) return -1;
    for (int i = 0; i < d->n; i++) {
        if (lb[i] > 9) {
            snprintf(err, errlen, "%s: label %d at offset %d (sample %d) is out of range 0-9", d->path[1], lb[i],
                     8 + i, i);
            return -1;
        }
        d->labels[i] = lb[i];
    }
    d->data_hash = crc32_z(crc32_z(0, d->pixels, isz), (const Bytef *)d->labels, (size_t)d->n * sizeof(int32_t)) |
                   1ull << 41;
    return 0;
}
