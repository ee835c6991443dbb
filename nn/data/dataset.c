/* The format-independent part: locating and detecting the data, per-format defaults,
 * one transformed sample (what loader workers call), names saved beside checkpoints. */
#include "nn/data/dataset.h"
#include "rt/hash.h"
#include "rt/env.h"
#include "nn/data/image.h"
#include "nn/data/tokens.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEBIAN_DIR "/usr/share/datasets/fashion-mnist"
#define HOWTO "; get one with: sudo apt-get install dataset-fashion-mnist (IDX), the CIFAR-10 binary version " \
              "(cifar-10-binary.tar.gz), an image folder DIR/train/CLASS/*.jpg + DIR/val/..., DIR/train.tsv + " \
              "DIR/test.tsv, or build/ddprt-data convert (Fashion-MNIST to an image folder or CIFAR-style binary)"

static const char *const fmt_names[] = {"idx", "cifar10", "cifar100", "imagefolder", "text", "synthetic", "tokens"};


static int exists(const char *dir, const char *name, int want_dir)
{
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

/* The format of dir (-1: none); CIFAR archives may be unpacked one level down. */
static int detect(char *dir, size_t dirlen)
{
    static const char *const sub[] = {"", "cifar-10-batches-bin", "cifar-100-binary"};
    if (exists(dir, "train-images-idx3-ubyte", 0) || exists(dir, "train-images-idx3-ubyte.gz", 0)) return NN_FMT_IDX;
    if (nn_tokens_detect(dir)) return NN_FMT_TOKENS;
    for (int s = 0; s < 3; s++) {
        char p[600];
        snprintf(p, sizeof p, "%s%s%s", dir, *sub[s] ? "/" : "", sub[s]);
        int f = exists(p, "data_batch_1.bin", 0) ? NN_FMT_CIFAR10 : exists(p, "train.bin", 0) ? NN_FMT_CIFAR100 : -1;
        if (f >= 0) return snprintf(dir, dirlen, "%s", p) < (int)dirlen ? f : -1;
    }
    if (exists(dir, "train.tsv", 0)) return NN_FMT_TEXT;
    if (exists(dir, "train", 1)) return NN_FMT_FOLDER;
    /* *train*.bin without a shard's magic: token shards all the same, so that opening
     * them names what is wrong with the file */
    if (nn_tokens_list(dir, "train", NULL, 0) > 0) return NN_FMT_TOKENS;
    return -1;
}

int nn_data_locate(const char *dir, char *out, size_t outlen, char *err, size_t errlen)
{
    const char *cands[3] = {rt_env_str(RT_ENV_DATA), "./data", DEBIAN_DIR};
    char tmp[512];
    if (dir && *dir) {
        snprintf(tmp, sizeof tmp, "%s", dir);
        if (!strcmp(dir, "synthetic") || detect(tmp, sizeof tmp) >= 0) {
            snprintf(out, outlen, "%s", dir);
            return 0;
        }
        snprintf(err, errlen, "--data %s: no data set there (no IDX, CIFAR, train/ folder, train.tsv or *train*.bin "
                 "token shards)" HOWTO, dir);
        return -1;
    }
    /* $DDPRT_DATA names the data: a wrong one is an error, not a reason to train on
     * something else. */
    if (cands[0]) {
        snprintf(tmp, sizeof tmp, "%s", cands[0]);
        if (detect(tmp, sizeof tmp) >= 0) {
            snprintf(out, outlen, "%s", cands[0]);
            return 0;
        }
        snprintf(err, errlen, "DDPRT_DATA=%s: no data set there (no IDX, CIFAR, train/ folder or train.tsv)" HOWTO,
                 cands[0]);
        return -1;
    }
    for (int i = 1; i < 3; i++) {
        snprintf(tmp, sizeof tmp, "%s", cands[i]);
        if (detect(tmp, sizeof tmp) >= 0) {
            snprintf(out, outlen, "%s", cands[i]);
            return 0;
        }
    }
    snprintf(err, errlen, "no data set found in ./data or " DEBIAN_DIR " (pass --data DIR or set DDPRT_DATA)" HOWTO);
    return -1;
}

int nn_data_open(nn_dataset *d, const nn_data_cfg *cfg, const char *split, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->cfg = *cfg;
    d->split_train = !strcmp(split, "train");
    d->bad_skip = cfg->bad_skip;
    int f = -1;
    if (cfg->dataset) {
        for (int i = 0; i < 7; i++)
            if (!strcmp(cfg->dataset, fmt_names[i])) f = i;
        if (f < 0) {
            snprintf(err, errlen, "--dataset %s: unknown (idx, cifar10, cifar100, imagefolder, text, synthetic, tokens)",
                     cfg->dataset);
            return -1;
        }
    }
    if (f == NN_FMT_SYNTHETIC || (cfg->dir && !strcmp(cfg->dir, "synthetic"))) {
        f = NN_FMT_SYNTHETIC;
        snprintf(d->dir, sizeof d->dir, "synthetic");
    } else {
        if (nn_data_locate(cfg->dir, d->dir, sizeof d->dir, err, errlen)) return -1;
        int found = detect(d->dir, sizeof d->dir);
        if (f < 0) f = found;
        else if (found >= 0 && found != f && !(f == NN_FMT_CIFAR100 && found == NN_FMT_CIFAR10)) {
            snprintf(err, errlen, "--dataset %s, but %s holds %s data", cfg->dataset, d->dir, fmt_names[found]);
            return -1;
        }
    }
    d->fmt = f;
    d->format = fmt_names[f];
    int rc = 0;
    switch (f) {
    case NN_FMT_IDX: rc = nn_idx_open(d, d->dir, d->split_train ? "train" : "t10k", err, errlen); break;
    case NN_FMT_CIFAR10:
    case NN_FMT_CIFAR100: rc = nn_cifar_open(d, d->dir, err, errlen); break;
    case NN_FMT_FOLDER: rc = nn_folder_open(d, d->dir, err, errlen); break;
    case NN_FMT_TEXT: rc = nn_text_open(d, d->dir, err, errlen); break;
    case NN_FMT_TOKENS: rc = nn_tokens_open(d, d->dir, err, errlen); break;
    default:
        d->n = cfg->syn_n > 0 ? (d->split_train ? cfg->syn_n : cfg->syn_n / 6 + 1) : (d->split_train ? 60000 : 10000);
        d->num_classes = cfg->syn_classes > 0 ? cfg->syn_classes : 10;
        d->src_c = cfg->syn_c > 0 ? cfg->syn_c : 1;
        d->src_h = cfg->syn_h > 0 ? cfg->syn_h : 28;
        d->src_w = cfg->syn_w > 0 ? cfg->syn_w : 28;
        if (cfg->syn_vocab > 0) {
            d->tokens = 1, d->vocab = cfg->syn_vocab, d->lm = cfg->syn_lm;
            d->c = d->h = 1, d->w = cfg->syn_w > 0 ? cfg->syn_w : 64;
            if (d->lm) d->num_classes = d->vocab;
        }
    }
    if (rc) return -1;
    if (d->tokens) return 0;
    /* Sample shape and transforms. */
    static const char *const augs[] = {"none", "cifar", "imagenet"};
    int def = f == NN_FMT_FOLDER ? NN_AUG_IMAGENET : (f == NN_FMT_CIFAR10 || f == NN_FMT_CIFAR100) ? NN_AUG_CIFAR : NN_AUG_NONE;
    d->aug = def;
    if (cfg->augment) {
        d->aug = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(cfg->augment, augs[i])) d->aug = i;
        if (d->aug < 0) {
            snprintf(err, errlen, "--augment %s: expected none, cifar or imagenet", cfg->augment);
            return -1;
        }
    }
    int size = cfg->image_size > 0 ? cfg->image_size : f == NN_FMT_FOLDER ? 224 : 0;
    d->c = d->src_c;
    d->h = size ? size : d->src_h;
    d->w = size ? size : d->src_w;
    if (f == NN_FMT_SYNTHETIC) d->aug = NN_AUG_NONE, d->h = d->src_h, d->w = d->src_w;
    static const float im_m[3] = {0.485f, 0.456f, 0.406f}, im_s[3] = {0.229f, 0.224f, 0.225f};
    static const float c10_m[3] = {0.4914f, 0.4822f, 0.4465f}, c10_s[3] = {0.2470f, 0.2435f, 0.2616f};
    static const float c100_m[3] = {0.5071f, 0.4865f, 0.4409f}, c100_s[3] = {0.2673f, 0.2564f, 0.2762f};
    const float *m = f == NN_FMT_CIFAR10 ? c10_m : f == NN_FMT_CIFAR100 ? c100_m : im_m;
    const float *s = f == NN_FMT_CIFAR10 ? c10_s : f == NN_FMT_CIFAR100 ? c100_s : im_s;
    for (int c = 0; c < 3; c++) {
        /* One channel: Fashion-MNIST's IDX constants, so a PNG folder made from it
         * feeds the model exactly what the IDX path does. */
        d->mean[c] = d->c == 1 ? NN_MNIST_MEAN : m[c];
        d->std[c] = d->c == 1 ? NN_MNIST_STD : s[c];
    }
    if (f == NN_FMT_IDX || f == NN_FMT_CIFAR10 || f == NN_FMT_CIFAR100)
        d->scratch_bytes = (size_t)d->w * 2 * (sizeof(float) * 64 + 16) + (size_t)(d->src_h + 2 * 64) * d->w * d->c * 4 + 4096;
    return 0;
}

int nn_data_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen)
{
    switch (d->fmt) {
    case NN_FMT_IDX: return nn_idx_load(d, a, err, errlen);
    case NN_FMT_CIFAR10:
    case NN_FMT_CIFAR100: return nn_cifar_load(d, a, err, errlen);
    case NN_FMT_FOLDER: {
        int rc = nn_folder_load(d, a, err, errlen);
        if (!rc && !a->planning) d->meta_hash = rt_fnv1a(RT_FNV1A_INIT, d->classes, d->classes_bytes);
        return rc;
    }
    case NN_FMT_TEXT: return nn_text_load(d, a, err, errlen);
    case NN_FMT_TOKENS: return nn_tokens_load(d, a, err, errlen);
    default: return 0;
    }
}

size_t nn_data_sample_bytes(const nn_dataset *d)
{
    return (size_t)d->c * d->h * d->w * (d->tokens ? sizeof(int32_t) : sizeof(float));
}

static uint64_t mixkey(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void synthetic(const nn_dataset *d, int idx, void *x, int32_t *y)
{
    uint64_t s = nn_tf_key(d->cfg.seed, 0, idx);
    *y = (int32_t)(mixkey(&s) % (uint64_t)d->num_classes);
    size_t n = (size_t)d->c * d->h * d->w;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = mixkey(&s);
        if (d->tokens) ((int32_t *)x)[i] = (int32_t)(r % (uint64_t)d->vocab);
        else ((float *)x)[i] = (float)((double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
    }
}

int nn_data_sample(const nn_dataset *d, int idx, int epoch, int train, void *x, int32_t *y, nn_data_scratch *s,
                   char *err, size_t errlen)
{
    if (d->fmt == NN_FMT_SYNTHETIC) {
        synthetic(d, idx, x, y);
        return 0;
    }
    if (d->fmt == NN_FMT_TOKENS) { /* the targets are in the window itself */
        *y = 0;
        return nn_tokens_sample(d, idx, x, err, errlen);
    }
    *y = d->labels[idx];
    if (d->fmt == NN_FMT_TEXT) {
        memcpy(x, d->toks + (size_t)idx * d->w, (size_t)d->w * sizeof(int32_t));
        return 0;
    }
    if (d->fmt == NN_FMT_FOLDER) return nn_folder_sample(d, idx, epoch, train, x, s, err, errlen);
    /* Pixel arrays (CHW bytes). The plain case is the old loader's single FMA. */
    size_t plane = (size_t)d->src_h * d->src_w;
    const uint8_t *src = d->pixels + (size_t)idx * plane * d->src_c;
    int kind = !train ? NN_TF_EVAL : d->aug == NN_AUG_CIFAR ? NN_TF_PADCROP : d->aug == NN_AUG_IMAGENET ? NN_TF_RRC : NN_TF_EVAL;
    if (kind == NN_TF_EVAL && d->h == d->src_h && d->w == d->src_w) {
        float *o = x;
        for (int c = 0; c < d->c; c++) {
            float scale = 1.0f / (255.0f * d->std[c]), shift = d->mean[c] / d->std[c];
            for (size_t j = 0; j < plane; j++) o[c * plane + j] = src[c * plane + j] * scale - shift;
        }
        return 0;
    }
    float crop[4];
    int flip;
    nn_tf_plan(kind, nn_tf_key(d->cfg.seed, epoch, idx), d->src_w, d->src_h, d->h, crop, &flip);
    if (nn_tf_resample(src, d->src_w, d->src_h, d->c, (ptrdiff_t)plane, 1, d->src_w, crop, flip, d->h, d->w, d->mean,
                       d->std, x, s->buf, s->bytes)) {
        snprintf(err, errlen, "%s: sample %d: resampling buffer too small", d->path[0], idx);
        return -1;
    }
    return 0;
}

void nn_data_sample_name(const nn_dataset *d, int idx, char *out, size_t outlen)
{
    if (d->fmt == NN_FMT_FOLDER) snprintf(out, outlen, "%s/%s", d->path[0], d->pool + d->off[idx]);
    else if (d->fmt == NN_FMT_TOKENS) snprintf(out, outlen, "%s window %d", d->dir, idx);
    else snprintf(out, outlen, "%s sample %d", d->dir, idx);
}

const char *nn_data_class_name(const nn_dataset *d, int label)
{
    if (!d->classes || !d->classes_bytes || label < 0 || label >= d->num_classes) return NULL;
    const char *p = d->classes;
    for (int i = 0; i < label; i++) p += strlen(p) + 1;
    return p;
}

static int write_list(const char *path, const char *pool, int n, const int64_t *off, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    const char *p = pool;
    for (int i = 0; i < n; i++) {
        if (off) p = pool + off[i];
        fprintf(f, "%s\n", p);
        p += strlen(p) + 1;
    }
    if (fclose(f)) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int nn_data_save_meta(const nn_dataset *d, const char *ckpt_path, char *err, size_t errlen)
{
    char p[1100];
    if (d->classes && d->classes_bytes) {
        snprintf(p, sizeof p, "%s.classes", ckpt_path);
        if (write_list(p, d->classes, d->num_classes, NULL, err, errlen)) return -1;
    }
    if (d->fmt == NN_FMT_TEXT && d->vocab_off) {
        snprintf(p, sizeof p, "%s.vocab", ckpt_path);
        if (write_list(p, d->pool, d->vocab, d->vocab_off, err, errlen)) return -1;
    }
    return 0;
}
