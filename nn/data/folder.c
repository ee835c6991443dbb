/* torchvision's ImageFolder: DIR/train/CLASS/NAME.{jpg,jpeg,png} and DIR/val (or
 * DIR/test)/CLASS/..., classes sorted by name; the train split's classes define the
 * ids and the evaluation split must have exactly the same ones. */
#include "nn/data/dataset.h"
#include "nn/data/image.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Per worker: the file, the decoded crop band, the resampler's buffers. */
#define FILE_CAP (16u << 20)
#define PIX_CAP (48u << 20)
#define TF_CAP (8u << 20)

static int is_image(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int is_dir(const char *parent, const char *name)
{
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", parent, name);
    return name[0] != '.' && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Visits the class folders (fn(ctx, name)); -1 with a message when dir cannot be read. */
static int each_class(const char *dir, void (*fn)(void *, const char *), void *ctx, char *err, size_t errlen)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        snprintf(err, errlen, "%s: cannot read: %s", dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(dp)))
        if (is_dir(dir, e->d_name)) fn(ctx, e->d_name);
    closedir(dp);
    return 0;
}

typedef struct scan {
    const char *dir;
    int nclasses, nfiles, empty;
    size_t pool, cbytes;
    char first_class[256], first_file[256], empty_name[256];
} scan;

static void count_class(void *ctx, const char *name)
{
    scan *s = ctx;
    char p[1200], best[256] = "";
    int k = 0;
    snprintf(p, sizeof p, "%s/%s", s->dir, name);
    DIR *dp = opendir(p);
    struct dirent *e;
    while (dp && (e = readdir(dp)))
        if (e->d_name[0] != '.' && is_image(e->d_name)) {
            k++;
            s->pool += strlen(name) + strlen(e->d_name) + 2;
            if (!best[0] || strcmp(e->d_name, best) < 0) snprintf(best, sizeof best, "%s", e->d_name);
        }
    if (dp) closedir(dp);
    if (!k && (!s->empty || strcmp(name, s->empty_name) < 0)) snprintf(s->empty_name, sizeof s->empty_name, "%s", name);
    s->empty += !k;
    s->nclasses++;
    s->nfiles += k;
    s->cbytes += strlen(name) + 1;
    if (k && (!s->first_class[0] || strcmp(name, s->first_class) < 0)) {
        snprintf(s->first_class, sizeof s->first_class, "%s", name);
        snprintf(s->first_file, sizeof s->first_file, "%s", best);
    }
}

static int scan_split(const char *dir, scan *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->dir = dir;
    if (each_class(dir, count_class, s, err, errlen)) return -1;
    if (!s->nclasses) {
        snprintf(err, errlen, "%s: no class folders (expected %s/CLASS/*.jpg|*.png)", dir, dir);
        return -1;
    }
    if (s->empty) {
        snprintf(err, errlen, "%s/%s: empty class folder (no .jpg, .jpeg or .png files)%s", dir, s->empty_name,
                 s->empty > 1 ? " (and others)" : "");
        return -1;
    }
    return 0;
}

static long read_file(const char *path, unsigned char *buf, size_t cap, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t n = fread(buf, 1, cap, f);
    int more = n == cap && fgetc(f) != EOF;
    fclose(f);
    if (more) {
        snprintf(err, errlen, "%s: larger than %u MiB, the per-file limit", path, (unsigned)(cap >> 20));
        return -1;
    }
    return (long)n;
}

/* The channels of the image at path (1 or 3), from its header; -1 with the problem. */
static int probe_channels(const char *path, char *err, size_t errlen)
{
    unsigned char head[1 << 16];
    long n = read_file(path, head, sizeof head, err, errlen);
    if (n < 0 && strstr(err, "larger")) n = sizeof head;
    if (n < 0) return -1;
    int w, h, c;
    char e2[256];
    if (nn_img_info(head, (size_t)n, &w, &h, &c, e2, sizeof e2)) {
        snprintf(err, errlen, "%s: %s", path, e2);
        return -1;
    }
    return c;
}

/* The channels of the first readable image of the split (class folders in directory
 * order; at most PROBE_MAX files tried); -1 with the first problem when none is. */
#define PROBE_MAX 256
static int probe_any(const char *split, char *err, size_t errlen)
{
    char first_err[1024] = "", e2[1024], p[1200];
    int tried = 0, c = -1;
    DIR *dp = opendir(split);
    struct dirent *e;
    while (c < 0 && tried < PROBE_MAX && dp && (e = readdir(dp))) {
        if (!is_dir(split, e->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", split, e->d_name);
        DIR *cp = opendir(p);
        struct dirent *f;
        while (c < 0 && tried < PROBE_MAX && cp && (f = readdir(cp))) {
            if (f->d_name[0] == '.' || !is_image(f->d_name)) continue;
            char fp[1500];
            snprintf(fp, sizeof fp, "%s/%s", p, f->d_name);
            tried++;
            c = probe_channels(fp, e2, sizeof e2);
            if (c < 0 && !first_err[0]) snprintf(first_err, sizeof first_err, "%s", e2);
        }
        if (cp) closedir(cp);
    }
    if (dp) closedir(dp);
    if (c < 0) snprintf(err, errlen, "%s: no readable image among the first %d tried: %s", split, tried, first_err);
    return c;
}

int nn_folder_open(nn_dataset *d, const char *dir, char *err, size_t errlen)
{
    char train[600], p[1400];
    scan st, s;
    snprintf(train, sizeof train, "%s/train", dir);
    if (d->split_train) snprintf(d->path[0], sizeof d->path[0], "%s", train);
    else {
        snprintf(d->path[0], sizeof d->path[0], "%s/val", dir);
        if (!is_dir(dir, "val")) snprintf(d->path[0], sizeof d->path[0], "%s/test", dir);
        if (!is_dir(dir, "val") && !is_dir(dir, "test")) {
            snprintf(err, errlen, "%s: no val/ or test/ folder beside train/ for evaluation", dir);
            return -1;
        }
    }
    if (scan_split(train, &st, err, errlen)) return -1;
    if (!d->split_train && scan_split(d->path[0], &s, err, errlen)) return -1;
    if (d->split_train) s = st;
    d->n = s.nfiles;
    d->num_classes = st.nclasses;
    d->meta_bytes = s.pool > st.cbytes ? s.pool : st.cbytes; /* the eval split's names too */
    d->classes_bytes = st.cbytes;
    /* The channel count (1 for grayscale data, else 3, as convert("RGB")) and the
     * decoder support come from the first training image; under --bad-sample skip a bad
     * one is passed over (the loader skips it too). */
    snprintf(p, sizeof p, "%s/%s/%s", train, st.first_class, st.first_file);
    int c = probe_channels(p, err, errlen);
    if (c < 0 && d->bad_skip) c = probe_any(train, err, errlen);
    if (c < 0) return -1;
    d->src_c = c;
    d->scratch_bytes = FILE_CAP + PIX_CAP + TF_CAP;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct collect { char **names; int n, cap; char *pool; size_t used, size; } collect;

static void add_name(void *ctx, const char *name)
{
    collect *c = ctx;
    size_t len = strlen(name) + 1;
    if (c->n < c->cap && c->used + len <= c->size) {
        memcpy(c->pool + c->used, name, len);
        c->names[c->n] = c->pool + c->used;
        c->used += len;
    }
    c->n++;
}

int nn_folder_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen)
{
    int K = d->num_classes;
    char train[600];
    d->pool = rt_arena_alloc(a, d->meta_bytes, RT_MEM_DATA, "image folder paths");
    d->off = rt_arena_alloc(a, (size_t)d->n * sizeof(int64_t), RT_MEM_DATA, "image folder offsets");
    d->labels = rt_arena_alloc(a, (size_t)d->n * sizeof(int32_t), RT_MEM_DATA, "image folder labels");
    d->classes = rt_arena_alloc(a, d->classes_bytes, RT_MEM_DATA, "class names");
    char **cls = rt_arena_alloc(a, (size_t)K * sizeof(char *), RT_MEM_DATA, "class list");
    char **files = rt_arena_alloc(a, (size_t)(d->n + 1) * sizeof(char *), RT_MEM_DATA, "file list");
    if (a->planning) return 0;
    snprintf(train, sizeof train, "%s/train", d->dir);
    collect c = {cls, 0, K, d->classes, 0, d->classes_bytes};
    if (each_class(train, add_name, &c, err, errlen)) return -1;
    if (c.n != K) goto changed;
    qsort(cls, (size_t)K, sizeof *cls, cmp_str);
    /* Re-pack the class names in sorted order (ids = positions) for saving. */
    {
        char *tmp = d->pool;
        size_t o = 0;
        for (int k = 0; k < K; k++) {
            size_t len = strlen(cls[k]) + 1;
            memcpy(tmp + o, cls[k], len);
            o += len;
        }
        memcpy(d->classes, tmp, o);
        o = 0;
        for (int k = 0; k < K; k++) cls[k] = d->classes + o, o += strlen(cls[k]) + 1;
    }
    if (!d->split_train) { /* the same classes, by name, in the evaluation split */
        collect v = {files, 0, d->n + 1, d->pool, 0, d->meta_bytes};
        if (each_class(d->path[0], add_name, &v, err, errlen)) return -1;
        for (int i = 0; i < v.n && i <= d->n; i++)
            if (!bsearch(&files[i], cls, (size_t)K, sizeof *cls, cmp_str)) {
                snprintf(err, errlen, "%s/%s: class not in the training split %s/train (ids must match)",
                         d->path[0], files[i], d->dir);
                return -1;
            }
        if (v.n != K) {
            for (int k = 0; k < K; k++)
                if (!is_dir(d->path[0], cls[k])) {
                    snprintf(err, errlen, "%s: class '%s' of the training split is missing (ids must match)",
                             d->path[0], cls[k]);
                    return -1;
                }
            goto changed;
        }
    }
    size_t used = 0;
    int k0 = 0;
    for (int k = 0; k < K; k++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", d->path[0], cls[k]);
        DIR *dp = opendir(p);
        if (!dp) {
            snprintf(err, errlen, "%s: cannot read: %s", p, strerror(errno));
            return -1;
        }
        struct dirent *e;
        int start = k0;
        size_t cl = strlen(cls[k]);
        while ((e = readdir(dp)))
            if (e->d_name[0] != '.' && is_image(e->d_name)) {
                size_t len = cl + strlen(e->d_name) + 2;
                if (k0 >= d->n || used + len > d->meta_bytes) { closedir(dp); goto changed; }
                snprintf(d->pool + used, len, "%s/%s", cls[k], e->d_name);
                files[k0++] = d->pool + used;
                used += len;
            }
        closedir(dp);
        qsort(files + start, (size_t)(k0 - start), sizeof *files, cmp_str);
        for (int i = start; i < k0; i++) d->labels[i] = k, d->off[i] = files[i] - d->pool;
    }
    if (k0 != d->n) goto changed;
    return 0;
changed:
    snprintf(err, errlen, "%s: the folder changed while it was being read; run again", d->path[0]);
    return -1;
}

typedef struct plan_ctx { int kind, out; uint64_t key; } plan_ctx;

static void plan_cb(void *ctx, int W, int H, float crop[4], int *flip)
{
    plan_ctx *p = ctx;
    nn_tf_plan(p->kind, p->key, W, H, p->out, crop, flip);
}

int nn_folder_sample(const nn_dataset *d, int idx, int epoch, int train, float *x, nn_data_scratch *s,
                     char *err, size_t errlen)
{
    char path[1200], e2[512];
    snprintf(path, sizeof path, "%s/%s", d->path[0], d->pool + d->off[idx]);
    long n = read_file(path, s->buf, FILE_CAP, err, errlen);
    if (n < 0) return -1;
    plan_ctx pc = {train ? (d->aug == NN_AUG_IMAGENET ? NN_TF_RRC : d->aug == NN_AUG_CIFAR ? NN_TF_PADCROP : NN_TF_EVAL)
                         : (d->aug == NN_AUG_IMAGENET ? NN_TF_EVAL_IMAGENET : NN_TF_EVAL),
                   d->h, nn_tf_key(d->cfg.seed, epoch, idx)};
    nn_img img;
    if (nn_img_decode(s->buf, (size_t)n, d->c, plan_cb, &pc, d->w, d->h, s->buf + FILE_CAP, PIX_CAP, &img, e2,
                      sizeof e2)) {
        snprintf(err, errlen, "%s: %s", path, e2);
        return -1;
    }
    if (nn_tf_resample(img.px, img.w, img.h, img.c, 1, img.c, (ptrdiff_t)img.w * img.c, img.crop, img.flip, d->h,
                       d->w, d->mean, d->std, x, s->buf + FILE_CAP + PIX_CAP, TF_CAP)) {
        snprintf(err, errlen, "%s: %dx%d image: the crop needs more resampling memory than the %u MiB buffer", path,
                 img.src_w, img.src_h, TF_CAP >> 20);
        return -1;
    }
    return 0;
}
