/* --invariant K: the same checkpoint bytes, losses and accuracies on every world size
 * the tree allows, with different thread counts, bucket sizes and collective paths
 * (shared memory for the other collectives, or DDPRT_ALGO=ring: sockets only) per run;
 * every model's kernels at 1, 2 and 3 threads; SGD and AdamW, --amp bf16,
 * --accum-steps, --grad-compress, a --model-file graph; and one-line refusals. */
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAXW 6
static char img_dir[512], text_dir[512];

static void make_images(void)
{
    snprintf(img_dir, sizeof img_dir, "%s/img", t_proc_tmpdir());
    mkdir(img_dir, 0755);
    t_write_synthetic_dataset(img_dir, 600, 200, 0);
}

/* label<TAB>text, a keyword task (t_data.c; test_ddp.c's TextCNN test trains on it too). */
static void make_text(void)
{
    snprintf(text_dir, sizeof text_dir, "%s/text", t_proc_tmpdir());
    mkdir(text_dir, 0755);
    t_write_text_dataset(text_dir);
}

typedef struct job {
    int world, threads;
    const char *bucket_mb, *algo; /* NULL: defaults */
} job;

/* Rank 0's Train Epoch lines up to the rate, and the Test set lines: what must not
 * change with the world size. */
static void digest(const char *out, char *d, size_t dn)
{
    size_t o = 0;
    d[0] = 0;
    for (const char *p = out; (p = strstr(p, "Train Epoch:")); p++) {
        const char *e = strstr(p, "\t(");
        if (!e) break;
        o += (size_t)snprintf(d + o, dn - o, "%.*s\n", (int)(e - p), p);
        if (o >= dn) return;
    }
    for (const char *p = out; (p = strstr(p, "Test set:")); p++) {
        const char *e = strchr(p, '\n');
        o += (size_t)snprintf(d + o, dn - o, "%.*s\n", e ? (int)(e - p) : (int)strlen(p), p);
        if (o >= dn) return;
    }
}

/* One job of j.world ranks over tcp://127.0.0.1 (one process without a rendezvous
 * when 1); checkpoint into ck; rank 0's digest into d. 0 when every rank exited 0. */
static int run(const job *j, const char *data, const char *const *extra, const char *ck, char *d, size_t dn)
{
    t_proc p[MAXW];
    static char init[64], rs[MAXW][12], ws[12], th[12], algo[64];
    int port = t_free_port(), ok = 1;
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", port);
    snprintf(ws, sizeof ws, "%d", j->world);
    snprintf(th, sizeof th, "%d", j->threads);
    snprintf(algo, sizeof algo, "DDPRT_ALGO=%s", j->algo ? j->algo : "auto");
    char *env[] = {algo, NULL};
    for (int r = 0; r < j->world; r++) {
        const char *argv[48] = {t_prog("ddprt-train"), "--data", data, "--threads", th, "--log-interval", "1",
                                "--save", ck};
        int n = 9;
        if (j->world > 1) {
            snprintf(rs[r], sizeof rs[r], "%d", r);
            const char *dist[] = {"--init-method", init, "--rank", rs[r], "--world-size", ws};
            for (int i = 0; i < 6; i++) argv[n++] = dist[i];
        }
        if (j->bucket_mb) argv[n++] = "--bucket-mb", argv[n++] = j->bucket_mb;
        for (int i = 0; extra[i] && n < 46; i++) argv[n++] = extra[i];
        argv[n] = NULL;
        char name[32];
        snprintf(name, sizeof name, "w%dr%d", j->world, r);
        t_spawn(&p[r], name, (char *const *)argv, env);
    }
    for (int r = 0; r < j->world; r++) {
        int rc = t_wait(&p[r], 300);
        if (rc) {
            t_note("rank %d of %d exited %d: %s", r, j->world, rc, t_slurp(p[r].err));
            ok = 0;
        }
    }
    digest(t_slurp(p[0].out), d, dn);
    return ok ? 0 : -1;
}

/* Runs the jobs; every checkpoint and digest must equal the first's. */
static void same_bits(const char *what, const char *data, const char *const *extra, const job *jobs, int n)
{
    static char ck0[600], ck[600], d0[8192], d[8192];
    snprintf(ck0, sizeof ck0, "%s/ref.st", t_proc_tmpdir());
    CHECKF(run(&jobs[0], data, extra, ck0, d0, sizeof d0) == 0, "%s: world %d failed", what, jobs[0].world);
    CHECKF(strstr(d0, "Train Epoch:") && strstr(d0, "Test set:"), "%s: no log lines: %s", what, d0);
    for (int i = 1; i < n; i++) {
        snprintf(ck, sizeof ck, "%s/w%d.st", t_proc_tmpdir(), jobs[i].world);
        CHECKF(run(&jobs[i], data, extra, ck, d, sizeof d) == 0, "%s: world %d failed", what, jobs[i].world);
        CHECKF(t_same_file(ck0, ck), "%s: the checkpoint of world %d (%d threads) differs from world %d's", what,
               jobs[i].world, jobs[i].threads, jobs[0].world);
        CHECKF(!strcmp(d0, d), "%s: world %d printed\n%s\nworld %d printed\n%s", what, jobs[0].world, d0, jobs[i].world, d);
    }
}

PTEST(invariant_lenet_resnet20_textcnn_same_bits_on_1_2_4_ranks)
{
    t_clean_env();
    make_images();
    make_text();
    /* W=1 with 2 threads; W=2 with shared memory for the other collectives and small
     * buckets; W=4 on sockets only with another bucket size. */
    const job jobs[] = {{1, 2, NULL, NULL}, {2, 1, "0.01", NULL}, {4, 1, "0.05", "ring"}};
    const char *lenet[] = {"--invariant", "4", "--batch-size", "8", "--epochs", "1", "--lr", "0.05", NULL};
    same_bits("lenet 1 epoch", img_dir, lenet, jobs, 3);
    const char *r20[] = {"--invariant", "4", "--model", "resnet20", "--batch-size", "4", "--epochs", "1", "--max-steps",
                         "4", "--test-batch-size", "50", NULL};
    same_bits("resnet20", img_dir, r20, jobs, 3);
    /* Winograd's dW sums tiles per slot of images: a shard's sums must not see the others */
    const char *r20w[] = {"--invariant", "4", "--model", "resnet20", "--conv-algo", "winograd", "--batch-size", "4",
                          "--epochs", "1", "--max-steps", "3", "--test-batch-size", "50", NULL};
    same_bits("resnet20 --conv-algo winograd", img_dir, r20w, jobs, 3);
    const char *tc[] = {"--invariant", "4", "--model", "textcnn", "--seq-len", "12", "--embed-dim", "16", "--batch-size",
                        "8", "--epochs", "2", "--lr", "0.1", "--momentum", "0.9", NULL};
    same_bits("textcnn 2 epochs", text_dir, tc, jobs, 3);
}

PTEST(invariant_three_ranks_with_a_radix_3_tree)
{
    t_clean_env();
    make_images();
    const job jobs[] = {{1, 1, NULL, NULL}, {3, 1, "0.02", NULL}};
    const char *lenet[] = {"--invariant", "6:2x3", "--batch-size", "6", "--epochs", "1", "--max-steps", "12", NULL};
    same_bits("lenet, tree 2x3", img_dir, lenet, jobs, 2);
}

/* Each kernel's result must not depend on the thread count (K = 1: one process). */
PTEST(invariant_every_model_same_bits_on_1_2_3_threads)
{
    t_clean_env();
    make_images();
    make_text();
    const job jobs[] = {{1, 1, NULL, NULL}, {1, 2, NULL, NULL}, {1, 3, NULL, NULL}};
    const char *lenet[] = {"--invariant", "2", "--batch-size", "16", "--epochs", "1", "--max-steps", "8", NULL};
    same_bits("lenet threads", img_dir, lenet, jobs, 3);
    const char *r20[] = {"--invariant", "2", "--model", "resnet20", "--batch-size", "8", "--epochs", "1",
                         "--max-steps", "3", "--test-batch-size", "50", NULL};
    same_bits("resnet20 threads", img_dir, r20, jobs, 3);
    const char *r20w[] = {"--invariant", "2", "--model", "resnet20", "--conv-algo", "winograd", "--batch-size", "8",
                          "--epochs", "1", "--max-steps", "3", "--test-batch-size", "50", NULL};
    same_bits("resnet20 --conv-algo winograd threads", img_dir, r20w, jobs, 3);
    const char *r20b[] = {"--invariant", "2", "--model", "resnet20", "--amp", "bf16", "--batch-size", "8", "--epochs",
                          "1", "--max-steps", "3", "--test-batch-size", "50", NULL};
    same_bits("resnet20 --amp bf16 threads", img_dir, r20b, jobs, 3);
    const char *tc[] = {"--invariant", "2", "--model", "textcnn", "--seq-len", "12", "--embed-dim", "16", "--batch-size",
                        "16", "--epochs", "1", NULL};
    same_bits("textcnn threads", text_dir, tc, jobs, 3);
}

/* The features under the tree: AdamW, bf16 compute, accumulation, 16-bit gradients,
 * clipping, a cfg-file graph with BatchNorm, a partial last accumulation. */
PTEST(invariant_optimizers_amp_accum_compress_model_file)
{
    t_clean_env();
    make_images();
    const job jobs[] = {{1, 2, NULL, NULL}, {2, 1, "0.02", NULL}, {4, 1, NULL, "ring"}};
    const char *a[] = {"--invariant", "4", "--model-file", "nn/models/resnet8.cfg", "--optimizer", "adamw", "--lr",
                       "0.002", "--weight-decay", "0.01", "--amp", "bf16", "--accum-steps", "3", "--grad-compress",
                       "bf16", "--clip-grad-norm", "1", "--batch-size", "4", "--epochs", "1", "--max-steps", "3",
                       "--test-batch-size", "50", NULL};
    same_bits("adamw amp accum bf16-compress model-file", img_dir, a, jobs, 3);
    const char *b[] = {"--invariant", "4", "--momentum", "0.9", "--nesterov", "--grad-compress", "fp16", "--accum-steps",
                       "4", "--lr-scale", "world", "--batch-size", "8", "--epochs", "2", NULL};
    same_bits("sgd nesterov fp16-compress accum 4 (partial last step)", img_dir, b, jobs, 3);
    /* the embedding's gradient folded by touched rows (nn_fold_rows), marks kept across
     * accumulated micro-batches, in 16-bit values */
    make_text();
    const char *c[] = {"--invariant", "4", "--model", "textcnn", "--seq-len", "12", "--embed-dim", "16", "--accum-steps",
                       "2", "--grad-compress", "bf16", "--optimizer", "adamw", "--lr", "0.01", "--batch-size", "4",
                       "--epochs", "1", NULL};
    same_bits("textcnn adamw accum 2 bf16-compress", text_dir, c, jobs, 3);
}

PTEST(invariant_refuses_what_it_cannot_honour)
{
    t_clean_env();
    make_images();
    static const struct { const char *args[8]; int world; const char *msg; } cases[] = {
        {{"--invariant", "4", "--sync-bn", NULL}, 1, "--invariant cannot honour --sync-bn"},
        {{"--invariant", "4", "--device", "cuda", NULL}, 1, "--device cuda"},
        {{"--invariant", "4", NULL}, 3, "3 ranks cannot share its tree"},
        {{"--invariant", "12:2x2", NULL}, 1, "the radices multiply to 4, not 12"},
        {{"--invariant", "22", NULL}, 1, "prime factor 11 is above 8"},
        {{"--invariant", "x", NULL}, 1, "expected K"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        t_proc p[MAXW];
        static char init[64], rs[MAXW][12], ws[12];
        int port = t_free_port(), W = cases[c].world;
        snprintf(init, sizeof init, "tcp://127.0.0.1:%d", port);
        snprintf(ws, sizeof ws, "%d", W);
        for (int r = 0; r < W; r++) {
            const char *argv[24] = {t_prog("ddprt-train"), "--data", img_dir, "--threads", "1", "--epochs", "1"};
            int n = 7;
            snprintf(rs[r], sizeof rs[r], "%d", r);
            if (W > 1) {
                const char *dist[] = {"--init-method", init, "--rank", rs[r], "--world-size", ws};
                for (int i = 0; i < 6; i++) argv[n++] = dist[i];
            }
            for (int i = 0; cases[c].args[i]; i++) argv[n++] = cases[c].args[i];
            argv[n] = NULL;
            t_spawn(&p[r], rs[r], (char *const *)argv, NULL);
        }
        for (int r = 0; r < W; r++) {
            int rc = t_wait(&p[r], 60);
            const char *err = t_slurp(p[r].err), *e = strstr(err, "error: ");
            CHECKF(rc != 0 && rc != -1 && e && !strstr(e + 1, "error: ") && strstr(e, cases[c].msg) &&
                       strstr(e, cases[c].msg) < strchr(e, '\n'),
                   "case %zu rank %d: rc %d, wanted one error line with \"%s\": %s", c, r, rc, cases[c].msg, err);
        }
    }
}

/* --save-every: a restart point inside an epoch (an elastic launcher's request file,
 * made here by hand) stops 2 ranks after the checkpoint of step 10 of 38, the sampler
 * position in it; one process resumes mid-epoch and ends in the checkpoint of an
 * uninterrupted one-process run, byte for byte. */
PTEST(invariant_mid_epoch_checkpoint_resumes_on_another_world_size)
{
    t_clean_env();
    make_images();
    static char full[600], part[600], d0[8192], init[64], ws[8] = "2", rs[2][8] = {"0", "1"};
    snprintf(full, sizeof full, "%s/full.st", t_proc_tmpdir());
    snprintf(part, sizeof part, "%s/part.st", t_proc_tmpdir());
    const char *a[] = {"--invariant", "4", "--batch-size", "4", "--epochs", "2", "--save-every", "10", NULL};
    const job one = {1, 1, NULL, NULL};
    CHECK(run(&one, img_dir, a, full, d0, sizeof d0) == 0);
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", t_free_port());
    t_proc p[2];
    /* An elastic launcher's request, made before the start: the first restart point (step 10) stops. */
    static char grow[640];
    snprintf(grow, sizeof grow, "DDPRT_ELASTIC=%s/grow", t_proc_tmpdir());
    t_write_file(t_proc_tmpdir(), "grow", "", 0, 0);
    char *env[] = {grow, NULL};
    for (int r = 0; r < 2; r++) {
        const char *argv[32] = {t_prog("ddprt-train"), "--data", img_dir, "--threads", "1", "--log-interval", "1",
                                "--save", part, "--init-method", init, "--rank", rs[r], "--world-size", ws};
        int n = 15;
        for (int i = 0; a[i]; i++) argv[n++] = a[i];
        argv[n] = NULL;
        t_spawn(&p[r], rs[r], (char *const *)argv, env);
    }
    for (int r = 0; r < 2; r++)
        CHECKF(t_wait(&p[r], 120) == 75, "rank %d should stop at a restart point: %s", r, t_slurp(p[r].err));
    CHECKF(strstr(t_slurp(p[0].err), "stopping at this restart point"), "%s", t_slurp(p[0].err));
    const char *hdr = t_st_header(part);
    CHECKF(strstr(hdr, "\"epoch_steps\":\"10\""), "the checkpoint is not step 10's: %.300s", hdr);
    const char *b[] = {"--invariant", "4", "--batch-size", "4", "--epochs", "2", "--save-every", "10", "--resume",
                       part, NULL};
    CHECK(run(&one, img_dir, b, part, d0, sizeof d0) == 0);
    CHECKF(t_same_file(full, part), "resumed mid-epoch on 1 rank: the checkpoint differs from the uninterrupted run's");
}

/* The same without --invariant, on one process: a mid-epoch checkpoint (--accum-steps 2:
 * the sampler position counts micro-batches) resumes to the uninterrupted bytes. */
PTEST(mid_epoch_checkpoint_resumes_plain_training)
{
    t_clean_env();
    make_images();
    static char full[600], part[600], d0[8192];
    snprintf(full, sizeof full, "%s/full.st", t_proc_tmpdir());
    snprintf(part, sizeof part, "%s/part.st", t_proc_tmpdir());
    const char *a[] = {"--batch-size", "8", "--accum-steps", "2", "--epochs", "2", "--save-every", "7", NULL};
    const job one = {1, 1, NULL, NULL};
    CHECK(run(&one, img_dir, a, full, d0, sizeof d0) == 0);
    const char *argv[24] = {t_prog("ddprt-train"), "--data", img_dir, "--threads", "1", "--log-interval", "1", "--save",
                            part};
    int n = 9;
    for (int i = 0; a[i]; i++) argv[n++] = a[i];
    argv[n] = NULL;
    static char grow[640];
    snprintf(grow, sizeof grow, "DDPRT_ELASTIC=%s/grow", t_proc_tmpdir());
    t_write_file(t_proc_tmpdir(), "grow", "", 0, 0);
    char *env[] = {grow, NULL};
    t_proc p;
    t_spawn(&p, "part", (char *const *)argv, env);
    CHECKF(t_wait(&p, 120) == 75, "%s", t_slurp(p.err));
    const char *b[] = {"--batch-size", "8", "--accum-steps", "2", "--epochs", "2", "--save-every", "7", "--resume", part,
                       NULL};
    CHECK(run(&one, img_dir, b, part, d0, sizeof d0) == 0);
    CHECKF(t_same_file(full, part), "resumed mid-epoch: the checkpoint differs from the uninterrupted run's");
}
