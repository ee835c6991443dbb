/* libFuzzer target: the token shard reader (nn/data/tokens.c) as the trainer opens it.
 * Byte 0 picks --seq-len (1-8) and whether the rest is one training shard or two (cut at
 * a point byte 0 also picks); the shards go to a private directory in /dev/shm with the
 * first as the validation split too. Open, load, then every window (up to 4096) is read:
 * a token outside the vocabulary is that window's error, every error names a shard, and
 * every id handed out lies in [0, vocab). With FUZZ_SEED_DIR set, well-formed uint16 and
 * uint32 shards are written there as seeds. Build and run: make fuzz. */
#include "nn/data/dataset.h"
#include "nn/data/tokens.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char dir[64], p1[128], p2[128], pv[128];

static void put(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f)) abort();
}

static void cleanup(void) { unlink(p1), unlink(p2), unlink(pv), rmdir(dir); }

/* A shard file's bytes with control byte c in front, as a seed. */
static void seed(const char *sdir, const char *name, uint8_t c, int vocab, int ntok)
{
    char tmp[200], out[300], err[512];
    int32_t tok[64];
    for (int i = 0; i < ntok; i++) tok[i] = (i * 7) % vocab;
    snprintf(tmp, sizeof tmp, "%s/x_train.bin", dir);
    if (nn_tokens_write(tmp, tok, (size_t)ntok, vocab, err, sizeof err)) abort();
    FILE *f = fopen(tmp, "rb");
    static uint8_t b[1 << 16];
    size_t n = f ? fread(b + 1, 1, sizeof b - 1, f) : 0;
    if (f) fclose(f);
    b[0] = c;
    snprintf(out, sizeof out, "%s/%s", sdir, name);
    put(out, b, n + 1);
    unlink(tmp);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/dev/shm/ddprt-fuzz-tok.XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(p1, sizeof p1, "%s/x_train_1.bin", dir);
    snprintf(p2, sizeof p2, "%s/x_train_2.bin", dir);
    snprintf(pv, sizeof pv, "%s/x_val.bin", dir);
    atexit(cleanup);
    rt_log_set_level(-1);
    if (getenv("FUZZ_SEED_DIR")) {
        seed(getenv("FUZZ_SEED_DIR"), "u16", 3, 256, 40);
        seed(getenv("FUZZ_SEED_DIR"), "u32", 0x84, 70000, 33);
    }
    return 0;
}

static void load(int train, int T)
{
    nn_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.split_train = train;
    ds.cfg.seq_len = T;
    char err[2048];
    rt_arena a;
    if (nn_tokens_open(&ds, dir, err, sizeof err)) {
        if (!strstr(err, dir)) abort(); /* every error names the directory or a shard in it */
        return;
    }
    if (ds.vocab < 1 || ds.n < 1 || ds.w != T + 1) abort();
    rt_arena_plan(&a, "fuzz");
    if (nn_tokens_load(&ds, &a, err, sizeof err)) abort(); /* planning cannot fail */
    if (rt_arena_init(&a, "fuzz", a.high)) abort();
    if (nn_tokens_load(&ds, &a, err, sizeof err) == 0) {
        int32_t x[16];
        for (int i = 0; i < ds.n && i < 4096; i++) {
            if (nn_tokens_sample(&ds, i, x, err, sizeof err)) {
                if (!strstr(err, dir) || !strstr(err, "outside the vocabulary")) abort();
                continue;
            }
            for (int k = 0; k <= T; k++)
                if (x[k] < 0 || x[k] >= ds.vocab) abort();
        }
        for (int s = 0; s < ds.nshards; s++)
            munmap((void *)ds.shards[s].map, NN_TOK_HEADER_BYTES + (size_t)ds.shards[s].ntok * (size_t)ds.shards[s].tbytes);
    } else if (!strstr(err, dir)) {
        abort();
    }
    rt_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!n) return 0;
    uint8_t c = d[0];
    d++, n--;
    int T = 1 + (c & 7);
    size_t cut = c & 8 ? n * (size_t)(c >> 4) / 16 : n;
    put(p1, d, cut);
    put(pv, d, cut);
    if (c & 8) put(p2, d + cut, n - cut);
    else unlink(p2);
    load(1, T);
    load(0, T);
    return 0;
}
