/* RDMA verbs backend. Where no RDMA port is usable (the build machines) only the
 * "clear error" tests run; `make test-verbs` runs this file inside a Soft-RoCE VM
 * (../shared/tools/rxe/rxe-run), where the rest runs for real: the collectives
 * matrix with 2, 3 and 4 processes through the tcp:// rendezvous, a 2-rank LeNet
 * training, and failures (a SIGKILLed rank, a wrong rkey, a QP forced to the error
 * state): every rank must exit non-zero within a bound, naming the cause. */
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include "transport/tp_backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAXW 4

static int have_verbs(void)
{
    char d[200];
    return tp_verbs_available(d, sizeof d);
}

/* ---- without a device ------------------------------------------------------------- */

static int one_rank_allgather(void *ctx, const void *mine, size_t len, void *all, char *err, size_t errlen)
{
    (void)ctx, (void)err, (void)errlen;
    memcpy(all, mine, len);
    return 0;
}

TEST(verbs_without_a_port_is_a_clear_error)
{
    char d[200], err[256] = "";
    if (tp_verbs_available(d, sizeof d)) return; /* covered by the VM tests */
    CHECKF(d[0], "no reason given");
    tp_bootstrap bs = {.world = 1, .allgather = one_rank_allgather, .timeout_s = 5};
    tp_backend *b = (tp_backend *)1;
    CHECK(tp_verbs_create(&bs, &b, err, sizeof err) == -1);
    CHECK(b == NULL);
    CHECKF(strstr(err, "RDMA") || strstr(err, "verbs"), "unclear: %s", err);
    setenv("DDPRT_IB_HCA", "mlx5_9:1", 1);
    CHECK(tp_verbs_create(&bs, &b, err, sizeof err) == -1);
    CHECKF(strstr(err, "verbs"), "unclear: %s", err);
    CHECK(tp_backend_create(&bs, "carrier-pigeon", &b, err, sizeof err) == -1);
    CHECKF(strstr(err, "tcp, verbs, auto"), "%s", err);
}

/* ---- in the VM ------------------------------------------------------------------- */

static void spawn_rank(t_proc *p, const char *mode, const char *url, int r, int world, char *const *env,
                       const char *a1, const char *a2)
{
    char rs[16], ws[16], name[64];
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(ws, sizeof ws, "%d", world);
    snprintf(name, sizeof name, "%s-%d", mode, r);
    char *argv[] = {(char *)t_prog("t-verbs_coll"), (char *)mode, (char *)url, rs, ws, (char *)(a1 ? a1 : "-"),
                    (char *)(a2 ? a2 : "-"), "timeout=120", NULL};
    t_spawn(p, name, argv, env);
}

static void run_matrix(int world)
{
    if (!have_verbs()) return;
    t_clean_env();
    t_proc p[MAXW];
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port());
    for (int r = world - 1; r >= 0; r--) spawn_rank(&p[r], "matrix", url, r, world, NULL, NULL, NULL);
    for (int r = 0; r < world; r++) {
        int rc = t_wait(&p[r], 240);
        char want[64];
        snprintf(want, sizeof want, "rank %d of %d ok", r, world);
        const char *out = t_slurp(p[r].out);
        CHECKF(rc == 0 && strstr(out, want), "world %d rank %d exited %d\nstdout: %s\nstderr: %s", world, r, rc,
               out, t_slurp(p[r].err));
    }
}

TEST(verbs_matrix_2) { run_matrix(2); }
TEST(verbs_matrix_3) { run_matrix(3); }
TEST(verbs_matrix_4) { run_matrix(4); }

/* Runs t-verbs_coll loop on every rank with env; the ranks but `victim` must print
 * "failed at" and exit 3 within `bound` s of the fault; each message must contain
 * want (if not NULL) and at least one must contain want_any. Returns via CHECKs. */
static void run_fault(int world, int victim, char *const *env, const char *a1, const char *want,
                      const char *want_any, double bound)
{
    if (!have_verbs()) return;
    t_clean_env();
    t_proc p[MAXW];
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port());
    for (int r = 0; r < world; r++) spawn_rank(&p[r], "loop", url, r, world, env, a1, "len=262144");
    int rc[MAXW], any = 0;
    double t0 = 1e30, t1 = 0;
    for (int r = 0; r < world; r++) rc[r] = t_wait(&p[r], 180);
    for (int r = 0; r < world; r++) {
        const char *out = t_slurp(p[r].out);
        double t;
        if (sscanf(out, "killed at %lf", &t) == 1 && t < t0) t0 = t;
        if (r == victim) {
            CHECKF(rc[r] == 128 + 9, "victim rank %d exited %d: %s", r, rc[r], t_slurp(p[r].err));
            continue;
        }
        const char *f = strstr(out, "failed at ");
        CHECKF(rc[r] == 3 && f, "rank %d exited %d\nstdout: %s\nstderr: %s", r, rc[r], out, t_slurp(p[r].err));
        if (!f) continue;
        sscanf(f, "failed at %lf", &t);
        if (t < t0 && victim < 0) t0 = t; /* an injected fault: from the first failure */
        if (t > t1) t1 = t;
        CHECKF(!want || strstr(f, want), "rank %d's error does not name '%s': %s", r, want, f);
        any |= want_any && strstr(f, want_any) != NULL;
        printf("  rank %d: %s", r, strchr(f, ':') ? strchr(f, ':') + 2 : f);
    }
    CHECKF(!want_any || any, "no rank's error names '%s'", want_any);
    CHECKF(t1 - t0 < bound, "the last rank failed %.1f s after the fault", t1 - t0);
    printf("  world %d: every rank failed within %.2f s\n", world, t1 - t0);
}

TEST(verbs_kill_one_rank_3)
{
    run_fault(3, 1, NULL, "victim=1", "rank 1", NULL, 20);
}

TEST(verbs_wrong_rkey_2)
{
    char *env[] = {"DDPRT_VERBS_TEST_FAULT=rkey:1", NULL};
    run_fault(2, -1, env, NULL, "rank 1", "remote access error", 20);
}

TEST(verbs_qp_forced_to_error_state_3)
{
    char *env[] = {"DDPRT_VERBS_TEST_FAULT=qperr:1:12", NULL};
    run_fault(3, -1, env, NULL, "from rank 1 to rank 2", "error state", 20);
}

/* The seed script's job over verbs: 2 ranks of LeNet on a small synthetic dataset,
 * checking after every step that both ranks hold identical parameters, and that it
 * learns. */
PTEST(verbs_ddp_lenet_2)
{
    if (!have_verbs()) return;
    t_clean_env();
    char dir[512], url[64];
    snprintf(dir, sizeof dir, "%s/data", t_proc_tmpdir());
    mkdir(dir, 0755);
    t_write_synthetic_dataset(dir, 600, 200, 0);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port());
    t_proc p[2];
    for (int r = 0; r < 2; r++) {
        char rs[16];
        snprintf(rs, sizeof rs, "%d", r);
        char *argv[] = {(char *)t_prog("ddprt-train"), "--data", dir, "--init-method", url, "--rank", rs,
                        "--world-size", "2", "--backend", "verbs", "--epochs", "2", "--batch-size", "32",
                        "--threads", "1", "--log-interval", "5", "--lr", "0.05", "--check-sync", "1", NULL};
        char name[32];
        snprintf(name, sizeof name, "train%d", r);
        t_spawn(&p[r], name, argv, NULL);
    }
    for (int r = 0; r < 2; r++) {
        int rc = t_wait(&p[r], 240);
        CHECKF(rc == 0, "rank %d exited %d\nstdout: %s\nstderr: %s", r, rc, t_slurp(p[r].out), t_slurp(p[r].err));
    }
    const char *out = t_slurp(p[0].out), *err = t_slurp(p[0].err);
    CHECKF(strstr(out, "Train Epoch: 1") && strstr(out, "Test set: Average loss"), "rank 0 printed: %s", out);
    CHECKF(strstr(err, "verbs: 2 ranks over"), "no verbs start-up line: %s", err);
    const char *acc = strstr(out, "Accuracy: "), *ts = acc;
    while (acc && strstr(acc + 1, "Accuracy: ")) acc = strstr(acc + 1, "Accuracy: ");
    int correct = 0;
    CHECKF(acc && sscanf(acc, "Accuracy: %d/200", &correct) == 1 && correct >= 160, "%s", out);
    for (ts = strstr(out, "Test set"); ts; ts = strstr(ts + 1, "Test set"))
        printf("  %.*s\n", (int)strcspn(ts, "\n"), ts);
}
