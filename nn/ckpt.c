#include "nn/ckpt.h"
#include "nn/train.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define STATE_MAGIC "DDPRTST1"
#define MAX_HEADER 8192

/* Writes buf to path atomically: tmp file, fsync, rename, fsync of the directory. */
static int write_atomic(const char *path, const void *a, size_t na, const void *b, size_t nb, char *err,
                        size_t errlen)
{
    char tmp[1024], dir[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) goto fail;
    const void *parts[2] = {a, b};
    size_t lens[2] = {na, nb};
    for (int i = 0; i < 2; i++)
        for (size_t off = 0; off < lens[i];) {
            ssize_t w = write(fd, (const char *)parts[i] + off, lens[i] - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) goto fail;
            off += (size_t)w;
        }
    if (fsync(fd) || close(fd)) { fd = -1; goto fail; }
    fd = -1;
    if (rename(tmp, path)) goto fail;
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    return 0;
fail:
    snprintf(err, errlen, "--save %s: cannot write: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
    return -1;
}

/* Tensor bytes in state_dict order without our alignment padding, and their CRC. */
static size_t pack_params(const nn_model *m, const float *src, float *dst)
{
    size_t n = 0;
    for (int i = 0; i < m->np; i++) {
        memcpy(dst + n, src + m->p[i].offset, m->p[i].numel * sizeof(float));
        n += m->p[i].numel;
    }
    return n;
}

int nn_ckpt_save(nn_trainer *t, const char *path, int epoch, char *err, size_t errlen)
{
    const nn_model *m = &t->model;
    /* Reuse the activation-gradient buffer as staging: it is idle between epochs and
     * larger than the parameters (the loop allocates nothing, and neither do we). */
    float *buf = m->ga;
    size_t n = pack_params(m, m->params, buf);
    uint32_t crc = (uint32_t)crc32(0, (const unsigned char *)buf, (unsigned)(n * sizeof(float)));
    char hdr[MAX_HEADER];
    int k = snprintf(hdr, sizeof hdr,
                     "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"ddprt\",\"epoch\":\"%d\",\"step\":\"%llu\","
                     "\"crc32\":\"%08x\"}",
                     epoch, (unsigned long long)t->step, crc);
    size_t off = 0;
    for (int i = 0; i < m->np; i++) {
        const nn_param *p = &m->p[i];
        k += snprintf(hdr + k, sizeof hdr - k, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", p->name);
        for (int d = 0; d < p->ndim; d++) k += snprintf(hdr + k, sizeof hdr - k, "%s%d", d ? "," : "", p->shape[d]);
        k += snprintf(hdr + k, sizeof hdr - k, "],\"data_offsets\":[%zu,%zu]}", off, off + p->numel * 4);
        off += p->numel * 4;
    }
    k += snprintf(hdr + k, sizeof hdr - k, "}");
    /* The spec pads the header with spaces so the data starts 8-byte aligned. */
    while ((k + 8) % 8) hdr[k++] = ' ';
    unsigned char file_head[MAX_HEADER + 8];
    uint64_t hl = (uint64_t)k;
    for (int i = 0; i < 8; i++) file_head[i] = (unsigned char)(hl >> (8 * i));
    memcpy(file_head + 8, hdr, (size_t)k);
    if (write_atomic(path, file_head, 8 + (size_t)k, buf, n * sizeof(float), err, errlen)) return -1;

    /* PATH.state: magic, epoch, step, count, momentum, then a CRC of all before it. */
    unsigned char sh[32];
    uint64_t fields[3] = {(uint64_t)epoch, t->step, (uint64_t)n};
    memcpy(sh, STATE_MAGIC, 8);
    memcpy(sh + 8, fields, sizeof fields);
    size_t nm = pack_params(m, t->momentum, buf);
    uint32_t scrc = (uint32_t)crc32(crc32(0, sh, 32), (const unsigned char *)buf, (unsigned)(nm * 4));
    memcpy((unsigned char *)(buf + nm), &scrc, 4);
    char spath[1024];
    snprintf(spath, sizeof spath, "%s.state", path);
    return write_atomic(spath, sh, 32, buf, nm * 4 + 4, err, errlen);
}

static unsigned char *read_all(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "--resume %s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = n > 0 && n < (1L << 30) ? malloc((size_t)n) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        snprintf(err, errlen, "--resume %s: cannot read (%ld bytes)", path, n);
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Finds "key":"value" or "key":[a,b] inside the header after `from`. */
static const char *find_key(const char *h, const char *key)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(h, pat);
    return p ? p + strlen(pat) : NULL;
}

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); goto out; } while (0)

int nn_ckpt_load(nn_trainer *t, const char *path, char *err, size_t errlen)
{
    nn_model *m = &t->model;
    size_t len = 0, slen = 0;
    int rc = -1;
    char spath[1024], hdr[MAX_HEADER + 1];
    unsigned char *st = NULL, *f = read_all(path, &len, err, errlen);
    if (!f) return -1;
    uint64_t hl = 0;
    if (len < 8) BAD("--resume %s: truncated: %zu bytes, not a safetensors file", path, len);
    for (int i = 0; i < 8; i++) hl |= (uint64_t)f[i] << (8 * i);
    if (hl < 2 || hl > MAX_HEADER || 8 + hl > len) BAD("--resume %s: header length %llu at offset 0 is out of range (file has %zu bytes)", path, (unsigned long long)hl, len);
    memcpy(hdr, f + 8, hl);
    hdr[hl] = 0;
    const unsigned char *data = f + 8 + hl;
    size_t dlen = len - 8 - hl, want = 0;
    for (int i = 0; i < m->np; i++) want += m->p[i].numel * 4;
    if (dlen != want) BAD("--resume %s: %zu bytes of tensor data, this model needs %zu (truncated, or another model?)", path, dlen, want);
    const char *v = find_key(hdr, "crc32");
    unsigned crc_file = 0, epoch = 0;
    unsigned long long step = 0;
    if (!v || sscanf(v, "\"%8x\"", &crc_file) != 1) BAD("--resume %s: no ddprt crc32 in the metadata", path);
    if ((uint32_t)crc32(0, data, (unsigned)dlen) != crc_file) BAD("--resume %s: checksum mismatch: the file is corrupt", path);
    if (!(v = find_key(hdr, "epoch")) || sscanf(v, "\"%u\"", &epoch) != 1 ||
        !(v = find_key(hdr, "step")) || sscanf(v, "\"%llu\"", &step) != 1)
        BAD("--resume %s: no epoch/step in the metadata", path);
    for (int i = 0; i < m->np; i++) {
        char key[80];
        size_t a, b;
        snprintf(key, sizeof key, "%s\":{\"dtype\":\"F32\",\"shape", m->p[i].name);
        const char *p = strstr(hdr, key), *o = p ? strstr(p, "data_offsets\":[") : NULL;
        if (!o || sscanf(o, "data_offsets\":[%zu,%zu]", &a, &b) != 2 || b - a != m->p[i].numel * 4 || b > dlen)
            BAD("--resume %s: tensor %s is missing or has the wrong size", path, m->p[i].name);
        memcpy(m->params + m->p[i].offset, data + a, b - a);
    }
    snprintf(spath, sizeof spath, "%s.state", path);
    if (!(st = read_all(spath, &slen, err, errlen))) goto out;
    uint64_t fields[3];
    if (slen < 36 || memcmp(st, STATE_MAGIC, 8)) BAD("--resume %s: not a ddprt state file (bad magic at offset 0)", spath);
    memcpy(fields, st + 8, sizeof fields);
    if (fields[2] * 4 + 36 != slen) BAD("--resume %s: truncated: %zu bytes, expected %llu", spath, slen, (unsigned long long)(fields[2] * 4 + 36));
    uint32_t scrc;
    memcpy(&scrc, st + slen - 4, 4);
    if ((uint32_t)crc32(0, st, (unsigned)(slen - 4)) != scrc) BAD("--resume %s: checksum mismatch: the file is corrupt", spath);
    if (fields[0] != epoch || fields[1] != step)
        BAD("--resume: %s (epoch %u, step %llu) and %s (epoch %llu, step %llu) are from different saves", path, epoch,
            step, spath, (unsigned long long)fields[0], (unsigned long long)fields[1]);
    size_t n = 0;
    for (int i = 0; i < m->np; i++) {
        memcpy(t->momentum + m->p[i].offset, st + 32 + n * 4, m->p[i].numel * 4);
        n += m->p[i].numel;
    }
    t->step = step;
    t->start_epoch = (int)epoch + 1;
    rc = 0;
out:
    free(f);
    free(st);
    return rc;
}
