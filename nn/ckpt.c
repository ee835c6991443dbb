/* Checkpoints on nn/stio (format: nn/ckpt.h). */
#include "nn/ckpt.h"
#include "nn/graph.h"
#include "nn/stio.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXM (NN_MAX_PARAMS + NN_MAX_BUFS + 2) /* + shared parameters' second names */
#define MAXS (NN_MAX_PARAMS * NN_CKPT_MAX_BLOCKS)
#define MAX_STEP (1ull << 53) /* steps beyond any run; exact in a double */

static const char *const opt_names[] = {"sgd", "adam", "adamw"};

static stio_tensor tensor(const char *name, int dtype, int ndim, const int *shape, void *data)
{
    stio_tensor t = {.name = name, .dtype = dtype, .ndim = ndim, .data = data};
    for (int d = 0; d < ndim; d++) t.shape[d] = shape[d];
    return t;
}

/* The model's state_dict: parameters, then buffers. */
static int model_tensors(const nn_graph *g, stio_tensor *t)
{
    int n = 0;
    for (int i = 0; i < g->np; i++)
        t[n++] = tensor(g->p[i].name, STIO_F32, g->p[i].ndim, g->p[i].shape, g->params + g->p[i].offset);
    for (int i = 0; i < g->nb; i++)
        t[n++] = tensor(g->b[i].name, g->b[i].dtype == RT_I64 ? STIO_I64 : STIO_F32, g->b[i].ndim, g->b[i].shape,
                        nn_buf_data((nn_graph *)g, i));
    return n;
}

/* Shared parameters under their second names (a tied classifier: "lm_head.weight" is
 * "transformer.wte.weight"), as PyTorch's state_dict lists them: written, and accepted
 * when a file holds them, but never read back (the first name carries the values). */
static int alias_tensors(const nn_graph *g, stio_tensor *t)
{
    for (int i = 0; i < g->nalias; i++) {
        const nn_param *p = &g->p[g->alias[i].param];
        t[i] = tensor(g->alias[i].name, STIO_F32, p->ndim, p->shape, g->params + p->offset);
    }
    return g->nalias;
}

/* The second names a file holds are checked, not trusted (issue 41: a flipped byte in
 * lm_head.weight loaded silently, and PyTorch would take that copy): their CRC, and
 * that their bytes are the first name's, as read into the model (loaded[0..nl)). */
static int check_aliases(stio_file *f, const char *path, const nn_graph *g, const stio_tensor *loaded, int nl,
                         char *err, size_t errlen)
{
    stio_tensor a[2];
    int na = alias_tensors(g, a), rc = 0;
    for (int i = 0; i < na && !rc; i++) {
        int at = -1, first = 0;
        stio_tensor t;
        for (int j = 0; j < stio_count(f) && at < 0; j++)
            if (stio_info(f, j, &t), !strcmp(t.name, a[i].name)) at = j;
        const char *orig = g->p[g->alias[i].param].name;
        for (int j = 0; j < nl && !first; j++) first = !strcmp(loaded[j].name, orig);
        if (at < 0) continue; /* a file without the second name (PyTorch's may omit it) */
        size_t bytes = stio_dtype_size(a[i].dtype);
        for (int d = 0; d < a[i].ndim; d++) bytes *= (size_t)a[i].shape[d];
        float *copy = malloc(bytes ? bytes : 1); /* load time, not the training loop */
        const float *want = a[i].data;
        stio_tensor r = a[i];
        r.data = copy;
        if (!copy) {
            snprintf(err, errlen, "%s: out of memory reading tensor %s", path, a[i].name);
            rc = -1;
        } else if (stio_read(f, &r, 1, err, errlen)) {
            rc = -1;
        } else if (first && memcmp(copy, want, bytes)) {
            size_t k = 0;
            while (!memcmp(copy + k, want + k, sizeof *copy)) k++;
            snprintf(err, errlen, "%s: offset %llu: tensor %s (element %zu) differs from %s, whose tied copy it is: "
                     "the file is corrupt", path, (unsigned long long)(stio_data_offset(f, at) + k * sizeof *copy),
                     a[i].name, k, orig);
            rc = -1;
        }
        free(copy);
    }
    return rc;
}

/* The optimizer blocks, named into names[] (storage that outlives the call). */
static int state_tensors(const nn_graph *g, const nn_ckpt_state *s, stio_tensor *t, char (*names)[NN_NAME + 32])
{
    int n = 0;
    for (int k = 0; k < s->nblocks && k < NN_CKPT_MAX_BLOCKS; k++)
        for (int i = 0; i < g->np; i++) {
            char *nm = names[k * g->np + i];
            snprintf(nm, NN_NAME + 32, "optim.%s.%s", s->block_names[k], g->p[i].name);
            t[n++] = tensor(nm, STIO_F32, g->p[i].ndim, g->p[i].shape, s->blocks[k] ? s->blocks[k] + g->p[i].offset : NULL);
        }
    return n;
}

static stio_tensor mt[MAXM], st[MAXS];
static char optnames[MAXS][NN_NAME + 32];

int nn_ckpt_check_names(const nn_graph *g, char *err, size_t errlen)
{
    int n = model_tensors(g, mt);
    n += alias_tensors(g, mt + n);
    for (int i = 0; i < n; i++) {
        /* "optim.exp_avg_sq." is the longest prefix the state gives a parameter's name. */
        if (strlen(mt[i].name) + 17 >= STIO_MAX_NAME) {
            snprintf(err, errlen, "tensor name %.60s... is too long for a checkpoint (at most %d characters)",
                     mt[i].name, STIO_MAX_NAME - 18);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(mt[i].name, mt[j].name)) {
                snprintf(err, errlen, "the model has two tensors named %s (give the layers distinct name=): a checkpoint "
                         "could not hold both", mt[i].name);
                return -1;
            }
    }
    return 0;
}

int nn_ckpt_save(const char *path, nn_graph *g, const nn_ckpt_state *s, int keep, char *err, size_t errlen)
{
    int nm = model_tensors(g, mt), ns = state_tensors(g, s, st, optnames);
    nm += alias_tensors(g, mt + nm);
    char epoch[24], step[24], ostep[24], esteps[24];
    snprintf(epoch, sizeof epoch, "%d", s->epoch);
    snprintf(step, sizeof step, "%" PRIu64, s->step);
    snprintf(ostep, sizeof ostep, "%" PRIu64, s->optimizer_step);
    snprintf(esteps, sizeof esteps, "%" PRIu64, s->epoch_steps);
    stio_meta m[6] = {{"format", "pt"}, {"producer", "ddprt"}, {"model", g->model}, {"epoch", epoch}, {"step", step},
                      {"epoch_steps", esteps}};
    stio_meta sm[10] = {{"format", "pt"}, {"producer", "ddprt"}, {"model", g->model}, {"epoch", epoch},
                        {"step", step}, {"optimizer", s->optimizer}, {"optimizer_step", ostep}, {"epoch_steps", esteps}};
    /* epoch_steps only inside an epoch: an epoch's checkpoint keeps its bytes */
    int in = s->epoch_steps != 0, nsm = 7 + in;
    char scale[32], good[24];
    if (s->loss_scale > 0) { /* --amp fp16's scaler: GradScaler's state_dict in a checkpoint */
        snprintf(scale, sizeof scale, "%.17g", s->loss_scale);
        snprintf(good, sizeof good, "%" PRIu64, s->scale_good);
        sm[nsm++] = (stio_meta){"amp_loss_scale", scale};
        sm[nsm++] = (stio_meta){"amp_growth_tracker", good};
    }
    stio_part parts[2] = {{"", mt, nm, m, 5 + in}, {NN_CKPT_STATE_SUFFIX, st, ns, sm, nsm}};
    return stio_save_parts(path, parts, 2, keep > 0 ? keep : 1, err, errlen);
}

/* An integer of f's metadata in [lo, hi]: never trusted before it is checked. */
static int meta_u64(const stio_file *f, const char *file, const char *key, uint64_t lo, uint64_t hi, uint64_t *out,
                    char *err, size_t errlen)
{
    const char *v = stio_meta_get(f, key);
    char *end;
    unsigned long long x = v && *v >= '0' && *v <= '9' && strlen(v) <= 20 ? strtoull(v, &end, 10) : 0;
    if (!v || !(*v >= '0' && *v <= '9') || strlen(v) > 20 || *end || x < lo || x > hi) {
        snprintf(err, errlen, "--resume %s: metadata \"%s\" is %s%.32s%s, expected an integer in %llu..%llu (a damaged "
                 "file, or not a ddprt checkpoint)", file, key, v ? "'" : "", v ? v : "missing", v ? "'" : "",
                 (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* Every tensor of the file is one of want (none unexpected); stio_read checks the rest. */
static int only_these(const stio_file *f, const char *file, const stio_tensor *want, int n, const char *hint, char *err,
                      size_t errlen)
{
    for (int i = 0; i < stio_count(f); i++) {
        stio_tensor t;
        stio_info(f, i, &t);
        int found = 0;
        for (int j = 0; j < n && !found; j++) found = !strcmp(t.name, want[j].name);
        if (!found) {
            snprintf(err, errlen, "%s: unexpected tensor %.128s in the file (not one of this model's%s)", file, t.name,
                     hint);
            return -1;
        }
    }
    return 0;
}

int nn_ckpt_load(const char *path, nn_graph *g, nn_ckpt_state *s, char *err, size_t errlen)
{
    stio_file *f = NULL, *sf = NULL;
    char e2[1024], state_path[1100];
    uint64_t epoch, step, step2, epoch2, ostep, esteps = 0;
    int rc = -1;
    snprintf(state_path, sizeof state_path, "%s%s", path, NN_CKPT_STATE_SUFFIX);
    if (stio_open(&f, path, e2, sizeof e2)) {
        snprintf(err, errlen, "--resume %s", e2);
        return -1;
    }
    const char *prod = stio_meta_get(f, "producer");
    if (!stio_meta_get(f, STIO_HEADER_CRC) || !prod || strcmp(prod, "ddprt")) {
        snprintf(err, errlen, "--resume %s: not a checkpoint of this ddprt version (no header checksum or producer); "
                 "to start from its weights: --init-from %s", path, path);
        goto out;
    }
    /* A checkpoint inside the first epoch (--save-every) has completed 0 epochs. */
    uint64_t lo = stio_meta_get(f, "epoch_steps") ? 0 : 1, msteps = 0;
    if (meta_u64(f, path, "epoch", lo, NN_CKPT_MAX_EPOCH, &epoch, err, errlen) ||
        meta_u64(f, path, "step", 0, MAX_STEP, &step, err, errlen) ||
        (!lo && meta_u64(f, path, "epoch_steps", 1, step, &msteps, err, errlen)))
        goto out;
    if (stio_open_part(&sf, path, NN_CKPT_STATE_SUFFIX, f, e2, sizeof e2)) {
        snprintf(err, errlen, "--resume %s (the optimizer state written with %s)", e2, path);
        goto out;
    }
    if (!stio_meta_get(sf, STIO_HEADER_CRC)) {
        snprintf(err, errlen, "--resume %s: no header checksum (a damaged file, or not written by ddprt)", state_path);
        goto out;
    }
    if (meta_u64(sf, state_path, "epoch", lo, NN_CKPT_MAX_EPOCH, &epoch2, err, errlen) ||
        meta_u64(sf, state_path, "step", 0, MAX_STEP, &step2, err, errlen) ||
        meta_u64(sf, state_path, "optimizer_step", 0, step, &ostep, err, errlen) ||
        (stio_meta_get(sf, "epoch_steps") && meta_u64(sf, state_path, "epoch_steps", 1, step, &esteps, err, errlen)))
        goto out;
    if (!!esteps != !lo || esteps != msteps) {
        snprintf(err, errlen, "--resume %s: %s and %s disagree on the steps taken inside the epoch (%llu, %llu; "
                 "a damaged file?)", path, path, state_path, (unsigned long long)msteps, (unsigned long long)esteps);
        goto out;
    }
    if (epoch2 != epoch || step2 != step) {
        snprintf(err, errlen, "--resume %s: epoch %llu step %llu, but %s says epoch %llu step %llu", path,
                 (unsigned long long)epoch, (unsigned long long)step, state_path, (unsigned long long)epoch2,
                 (unsigned long long)step2);
        goto out;
    }
    const char *opt = stio_meta_get(sf, "optimizer");
    int known = 0;
    for (int i = 0; i < 3 && opt; i++) known |= !strcmp(opt, opt_names[i]);
    if (!known) {
        snprintf(err, errlen, "--resume %s: metadata \"optimizer\" is '%.32s', expected sgd, adam or adamw (a damaged "
                 "file?)", state_path, opt ? opt : "missing");
        goto out;
    }
    if (strcmp(opt, s->optimizer)) {
        snprintf(err, errlen, "--resume %s holds %s state, but --optimizer is %s", path, opt, s->optimizer);
        goto out;
    }
    int nm = model_tensors(g, mt), ns = state_tensors(g, s, st, optnames), na = alias_tensors(g, mt + nm);
    /* The model's tensors first (a missing one or another shape says "another model"
     * best), then that the files hold nothing else. */
    if (stio_read(f, mt, nm, e2, sizeof e2) || stio_read(sf, st, ns, e2, sizeof e2) ||
        only_these(f, path, mt, nm + na, "", e2, sizeof e2) || only_these(sf, state_path, st, ns, "", e2, sizeof e2) ||
        check_aliases(f, path, g, mt, nm, e2, sizeof e2)) {
        snprintf(err, errlen, "--resume %s", e2);
        goto out;
    }
    const char *ls = stio_meta_get(sf, "amp_loss_scale");
    uint64_t good = 0;
    char *end = NULL;
    double scale = ls ? strtod(ls, &end) : 0;
    if (ls && (!*ls || *end || !(scale > 0) || scale > 3.4e38 ||
               meta_u64(sf, state_path, "amp_growth_tracker", 0, 2000, &good, err, errlen))) {
        if (!(scale > 0) || scale > 3.4e38 || *end || !*ls)
            snprintf(err, errlen, "--resume %s: metadata \"amp_loss_scale\" is '%.32s', expected a positive number up "
                     "to 3.4e38 (a damaged file?)", state_path, ls);
        goto out;
    }
    s->loss_scale = ls ? scale : 0;
    s->scale_good = good;
    s->epoch = (int)epoch;
    s->epoch_steps = esteps;
    s->step = step;
    s->optimizer_step = ostep;
    rc = 0;
out:
    stio_close(sf);
    stio_close(f);
    return rc;
}

int nn_ckpt_init_from(nn_graph *g, const char *path, int strict, int skipped[2], char *err, size_t errlen)
{
    stio_file *f;
    char e2[1024];
    int rc = -1;
    skipped[0] = skipped[1] = 0;
    if (stio_open(&f, path, e2, sizeof e2)) {
        snprintf(err, errlen, "--init-from %s", e2);
        return -1;
    }
    int n = model_tensors(g, mt), na = alias_tensors(g, mt + n);
    if (strict) {
        if (!stio_read(f, mt, n, e2, sizeof e2) &&
            !only_these(f, path, mt, n + na, "; --init-non-strict loads the tensors that match", e2, sizeof e2) &&
            !check_aliases(f, path, g, mt, n, e2, sizeof e2))
            rc = 0;
    } else {
        /* load_state_dict(strict=False): what matches by name; the rest is counted. */
        int k = 0;
        for (int i = 0; i < n; i++) {
            int found = 0;
            for (int j = 0; j < stio_count(f) && !found; j++) {
                stio_tensor t;
                stio_info(f, j, &t);
                found = !strcmp(t.name, mt[i].name);
            }
            if (found) mt[k++] = mt[i];
            else skipped[0]++;
        }
        skipped[1] = stio_count(f) - k;
        for (int i = 0; i < na; i++) { /* a second name present is not "unused" */
            stio_tensor t;
            for (int j = 0; j < stio_count(f); j++)
                if (stio_info(f, j, &t), !strcmp(t.name, mt[n + i].name)) skipped[1]--;
        }
        rc = stio_read(f, mt, k, e2, sizeof e2) || check_aliases(f, path, g, mt, k, e2, sizeof e2) ? -1 : 0;
    }
    if (rc) snprintf(err, errlen, "--init-from %s", e2);
    stio_close(f);
    return rc;
}
