/* Issue 11's training features end to end (ddprt-train, 2 ranks over TCP on
 * 127.0.0.1, synthetic data): resume bit-identical with Adam/AdamW and schedules;
 * --accum-steps equal to a batch N times larger with one allreduce round per optimizer
 * step; --grad-compress halving the bytes; --sync-bn in sync; --topk printed. */
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char data_dir[512];

static void make_data(void)
{
    snprintf(data_dir, sizeof data_dir, "%s/data", t_proc_tmpdir());
    mkdir(data_dir, 0755);
    t_write_synthetic_dataset(data_dir, 600, 200, 1);
}

static const char *write_cfg(const char *name, const char *text)
{
    static char path[4][600];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 600, "%s/%s", t_proc_tmpdir(), name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return p;
}

/* Runs 2 ranks with extra args; rank 0's stdout and stderr into out/err (static). */
static char **run2_env; /* extra environment of both ranks (NULL: none) */

static int run2(const char *const *extra, const char **out, const char **err)
{
    t_proc p[2];
    int port = t_free_port(), ok = 1;
    char init[64];
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", port);
    for (int r = 0; r < 2; r++) {
        const char *argv[48] = {t_prog("ddprt-train"), "--data", data_dir, "--init-method", init, "--rank",
                                r ? "1" : "0", "--world-size", "2", "--threads", "1", "--batch-size", "32",
                                "--log-interval", "5"};
        int n = 15;
        for (int i = 0; extra[i] && n < 46; i++) argv[n++] = extra[i];
        argv[n] = NULL;
        t_spawn(&p[r], r ? "rank1" : "rank0", (char *const *)argv, run2_env);
    }
    for (int r = 0; r < 2; r++) {
        int rc = t_wait(&p[r], 240);
        if (rc) {
            ok = 0;
            fprintf(stderr, "rank %d exited %d: %s\n", r, rc, t_slurp(p[r].err));
        }
    }
    static char o[16384], e[16384];
    snprintf(o, sizeof o, "%s", t_slurp(p[0].out));
    snprintf(e, sizeof e, "%s", t_slurp(p[0].err));
    if (out) *out = o;
    if (err) *err = e;
    return ok;
}

static unsigned char *slurp_bin(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n);
    if (b && fread(b, 1, *n, f) != *n) { free(b); b = NULL; }
    fclose(f);
    return b;
}

/* Max |a - b| over the f32 tensor data of two safetensors files of the same model
 * (relative to the largest |a|); -1 when the layouts differ. */
static double max_rel_diff(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    unsigned char *x = slurp_bin(a, &na), *y = slurp_bin(b, &nb);
    double worst = -1, scale = 0;
    uint64_t hl = 0;
    if (x && y && na == nb && na > 8) {
        for (int i = 0; i < 8; i++) hl |= (uint64_t)x[i] << (8 * i);
        worst = 0;
        for (size_t o = 8 + hl; o + 4 <= na; o += 4) {
            float u, v;
            memcpy(&u, x + o, 4);
            memcpy(&v, y + o, 4);
            worst = fmax(worst, fabs((double)u - v));
            scale = fmax(scale, fabs((double)u));
        }
        worst = scale > 0 ? worst / scale : worst;
    }
    free(x);
    free(y);
    return worst;
}

/* "gradient allreduces: R rounds, B buckets, N bytes per rank (dt); sync-bn allreduces S" */
typedef struct ar { unsigned long long rounds, buckets, bytes, sync, steps; char dt[16]; } ar;
static ar allreduces(const char *err)
{
    ar a = {0};
    const char *p = strstr(err, "gradient allreduces: "), *q = p;
    while (q && (q = strstr(q + 1, "gradient allreduces: "))) p = q; /* the last epoch's */
    if (p)
        sscanf(p, "gradient allreduces: %llu rounds, %llu buckets, %llu bytes per rank (%15[^)]); sync-bn allreduces "
                  "%llu; optimizer steps %llu", &a.rounds, &a.buckets, &a.bytes, a.dt, &a.sync, &a.steps);
    return a;
}

PTEST(train_resume_bit_identical_with_adam_cosine_and_adamw_multistep)
{
    t_clean_env();
    make_data();
    static const char *const cfgs[2][14] = {
        {"--optimizer", "adam", "--lr", "0.002", "--lr-schedule", "cosine", "--warmup-epochs", "0.5",
         "--clip-grad-norm", "1", "--weight-decay", "1e-4", NULL},
        {"--optimizer", "adamw", "--lr", "0.002", "--lr-schedule", "multistep", "--lr-milestones", "1",
         "--weight-decay", "0.01", "--no-decay-bn-bias", "--accum-steps", "2", NULL}};
    for (int c = 0; c < 2; c++) {
        char full[600], part[600];
        snprintf(full, sizeof full, "%s/full%d.safetensors", t_proc_tmpdir(), c);
        snprintf(part, sizeof part, "%s/part%d.safetensors", t_proc_tmpdir(), c);
        const char *runs[3][6] = {{"--epochs", "2", "--save", full, NULL},
                                  {"--epochs", "1", "--save", part, NULL},
                                  {"--epochs", "2", "--save", part, "--resume", part}};
        char counts[2][400] = {"", "-"};
        for (int k = 0; k < 3; k++) {
            const char *extra[24];
            int n = 0;
            for (int i = 0; cfgs[c][i]; i++) extra[n++] = cfgs[c][i];
            for (int i = 0; i < 6 && runs[k][i]; i++) extra[n++] = runs[k][i];
            extra[n] = NULL;
            const char *out, *err;
            CHECKF(run2(extra, &out, &err), "config %d run %d", c, k);
            if (k == 0) CHECKF(strstr(out, "\tLR: "), "%s", out);
            /* Epoch 2's allreduce counts are that epoch's, resumed or not (issue 26). */
            const char *e2 = strstr(err, "epoch 2: gradient allreduces:");
            if (k != 1 && e2) snprintf(counts[k / 2], sizeof counts[0], "%.*s", (int)strcspn(e2, "\n"), e2);
        }
        CHECKF(!strcmp(counts[0], counts[1]), "full: %s\nresumed: %s", counts[0], counts[1]);
        /* Parameters and buffers, and in PATH.state the optimizer state and its step. */
        CHECKF(t_same_checkpoint(full, part), "config %d: checkpoint differs after resume", c);
    }
    /* The state says which optimizer wrote it. */
    char part[600];
    snprintf(part, sizeof part, "%s/part0.safetensors", t_proc_tmpdir());
    const char *argv[] = {t_prog("ddprt-train"), "--data", data_dir, "--resume", part, "--epochs", "3", NULL};
    t_proc q;
    t_spawn(&q, "wrong-opt", (char *const *)argv, NULL);
    CHECK(t_wait(&q, 60) == 1);
    CHECKF(strstr(t_slurp(q.err), "holds adam state, but --optimizer is sgd"), "%s", t_slurp(q.err));
}

static const char *const plain_cfg = "[conv2d]\nname=conv1\nfilters=4\nsize=3\npad=1\n[relu]\n[maxpool]\nsize=2\n"
                                     "[conv2d]\nname=conv2\nfilters=8\nsize=3\n[relu]\n[flatten]\n"
                                     "[linear]\nname=fc\nout=classes\n";

PTEST(train_accum_steps_equal_a_larger_batch_with_one_allreduce_round_per_step)
{
    t_clean_env();
    make_data();
    const char *cfg = write_cfg("plain.cfg", plain_cfg);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/accum.safetensors", t_proc_tmpdir());
    snprintf(b, sizeof b, "%s/big.safetensors", t_proc_tmpdir());
    /* Small buckets: several per step, so "one round" is not trivially one bucket. */
    const char *ea[] = {"--model-file", cfg, "--lr", "0.05", "--momentum", "0.9", "--max-steps", "6", "--epochs", "1",
                        "--bucket-mb", "0.02", "--batch-size", "8", "--accum-steps", "4", "--save", a, NULL};
    const char *eb[] = {"--model-file", cfg, "--lr", "0.05", "--momentum", "0.9", "--max-steps", "6", "--epochs", "1",
                        "--bucket-mb", "0.02", "--batch-size", "32", "--save", b, NULL};
    const char *err;
    CHECK(run2(ea, NULL, &err));
    ar ra = allreduces(err);
    CHECK(run2(eb, NULL, &err));
    ar rb = allreduces(err);
    CHECKF(ra.steps == 6 && ra.rounds == 6 && rb.rounds == 6, "rounds %llu / %llu, steps %llu", ra.rounds, rb.rounds,
           ra.steps);
    CHECKF(rb.buckets > 6 && ra.buckets == rb.buckets && ra.bytes == rb.bytes,
           "accumulated: %llu buckets %llu bytes; large batch: %llu buckets %llu bytes", ra.buckets, ra.bytes,
           rb.buckets, rb.bytes);
    double d = max_rel_diff(a, b);
    CHECKF(d >= 0 && d < 1e-4, "parameters after 6 steps differ by %g (relative)", d);
}

PTEST(train_grad_compress_halves_the_bytes_and_sync_bn_stays_in_sync)
{
    t_clean_env();
    make_data();
    static const char *const comp[3] = {"none", "fp16", "bf16"};
    ar r[3];
    for (int c = 0; c < 3; c++) {
        const char *e[] = {"--epochs", "2", "--lr", "0.05", "--check-sync", "1", "--grad-compress", comp[c],
                           "--topk", "1,5", NULL};
        const char *out, *err;
        /* DDPRT_COMPRESS_CHECK: each step's 16-bit average against the f32 one. */
        static char *check[] = {"DDPRT_COMPRESS_CHECK=1", NULL};
        run2_env = c ? check : NULL;
        CHECKF(run2(e, &out, &err), "--grad-compress %s", comp[c]);
        run2_env = NULL;
        r[c] = allreduces(err);
        const char *l2 = strstr(err, "relative L2 error ");
        double rel = -1;
        if (l2) sscanf(l2, "relative L2 error %lf", &rel);
        /* Rounding to 11 (fp16) or 8 (bf16) significant bits, twice (before the sum and
         * after it): per element at most about 2^-11 or 2^-8 relative. */
        CHECKF(c ? rel > 0 && rel < (c == 1 ? 2e-3 : 1.5e-2) : !l2, "%s: relative error %g\n%s", comp[c], rel, err);
        const char *acc = strstr(out, "Accuracy: "), *x = acc;
        while (x && (x = strstr(x + 1, "Accuracy: "))) acc = x;
        int correct = 0;
        CHECKF(acc && sscanf(acc, "Accuracy: %d/200", &correct) == 1 && correct >= 160, "%s: %s", comp[c], out);
        CHECKF(strstr(out, " * Acc@1 ") && strstr(out, " Acc@5 "), "%s", out);
    }
    CHECKF(r[0].bytes > 0 && r[1].bytes * 2 == r[0].bytes && r[2].bytes * 2 == r[0].bytes,
           "bytes per rank: f32 %llu, fp16 %llu, bf16 %llu", r[0].bytes, r[1].bytes, r[2].bytes);
    CHECKF(!strcmp(r[0].dt, "float") && !strcmp(r[1].dt, "half") && !strcmp(r[2].dt, "bfloat16"), "%s %s %s", r[0].dt,
           r[1].dt, r[2].dt);

    const char *bn = write_cfg("bn.cfg", "[conv2d]\nname=conv1\nfilters=4\nsize=3\npad=1\nbias=0\n[batchnorm]\nname=bn1\n"
                                         "[relu]\n[avgpool]\n[flatten]\n[linear]\nname=fc\nout=classes\n");
    for (int s = 0; s < 2; s++) {
        const char *e[] = {"--model-file", bn, "--epochs", "1", "--lr", "0.05", "--check-sync", "1",
                           s ? "--sync-bn" : "--drop-last", NULL};
        const char *err;
        CHECK(run2(e, NULL, &err));
        ar x = allreduces(err);
        /* One per BatchNorm in forward and one in backward, per step. */
        CHECKF(s ? x.sync == 2 * x.steps && x.steps > 0 : x.sync == 0, "sync-bn %d: %llu allreduces, %llu steps", s,
               x.sync, x.steps);
    }
}
