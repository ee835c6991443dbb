/* GPT-2 in the trainer: parity with PyTorch 1.13 (test/py/gpt_torch.py: 10 AdamW steps
 * from the same weights on the same windows; ddprt's checkpoint loaded by the PyTorch
 * module with strict=True), training on token shards and on synthetic tokens,
 * sampling from a checkpoint, a corrupt shard, 2-rank DDP --check-sync and a resumed
 * run that ends bit-identical to an uninterrupted one. */
#include "kernels/cpu/k_amx.h"
#include "nn/data/tokens.h"
#include "nn/stio.h"
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *cfg_file(const char *dir, const char *body) { return t_write_text(dir, "gpt.cfg", body); }

static const char *lm_data(const char *dir, int ntrain) { return t_lm_data(dir, ntrain, 33); }

static int run(const char *name, const char *const *argv, double secs, t_proc *p)
{
    t_spawn(p, name, (char *const *)argv, NULL);
    return t_wait(p, secs);
}

/* prec: --matmul-precision (high: bf16x3 on AMX, within the same tolerances) */
static void parity(const char *prec)
{
    const char *dir = t_tmpdir(strcmp(prec, "high") ? "gptpt" : "gptph");
    char cmd[1200], init[700], out[700], data[700];
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && /usr/bin/python3 test/py/gpt_torch.py prep %s", data, dir);
    CHECK(system(cmd) == 0);
    const char *cfg = cfg_file(dir, "[gpt] layers=2 dim=32\nheads=4\nctx=16\n") /* keys on the header line too */;
    snprintf(init, sizeof init, "%s/init.st", dir);
    snprintf(out, sizeof out, "%s/out.st", dir);
    const char *argv[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--batch-size", "4",
                          "--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.1", "--no-decay-bn-bias",
                          "--epochs", "10", "--log-interval", "1", "--init-from", init, "--save", out, "--threads", "1",
                          "--sample-len", "8", "--matmul-precision", prec, NULL};
    t_proc p;
    CHECKF(run("train", argv, 120, &p) == 0, "%s", t_slurp(p.err));
    /* the loss of each step (one step per epoch: 4 windows, batch 4), the last validation loss */
    char losses[400] = "", val[32] = "";
    const char *s = t_slurp(p.out), *q = s;
    int steps = 0;
    while ((q = strstr(q, "Loss: "))) {
        q += 6;
        size_t l = strlen(losses);
        snprintf(losses + l, sizeof losses - l, "%s%.*s", steps++ ? "," : "", (int)strcspn(q, "\t\n"), q);
    }
    for (q = s; (q = strstr(q, "Test set: Average loss: ")); q += 24)
        snprintf(val, sizeof val, "%.*s", (int)strcspn(q + 24, " \n"), q + 24);
    CHECKF(steps == 10 && val[0], "%s", s);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 test/py/gpt_torch.py check %s %s %s > %s/check.txt 2>&1", dir, losses,
             val, dir);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "%s/check.txt", dir);
    CHECKF(rc == 0, "--matmul-precision %s: %s", prec, t_slurp(cmd));
}

PTEST(gpt_parity_with_pytorch)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        t_note("skipped: /usr/bin/python3 has no torch (apt-get install python3-torch)");
        return;
    }
    parity("highest");
}

/* The fp32 parity holds with bf16x3 products too (where the CPU has AMX; without
 * it "high" runs the fp32 kernels, the case above). */
PTEST(gpt_parity_with_pytorch_at_high_matmul_precision)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        t_note("skipped: /usr/bin/python3 has no torch (apt-get install python3-torch)");
        return;
    }
    if (!k_amx_ok()) t_note("no AMX-BF16 here: high runs the fp32 products");
    parity("high");
}

PTEST(gpt_trains_on_shards_and_samples_from_a_checkpoint)
{
    const char *dir = t_tmpdir("gpttr");
    const char *data = lm_data(dir, 64);
    const char *cfg = cfg_file(dir, "[gpt]\nlayers=2\ndim=32\nheads=2\nctx=16\n");
    char ck[700];
    snprintf(ck, sizeof ck, "%s/m.st", dir);
    const char *argv[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--batch-size", "8",
                          "--optimizer", "adamw", "--lr", "3e-3", "--epochs", "6", "--log-interval", "100",
                          "--eval-every", "16", "--sample-every", "24", "--sample-len", "12", "--save", ck, "--threads",
                          "2", NULL};
    t_proc p;
    CHECKF(run("train", argv, 120, &p) == 0, "%s", t_slurp(p.err));
    const char *o = t_slurp(p.out);
    CHECKF(strstr(o, "sample before training: ") && strstr(o, "step 24 sample: ") && strstr(o, "step 16: val loss ") &&
           strstr(o, "sample after training: "), "%s", o);
    /* a repeating pattern: the validation loss falls well below log(64) = 4.16 */
    const char *v = strstr(o, "Test set: Average loss: ");
    double first = v ? atof(v + 24) : 99, last = first;
    for (; v; v = strstr(v + 1, "Test set: Average loss: ")) last = atof(v + 24);
    CHECKF(first < 3.8 && last < first - 1.5, "validation loss %g then %g:\n%s", first, last, o);
    /* sampling from the checkpoint alone; the same seed, the same text */
    const char *g[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--init-from", ck,
                       "--generate", "20", "--top-k", "5", "--temperature", "0.7", NULL};
    char first_out[256];
    CHECKF(run("gen", g, 60, &p) == 0, "%s", t_slurp(p.err));
    snprintf(first_out, sizeof first_out, "%s", t_slurp(p.out));
    CHECK(strlen(first_out) >= 20);
    CHECKF(run("gen2", g, 60, &p) == 0, "%s", t_slurp(p.err));
    CHECK(!strcmp(first_out, t_slurp(p.out)));
    /* --data synthetic: windows in the cfg model's shape */
    const char *syn[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", "synthetic", "--seq-len", "16",
                         "--batch-size", "4", "--max-steps", "3", "--epochs", "1", "--no-eval", "--sample-len", "4", NULL};
    CHECKF(run("syn", syn, 60, &p) == 0, "%s", t_slurp(p.err));
    CHECKF(strstr(t_slurp(p.out), "tokens/s"), "%s", t_slurp(p.out));
}

/* The losses a run printed (train lines, then validation), as one string. */
static char *losses(const char *out)
{
    static char buf[4096];
    size_t k = 0;
    buf[0] = 0;
    for (const char *p = out; (p = strstr(p, "oss: ")) && k + 32 < sizeof buf; p += 5)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%.9s ", p + 5);
    return buf;
}

/* The same GPT-2 block written as separate op sections trains bit for bit like [gpt]
 * (same names, initialisation, node order); a language model must end with lm_loss. */
PTEST(gpt_cfg_of_op_sections_is_the_gpt_section)
{
    const char *dir = t_tmpdir("gptops");
    const char *data = lm_data(dir, 16);
    static const char ops[] =
        "[tok_pos_embed] name=transformer dim=32 ctx=16 id=e\n"
        "[layernorm] name=transformer.h.0.ln_1\n"
        "[conv1d_hf] name=transformer.h.0.attn.c_attn out=96\n"
        "[attention] heads=2\n"
        "[conv1d_hf] name=transformer.h.0.attn.c_proj out=32 init_std=0.014142135\n"
        "[add] from=e,-1 id=r\n"
        "[layernorm] name=transformer.h.0.ln_2\n"
        "[conv1d_hf] name=transformer.h.0.mlp.c_fc out=128\n"
        "[gelu]\n"
        "[conv1d_hf] name=transformer.h.0.mlp.c_proj out=32 init_std=0.014142135\n"
        "[add] from=r,-1\n"
        "[layernorm] name=transformer.ln_f\n"
        "[lm_loss] name=lm_head from=-1,input\n";
    char path[2][700], out[2][4096];
    snprintf(path[0], sizeof path[0], "%s", t_write_text(dir, "ops.cfg", ops));
    snprintf(path[1], sizeof path[1], "%s", cfg_file(dir, "[gpt] layers=1 dim=32 heads=2 ctx=16\n"));
    for (int k = 0; k < 2; k++) {
        const char *argv[] = {t_prog("ddprt-train"), "--model-file", path[k], "--data", data, "--seq-len", "16",
                              "--batch-size", "4", "--optimizer", "adamw", "--epochs", "2", "--log-interval", "1",
                              "--threads", "1", "--sample-len", "4", NULL};
        t_proc p;
        CHECKF(run(k ? "gpt" : "ops", argv, 60, &p) == 0, "%s", t_slurp(p.err));
        snprintf(out[k], sizeof out[k], "%s", losses(t_slurp(p.out)));
    }
    CHECKF(strlen(out[0]) > 60 && !strcmp(out[0], out[1]), "op sections: %s\n[gpt]: %s", out[0], out[1]);
    static const char bad[] = "[tok_pos_embed] name=t dim=8 ctx=16\n[layernorm] name=ln\n";
    const char *bp = t_write_text(dir, "bad.cfg", bad);
    const char *argv[] = {t_prog("ddprt-train"), "--model-file", bp, "--data", data, "--seq-len", "16", "--epochs", "1",
                          NULL};
    t_proc p;
    CHECK(run("bad", argv, 60, &p) != 0);
    CHECKF(strstr(t_slurp(p.err), "bad.cfg: a language model (token windows) ends with [lm_loss]"), "%s",
           t_slurp(p.err));
}

/* [gpt] dropout=: dropout after the embedding and each residual branch, in training
 * only (the same losses twice, others than without it; it still learns the pattern). */
PTEST(gpt_dropout)
{
    const char *dir = t_tmpdir("gptdrop");
    const char *data = lm_data(dir, 32);
    char out[3][4096];
    static const char *const cfgs[] = {"[gpt] layers=1 dim=32 heads=2 ctx=16 dropout=0.1\n",
                                       "[gpt] layers=1 dim=32 heads=2 ctx=16 dropout=0.1\n",
                                       "[gpt] layers=1 dim=32 heads=2 ctx=16\n"};
    for (int k = 0; k < 3; k++) {
        const char *cfg = cfg_file(dir, cfgs[k]);
        const char *argv[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16",
                              "--batch-size", "4", "--optimizer", "adamw", "--lr", "3e-3", "--epochs", "3",
                              "--log-interval", "4", "--threads", "1", "--sample-len", "4", NULL};
        t_proc p;
        CHECKF(run("drop", argv, 60, &p) == 0, "%s", t_slurp(p.err));
        const char *o = t_slurp(p.out);
        snprintf(out[k], sizeof out[k], "%s", losses(o));
        if (k == 0) { /* validation (no dropout): the pattern is learnt */
            const char *v = strstr(o, "Average loss: ");
            double first = v ? atof(v + 14) : 99, last = first;
            for (; v; v = strstr(v + 1, "Average loss: ")) last = atof(v + 14);
            CHECKF(last < first - 0.5, "validation loss %g then %g:\n%s", first, last, o);
        }
    }
    CHECKF(!strcmp(out[0], out[1]) && strcmp(out[0], out[2]), "dropout 0.1: %s\nagain: %s\nnone: %s", out[0], out[1],
           out[2]);
    const char *bad = cfg_file(dir, "[gpt] layers=1 dim=32 heads=2 ctx=16 dropout=1\n");
    const char *argv[] = {t_prog("ddprt-train"), "--model-file", bad, "--data", data, "--seq-len", "16", NULL};
    t_proc p;
    CHECK(run("bad", argv, 60, &p) != 0);
    CHECKF(strstr(t_slurp(p.err), "[gpt] dropout=1 is not in [0, 1)"), "%s", t_slurp(p.err));
}

/* --amp bf16 reaches GPT-2's linear layers (conv1d_hf): the losses differ from fp32's
 * by rounding only, and the pattern is learnt as well. */
PTEST(gpt_amp_bf16)
{
    const char *dir = t_tmpdir("gptamp");
    const char *data = lm_data(dir, 32);
    const char *cfg = cfg_file(dir, "[gpt] layers=1 dim=32 heads=2 ctx=16\n");
    double val[2];
    char out[2][4096];
    for (int k = 0; k < 2; k++) {
        const char *argv[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16",
                              "--batch-size", "4", "--optimizer", "adamw", "--lr", "3e-3", "--epochs", "3",
                              "--threads", "1", "--sample-len", "4", "--amp", k ? "bf16" : "none", NULL};
        t_proc p;
        CHECKF(run(k ? "bf16" : "fp32", argv, 60, &p) == 0, "%s", t_slurp(p.err));
        const char *o = t_slurp(p.out), *v = strstr(o, "Average loss: ");
        snprintf(out[k], sizeof out[k], "%s", losses(o));
        for (val[k] = 99; v; v = strstr(v + 1, "Average loss: ")) val[k] = atof(v + 14);
    }
    CHECKF(strcmp(out[0], out[1]) && fabs(val[0] - val[1]) < 0.1 && val[1] < 2.5,
           "fp32: %s (last validation %g)\nbf16: %s (%g)", out[0], val[0], out[1], val[1]);
}

/* The training loop of a language model allocates nothing (steps, fused loss head,
 * validation windows). */
PTEST(gpt_no_allocations_in_the_loop)
{
    const char *dir = t_tmpdir("gptal");
    const char *data = lm_data(dir, 16);
    const char *cfg = cfg_file(dir, "[gpt]\nlayers=1\ndim=32\nheads=2\nctx=64\n");
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "%s %s 2 %s 2>&1", t_prog("t-alloc_count"), data, cfg);
    FILE *f = popen(cmd, "r");
    char line[512] = "";
    CHECK(f != NULL);
    if (!f) return;
    while (fgets(line, sizeof line, f) && !strstr(line, "allocations:")) {}
    pclose(f);
    if (strstr(line, "skipped")) return;
    int a = -1, s = 0;
    CHECKF(sscanf(line, "allocations: %d over %d steps", &a, &s) == 2 && a == 0 && s > 0, "%s", line);
}

/* --zero 1 on 2 and 3 ranks: each keeps its share of the AdamW state, buckets
 * reduce-scatter during backward (several buckets: --bucket-mb), and the run (clipping
 * and decay included) ends with the checkpoint bytes of the unsharded run; the
 * checkpoint holds the whole state, so one rank resumes it. --save-every too:
 * mid-epoch checkpoints gather the sharded state on every rank (a rank left out would
 * hang the job). */
PTEST(gpt_zero1_bit_identical_to_unsharded)
{
    t_clean_env();
    const char *dir = t_tmpdir("gptz");
    const char *data = lm_data(dir, 16);
    const char *cfg = cfg_file(dir, "[gpt]\nlayers=1\ndim=32\nheads=2\nctx=16\n");
    char ck[2][700], rs[700];
    for (int w = 2; w <= 3; w++) {
        double mem[2] = {0, 0};
        for (int z = 0; z < 2; z++) {
            char ws[16], name[32];
            snprintf(ws, sizeof ws, "%d", w);
            snprintf(name, sizeof name, "zero%d_w%d", z, w);
            snprintf(ck[z], sizeof ck[z], "%s/z%d_w%d.st", dir, z, w);
            const char *argv[] = {t_prog("ddprt-launch"), "--nproc-per-node", ws, "--", t_prog("ddprt-train"),
                                  "--model-file", cfg, "--data", data, "--seq-len", "16", "--batch-size", "2",
                                  "--optimizer", "adamw", "--weight-decay", "0.1", "--no-decay-bn-bias",
                                  "--clip-grad-norm", "0.5", "--epochs", "2", "--threads", "1", "--check-sync", "1",
                                  "--sample-len", "4", "--mem-report", "--bucket-mb", "0.03", "--zero", z ? "1" : "0",
                                  "--save", ck[z], "--save-every", "3", NULL};
            t_proc l;
            CHECKF(run(name, argv, 180, &l) == 0, "%s", t_slurp(l.err));
            const char *m = strstr(t_slurp(l.out), "optimizer state");
            CHECKF(m != NULL, "%s", t_slurp(l.out));
            if (!m) return;
            mem[z] = atof(m + strcspn(m, "0123456789"));
            if (!z) continue;
            const char *r = strstr(t_slurp(l.err), "--zero 1: ");
            CHECKF(r && atoi(r + 10) > 0, "no bucket reduce-scatters with --zero 1 on %d ranks: %s", w, t_slurp(l.err));
        }
        CHECKF(mem[1] < (w == 2 ? 0.55 : 0.4) * mem[0], "optimizer state per rank %g MiB with --zero 1 on %d ranks, %g without",
               mem[1], w, mem[0]);
        char cmd[1500];
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", ck[0], ck[1]);
        CHECKF(system(cmd) == 0, "--zero 1 on %d ranks ended with other checkpoint bytes than the unsharded run", w);
    }
    snprintf(rs, sizeof rs, "%s/rs.st", dir);
    const char *r1[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--batch-size", "4",
                        "--optimizer", "adamw", "--epochs", "3", "--resume", ck[1], "--save", rs, "--sample-len", "4", NULL};
    t_proc p;
    CHECKF(run("resume1", r1, 120, &p) == 0, "%s", t_slurp(p.err));
}

PTEST(gpt_corrupt_shard_is_one_line)
{
    const char *dir = t_tmpdir("gptbad");
    const char *data = lm_data(dir, 8);
    char p[800];
    snprintf(p, sizeof p, "%s/lm_train.bin", data);
    FILE *f = fopen(p, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    uint16_t bad = 9999; /* above the vocabulary of 64, in window 2 */
    fseek(f, 1024 + 2 * 40, SEEK_SET);
    fwrite(&bad, 2, 1, f);
    fclose(f);
    const char *cfg = cfg_file(dir, "[gpt]\nlayers=1\ndim=16\nheads=2\nctx=16\n");
    const char *argv[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--batch-size", "2",
                          "--epochs", "1", "--no-eval", "--sample-len", "1", NULL};
    t_proc pr;
    CHECK(run("train", argv, 60, &pr) != 0);
    const char *e = t_slurp(pr.err);
    CHECKF(strstr(e, "lm_train.bin: offset 1104: token 9999 outside the vocabulary of 64"), "%s", e);
}

/* A model whose vocabulary is smaller than the data's token ids is refused at start-up,
 * naming both (before: the embedding and the sampler read and wrote past their tables,
 * or it trained to a loss below ln V). Equal, or larger, trains. */
PTEST(gpt_model_vocabulary_below_the_data_is_refused)
{
    const char *dir = t_tmpdir("gptvocab");
    const char *data = lm_data(dir, 8); /* token ids in [0, 64) */
    const char *small = cfg_file(dir, "[gpt]\nlayers=1\ndim=16\nheads=2\nctx=16\nvocab=40\n");
    const char *argv[] = {t_prog("ddprt-train"), "--model-file", small, "--data", data, "--seq-len", "16", "--batch-size",
                          "2", "--epochs", "1", "--max-steps", "2", "--sample-len", "2", NULL};
    t_proc pr;
    CHECK(run("small", argv, 60, &pr) != 0);
    const char *e = t_slurp(pr.err);
    CHECKF(strstr(e, "token ids up to 63 (a vocabulary of 64) but the model's vocabulary is 40: give the model vocab=64 or "
                     "more") && !strstr(t_slurp(pr.out), "Train Epoch"), "%s", e);
    const char *big = cfg_file(dir, "[gpt]\nlayers=1\ndim=16\nheads=2\nctx=16\nvocab=80\n");
    argv[2] = big;
    CHECKF(run("big", argv, 60, &pr) == 0, "%s", t_slurp(pr.err));
    /* a negative vocabulary is refused, not taken as the data's (issue 41 point 8) */
    argv[2] = cfg_file(dir, "[gpt]\nlayers=1\ndim=16\nheads=2\nctx=16\nvocab=-5\n");
    CHECK(run("negative", argv, 60, &pr) != 0);
    CHECKF(strstr(t_slurp(pr.err), "[gpt] vocab=-5: 0 (the data's) or at least 2"), "%s", t_slurp(pr.err));
    /* --generate without weights would sample a random model */
    big = cfg_file(dir, "[gpt]\nlayers=1\ndim=16\nheads=2\nctx=16\nvocab=80\n");
    const char *gen[] = {t_prog("ddprt-train"), "--model-file", big, "--data", data, "--seq-len", "16", "--generate", "5",
                         NULL};
    CHECK(run("generate", gen, 60, &pr) != 0);
    CHECKF(strstr(t_slurp(pr.err), "--generate 5 samples from trained weights: give them with --init-from FILE or "
                                    "--resume FILE"), "%s", t_slurp(pr.err));
}

PTEST(gpt_ddp_check_sync_and_resume_bit_identical)
{
    t_clean_env();
    const char *dir = t_tmpdir("gptddp");
    const char *data = lm_data(dir, 16);
    const char *cfg = cfg_file(dir, "[gpt]\nlayers=1\ndim=32\nheads=2\nctx=16\n");
    const char *argv[] = {t_prog("ddprt-launch"), "--nproc-per-node", "2", "--", t_prog("ddprt-train"), "--model-file", cfg,
                          "--data", data, "--seq-len", "16", "--batch-size", "2", "--optimizer", "adamw", "--epochs",
                          "2", "--threads", "1", "--check-sync", "1", "--sample-len", "4", NULL};
    t_proc l;
    CHECKF(run("launch", argv, 120, &l) == 0, "%s", t_slurp(l.err));
    CHECKF(strstr(t_slurp(l.out), "[rank 0] Test set: Average loss"), "%s", t_slurp(l.out));
    /* 2 epochs straight vs 1, then resumed for the second: the same checkpoint bytes */
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/a.st", dir);
    snprintf(b, sizeof b, "%s/b.st", dir);
    const char *base[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--batch-size", "4",
                          "--optimizer", "adamw", "--threads", "2", "--sample-len", "4", "--epochs"};
    const char *r1[24], *r2[24], *r3[24];
    int nb = (int)(sizeof base / sizeof base[0]);
    for (int i = 0; i < nb; i++) r1[i] = r2[i] = r3[i] = base[i];
    const char *t1[] = {"2", "--save", a, NULL}, *t2[] = {"1", "--save", b, NULL},
               *t3[] = {"2", "--resume", b, "--save", b, NULL};
    for (int i = 0; i < 6; i++) {
        if (i < 4) r1[nb + i] = t1[i], r2[nb + i] = t2[i];
        r3[nb + i] = t3[i];
    }
    t_proc p;
    CHECKF(run("full", r1, 120, &p) == 0, "%s", t_slurp(p.err));
    CHECKF(run("half", r2, 120, &p) == 0, "%s", t_slurp(p.err));
    CHECKF(run("resumed", r3, 120, &p) == 0, "%s", t_slurp(p.err));
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    CHECKF(system(cmd) == 0, "the resumed run's checkpoint differs from the uninterrupted one");
}

/* --recompute-macs on a GPT: Conv1D outputs (c_attn, c_fc: 32 multiply-adds per output
 * here; c_proj: 128) dropped after the forward and re-run in backward; the checkpoint is
 * the same bits as keeping them, in fp32, at --matmul-precision high and under bf16,
 * and the plan is smaller. */
PTEST(gpt_recompute_linear_layers_same_bits)
{
    const char *dir = t_tmpdir("gptrc");
    const char *data = lm_data(dir, 16);
    const char *cfg = cfg_file(dir, "[gpt]\nlayers=2\ndim=32\nheads=2\nctx=32\n");
    static const char *const mode[][2] = {{"--amp", "none"}, {"--matmul-precision", "high"}, {"--amp", "bf16"}};
    for (int m = 0; m < 3; m++) {
        char ck[3][700];
        double act[3] = {0, 0, 0};
        static const char *const macs[] = {"0", "32", "1000"};
        for (int r = 0; r < 3; r++) {
            snprintf(ck[r], sizeof ck[r], "%s/m%d_r%d.st", dir, m, r);
            const char *argv[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "32",
                                  "--batch-size", "4", "--optimizer", "adamw", "--epochs", "2", "--threads", "2",
                                  "--no-eval", "--sample-len", "4", "--mem-report", "--recompute-macs", macs[r],
                                  mode[m][0], mode[m][1], "--save", ck[r], NULL};
            t_proc p;
            CHECKF(run("rc", argv, 60, &p) == 0, "%s", t_slurp(p.err));
            const char *a = strstr(t_slurp(p.out), "activations: planned ");
            CHECKF(a != NULL, "%s", t_slurp(p.out));
            act[r] = a ? atof(a + 21) : 0;
            if (r) CHECKF(t_same_checkpoint(ck[0], ck[r]), "%s %s: --recompute-macs %s changed the checkpoint", mode[m][0],
                          mode[m][1], macs[r]);
        }
        CHECKF(act[2] <= act[1] && act[1] < act[0], "%s %s: planned %g, %g, %g MiB", mode[m][0], mode[m][1], act[0], act[1],
               act[2]);
    }
}

/* issue 41: the tied copy lm_head.weight is checked on load, not trusted: a flipped byte
 * (its CRC no longer matches) is refused by --resume and --init-from, and a copy that
 * differs from transformer.wte.weight under a matching CRC by --init-from; each error
 * names the file, the tensor and the byte offset. */
PTEST(gpt_tied_copy_checked_on_load)
{
    const char *dir = t_tmpdir("gpttie");
    const char *data = lm_data(dir, 16);
    const char *cfg = cfg_file(dir, "[gpt]\nlayers=1\ndim=32\nheads=2\nctx=16\n");
    char ck[700], ck2[700], err[1024], want[800];
    snprintf(ck, sizeof ck, "%s/m.st", dir);
    snprintf(ck2, sizeof ck2, "%s/differ.st", dir);
    const char *tr[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--batch-size", "4",
                        "--optimizer", "adamw", "--epochs", "1", "--max-steps", "2", "--no-eval", "--sample-len", "2",
                        "--threads", "1", "--save", ck, NULL};
    t_proc p;
    CHECKF(run("tie", tr, 60, &p) == 0, "%s", t_slurp(p.err));
    /* every tensor of the model file; lm_head.weight's element 5 changed, CRCs fresh */
    stio_file *f = NULL;
    CHECKF(stio_open(&f, ck, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    int n = stio_count(f), lm = -1;
    stio_tensor t[64];
    CHECK(n > 2 && n <= 64);
    for (int i = 0; i < n && i < 64; i++) {
        stio_info(f, i, &t[i]);
        size_t b = stio_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) b *= (size_t)t[i].shape[d];
        t[i].data = malloc(b ? b : 1);
        t[i].name = strdup(t[i].name);
        if (!strcmp(t[i].name, "lm_head.weight")) lm = i;
    }
    CHECKF(lm >= 0 && stio_read(f, t, n, err, sizeof err) == 0, "lm_head.weight %d: %s", lm, err);
    uint64_t at = stio_data_offset(f, lm);
    stio_close(f);
    if (lm < 0) return;
    ((float *)t[lm].data)[5] += 1.0f;
    CHECKF(stio_save(ck2, t, n, NULL, 0, 1, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < n; i++) free(t[i].data), free((char *)t[i].name);
    const char *ini[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--init-from", ck2,
                         "--generate", "4", NULL};
    CHECK(run("tie-differ", ini, 60, &p) != 0);
    CHECKF(strstr(t_slurp(p.err), "tensor lm_head.weight (element 5) differs from transformer.wte.weight"), "%s",
           t_slurp(p.err));
    /* a flipped byte in the trained file's lm_head.weight */
    FILE *w = fopen(ck, "r+b");
    CHECK(w != NULL);
    if (!w) return;
    unsigned char c = 0;
    CHECK(fseek(w, (long)at + 9, SEEK_SET) == 0 && fread(&c, 1, 1, w) == 1);
    c ^= 0x10;
    CHECK(fseek(w, (long)at + 9, SEEK_SET) == 0 && fwrite(&c, 1, 1, w) == 1);
    fclose(w);
    snprintf(want, sizeof want, "m.st: offset %llu: tensor lm_head.weight: checksum mismatch", (unsigned long long)at);
    ini[8] = ck;
    CHECK(run("tie-init", ini, 60, &p) != 0);
    CHECKF(strstr(t_slurp(p.err), want), "want %s:\n%s", want, t_slurp(p.err));
    const char *res[] = {t_prog("ddprt-train"), "--model-file", cfg, "--data", data, "--seq-len", "16", "--batch-size",
                         "4", "--optimizer", "adamw", "--epochs", "2", "--max-steps", "3", "--no-eval", "--sample-len",
                         "2", "--threads", "1", "--resume", ck, NULL};
    CHECK(run("tie-resume", res, 60, &p) != 0);
    CHECKF(strstr(t_slurp(p.err), want), "want %s:\n%s", want, t_slurp(p.err));
}
