#include "test/t_data.h"
#include "nn/data/tokens.h"
#include "test/t.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

const char *t_tmpdir(const char *tag)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/ddprt-test-%s-XXXXXX", tag);
    if (!mkdtemp(path)) t_fail(__FILE__, __LINE__, "mkdtemp failed");
    return path;
}

void t_write_file(const char *dir, const char *name, const void *buf, size_t n, int gz)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        if (!f || (n && gzwrite(f, buf, (unsigned)n) != (int)n)) t_fail(__FILE__, __LINE__, "gzwrite %s", p);
        if (f) gzclose(f);
    } else {
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(buf, 1, n, f) != n) t_fail(__FILE__, __LINE__, "write %s", p);
        if (f) fclose(f);
    }
}

void t_patch_file(const char *path, const char *find, long skip, const char *with, int x)
{
    FILE *f = fopen(path, "r+b");
    char hdr[4096];
    size_t n = f ? fread(hdr, 1, sizeof hdr, f) : 0;
    char *at = memmem(hdr, n, find, strlen(find));
    if (!at) {
        t_fail(__FILE__, __LINE__, "%s: no '%s' in its first %zu bytes", path, find, n);
        if (f) fclose(f);
        return;
    }
    long off = (long)(at - hdr) + skip;
    fseek(f, off, SEEK_SET);
    if (with) fputs(with, f);
    else fputc(hdr[off] ^ x, f);
    fclose(f);
}

const char *t_write_text(const char *dir, const char *name, const char *text)
{
    static char p[4][700];
    static int next;
    char *path = p[next++ % 4];
    t_write_file(dir, name, text, strlen(text), 0);
    snprintf(path, sizeof p[0], "%s/%s", dir, name);
    return path;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

void t_write_idx_images(const char *dir, const char *name, int n, int rows, int cols, const uint8_t *px, int gz)
{
    size_t sz = 16 + (size_t)n * rows * cols;
    uint8_t *b = malloc(sz);
    put32(b, 0x803); put32(b + 4, n); put32(b + 8, rows); put32(b + 12, cols);
    memcpy(b + 16, px, sz - 16);
    t_write_file(dir, name, b, sz, gz);
    free(b);
}

void t_write_idx_labels(const char *dir, const char *name, int n, const uint8_t *labels, int gz)
{
    uint8_t *b = malloc(8 + (size_t)n);
    put32(b, 0x801); put32(b + 4, n);
    memcpy(b + 8, labels, n);
    t_write_file(dir, name, b, 8 + (size_t)n, gz);
    free(b);
}

static void synth_split(const char *dir, const char *split, int n, unsigned seed, int gz)
{
    uint8_t *px = malloc((size_t)n * 784), *lb = malloc(n);
    char name[64];
    srand(seed);
    for (int i = 0; i < n; i++) {
        int c = rand() % 10;
        lb[i] = (uint8_t)c;
        for (int j = 0; j < 784; j++) px[(size_t)i * 784 + j] = (uint8_t)(rand() % 40);
        /* A horizontal bar at row 4 + 2c: easy for a conv net to separate. */
        for (int x = 4; x < 24; x++) px[(size_t)i * 784 + (4 + 2 * c) * 28 + x] = 255;
    }
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", split, gz ? ".gz" : "");
    t_write_idx_images(dir, name, n, 28, 28, px, gz);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", split, gz ? ".gz" : "");
    t_write_idx_labels(dir, name, n, lb, gz);
    free(px);
    free(lb);
}

void t_write_synthetic_dataset(const char *dir, int n_train, int n_test, int gz)
{
    synth_split(dir, "train", n_train, 1, gz);
    synth_split(dir, "t10k", n_test, 2, gz);
}

void t_write_text_dataset(const char *dir)
{
    static char buf[1 << 16];
    static const char *const pos[] = {"great", "fine", "lovely", "superb"}, *const neg[] = {"awful", "bad", "poor", "dull"},
                             *const filler[] = {"the", "movie", "was", "a", "plot", "and", "actors", "quite"};
    for (int split = 0; split < 2; split++) {
        size_t n = 0;
        for (int i = 0; i < (split ? 64 : 256); i++) {
            int label = i % 2;
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\t", label ? "pos" : "neg");
            for (int w = 0; w < 7; w++)
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%s ",
                                      w == (i * 3 + split) % 7 ? (label ? pos : neg)[(i / 2) % 4] : filler[(i + w * 5) % 8]);
            buf[n - 1] = '\n';
        }
        t_write_file(dir, split ? "test.tsv" : "train.tsv", buf, n, 0);
    }
}

int t_same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

int t_same_checkpoint(const char *a, const char *b)
{
    char as[700], bs[700];
    snprintf(as, sizeof as, "%s.state", a);
    snprintf(bs, sizeof bs, "%s.state", b);
    return (access(as, F_OK) != 0 || t_same_file(as, bs)) && t_same_file(a, b);
}

int t_open_load(nn_dataset *d, rt_arena *a, const nn_data_cfg *cfg, const char *split, char *err, size_t n)
{
    if (nn_data_open(d, cfg, split, err, n)) return -1;
    rt_arena_plan(a, "t");
    if (nn_data_load(d, a, err, n)) return -1;
    rt_arena_init(a, "t", a->high);
    if (nn_data_load(d, a, err, n) == 0) return 0;
    rt_arena_free(a); /* the caller frees it only on success */
    return -1;
}

const char *t_st_header(const char *path)
{
    static char hdr[65536];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(hdr, 1, sizeof hdr - 1, f) : 0;
    if (f) fclose(f);
    hdr[n] = 0;
    if (n >= 8) memset(hdr, ' ', 8); /* the binary header length */
    return hdr;
}

const char *t_lm_data(const char *dir, int ntrain, int nval)
{
    static char d[700];
    char p[800], err[512];
    snprintf(d, sizeof d, "%s/data", dir);
    snprintf(p, sizeof p, "mkdir -p %s", d);
    CHECK(system(p) == 0);
    int n = ntrain * 16 + 1;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) t[i] = (i * 7 + i / 5) % 23;
    snprintf(p, sizeof p, "%s/lm_train.bin", d);
    CHECK(nn_tokens_write(p, t, (size_t)n, 64, err, sizeof err) == 0);
    snprintf(p, sizeof p, "%s/lm_val.bin", d);
    CHECK(nn_tokens_write(p, t, (size_t)nval, 64, err, sizeof err) == 0);
    free(t);
    return d;
}
