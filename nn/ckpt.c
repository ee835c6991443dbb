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

#define STATE_MAGIC "DDPRTST1"  /* epoch, step, nparams; SGD momentum */
#define STATE_MAGIC2 "DDPRTST2" /* + optimizer kind and its step count; 1 or 2 slots */
#define MAX_HEADER (1 << 20)

typedef struct part { const void *p; size_t n; } part;

/* Writes the parts to path atomically: tmp file, fsync, rename, fsync of the directory. */
static int write_atomic(const char *path, const part *parts, int np, char *err, size_t errlen)
{
    char tmp[1024], dir[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) goto fail;
    for (int i = 0; i < np; i++)
        for (size_t off = 0; off < parts[i].n;) {
            ssize_t w = write(fd, (const char *)parts[i].p + off, parts[i].n - off);
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

/* The graph's tensors in file order: parameters, then buffers. */
typedef struct entry { const char *name; const char *dtype; int ndim; const int *shape; void *data; size_t bytes; } entry;

static int entries(const nn_graph *g, entry *e)
{
    int n = 0;
    for (int i = 0; i < g->np; i++)
        e[n++] = (entry){g->p[i].name, "F32", g->p[i].ndim, g->p[i].shape, g->params + g->p[i].offset,
                         g->p[i].numel * sizeof(float)};
    for (int i = 0; i < g->nb; i++)
        e[n++] = (entry){g->b[i].name, g->b[i].dtype == RT_I64 ? "I64" : "F32", g->b[i].ndim, g->b[i].shape,
                         g->bufs + g->b[i].offset, g->b[i].numel * rt_dtype_size(g->b[i].dtype)};
    return n;
}

int nn_ckpt_save(nn_trainer *t, const char *path, int epoch, char *err, size_t errlen)
{
    const nn_graph *g = &t->g;
    static entry e[NN_MAX_PARAMS + NN_MAX_BUFS];
    static part parts[NN_MAX_PARAMS + NN_MAX_BUFS + 1];
    int ne = entries(g, e);
    uint32_t crc = (uint32_t)crc32(0, NULL, 0);
    for (int i = 0; i < ne; i++) crc = (uint32_t)crc32(crc, e[i].data, (unsigned)e[i].bytes);
    char *hdr = malloc(MAX_HEADER); /* between epochs, not in a step */
    if (!hdr) { snprintf(err, errlen, "--save %s: out of memory", path); return -1; }
    size_t k = 8, cap = MAX_HEADER;
    k += (size_t)snprintf(hdr + k, cap - k,
                          "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"ddprt\",\"model\":\"%s\",\"epoch\":\"%d\","
                          "\"step\":\"%llu\",\"crc32\":\"%08x\"}",
                          g->model, epoch, (unsigned long long)t->step, crc);
    size_t off = 0;
    for (int i = 0; i < ne && k < cap - 512; i++) {
        k += (size_t)snprintf(hdr + k, cap - k, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name, e[i].dtype);
        for (int d = 0; d < e[i].ndim; d++) k += (size_t)snprintf(hdr + k, cap - k, "%s%d", d ? "," : "", e[i].shape[d]);
        k += (size_t)snprintf(hdr + k, cap - k, "],\"data_offsets\":[%zu,%zu]}", off, off + e[i].bytes);
        off += e[i].bytes;
        parts[i + 1] = (part){e[i].data, e[i].bytes};
    }
    if (k >= cap - 512) { free(hdr); snprintf(err, errlen, "--save %s: header too large", path); return -1; }
    hdr[k++] = '}';
    /* The spec pads the header with spaces so the data starts 8-byte aligned. */
    while (k % 8) hdr[k++] = ' ';
    uint64_t hl = (uint64_t)(k - 8);
    for (int i = 0; i < 8; i++) hdr[i] = (char)(unsigned char)(hl >> (8 * i));
    parts[0] = (part){hdr, k};
    int rc = write_atomic(path, parts, ne + 1, err, errlen);
    free(hdr);
    if (rc) return -1;

    /* PATH.state: magic, epoch, step, count, optimizer kind, its step count, the
     * state slots (momentum, or Adam's exp_avg and exp_avg_sq), a CRC of all before. */
    unsigned char sh[48];
    uint64_t fields[5] = {(uint64_t)epoch, t->step, (uint64_t)g->nparams, (uint64_t)t->opt.c.kind, t->opt.t};
    memcpy(sh, STATE_MAGIC2, 8);
    memcpy(sh + 8, fields, sizeof fields);
    int ns = nn_optim_slots(&t->opt);
    uint32_t scrc = (uint32_t)crc32(crc32(0, sh, 48), (const unsigned char *)t->opt.m, (unsigned)(g->nparams * 4));
    if (ns > 1) scrc = (uint32_t)crc32(scrc, (const unsigned char *)t->opt.v, (unsigned)(g->nparams * 4));
    char spath[1024];
    snprintf(spath, sizeof spath, "%s.state", path);
    part sp[4] = {{sh, 48}, {t->opt.m, g->nparams * 4}, {t->opt.v, ns > 1 ? g->nparams * 4 : 0}, {&scrc, 4}};
    return write_atomic(spath, sp, 4, err, errlen);
}

static unsigned char *read_all(const char *flag, const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s %s: cannot open: %s", flag, path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = n > 0 && n < (1L << 34) ? malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        snprintf(err, errlen, "%s %s: cannot read (%ld bytes)", flag, path, n);
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Finds "key":"value" inside the metadata. */
static const char *find_key(const char *h, const char *key)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(h, pat);
    return p ? p + strlen(pat) : NULL;
}

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); goto out; } while (0)

/* Reads every tensor of g (parameters and buffers) from a safetensors file: names,
 * dtypes and shapes must match (PyTorch's load_state_dict(strict=True)). Returns the
 * header (caller frees the file) or NULL with err. */
static int load_tensors(nn_graph *g, const char *flag, const char *path, unsigned char *f, size_t len,
                        char **hdr_out, char *err, size_t errlen)
{
    static entry e[NN_MAX_PARAMS + NN_MAX_BUFS];
    uint64_t hl = 0;
    if (len < 8) { snprintf(err, errlen, "%s %s: truncated: %zu bytes, not a safetensors file", flag, path, len); return -1; }
    for (int i = 0; i < 8; i++) hl |= (uint64_t)f[i] << (8 * i);
    if (hl < 2 || hl > MAX_HEADER || 8 + hl > len) {
        snprintf(err, errlen, "%s %s: header length %llu at offset 0 is out of range (file has %zu bytes)", flag, path,
                 (unsigned long long)hl, len);
        return -1;
    }
    char *hdr = malloc(hl + 1);
    if (!hdr) { snprintf(err, errlen, "%s %s: out of memory", flag, path); return -1; }
    memcpy(hdr, f + 8, hl);
    hdr[hl] = 0;
    const unsigned char *data = f + 8 + hl;
    size_t dlen = len - 8 - hl;
    int ne = entries(g, e);
    for (int i = 0; i < ne; i++) {
        char key[NN_NAME + 8], dt[8] = "", shape[128] = "", want[128] = "";
        size_t a, b;
        snprintf(key, sizeof key, "\"%s\":{", e[i].name);
        const char *p = strstr(hdr, key);
        if (!p) { snprintf(err, errlen, "%s %s: tensor %s is missing", flag, path, e[i].name); goto bad; }
        p += strlen(key);
        const char *q = strstr(p, "\"dtype\":\""), *s = strstr(p, "\"shape\":["), *o = strstr(p, "\"data_offsets\":[");
        if (!q || !s || !o || sscanf(q, "\"dtype\":\"%7[A-Z0-9]\"", dt) != 1 || sscanf(s, "\"shape\":[%127[0-9,]]", shape) < 0 ||
            sscanf(o, "\"data_offsets\":[%zu,%zu]", &a, &b) != 2) {
            snprintf(err, errlen, "%s %s: tensor %s: unreadable header entry", flag, path, e[i].name);
            goto bad;
        }
        if (s[9] == ']') shape[0] = 0;
        for (int d = 0, k = 0; d < e[i].ndim; d++)
            k += snprintf(want + k, sizeof want - (size_t)k, "%s%d", d ? "," : "", e[i].shape[d]);
        if (strcmp(dt, e[i].dtype) || strcmp(shape, want)) {
            snprintf(err, errlen, "%s %s: tensor %s is %s [%s] in the file, the model has %s [%s]", flag, path,
                     e[i].name, dt, shape, e[i].dtype, want);
            goto bad;
        }
        if (b < a || b - a != e[i].bytes || b > dlen) {
            snprintf(err, errlen, "%s %s: tensor %s: data offsets [%zu,%zu] do not fit (%zu bytes of data)", flag, path,
                     e[i].name, a, b, dlen);
            goto bad;
        }
        memcpy(e[i].data, data + a, b - a);
    }
    *hdr_out = hdr;
    return 0;
bad:
    free(hdr);
    return -1;
}

int nn_ckpt_init_from(nn_graph *g, const char *path, char *err, size_t errlen)
{
    size_t len = 0;
    char *hdr = NULL;
    unsigned char *f = read_all("--init-from", path, &len, err, errlen);
    if (!f) return -1;
    int rc = load_tensors(g, "--init-from", path, f, len, &hdr, err, errlen);
    free(hdr);
    free(f);
    return rc;
}

int nn_ckpt_load(nn_trainer *t, const char *path, char *err, size_t errlen)
{
    nn_graph *g = &t->g;
    size_t len = 0, slen = 0;
    int rc = -1;
    char spath[1024], *hdr = NULL;
    unsigned char *st = NULL, *f = read_all("--resume", path, &len, err, errlen);
    if (!f) return -1;
    if (load_tensors(g, "--resume", path, f, len, &hdr, err, errlen)) goto out;
    size_t hl = strlen(hdr);
    const unsigned char *data = f + 8 + hl;
    size_t dlen = len - 8 - hl, want = 0;
    for (int i = 0; i < g->np; i++) want += g->p[i].numel * 4;
    for (int i = 0; i < g->nb; i++) want += g->b[i].numel * rt_dtype_size(g->b[i].dtype);
    if (dlen != want) BAD("--resume %s: %zu bytes of tensor data, this model needs %zu (truncated, or another model?)", path, dlen, want);
    const char *v = find_key(hdr, "crc32");
    unsigned crc_file = 0, epoch = 0;
    unsigned long long step = 0;
    if (!v || sscanf(v, "\"%8x\"", &crc_file) != 1) BAD("--resume %s: no ddprt crc32 in the metadata", path);
    if ((uint32_t)crc32(0, data, (unsigned)dlen) != crc_file) BAD("--resume %s: checksum mismatch: the file is corrupt", path);
    if (!(v = find_key(hdr, "epoch")) || sscanf(v, "\"%u\"", &epoch) != 1 ||
        !(v = find_key(hdr, "step")) || sscanf(v, "\"%llu\"", &step) != 1)
        BAD("--resume %s: no epoch/step in the metadata", path);
    snprintf(spath, sizeof spath, "%s.state", path);
    if (!(st = read_all("--resume", spath, &slen, err, errlen))) goto out;
    uint64_t fields[5] = {0, 0, 0, NN_OPT_SGD, 0};
    int v2 = slen >= 52 && !memcmp(st, STATE_MAGIC2, 8);
    if (!v2 && (slen < 36 || memcmp(st, STATE_MAGIC, 8))) BAD("--resume %s: not a ddprt state file (bad magic at offset 0)", spath);
    memcpy(fields, st + 8, v2 ? 40 : 24);
    if (!v2) fields[4] = fields[1]; /* version 1: SGD, one step per trainer step */
    size_t hlen = v2 ? 48 : 32, ns = fields[3] == NN_OPT_SGD ? 1 : 2;
    if (fields[3] > NN_OPT_ADAMW || (int)fields[3] != t->opt.c.kind)
        BAD("--resume %s: holds %s state, but --optimizer is %s", spath,
            fields[3] <= NN_OPT_ADAMW ? nn_optim_name((int)fields[3]) : "unknown", nn_optim_name(t->opt.c.kind));
    if (fields[2] != g->nparams) BAD("--resume %s: holds state for %llu parameters, the model has %zu", spath, (unsigned long long)fields[2], g->nparams);
    if (fields[2] * 4 * ns + hlen + 4 != slen) BAD("--resume %s: truncated: %zu bytes, expected %llu", spath, slen, (unsigned long long)(fields[2] * 4 * ns + hlen + 4));
    uint32_t scrc;
    memcpy(&scrc, st + slen - 4, 4);
    if ((uint32_t)crc32(0, st, (unsigned)(slen - 4)) != scrc) BAD("--resume %s: checksum mismatch: the file is corrupt", spath);
    if (fields[0] != epoch || fields[1] != step)
        BAD("--resume: %s (epoch %u, step %llu) and %s (epoch %llu, step %llu) are from different saves", path, epoch,
            step, spath, (unsigned long long)fields[0], (unsigned long long)fields[1]);
    memcpy(t->opt.m, st + hlen, g->nparams * 4);
    if (ns > 1) memcpy(t->opt.v, st + hlen + g->nparams * 4, g->nparams * 4);
    t->opt.t = fields[4];
    t->step = step;
    t->start_epoch = (int)epoch + 1;
    rc = 0;
out:
    free(hdr);
    free(f);
    free(st);
    return rc;
}
