/* libFuzzer target: GPT-2's BPE files (nn/data/bpe.c). The input is split at its first
 * NUL byte into encoder.json and vocab.bpe (no NUL: an empty vocab.bpe) in a private
 * directory in /dev/shm. A load that fails names a file; one that succeeds encodes a
 * fixed text and the input's own bytes, and every id must lie in [0, vocab) and decode.
 * With FUZZ_SEED_DIR set, a small well-formed pair is written there as a seed. Build and
 * run: make fuzz. */
#include "nn/data/bpe.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], pe[128], pm[128];

static void put(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f)) abort();
}

static void cleanup(void) { unlink(pe), unlink(pm), rmdir(dir); }

/* GPT-2's byte-to-character map: printable bytes stand for themselves. */
static int byte_char(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int k = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) k++;
    return 256 + k;
}

static void write_seed(const char *sdir)
{
    static char j[1 << 16];
    size_t o = (size_t)sprintf(j, "{");
    for (int b = 0; b < 256; b++) o += (size_t)sprintf(j + o, "%s\"\\u%04x\": %d", b ? ", " : "", byte_char(b), b);
    o += (size_t)sprintf(j + o, ", \"\xc4\xa0t\": 256, \"he\": 257, \"\xc4\xa0the\": 258, \"<|endoftext|>\": 259}\n");
    const char *m = "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\n";
    j[o++] = 0;
    memcpy(j + o, m, strlen(m));
    char p[300];
    snprintf(p, sizeof p, "%s/pair", sdir);
    put(p, (const uint8_t *)j, o + strlen(m));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/dev/shm/ddprt-fuzz-bpe.XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(pe, sizeof pe, "%s/encoder.json", dir);
    snprintf(pm, sizeof pm, "%s/vocab.bpe", dir);
    atexit(cleanup);
    rt_log_set_level(-1);
    if (getenv("FUZZ_SEED_DIR")) write_seed(getenv("FUZZ_SEED_DIR"));
    return 0;
}

static void check(const nn_bpe *b, const char *text, size_t n)
{
    int32_t *ids = NULL;
    size_t len = 0, cap = 0, dl;
    if (nn_bpe_encode(b, text, n, &ids, &len, &cap) == 0)
        for (size_t i = 0; i < len; i++)
            if (ids[i] < 0 || ids[i] >= nn_bpe_vocab(b) || !nn_bpe_decode(b, ids[i], &dl)) abort();
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    const uint8_t *z = memchr(d, 0, n);
    size_t ne = z ? (size_t)(z - d) : n;
    put(pe, d, ne);
    put(pm, z ? z + 1 : d, z ? n - ne - 1 : 0);
    char err[2048];
    nn_bpe *b = nn_bpe_load(dir, err, sizeof err);
    if (!b) {
        if (!strstr(err, dir)) abort(); /* every error names a file */
        return 0;
    }
    int eot = nn_bpe_eot(b);
    if (nn_bpe_vocab(b) < 1 || eot >= nn_bpe_vocab(b)) abort();
    static const char text[] = "the cat, the CAT!  \n\tcaf\xc3\xa9 <|endoftext|> 123 \xff\xfe end";
    check(b, text, sizeof text - 1);
    check(b, (const char *)d, n);
    nn_bpe_free(b);
    return 0;
}
