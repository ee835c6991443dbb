/* Checkpoints on nn/stio: one safetensors file with the parameters and buffers under
 * PyTorch's state_dict names, the optimizer state as "optim.<block>.<param>" tensors,
 * and the epoch, step and model in the metadata. */
#include "nn/ckpt.h"
#include "nn/graph.h"
#include "nn/stio.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXT (NN_MAX_PARAMS * (1 + NN_CKPT_MAX_BLOCKS) + NN_MAX_BUFS)

static stio_tensor tensor(const char *name, int dtype, int ndim, const int *shape, void *data)
{
    stio_tensor t = {.name = name, .dtype = dtype, .ndim = ndim, .data = data};
    for (int d = 0; d < ndim; d++) t.shape[d] = shape[d];
    return t;
}

/* The graph's tensors (and the optimizer blocks when s is given), in file order. The
 * optimizer names are written into names[] (storage that outlives the call). */
static int tensors(nn_graph *g, const nn_ckpt_state *s, stio_tensor *t, char (*names)[NN_NAME + 32])
{
    int n = 0;
    for (int i = 0; i < g->np; i++)
        t[n++] = tensor(g->p[i].name, STIO_F32, g->p[i].ndim, g->p[i].shape, g->params + g->p[i].offset);
    for (int i = 0; i < g->nb; i++)
        t[n++] = tensor(g->b[i].name, g->b[i].dtype == RT_I64 ? STIO_I64 : STIO_F32, g->b[i].ndim, g->b[i].shape,
                        nn_buf_data(g, i));
    for (int k = 0; s && k < s->nblocks; k++)
        for (int i = 0; i < g->np; i++) {
            char *nm = names[k * g->np + i];
            snprintf(nm, NN_NAME + 32, "optim.%s.%s", s->block_names[k], g->p[i].name);
            t[n++] = tensor(nm, STIO_F32, g->p[i].ndim, g->p[i].shape, s->blocks[k] + g->p[i].offset);
        }
    return n;
}

static stio_tensor tt[MAXT];
static char optnames[NN_MAX_PARAMS * NN_CKPT_MAX_BLOCKS][NN_NAME + 32];

int nn_ckpt_save(const char *path, nn_graph *g, const nn_ckpt_state *s, int keep, char *err, size_t errlen)
{
    int n = tensors(g, s, tt, optnames);
    char epoch[24], step[24], extra[8][24];
    snprintf(epoch, sizeof epoch, "%d", s->epoch);
    snprintf(step, sizeof step, "%" PRIu64, s->step);
    stio_meta m[12] = {{"format", "pt"}, {"producer", "ddprt"}, {"model", g->model}, {"epoch", epoch}, {"step", step}};
    int nm = 5;
    for (int i = 0; i < s->nscalars && i < 8; i++) {
        snprintf(extra[i], sizeof extra[i], "%" PRId64, s->scalars[i]);
        m[nm++] = (stio_meta){s->scalar_names[i], extra[i]};
    }
    return stio_save(path, tt, n, m, nm, keep > 0 ? keep : 1, err, errlen);
}

static int read_int(const stio_file *f, const char *key, const char *path, int64_t *out, char *err, size_t errlen)
{
    const char *v = stio_meta_get(f, key);
    char *end;
    if (v) {
        long long x = strtoll(v, &end, 10);
        if (*v && !*end) { *out = x; return 0; }
    }
    snprintf(err, errlen, "--resume %s: no valid \"%s\" in the metadata (not a ddprt checkpoint?)", path, key);
    return -1;
}

int nn_ckpt_load(const char *path, nn_graph *g, nn_ckpt_state *s, char *err, size_t errlen)
{
    stio_file *f;
    char e2[512];
    if (stio_open(&f, path, e2, sizeof e2)) {
        snprintf(err, errlen, "--resume %s", e2);
        return -1;
    }
    int n = tensors(g, s, tt, optnames), rc = -1;
    int64_t epoch = 0, step = 0;
    if (read_int(f, "epoch", path, &epoch, err, errlen) || read_int(f, "step", path, &step, err, errlen)) goto out;
    for (int i = 0; i < s->nscalars; i++)
        if (read_int(f, s->scalar_names[i], path, &s->scalars[i], err, errlen)) goto out;
    if (stio_read(f, tt, n, e2, sizeof e2)) {
        snprintf(err, errlen, "--resume %s", e2);
        goto out;
    }
    s->epoch = (int)epoch;
    s->step = (uint64_t)step;
    rc = 0;
out:
    stio_close(f);
    return rc;
}

int nn_ckpt_meta_int(const char *path, const char *key, int64_t *out, char *err, size_t errlen)
{
    stio_file *f;
    char e2[512];
    if (stio_open(&f, path, e2, sizeof e2)) {
        snprintf(err, errlen, "--resume %s", e2);
        return -1;
    }
    int rc = read_int(f, key, path, out, err, errlen);
    stio_close(f);
    return rc;
}

int nn_ckpt_init_from(nn_graph *g, const char *path, char *err, size_t errlen)
{
    stio_file *f;
    char e2[512];
    int rc = -1;
    if (stio_open(&f, path, e2, sizeof e2)) {
        snprintf(err, errlen, "--init-from %s", e2);
        return -1;
    }
    int n = tensors(g, NULL, tt, optnames);
    if (stio_read(f, tt, n, e2, sizeof e2)) snprintf(err, errlen, "--init-from %s", e2);
    else rc = 0;
    stio_close(f);
    return rc;
}
