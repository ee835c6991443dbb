/* Issue 41 point 8: options and inputs that were ignored or accepted silently, each now
 * one line naming what is wrong (or, for --invariant 0, documented), and ddprt-trace's
 * reader: every field checked, a file cut by a crash used up to its last whole line. */
#include "nn/data/tokens.h"
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include "test/t_util.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A command's status with stderr in out. */
static int run(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t n, const char *fmt, ...)
{
    char body[3000], cmd[3100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "{ %s; } 2>&1", body);
    return t_sh(cmd, out, n);
}

TEST(refuse_train_flags_recompute_and_invariant)
{
    char out[8192];
    int st = run(out, sizeof out, "%s --recompute-macs -7", t_prog("ddprt-train"));
    CHECKF(st == 2 && strstr(out, "--recompute-macs: expected an integer in -2..2147483647, got '-7'"), "%d: %s", st, out);
    /* --invariant 0 is off, as without the flag, and says so in --help */
    st = run(out, sizeof out, "%s --help", t_prog("ddprt-train"));
    CHECKF(st == 0 && strstr(out, "0: off, as without the flag"), "%d: %s", st, out);
}

PTEST(refuse_tokenize_name_and_output_inside_the_input)
{
    const char *d = t_tmpdir();
    char out[4096], in[600];
    snprintf(in, sizeof in, "%s/in", d);
    mkdir(in, 0755);
    t_write_text(in, "a.txt", "some text to tokenize, long enough\n");
    char tok[4096];
    CHECK(realpath(t_prog("ddprt-data"), tok) != NULL); /* the commands run in d */
    int st = run(out, sizeof out, "cd %s && %s tokenize in --to out --name ../../x", d, tok);
    CHECKF(st != 0 && strstr(out, "--name '../../x': a file name prefix, without '/'"), "%d: %s", st, out);
    static const char *const tos[] = {"in", "in/", "./in/../in", "in/sub/deeper"};
    for (int i = 0; i < 4; i++) {
        st = run(out, sizeof out, "cd %s && %s tokenize in --to %s", d, tok, tos[i]);
        CHECKF(st != 0 && strstr(out, "is the input directory in or inside it"), "--to %s: %d: %s", tos[i], st, out);
    }
    st = run(out, sizeof out, "ls %s/in", d);
    CHECKF(!strcmp(out, "a.txt\n"), "%s", out);
    st = run(out, sizeof out, "cd %s && %s tokenize in --to out --name ok", d, tok);
    CHECKF(st == 0 && strstr(out, "out/ok_train.bin"), "%d: %s", st, out);
}

TEST(refuse_launch_empty_or_unresolvable_master_addr)
{
    char out[4096];
    int st = run(out, sizeof out, "%s --nproc-per-node 1 --master-addr '' -- true", t_prog("ddprt-launch"));
    CHECKF(st == 2 && strstr(out, "--master-addr '': give rank 0's host name or address"), "%d: %s", st, out);
    st = run(out, sizeof out, "%s --nproc-per-node 1 --nnodes 2 --master-addr nosuchhost.invalid -- true",
             t_prog("ddprt-launch"));
    CHECKF(st == 2 && strstr(out, "cannot resolve 'nosuchhost.invalid'"), "%d: %s", st, out);
}

/* The language-model options: a tokenizer that cannot be read, --generate from a
 * --resume checkpoint that another optimizer wrote, a validation split of another
 * vocabulary. */
PTEST(refuse_lm_tokenizer_generate_resume_and_val_vocab)
{
    const char *d = t_tmpdir(), *data = t_lm_data(d, 64, 40);
    char out[8192], cfg[600], base[2000];
    snprintf(cfg, sizeof cfg, "%s", t_write_text(d, "v.cfg", "[gpt]\nlayers=1\ndim=16\nheads=2\nctx=16\nvocab=0\n"));
    snprintf(base, sizeof base, "%s --model-file %s --data %s --seq-len 16 --batch-size 4 --threads 1 --epochs 1",
             t_prog("ddprt-train"), cfg, data);
    int st = run(out, sizeof out, "%s --max-steps 1 --tokenizer %s/none", base, d);
    CHECKF(st != 0 && strstr(out, "--tokenizer ") && strstr(out, "/none/encoder.json: cannot read"), "%d: %s", st, out);
    char garbage[600];
    snprintf(garbage, sizeof garbage, "%s/garbage", d);
    mkdir(garbage, 0755);
    t_write_text(garbage, "encoder.json", "{{{ not json");
    t_write_text(garbage, "vocab.bpe", "#version: 0.2\n");
    st = run(out, sizeof out, "%s --max-steps 1 --tokenizer %s", base, garbage);
    CHECKF(st != 0 && strstr(out, "--tokenizer ") && strstr(out, "garbage/encoder.json"), "%d: %s", st, out);
    /* --generate with --resume reads the weights only: no --optimizer adamw needed */
    st = run(out, sizeof out, "%s --max-steps 2 --no-eval --optimizer adamw --save %s/ck.st", base, d);
    CHECKF(st == 0, "%d: %s", st, out);
    st = run(out, sizeof out, "%s --resume %s/ck.st --generate 5", base, d);
    CHECKF(st == 0 && !strstr(out, "--optimizer"), "%d: %s", st, out);
    st = run(out, sizeof out, "%s --resume %s/ck.st --max-steps 3", base, d); /* training on still needs it */
    CHECKF(st != 0 && strstr(out, "holds adamw state, but --optimizer is sgd"), "%d: %s", st, out);
    /* a validation shard of another tokenizer */
    char p[800], e[512];
    int32_t toks[40] = {0};
    snprintf(p, sizeof p, "%s/lm_val.bin", data);
    CHECKF(nn_tokens_write(p, toks, 40, 50257, e, sizeof e) == 0, "%s", e);
    st = run(out, sizeof out, "%s --max-steps 1", base);
    CHECKF(st != 0 && strstr(out, "lm_val.bin: vocabulary 50257, but the training shards (") &&
           strstr(out, "lm_train.bin) have "), "%d: %s", st, out);
    /* two training shards of different vocabularies */
    snprintf(p, sizeof p, "%s/lm_val.bin", data);
    remove(p);
    snprintf(p, sizeof p, "%s/lm_train_2.bin", data);
    CHECKF(nn_tokens_write(p, toks, 40, 50257, e, sizeof e) == 0, "%s", e);
    st = run(out, sizeof out, "%s --max-steps 1 --no-eval", base);
    CHECKF(st != 0 && strstr(out, "lm_train_2.bin: vocabulary 50257, but ") && strstr(out, "shards of different tokenizers"),
           "%d: %s", st, out);
}

/* A flight-recorder file as tp_trace_dump writes it, with `rows` after the header. */
static const char *trace_file(const char *dir, const char *name, int rank, int world, const char *version,
                              const char *rows)
{
    char text[4096];
    snprintf(text, sizeof text, "# ddprt-trace %s\nrank %d\nworld %d\npid 42\nhost h\nnow 100.5\nissued 3\nwhy test\n"
             "# seq kind dtype redop root bytes state rc t_issue t_start t_end (unix s; 0 = not yet)\n%s",
             version, rank, world, rows);
    return t_write_text(dir, name, text);
}

PTEST(trace_reader_refuses_bad_fields_and_uses_a_cut_file)
{
    const char *d = t_tmpdir();
    const char *ok = "1 allreduce float sum 0 1024 done 0 1.0 1.0 1.5\n2 allreduce float sum 0 1024 done 0 2.0 2.0 2.5\n";
    char out[8192], f0[700], f1[700];
    snprintf(f0, sizeof f0, "%s", trace_file(d, "t0", 0, 2, "1", ok));
    snprintf(f1, sizeof f1, "%s", trace_file(d, "t1", 1, 2, "1", ok));
    int st = run(out, sizeof out, "%s %s %s", t_prog("ddprt-trace"), f0, f1);
    CHECKF(st == 0 && strstr(out, "behind: none (every rank with a file reached #2)"), "%d: %s", st, out);
    static const struct { const char *version, *rows, *msg; int world; } bad[] = {
        {"1", "1 frobnicate float sum 0 1024 done 0 1.0 1.0 1.5\n", ":10: unknown kind of collective", 2},
        {"1", "1 allreduce float sum 0 -1024 done 0 1.0 1.0 1.5\n", ":10: bytes: expected a size 0 to 2^62", 2},
        {"1", "99999999999999999999999 allreduce float sum 0 8 done 0 1 1 1\n", ":10: sequence number: expected", 2},
        {"1", "9 allreduce float sum 0 8 done 0 1 1 1\n", ":10: sequence number past the header's 'issued'", 2},
        {"1", "1 allreduce float sum 0 8 done 0 1 1\n", ":10: not a trace line", 2},
        {"1", "1 allreduce float sum 0 8 done 0 1 nan 1\n", ":10: times: expected seconds >= 0", 2},
        {"99", "", ":1: version 99; this ddprt-trace reads version 1", 2},
        {"1", "rank 0\n", ":10: a header line given twice", 2},
        {"1", "1 allreduce float sum 0 8 done 0 1 1 1\nissued 9\n", ":11: a header line after the rows", 2},
        {"1", "", ":3: world: more ranks than ddprt-trace merges (65536)", 2000000000},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *b = trace_file(d, "bad", 1, bad[i].world, bad[i].version, bad[i].rows);
        st = run(out, sizeof out, "%s %s %s", t_prog("ddprt-trace"), f0, b);
        CHECKF(st == 1 && strstr(out, bad[i].msg) && !strstr(out, "behind:"), "case %zu: %d: %s", i, st, out);
    }
    /* the same rank's file twice */
    st = run(out, sizeof out, "%s %s %s %s", t_prog("ddprt-trace"), f0, f1, f1);
    CHECKF(st == 1 && strstr(out, "are both rank 1's") && !strstr(out, "behind:"), "%d: %s", st, out);
    /* rank 1 died while writing its third row: its two whole rows are used, one warning */
    const char *cut = trace_file(d, "cut", 1, 2, "1", "1 allreduce float sum 0 1024 done 0 1.0 1.0 1.5\n"
                                                     "2 allreduce float sum 0 1024 done 0 2.0 2.0 2.5\n3 allre");
    st = run(out, sizeof out, "%s %s %s", t_prog("ddprt-trace"), f0, cut);
    CHECKF(st == 0 && strstr(out, "warning: ") && strstr(out, "/cut:12: the last line is cut") &&
           strstr(out, "using the 2 complete rows") && strstr(out, "behind: none (every rank with a file reached #2)"),
           "%d: %s", st, out);
}

/* Point 10's messages: a number out of range says so, a pad that makes the output huge
 * is named (not a terabyte arena), an arena that cannot be had is one line, and the
 * argument limit is the real one. */
PTEST(refuse_messages_name_the_cause_once)
{
    const char *d = t_tmpdir();
    char out[8192], base[1200];
    const char *lenet = "[conv2d]\nname=conv1\nfilters=%s\nsize=5\npad=%s\n[relu]\n[flatten]\n[linear]\nout=10\n";
    char cfg[300];
    snprintf(base, sizeof base, "%s --data synthetic --epochs 1 --max-steps 1 --threads 1 --model-file", t_prog("ddprt-train"));
    snprintf(cfg, sizeof cfg, lenet, "2000000000", "0");
    int st = run(out, sizeof out, "%s %s", base, t_write_text(d, "f.cfg", cfg));
    CHECKF(st != 0 && strstr(out, "filters=2000000000 is out of range (-1000000 to 1000000)"), "%d: %s", st, out);
    snprintf(cfg, sizeof cfg, lenet, "10", "100000");
    st = run(out, sizeof out, "%s %s", base, t_write_text(d, "p.cfg", cfg));
    CHECKF(st != 0 && strstr(out, "pad=100000 makes a 10x200024x200024 output (at most 65536 a side and 2^31 values)") &&
           !strstr(out, "arena"), "%d: %s", st, out);
    /* 4 GiB of activations under a 1 GiB address-space limit */
    snprintf(cfg, sizeof cfg, lenet, "4000", "100");
    st = run(out, sizeof out, "ulimit -v 1048576; %s %s --batch-size 64", base, t_write_text(d, "a.cfg", cfg));
    const char *c = strstr(out, "cannot allocate");
    CHECKF(st != 0 && c && !strstr(c + 1, "cannot allocate") && strstr(out, "cannot allocate the host arena of "),
           "%d: %s", st, out);
    st = run(out, sizeof out, "%s tokenize $(seq 1 1025) --to %s/x", t_prog("ddprt-data"), d);
    CHECKF(st == 2 && strstr(out, "1027 arguments after the command, more than 1024"), "%d: %s", st, out);
    st = run(out, sizeof out, "%s tokenize $(seq 1 1021) --to %s/x", t_prog("ddprt-data"), d);
    CHECKF(st != 2 && strstr(out, "tokenize: 1: "), "%d: %s", st, out); /* 1023 arguments: read as files */
}

/* Issue 41 point 11: two ranks reading data sets of the same size but other bytes (one
 * pixel) are refused at start naming both ranks; an identical copy elsewhere is fine. */
static int pair(const char *d0, const char *d1, char *e, size_t n)
{
    int port = t_free_port(), st[2];
    char init[64];
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", port);
    t_proc p[2];
    for (int r = 0; r < 2; r++) {
        const char *argv[] = {t_prog("ddprt-train"), "--data", r ? d1 : d0, "--init-method", init, "--rank", r ? "1" : "0",
                              "--world-size", "2", "--threads", "1", "--epochs", "1", "--max-steps", "1", "--no-eval",
                              NULL};
        t_spawn(&p[r], r ? "r1" : "r0", (char *const *)argv, NULL);
    }
    for (int r = 0; r < 2; r++) st[r] = t_wait(&p[r], 60);
    snprintf(e, n, "%s", t_slurp(p[0].err));
    return st[0] || st[1];
}

PTEST(refuse_ranks_reading_different_data_of_one_size)
{
    t_clean_env();
    char a[600], b[600], c[600], e[4096], path[700];
    snprintf(a, sizeof a, "%s/a", t_tmpdir());
    snprintf(b, sizeof b, "%s/b", t_tmpdir());
    snprintf(c, sizeof c, "%s/c", t_tmpdir());
    mkdir(a, 0755), mkdir(b, 0755), mkdir(c, 0755);
    t_write_synthetic_dataset(a, 300, 100, 0);
    t_write_synthetic_dataset(b, 300, 100, 0);
    t_write_synthetic_dataset(c, 300, 100, 0);
    CHECKF(pair(a, b, e, sizeof e) == 0, "identical copies refused: %s", e);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", c);
    FILE *f = fopen(path, "r+b");
    CHECK(f && fseek(f, 16 + 5000, SEEK_SET) == 0);
    int px = f ? fgetc(f) : 0;
    if (f) fseek(f, 16 + 5000, SEEK_SET), fputc(px ^ 0x40, f), fclose(f);
    CHECK(pair(a, c, e, sizeof e) != 0);
    CHECKF(strstr(e, "the training data's content (a checksum of the samples read) is not the same on rank 1 as on "
                     "rank 0"), "%s", e);
}
