/* Token shard data sets (nn/data/tokens.h). Shards are mapped read-only, not copied:
 * a fineweb shard is 100M tokens, and the page cache already holds it. Headers are
 * checked when the set is opened; token values when a window is read (a value outside
 * the vocabulary is that sample's error, naming the file and byte offset). */
#include "nn/data/tokens.h"
#include "nn/data/dataset.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

int nn_tokens_probe(const char *path, nn_tok_info *info, char *err, size_t errlen)
{
    int32_t h[256];
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    ssize_t r = read(fd, h, sizeof h);
    close(fd);
    if (r < 12) {
        snprintf(err, errlen, "%s: offset %ld: the file ends inside the %d-byte header", path, r < 0 ? 0L : (long)r,
                 NN_TOK_HEADER_BYTES);
        return -1;
    }
    if (h[0] != NN_TOK_MAGIC16 && h[0] != NN_TOK_MAGIC32) {
        snprintf(err, errlen, "%s: offset 0: magic %d, expected %d (uint16 tokens) or %d (uint32): not an llm.c "
                 "token shard", path, h[0], NN_TOK_MAGIC16, NN_TOK_MAGIC32);
        return -1;
    }
    int want = h[0] == NN_TOK_MAGIC16 ? 1 : 7;
    if (h[1] != want) {
        snprintf(err, errlen, "%s: offset 4: version %d, expected %d for magic %d", path, h[1], want, h[0]);
        return -1;
    }
    if (r < NN_TOK_HEADER_BYTES) {
        snprintf(err, errlen, "%s: offset %ld: the file ends inside the %d-byte header", path, (long)r,
                 NN_TOK_HEADER_BYTES);
        return -1;
    }
    info->tbytes = h[0] == NN_TOK_MAGIC16 ? 2 : 4;
    info->ntok = h[2];
    info->vocab = h[3] > 0 ? h[3] : info->tbytes == 2 ? 50257 : 128256;
    int64_t body = (int64_t)st.st_size - NN_TOK_HEADER_BYTES;
    if (h[2] < 0 || body != (int64_t)h[2] * info->tbytes) {
        snprintf(err, errlen, "%s: offset 8: the header says %d tokens (%lld bytes) but %lld bytes follow it "
                 "(truncated or not this format)", path, h[2], (long long)h[2] * info->tbytes, (long long)body);
        return -1;
    }
    if (h[3] < 0 || (info->tbytes == 2 && info->vocab > 65536)) {
        snprintf(err, errlen, "%s: offset 12: vocabulary size %d does not fit %d-byte tokens", path, h[3], info->tbytes);
        return -1;
    }
    return 0;
}

int nn_tokens_write(const char *path, const int32_t *tok, size_t n, int vocab, char *err, size_t errlen)
{
    char tmp[700];
    int32_t h[256] = {0};
    int wide = vocab > 65536;
    if (n > INT32_MAX) {
        snprintf(err, errlen, "%s: %zu tokens: a shard holds at most %d", path, n, INT32_MAX);
        return -1;
    }
    h[0] = wide ? NN_TOK_MAGIC32 : NN_TOK_MAGIC16;
    h[1] = wide ? 7 : 1;
    h[2] = (int32_t)n;
    h[3] = vocab;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(h, sizeof h, 1, f) == 1;
    uint16_t b16[4096];
    uint32_t b32[4096];
    for (size_t i = 0; ok && i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < k; j++) {
            if (tok[i + j] < 0 || tok[i + j] >= vocab) {
                snprintf(err, errlen, "%s: token %zu is %d, outside the vocabulary of %d", path, i + j, tok[i + j],
                         vocab);
                fclose(f);
                unlink(tmp);
                return -1;
            }
            if (wide) b32[j] = (uint32_t)tok[i + j];
            else b16[j] = (uint16_t)tok[i + j];
        }
        ok = wide ? fwrite(b32, 4, k, f) == k : fwrite(b16, 2, k, f) == k;
    }
    if (f && fclose(f)) ok = 0;
    if (!ok || rename(tmp, path)) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

/* train: names with "train" in them; val: "val" (llm.c's NAME_train_000001.bin). No
 * fixed table: a cap dropped the shards beyond it silently (issue 41). -1 when out of
 * memory. */
int nn_tokens_list(const char *dir, const char *split, char (*out)[600], int max)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    char (*names)[256] = NULL;
    int n = 0, cap = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || l >= 256 || strcmp(e->d_name + l - 4, ".bin") || !strstr(e->d_name, split)) continue;
        if (n == cap) {
            void *q = n < INT32_MAX / 2 ? realloc(names, sizeof *names * (size_t)(cap = cap ? 2 * cap : 64)) : NULL;
            if (!q) {
                free(names);
                closedir(d);
                return -1;
            }
            names = q;
        }
        snprintf(names[n++], 256, "%s", e->d_name);
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof names[0], cmp_names);
    for (int i = 0; out && i < n && i < max; i++) snprintf(out[i], 600, "%.340s/%.255s", dir, names[i]);
    free(names);
    return n;
}

/* The paths of a split's shards (malloc'd; start-up only): NULL with err when there are
 * none or the listing fails. */
static char (*shard_paths(const char *dir, const char *split, int *ns, char *err, size_t errlen))[600]
{
    int n = nn_tokens_list(dir, split, NULL, 0);
    char (*p)[600] = n > 0 ? malloc(sizeof *p * (size_t)n) : NULL;
    int again = p ? nn_tokens_list(dir, split, p, n) : n;
    if (p && again == n) {
        *ns = n;
        return p;
    }
    free(p);
    if (n == 0) snprintf(err, errlen, "%s: no *%s*.bin token shards (make them with: ddprt-data tokenize)", dir, split);
    else if (n < 0 || !p || again < 0) snprintf(err, errlen, "%s: out of memory listing the token shards", dir);
    else snprintf(err, errlen, "%s: the shards changed while listing them (%d, then %d)", dir, n, again);
    return NULL;
}

/* A directory whose first *train*.bin starts with a shard magic (CIFAR-100's train.bin
 * does not). */
int nn_tokens_detect(const char *dir)
{
    char p[1][600];
    int32_t magic = 0;
    if (nn_tokens_list(dir, "train", p, 1) < 1) return 0;
    FILE *f = fopen(p[0], "rb");
    if (!f) return 0;
    size_t r = fread(&magic, 4, 1, f);
    fclose(f);
    return r == 1 && (magic == NN_TOK_MAGIC16 || magic == NN_TOK_MAGIC32);
}

static int seq_of(const nn_dataset *d) { return d->cfg.seq_len > 0 ? d->cfg.seq_len : 64; }

int nn_tokens_open(nn_dataset *d, const char *dir, char *err, size_t errlen)
{
    const char *split = d->split_train ? "train" : "val";
    int ns = 0, T = seq_of(d);
    char (*paths)[600] = shard_paths(dir, split, &ns, err, errlen);
    if (!paths) return -1;
    int64_t windows = 0, toks = 0;
    d->vocab = 0;
    for (int i = 0; i < ns; i++) {
        nn_tok_info info;
        if (nn_tokens_probe(paths[i], &info, err, errlen)) {
            free(paths);
            return -1;
        }
        /* Shards of two tokenizers in one set: the ids mean different tokens. */
        if (i && info.vocab != d->vocab) {
            snprintf(err, errlen, "%s: vocabulary %d, but %s has %d: shards of different tokenizers", paths[i],
                     info.vocab, paths[0], d->vocab);
            free(paths);
            return -1;
        }
        d->vocab = info.vocab;
        if (info.ntok > T) windows += (info.ntok - 1) / T;
        toks += info.ntok;
    }
    free(paths);
    if (windows == 0 || windows > INT32_MAX) {
        snprintf(err, errlen, "%s: the %s shards hold %lld tokens: %s", dir, split, (long long)toks,
                 windows ? "more windows than 2^31 (raise --seq-len)" : "not one window of --seq-len + 1 tokens");
        return -1;
    }
    snprintf(d->path[0], sizeof d->path[0], "%s", dir);
    d->nshards = ns;
    d->n = (int)windows;
    d->c = d->h = 1;
    d->w = T + 1;
    d->tokens = d->lm = 1;
    d->num_classes = d->vocab;
    return 0;
}

int nn_tokens_same_vocab(const nn_dataset *train, const nn_dataset *val, char *err, size_t errlen)
{
    if (!train->tokens || !train->nshards || !val->nshards || train->vocab == val->vocab) return 0;
    char a[1][600], b[1][600];
    if (nn_tokens_list(train->path[0], "train", a, 1) < 1) snprintf(a[0], sizeof a[0], "%.590s", train->path[0]);
    if (nn_tokens_list(val->path[0], "val", b, 1) < 1) snprintf(b[0], sizeof b[0], "%.590s", val->path[0]);
    snprintf(err, errlen, "%s: vocabulary %d, but the training shards (%s) have %d: the validation split comes from "
             "another tokenizer", b[0], val->vocab, a[0], train->vocab);
    return -1;
}

/* A shard's fingerprint folded into crc: whole up to 16 MiB; beyond, 16 pieces of 64 KiB
 * spread over it (a 100M-token shard is not read through at start). */
static uint64_t shard_crc(uint64_t crc, const void *map, size_t bytes)
{
    const unsigned char *p = map;
    enum { SMALL = 16 << 20, PIECE = 64 << 10, PIECES = 16 };
    if (bytes <= SMALL) return crc32_z((uLong)crc, p, bytes);
    for (size_t k = 0; k < PIECES; k++) crc = crc32_z((uLong)crc, p + k * ((bytes - PIECE) / (PIECES - 1)), PIECE);
    return crc32_z((uLong)crc, (const Bytef *)&bytes, sizeof bytes);
}

int nn_tokens_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen)
{
    nn_tok_shard *sh = rt_arena_alloc(a, sizeof *sh * (size_t)d->nshards, RT_MEM_DATA, "token shards");
    if (a->planning) return 0;
    int ns = 0, T = seq_of(d);
    char (*paths)[600] = shard_paths(d->path[0], d->split_train ? "train" : "val", &ns, err, errlen);
    if (!paths) return -1;
    if (ns != d->nshards) {
        snprintf(err, errlen, "%s: the shards changed while starting (%d, now %d)", d->path[0], d->nshards, ns);
        free(paths);
        return -1;
    }
    int64_t first = 0;
    for (int i = 0; i < ns; i++) {
        nn_tok_info info;
        if (nn_tokens_probe(paths[i], &info, err, errlen)) {
            free(paths);
            return -1;
        }
        int fd = open(paths[i], O_RDONLY);
        size_t bytes = NN_TOK_HEADER_BYTES + (size_t)info.ntok * (size_t)info.tbytes;
        void *m = fd < 0 ? MAP_FAILED : mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (fd >= 0) close(fd);
        if (m == MAP_FAILED) {
            snprintf(err, errlen, "%s: cannot map: %s", paths[i], strerror(errno));
            free(paths);
            return -1;
        }
        const char *base = strrchr(paths[i], '/');
        snprintf(sh[i].name, sizeof sh[i].name, "%.127s", base ? base + 1 : paths[i]);
        sh[i].map = m;
        sh[i].ntok = info.ntok;
        sh[i].tbytes = info.tbytes;
        sh[i].first = first;
        first += info.ntok > T ? (info.ntok - 1) / T : 0;
        d->data_hash = shard_crc(d->data_hash, m, bytes);
    }
    d->data_hash |= 1ull << 41;
    free(paths);
    d->shards = sh;
    return 0;
}

int nn_tokens_sample(const nn_dataset *d, int idx, int32_t *x, char *err, size_t errlen)
{
    int lo = 0, hi = d->nshards - 1, T = d->w - 1;
    while (lo < hi) { /* the last shard whose first window is <= idx */
        int mid = (lo + hi + 1) / 2;
        if (d->shards[mid].first <= idx) lo = mid;
        else hi = mid - 1;
    }
    const nn_tok_shard *s = &d->shards[lo];
    int64_t t0 = (idx - s->first) * (int64_t)T;
    const unsigned char *p = (const unsigned char *)s->map + NN_TOK_HEADER_BYTES + t0 * s->tbytes;
    for (int i = 0; i <= T; i++) {
        uint32_t v;
        if (s->tbytes == 2) {
            uint16_t u;
            memcpy(&u, p + 2 * i, 2);
            v = u;
        } else
            memcpy(&v, p + 4 * i, 4);
        if (v >= (uint32_t)d->vocab) {
            snprintf(err, errlen, "%s/%s: offset %lld: token %u outside the vocabulary of %d (a corrupt shard?)",
                     d->path[0], s->name, (long long)(NN_TOK_HEADER_BYTES + (t0 + i) * s->tbytes), v, d->vocab);
            return -1;
        }
        x[i] = (int32_t)v;
    }
    return 0;
}
