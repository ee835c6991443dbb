/* --optimizer adamw8bit in the trainer (the kernels: test_optim8.c): a quarter of the
 * state's memory, a loss that tracks fp32 AdamW's, a resumed run that ends with the
 * uninterrupted run's checkpoint bytes, checkpoints (fp32 state) that fp32 AdamW
 * resumes and back, and --zero 1 over 2 ranks. */
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 64 windows of 16 (+1) tokens of a repeating pattern, and a model file. */
static const char *setup(const char *dir, const char **cfg)
{
    *cfg = t_write_text(dir, "gpt.cfg", "[gpt]\nlayers=2\ndim=64\nheads=4\nctx=16\n");
    return t_lm_data(dir, 64, 65);
}

/* ddprt-train on the data: epochs, optimizer, then extra flags; the run's stdout. */
static const char *train(const char *name, const char *data, const char *cfg, const char *epochs, const char *opt,
                         const char *const *extra)
{
    const char *argv[40] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16",
                            "--batch-size", "8", "--optimizer", opt, "--lr", "3e-3", "--weight-decay", "0.1",
                            "--no-decay-bn-bias", "--threads", "2", "--sample-len", "4", "--mem-report", "--epochs",
                            epochs};
    int n = 23;
    for (int i = 0; extra && extra[i]; i++) argv[n++] = extra[i];
    t_proc p;
    t_spawn(&p, name, (char *const *)argv, NULL);
    CHECKF(t_wait(&p, 120) == 0, "%s: %s", name, t_slurp(p.err));
    return t_slurp(p.out);
}

static double last(const char *out, const char *key)
{
    const char *q = out, *l = NULL;
    while ((q = strstr(q, key))) l = q++;
    return l ? atof(l + strlen(key) + strcspn(l + strlen(key), "0123456789")) : -1;
}

PTEST(gpt_adamw8bit_tracks_adamw_resumes_bit_identical)
{
    t_clean_env();
    const char *dir = t_tmpdir("gpt8"), *cfg;
    const char *data = setup(dir, &cfg);
    char a[700], b[700], c[700];
    snprintf(a, sizeof a, "%s/a.st", dir);
    snprintf(b, sizeof b, "%s/b.st", dir);
    snprintf(c, sizeof c, "%s/c.st", dir);
    /* 6 epochs of 8 steps: the loss falls from ~3.2 alike, on a quarter of the state */
    const char *s32[] = {"--save", c, NULL}, *s8[] = {"--save", a, NULL};
    const char *o32 = strdup(train("fp32", data, cfg, "6", "adamw", s32));
    const char *o8 = train("8bit", data, cfg, "6", "adamw8bit", s8);
    double l32 = last(o32, "Test set: Average loss: "), l8 = last(o8, "Test set: Average loss: ");
    double m32 = last(o32, "optimizer state"), m8 = last(o8, "optimizer state");
    CHECKF(l32 > 0 && l32 < 2.5 && fabs(l8 - l32) < 0.05 * l32 + 0.02, "validation loss %g with adamw8bit, %g with adamw", l8, l32);
    CHECKF(m8 > 0 && m8 < 0.3 * m32, "optimizer state %g MiB with adamw8bit, %g with adamw", m8, m32);
    /* 3 epochs, then resumed for the other 3: the uninterrupted run's bytes */
    const char *h[] = {"--save", b, NULL}, *r[] = {"--resume", b, "--save", b, NULL};
    train("half", data, cfg, "3", "adamw8bit", h);
    train("resumed", data, cfg, "6", "adamw8bit", r);
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    CHECKF(system(cmd) == 0, "the resumed adamw8bit run's checkpoint differs from the uninterrupted one");
    /* the checkpoints hold fp32 moments: each optimizer resumes the other's */
    const char *x8[] = {"--resume", c, NULL}, *x32[] = {"--resume", a, NULL};
    train("fp32-to-8bit", data, cfg, "7", "adamw8bit", x8);
    train("8bit-to-fp32", data, cfg, "7", "adamw", x32);
    free((void *)o32);
}

/* --zero 1 with 8-bit state: each rank encodes its segments; the ranks stay in step and
 * the checkpoint holds the whole state, which one rank resumes. */
PTEST(gpt_adamw8bit_zero1)
{
    t_clean_env();
    const char *dir = t_tmpdir("gpt8z"), *cfg;
    const char *data = setup(dir, &cfg);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/z.st", dir);
    const char *argv[] = {t_prog("ddprt-launch"), "--nproc-per-node", "2", "--", t_prog("ddprt-train"), "--model-file",
                          cfg, "--data", data, "--seq-len", "16", "--batch-size", "4", "--optimizer", "adamw8bit",
                          "--clip-grad-norm", "0.5", "--epochs", "2", "--threads", "1", "--check-sync", "1",
                          "--bucket-mb", "0.05", "--zero", "1", "--sample-len", "4", "--save", ck, NULL};
    t_proc l;
    t_spawn(&l, "zero1", (char *const *)argv, NULL);
    CHECKF(t_wait(&l, 120) == 0, "%s", t_slurp(l.err));
    const char *r[] = {"--resume", ck, NULL};
    train("resume1", data, cfg, "3", "adamw8bit", r);
}
