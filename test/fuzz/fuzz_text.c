/* libFuzzer target: the text TSV reader and tokenizer (nn/data/text.c) through the data
 * set interface, as the trainer opens it: the input is split at its first NUL byte into
 * train.tsv and test.tsv (no NUL: the same bytes twice) in a private directory in /dev/shm;
 * the last byte picks seq_len, min_freq, max_vocab and --bad-sample. Both splits are
 * opened and loaded (planning arena, then the real one); every token id must lie in
 * [0, vocab) and every label in [0, num_classes). Build and run: make fuzz. */
#include "nn/data/dataset.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void put(const char *name, const uint8_t *p, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) abort();
}

static void cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/train.tsv", dir), unlink(path);
    snprintf(path, sizeof path, "%s/test.tsv", dir), unlink(path);
    rmdir(dir);
}

static void load(const nn_data_cfg *cfg, const char *split)
{
    nn_dataset ds;
    rt_arena a;
    char err[2048];
    if (nn_data_open(&ds, cfg, split, err, sizeof err)) {
        if (!strstr(err, ".tsv")) abort(); /* every error names the file */
        return;
    }
    rt_arena_plan(&a, "fuzz");
    if (nn_data_load(&ds, &a, err, sizeof err)) abort(); /* planning cannot fail */
    if (rt_arena_init(&a, "fuzz", a.high)) abort();
    if (nn_data_load(&ds, &a, err, sizeof err) == 0) {
        if (ds.vocab < 2 || ds.num_classes < 1) abort();
        for (size_t i = 0; i < (size_t)ds.n * ds.w; i++)
            if (ds.toks[i] < 0 || ds.toks[i] >= ds.vocab) abort();
        for (int i = 0; i < ds.n; i++)
            if (ds.labels[i] < 0 || ds.labels[i] >= ds.num_classes) abort();
    } else if (!strstr(err, ".tsv")) {
        abort();
    }
    rt_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/ddprt-fuzz-text.XXXXXX");
        if (!mkdtemp(dir)) abort();
        atexit(cleanup);
        rt_log_set_level(RT_LOG_ERROR);
    }
    if (!n) return 0;
    uint8_t t = d[n - 1];
    n--;
    const uint8_t *z = memchr(d, 0, n);
    size_t ntrain = z ? (size_t)(z - d) : n;
    put("train.tsv", d, ntrain);
    if (z) put("test.tsv", z + 1, n - ntrain - 1);
    else put("test.tsv", d, n);
    nn_data_cfg cfg = {.dir = dir, .dataset = "text", .seq_len = 1 + (t & 7), .min_freq = 1 + (t >> 3 & 1),
                       .max_vocab = t >> 4 & 1 ? 5 : 0, .bad_skip = t >> 5 & 1, .seed = 1};
    load(&cfg, "train");
    load(&cfg, "test");
    return 0;
}
