/* Token shards (llm.c's format, uint16 and uint32), their windows as a data set,
 * corrupt shards (one error naming the file and byte offset), GPT-2 BPE from a small
 * encoder.json + vocab.bpe written here, and ddprt-data tokenize. */
#include "nn/data/bpe.h"
#include "nn/data/dataset.h"
#include "nn/data/tokens.h"
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_raw(const char *dir, const char *name, const int32_t *h, const void *body, size_t bytes)
{
    unsigned char *buf = malloc(1024 + bytes);
    memcpy(buf, h, 1024);
    memcpy(buf + 1024, body, bytes);
    t_write_file(dir, name, buf, 1024 + bytes, 0);
    free(buf);
}

PTEST(tokens_shards_windows_uint16_uint32)
{
    for (int wide = 0; wide < 2; wide++) {
        const char *dir = t_tmpdir("tok");
        int vocab = wide ? 70000 : 300;
        int32_t a[10], b[7], v[6];
        for (int i = 0; i < 10; i++) a[i] = (i * 37 + 5) % vocab + (wide ? 65536 : 0) * (i == 3);
        for (int i = 0; i < 7; i++) b[i] = (i * 11 + 1) % vocab;
        for (int i = 0; i < 6; i++) v[i] = i;
        char p[700], err[1024];
        snprintf(p, sizeof p, "%s/x_train_000001.bin", dir);
        CHECK(nn_tokens_write(p, a, 10, vocab, err, sizeof err) == 0);
        snprintf(p, sizeof p, "%s/x_train_000002.bin", dir);
        CHECK(nn_tokens_write(p, b, 7, vocab, err, sizeof err) == 0);
        snprintf(p, sizeof p, "%s/x_val.bin", dir);
        CHECK(nn_tokens_write(p, v, 6, vocab, err, sizeof err) == 0);
        nn_tok_info info;
        CHECK(nn_tokens_probe(p, &info, err, sizeof err) == 0);
        CHECK_EQ(info.tbytes, wide ? 4 : 2);
        CHECK_EQ(info.ntok, 6);
        CHECK_EQ(info.vocab, vocab);
        nn_data_cfg cfg = {.dir = dir, .seq_len = 4, .seed = 1};
        nn_dataset d, t;
        rt_arena a1, a2;
        CHECKF(t_open_load(&d, &a1, &cfg, "train", err, sizeof err) == 0, "%s", err);
        CHECKF(t_open_load(&t, &a2, &cfg, "test", err, sizeof err) == 0, "%s", err);
        CHECK(!strcmp(d.format, "tokens"));
        CHECK(d.tokens && d.lm);
        CHECK_EQ(d.w, 5);
        CHECK_EQ(d.vocab, vocab);
        CHECK_EQ(d.n, 3); /* (10-1)/4 + (7-1)/4: windows never cross shards */
        CHECK_EQ(t.n, 1);
        CHECK_EQ(nn_data_sample_bytes(&d), 5 * sizeof(int32_t));
        int32_t x[5], y;
        const int32_t *want[3] = {a, a + 4, b};
        for (int s = 0; s < 3; s++) {
            CHECK(nn_data_sample(&d, s, 0, 1, x, &y, NULL, err, sizeof err) == 0);
            CHECKF(memcmp(x, want[s], sizeof x) == 0, "window %d", s);
        }
        CHECK(nn_data_sample(&t, 0, 0, 0, x, &y, NULL, err, sizeof err) == 0);
        CHECK(memcmp(x, v, sizeof x) == 0);
        rt_arena_free(&a1);
        rt_arena_free(&a2);
        t_tmp_cleanup();
    }
}

PTEST(tokens_corrupt_shards_name_file_and_offset)
{
    const char *dir = t_tmpdir("tokbad");
    int32_t h[256] = {NN_TOK_MAGIC16, 1, 10, 300};
    uint16_t body[10] = {1, 2, 3, 4, 5, 6, 299, 8, 9, 10};
    char err[1024];
    nn_data_cfg cfg = {.dir = dir, .dataset = "tokens", .seq_len = 4};
    nn_dataset d;
    rt_arena a;
    /* bad magic */
    h[0] = 12345;
    write_raw(dir, "c_train.bin", h, body, sizeof body);
    CHECK(nn_data_open(&d, &cfg, "train", err, sizeof err) == -1);
    CHECKF(strstr(err, "c_train.bin: offset 0: magic 12345") && !strchr(err, '\n'), "%s", err);
    /* wrong version */
    h[0] = NN_TOK_MAGIC16;
    h[1] = 2;
    write_raw(dir, "c_train.bin", h, body, sizeof body);
    CHECK(nn_data_open(&d, &cfg, "train", err, sizeof err) == -1);
    CHECKF(strstr(err, "c_train.bin: offset 4: version 2"), "%s", err);
    /* truncated: the header promises 10 tokens, 9 follow */
    h[1] = 1;
    write_raw(dir, "c_train.bin", h, body, sizeof body - 2);
    CHECK(nn_data_open(&d, &cfg, "train", err, sizeof err) == -1);
    CHECKF(strstr(err, "c_train.bin: offset 8: the header says 10 tokens"), "%s", err);
    /* shorter than the header */
    t_write_file(dir, "c_train.bin", h, 600, 0);
    CHECK(nn_data_open(&d, &cfg, "train", err, sizeof err) == -1);
    CHECKF(strstr(err, "c_train.bin: offset 600: the file ends inside"), "%s", err);
    /* a token outside the vocabulary: found when its window is read */
    body[6] = 300;
    write_raw(dir, "c_train.bin", h, body, sizeof body);
    write_raw(dir, "c_val.bin", h, body, sizeof body);
    CHECKF(t_open_load(&d, &a, &cfg, "train", err, sizeof err) == 0, "%s", err);
    int32_t x[5], y;
    CHECK(nn_data_sample(&d, 0, 0, 1, x, &y, NULL, err, sizeof err) == 0);
    CHECK(nn_data_sample(&d, 1, 0, 1, x, &y, NULL, err, sizeof err) == -1);
    CHECKF(strstr(err, "c_train.bin: offset 1036: token 300 outside the vocabulary of 300"), "%s", err);
    rt_arena_free(&a);
    /* no val shards */
    nn_data_cfg c2 = cfg;
    char other[700];
    snprintf(other, sizeof other, "%s/c_val.bin", dir);
    remove(other);
    CHECK(nn_data_open(&d, &c2, "test", err, sizeof err) == -1);
    CHECKF(strstr(err, "no *val*.bin token shards"), "%s", err);
}

/* ---------------------------------------------------------------- GPT-2 BPE */
static int printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff); }
static unsigned byte_char(int b)
{
    if (printable(b)) return (unsigned)b;
    int n = 0;
    for (int k = 0; k < b; k++) n += !printable(k);
    return 256u + (unsigned)n;
}

/* 256 byte tokens (ids 0..255 in byte order, written as \u escapes), then the
 * merges' results, then <|endoftext|>. */
enum { M_GT = 256, M_HE, M_GTHE, M_CA, M_CAT, M_EOT };
static void write_bpe(const char *dir)
{
    char *j = malloc(1 << 16);
    size_t o = (size_t)sprintf(j, "{");
    for (int b = 0; b < 256; b++) o += (size_t)sprintf(j + o, "%s\"\\u%04x\": %d", b ? ", " : "", byte_char(b), b);
    /* G-dot (U+0120) is the space's stand-in: written as UTF-8 here */
    o += (size_t)sprintf(j + o, ", \"\xc4\xa0t\": %d, \"he\": %d, \"\xc4\xa0the\": %d, \"ca\": %d, \"cat\": %d, "
                               "\"<|endoftext|>\": %d}\n", M_GT, M_HE, M_GTHE, M_CA, M_CAT, M_EOT);
    t_write_file(dir, "encoder.json", j, o, 0);
    const char *m = "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\nc a\nca t\n";
    t_write_file(dir, "vocab.bpe", m, strlen(m), 0);
    free(j);
}

static int enc(nn_bpe *b, const char *s, int32_t *want, int nw)
{
    int32_t *out = NULL;
    size_t len = 0, cap = 0;
    int ok = nn_bpe_encode(b, s, strlen(s), &out, &len, &cap) == 0 && len == (size_t)nw &&
             !memcmp(out, want, sizeof(int32_t) * (size_t)nw);
    if (!ok) {
        fprintf(stderr, "encode(\"%s\") =", s);
        for (size_t i = 0; i < len; i++) fprintf(stderr, " %d", out[i]);
        fprintf(stderr, "\n");
    }
    free(out);
    return ok;
}

PTEST(bpe_merges_pretokens_and_decode)
{
    const char *dir = t_tmpdir("bpe");
    write_bpe(dir);
    char err[1024];
    nn_bpe *b = nn_bpe_load(dir, err, sizeof err);
    CHECKF(b != NULL, "%s", err);
    if (!b) return;
    CHECK_EQ(nn_bpe_vocab(b), M_EOT + 1);
    CHECK_EQ(nn_bpe_eot(b), M_EOT);
    const int SP = ' ', NL = '\n';
    CHECK(enc(b, "the cat", (int32_t[]){'t', M_HE, SP, M_CAT}, 4));
    CHECK(enc(b, " the", (int32_t[]){M_GTHE}, 1));
    /* "\nthe": a newline is not the optional space, so "the" is its own word */
    CHECK(enc(b, "\nthe", (int32_t[]){NL, 't', M_HE}, 3));
    /* two spaces: the last joins the word (\s+(?!\S)) */
    CHECK(enc(b, "  the", (int32_t[]){SP, M_GTHE}, 2));
    /* contractions, digits, punctuation, a trailing run of spaces */
    CHECK(enc(b, "it's 12!! ", (int32_t[]){'i', 't', '\'', 's', SP, '1', '2', '!', '!', SP}, 10));
    CHECK(enc(b, "xthe", (int32_t[]){'x', 't', M_HE}, 3));
    /* merges stop at word boundaries: "ca t" is not "cat" */
    CHECK(enc(b, "ca t", (int32_t[]){M_CA, M_GT}, 2));
    /* UTF-8 letters are bytes of one word; bad UTF-8 stays bytes */
    CHECK(enc(b, "\xc3\xa9t\xff", (int32_t[]){0xc3, 0xa9, 't', 0xff}, 4));
    size_t len;
    const char *s = nn_bpe_decode(b, M_GTHE, &len);
    CHECK(len == 4 && !memcmp(s, " the", 4));
    s = nn_bpe_decode(b, NL, &len);
    CHECK(len == 1 && s[0] == '\n');
    s = nn_bpe_decode(b, M_EOT, &len);
    CHECK(len == 13 && !memcmp(s, "<|endoftext|>", 13));
    CHECK(nn_bpe_decode(b, M_EOT + 1, &len) == NULL);
    nn_bpe_free(b);
    /* a broken encoder.json names the file and the offset */
    t_write_file(dir, "encoder.json", "{\"a\": 0, \"b\" 1}", 16, 0);
    CHECK(nn_bpe_load(dir, err, sizeof err) == NULL);
    CHECKF(strstr(err, "encoder.json: offset 13: expected ':'"), "%s", err);
    /* a merge of unknown tokens names the line */
    write_bpe(dir);
    t_write_file(dir, "vocab.bpe", "#version: 0.2\nq z\n", 18, 0);
    CHECK(nn_bpe_load(dir, err, sizeof err) == NULL);
    CHECKF(strstr(err, "vocab.bpe: line 2"), "%s", err);
}

/* Runs `ddprt-data tokenize` (av) to exit 0 within secs and probes the shards it wrote,
 * DIR/NAME_train.bin into *it and, when iv is not NULL, DIR/NAME_val.bin into *iv. */
static void tokenize_ok(char *const av[], const char *tag, double secs, const char *dir, const char *name,
                        nn_tok_info *it, nn_tok_info *iv)
{
    t_proc pr;
    char p[800], err[1024];
    t_spawn(&pr, tag, av, NULL);
    CHECKF(t_wait(&pr, secs) == 0, "%s", t_slurp(pr.err));
    for (int v = 0; v < (iv ? 2 : 1); v++) {
        snprintf(p, sizeof p, "%s/%s_%s.bin", dir, name, v ? "val" : "train");
        CHECKF(nn_tokens_probe(p, v ? iv : it, err, sizeof err) == 0, "%s", err);
    }
}

PTEST(data_tokenize_bytes_and_bpe)
{
    const char *dir = t_tmpdir("tokz");
    char in[700], out[700], p[800];
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    const char *text = "the cat\n%\n the\n";
    t_write_file(dir, "in.txt", text, strlen(text), 0);
    /* bytes, a quarter for validation */
    char *av[] = {(char *)t_prog("ddprt-data"), "tokenize", in, "--to", out, "--name", "t", "--val-fraction", "0.25", NULL};
    nn_tok_info iv, it;
    tokenize_ok(av, "tok1", 60, out, "t", &it, &iv);
    CHECK_EQ(iv.ntok, 3); /* 15 bytes: 3 + 12 */
    CHECK_EQ(it.ntok, 12);
    CHECK_EQ(it.vocab, 256);
    /* GPT-2 BPE: documents at "%" lines, each after <|endoftext|>; the files copied */
    write_bpe(dir);
    char *av2[] = {(char *)t_prog("ddprt-data"), "tokenize", in, "--to", out, "--name", "b", "--bpe", (char *)dir,
                   "--doc-sep", "%", "--val-fraction", "0", NULL};
    tokenize_ok(av2, "tok2", 60, out, "b", &it, NULL);
    snprintf(p, sizeof p, "%s/b_train.bin", out);
    CHECK_EQ(it.vocab, M_EOT + 1);
    int32_t want[] = {M_EOT, 't', M_HE, ' ', M_CAT, '\n', M_EOT, M_GTHE, '\n'};
    CHECK_EQ(it.ntok, 9);
    const char *raw = t_slurp(p);
    uint16_t got[9];
    memcpy(got, raw + 1024, sizeof got);
    for (int i = 0; i < 9; i++) CHECKF(got[i] == want[i], "token %d: %d want %d", i, got[i], want[i]);
    snprintf(p, sizeof p, "%s/encoder.json", out);
    CHECK(t_slurp(p)[0] == '{');
    /* bad input: one line, exit non-zero */
    t_proc pr;
    char *av3[] = {(char *)t_prog("ddprt-data"), "tokenize", "/nonexistent/file", "--to", out, NULL};
    t_spawn(&pr, "tok3", av3, NULL);
    CHECK(t_wait(&pr, 60) != 0);
    CHECKF(strstr(t_slurp(pr.err), "/nonexistent/file: ") != NULL, "%s", t_slurp(pr.err));
}

/* The default corpus (Debian's fortunes, a "ci" package of deps/debian.txt). */
PTEST(data_tokenize_default_corpus)
{
    FILE *f = fopen("/usr/share/games/fortunes/fortunes", "r");
    if (!f) {
        t_note("skipped: /usr/share/games/fortunes missing (apt-get install fortunes)");
        return;
    }
    fclose(f);
    const char *dir = t_tmpdir("tokf");
    char *av[] = {(char *)t_prog("ddprt-data"), "tokenize", "--to", (char *)dir, NULL};
    nn_tok_info it, iv;
    tokenize_ok(av, "tokf", 120, dir, "fortunes", &it, &iv);
    CHECK(it.ntok > 1000000 && iv.ntok > 100000);
    CHECK_EQ(it.vocab, 256);
}

/* issue 41: malformed BPE files are refused with one line naming the file and the entry
 * (they were accepted: a duplicate id made merges yield another token, a sparse id a
 * 10-million-row vocabulary, a repeated merge line was kept at its first rank). */
PTEST(bpe_malformed_files_refused)
{
    const char *dir = t_tmpdir("bpebad");
    char err[1024], p[700];
    write_bpe(dir);
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    char *enc_ok = strdup(t_slurp(p));
    size_t n = strlen(enc_ok);
    char *e = malloc(n + 64);
    struct { const char *from, *to, *want; } c[] = {
        {"\"cat\": 260", "\"cat\": 259", "\"cat\": id 259 is already the id of"},  /* two tokens, one id */
        {"\"cat\": 260", "\"cat\": 9999999", "expected an id in 0 .. "},           /* far beyond any table */
        {"\"cat\": 260", "\"\": 260", "an empty token"},                          /* fuzz_bpe's first find */
        {"\"cat\": 260", "\"cat\": 700", "id 700, but the file has fewer entries"}, /* beyond this file's table */
        {"\"<|endoftext|>\": 261", "\"<|endoftext|>\": 300", "id 261 is missing"}, /* a gap (last: see below) */
    };
    for (int k = 0; k < (int)(sizeof c / sizeof c[0]); k++) {
        const char *at = strstr(enc_ok, c[k].from);
        CHECKF(at != NULL, "case %d: %s not in the test's encoder.json", k, c[k].from);
        if (!at) continue;
        size_t pre = (size_t)(at - enc_ok);
        int m = snprintf(e, n + 64, "%.*s%s%s", (int)pre, enc_ok, c[k].to, at + strlen(c[k].from));
        t_write_file(dir, "encoder.json", e, (size_t)m, 0);
        err[0] = 0;
        nn_bpe *b = nn_bpe_load(dir, err, sizeof err);
        CHECKF(b == NULL, "case %d: accepted (vocabulary %d)", k, b ? nn_bpe_vocab(b) : 0);
        nn_bpe_free(b);
        CHECKF(strstr(err, "encoder.json: offset ") && strstr(err, c[k].want), "case %d: %s", k, err);
        CHECKF(!strchr(err, '\n'), "case %d: one line: %s", k, err);
    }
    CHECKF(strstr(err, "ids up to 300 (the entry at offset "), "%s", err);
    /* a merge listed twice */
    write_bpe(dir);
    const char *m = "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\nh e\nc a\nca t\n";
    t_write_file(dir, "vocab.bpe", m, strlen(m), 0);
    CHECK(nn_bpe_load(dir, err, sizeof err) == NULL);
    CHECKF(strstr(err, "vocab.bpe: line 5 ") && strstr(err, "\"h e\" repeats line 3"), "%s", err);
    free(e);
    free(enc_ok);
    t_tmp_cleanup();
}

/* issue 41: a directory of more than 4096 shards is read whole (it stopped at 4096
 * without a word: 23 % of `tokenize --shard-tokens 40`'s data never trained). */
PTEST(tokens_more_than_4096_shards_all_read)
{
    const char *dir = t_tmpdir("tokmany");
    enum { NSH = 4100, PER = 40 };
    char *text = malloc(NSH * PER);
    for (int i = 0; i < NSH * PER; i++) text[i] = (char)('a' + (i * 7 + i / PER) % 26);
    t_write_file(dir, "in.txt", text, NSH * PER, 0);
    char in[700], out[700], p[800], err[1024];
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    char *av[] = {(char *)t_prog("ddprt-data"), "tokenize", in, "--to", out, "--name", "m", "--val-fraction", "0",
                  "--shard-tokens", "40", NULL};
    t_proc pr;
    t_spawn(&pr, "tokmany", av, NULL);
    CHECKF(t_wait(&pr, 120) == 0, "%s", t_slurp(pr.err));
    CHECK_EQ(nn_tokens_list(out, "train", NULL, 0), NSH);
    snprintf(p, sizeof p, "%s/m_train_%06d.bin", out, NSH);
    nn_tok_info it;
    CHECKF(nn_tokens_probe(p, &it, err, sizeof err) == 0, "%s", err);
    nn_data_cfg cfg = {.dir = out, .seq_len = 8, .seed = 1};
    nn_dataset d;
    rt_arena a;
    CHECKF(t_open_load(&d, &a, &cfg, "train", err, sizeof err) == 0, "%s", err);
    CHECK_EQ(d.nshards, NSH);
    CHECK_EQ(d.n, NSH * ((PER - 1) / 8)); /* 4 windows a shard: 16400, not 16384 */
    int32_t x[9], y;
    CHECK(nn_data_sample(&d, d.n - 1, 0, 1, x, &y, NULL, err, sizeof err) == 0);
    for (int i = 0; i < 9; i++) CHECKF(x[i] == (unsigned char)text[(NSH - 1) * PER + 24 + i], "last window, token %d", i);
    rt_arena_free(&a);
    free(text);
    t_tmp_cleanup();
}
