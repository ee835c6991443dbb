/* The Python package (python/ddprt) over build/libddprt.so: the core calls on every
 * dtype and op against numpy at 1, 2 and 3 ranks (python/tests/core_check.py); DDP with
 * ddprt's hook against gloo, the Horovod API, overlap, the compressed hooks, under
 * ddprt-launch and torchrun (ddp_check.py); a SIGKILLed rank raising an exception that
 * names it (fail_check.py); misuse (misuse_check.py); sum vs average defaults (defaults_check.py); the
 * rest of the Horovod API (hvd_check.py, hvd_train_check.py); the argument checks'
 * property test (args_fuzz.py); `pip install`
 * of the package. Skipped with a note where the Python (DDPRT_PYTHON, default
 * /usr/bin/python3) lacks numpy or torch, or under a sanitizer (an uninstrumented
 * interpreter cannot load an instrumented library). The ctypes mirror of the C header:
 * test/test_api_abi.c. */
#include "test/t.h"
#include "test/t_proc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *python(void)
{
    const char *p = getenv("DDPRT_PYTHON");
    if (p && *p) return p;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

/* 1 when the test can run; else notes why not. need: "numpy" or "torch". */
static int have(const char *need)
{
    if (t_san("")) {
        t_note("skipped under a sanitizer: %s would load an instrumented libddprt.so", python());
        return 0;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "%s -c 'import %s' >/dev/null 2>&1", python(), need);
    if (system(cmd)) {
        t_note("skipped: %s has no %s (Debian: apt-get install python3-%s)", python(), need,
               strcmp(need, "numpy") ? need : "numpy");
        return 0;
    }
    return 1;
}

/* PYTHONPATH=python (the checkout), traces into the test's folder. */
static char **env_for(const char *extra)
{
    static char pp[600], tr[600], ex[200];
    char cwd[400];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    snprintf(pp, sizeof pp, "PYTHONPATH=%s/python", cwd);
    snprintf(tr, sizeof tr, "DDPRT_TRACE_DIR=%s", t_proc_tmpdir());
    snprintf(ex, sizeof ex, "%s", extra ? extra : "DDPRT_TEST_PY=1");
    static char *env[4];
    env[0] = pp, env[1] = tr, env[2] = ex, env[3] = NULL;
    return env;
}

/* core_check.py in one process, or world ranks under ddprt-launch: "rank R of W ok". */
static void core(int world)
{
    if (!have("numpy")) return;
    char n[16];
    snprintf(n, sizeof n, "%d", world);
    char *one[] = {(char *)python(), "python/tests/core_check.py", NULL};
    char *launch[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", n, "--", (char *)python(),
                      "python/tests/core_check.py", NULL};
    t_launch_ok(world == 1 ? one : launch, env_for(NULL), world, "rank %d of %d ok", 180);
}

PTEST(python_core_calls_vs_numpy_one_process) { core(1); }
PTEST(python_core_calls_vs_numpy_2_ranks) { core(2); }
PTEST(python_core_calls_vs_numpy_3_ranks) { core(3); }

/* misuse_check.py: arrays and handles outliving finalize(), byte order, integer
 * ranges and enums refused before any C call, 2200 dropped handles (1024 slots). */
static void misuse(int world)
{
    if (!have("numpy")) return;
    char n[16];
    snprintf(n, sizeof n, "%d", world);
    char *one[] = {(char *)python(), "python/tests/misuse_check.py", NULL};
    char *launch[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", n, "--", (char *)python(),
                      "python/tests/misuse_check.py", NULL};
    t_launch_ok(world == 1 ? one : launch, env_for(NULL), world, "rank %d of %d misuse ok", 180);
}

PTEST(python_misuse_refused_or_defined_one_process) { misuse(1); }
PTEST(python_misuse_refused_or_defined_2_ranks) { misuse(2); }

/* The property test of the argument checks (args_fuzz.py), short and seeded: 20000
 * random calls (dtypes and byte orders, non-contiguous, 0-d and empty arrays, roots,
 * ops, init's options) each refused cleanly before any C call, naming the argument, or
 * accepted with its values intact. `python3 python/tests/args_fuzz.py 1000000 SEED`
 * is the long run. */
PTEST(python_argument_checks_fuzz_20000_cases)
{
    if (!have("numpy")) return;
    t_clean_env();
    char *argv[] = {(char *)python(), "python/tests/args_fuzz.py", "20000", "41", NULL};
    t_proc p;
    t_spawn(&p, "args_fuzz", argv, env_for(NULL));
    int rc = t_wait(&p, 300);
    const char *out = t_slurp(p.out);
    CHECKF(rc == 0 && strstr(out, "args fuzz ok: 20000 cases") && strstr(out, "collective accepted") &&
               strstr(out, "init refused"), "exit %d\nstdout: %s\nstderr: %s", rc, out, t_slurp(p.err));
}

/* ddprt.allreduce sums by default (MPI, NCCL), ddprt.torch.allreduce averages
 * (Horovod): both defaults, and each asked for the other (defaults_check.py). */
PTEST(python_core_allreduce_sums_horovod_allreduce_averages_2_ranks)
{
    if (!have("numpy")) return;
    char *argv[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", "2", "--", (char *)python(),
                    "python/tests/defaults_check.py", NULL};
    t_launch_ok(argv, env_for(NULL), 2, "rank %d of %d ok", 180);
}

/* The Horovod API beyond the core calls (hvd_check.py): alltoall, reducescatter, the
 * grouped calls against numpy; gradients through every collective against Horovod's
 * backward rules; integer Average; the queries; the timeline. hvd_train_check.py: join
 * with uneven batches (no hang, Horovod's rule for joined ranks), a fresh Adam's state
 * broadcast, sparse_as_dense, num_groups. */
static void hvd(const char *script, const char *want, int world)
{
    if (!have("torch")) return;
    char n[16];
    snprintf(n, sizeof n, "%d", world);
    char *argv[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", n, "--", (char *)python(), (char *)script,
                    NULL};
    t_launch_ok(argv, env_for(NULL), world, want, 240);
}

PTEST(python_horovod_collectives_and_gradients_vs_numpy_2_ranks)
{
    hvd("python/tests/hvd_check.py", "rank %d of %d hvd ok", 2);
}
PTEST(python_horovod_collectives_and_gradients_vs_numpy_3_ranks)
{
    hvd("python/tests/hvd_check.py", "rank %d of %d hvd ok", 3);
}
PTEST(python_horovod_join_uneven_batches_and_optimizer_options_2_ranks)
{
    hvd("python/tests/hvd_train_check.py", "rank %d of %d train ok", 2);
}
PTEST(python_horovod_join_uneven_batches_and_optimizer_options_3_ranks)
{
    hvd("python/tests/hvd_train_check.py", "rank %d of %d train ok", 3);
}

/* hvd.sparse_allreduce_async (hvd_sparse_check.py): every rank's sparse COO tensor
 * (different nonzeros, duplicates, an empty rank) against torch's coalesce of their
 * concatenation, bitwise; DistributedOptimizer with Embedding(sparse=True) through that
 * path, a rank not using it in some steps, against a local replay. */
PTEST(python_horovod_sparse_allreduce_vs_coalesce_2_ranks)
{
    hvd("python/tests/hvd_sparse_check.py", "rank %d of %d sparse ok", 2);
}
PTEST(python_horovod_sparse_allreduce_vs_coalesce_3_ranks)
{
    hvd("python/tests/hvd_sparse_check.py", "rank %d of %d sparse ok", 3);
}

/* op=hvd.Adasum (hvd_adasum_check.py): allreduce against the formula's pair tree,
 * bitwise (equal vectors give themselves, orthogonal ones their sum), refusals, and
 * DistributedOptimizer(op=Adasum) against a replay of start + Adasum of the deltas. */
PTEST(python_horovod_adasum_vs_formula_2_ranks)
{
    hvd("python/tests/hvd_adasum_check.py", "rank %d of %d adasum ok", 2);
}
PTEST(python_horovod_adasum_vs_formula_3_ranks)
{
    hvd("python/tests/hvd_adasum_check.py", "rank %d of %d adasum ok", 3);
}

/* hvd.SyncBatchNorm (hvd_sbn_check.py): uneven per-rank batches (one rank empty) against
 * torch's batch norm of the concatenated batch in one process: output, input, weight and
 * bias gradients, running statistics and eval mode within 1e-6 (relative above 1). */
PTEST(python_horovod_sync_batch_norm_vs_whole_batch_2_ranks)
{
    hvd("python/tests/hvd_sbn_check.py", "rank %d of %d sbn ok", 2);
}
PTEST(python_horovod_sync_batch_norm_vs_whole_batch_3_ranks)
{
    hvd("python/tests/hvd_sbn_check.py", "rank %d of %d sbn ok", 3);
}

/* Process sets (hvd_sets_check.py): set {0,2} of 3 ranks runs every collective (and
 * SyncBatchNorm) among its members on its own communicator while rank 1 is refused naming
 * the set; join with uneven batches within the set; a second set, mismatched or unregistered sets,
 * remove_process_set. */
PTEST(python_horovod_process_sets_3_ranks)
{
    hvd("python/tests/hvd_sets_check.py", "rank %d of %d sets ok", 3);
}

/* The dynamic-graph probe (hvd_dynamic_check.py): ranks use different layers, in
 * different orders, of equal sizes; the reduced gradients must equal the exact
 * averages bitwise (Horovod's zeros for unused ones), and rank 0's changed order be
 * agreed. */
PTEST(python_horovod_dynamic_graph_gives_exact_averages_2_ranks)
{
    hvd("python/tests/hvd_dynamic_check.py", "rank %d of %d dynamic ok", 2);
}
PTEST(python_horovod_dynamic_graph_gives_exact_averages_3_ranks)
{
    hvd("python/tests/hvd_dynamic_check.py", "rank %d of %d dynamic ok", 3);
}

/* The DDP hook's order protection (ddp_order_check.py): hooks called with stand-in
 * buckets in an order chosen per rank; swapped buckets of equal size fail on every rank
 * naming each rank's bucket index and size; different sizes name this rank's bucket. */
PTEST(python_ddp_hook_swapped_buckets_fail_naming_each_rank_2_ranks)
{
    hvd("python/tests/ddp_order_check.py", "rank %d of %d order ok", 2);
}
PTEST(python_ddp_hook_swapped_buckets_fail_naming_each_rank_3_ranks)
{
    hvd("python/tests/ddp_order_check.py", "rank %d of %d order ok", 3);
}

/* gloo and ddprt on one environment: under ddprt-launch rank 0's torch store takes
 * MASTER_PORT, under torchrun the agent's does. */
PTEST(python_ddp_hook_bitwise_equal_to_gloo_under_ddprt_launch)
{
    if (!have("torch")) return;
    char *argv[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", "2", "--", (char *)python(),
                    "python/tests/ddp_check.py", NULL};
    t_launch_ok(argv, env_for(NULL), 2, "rank %d ok", 240);
}

PTEST(python_ddp_hook_bitwise_equal_to_gloo_under_torchrun)
{
    if (!have("torch")) return;
    char port[16];
    snprintf(port, sizeof port, "%d", t_free_port());
    /* --redirects 1 --tee 1: torch 1.13's torchrun on Python 3.11 fails to parse its
     * own default ("0": Std.NONE is not iterable there). */
    char *argv[] = {(char *)python(), "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port,
                    "--redirects", "1", "--tee", "1", "python/tests/ddp_check.py", NULL};
    t_launch_ok(argv, env_for(NULL), 2, "rank %d ok", 240);
}

/* Ranks started with torchrun's variables: rank 2 SIGKILLs itself (mode "stop": stops
 * itself, a stalled peer); 0 and 1 raise an exception naming it, well within the
 * deadline (20 s; 4 s for the stall, which only the deadline can end). */
static void killed(const char *mode)
{
    int stop = !strcmp(mode, "stop");
    t_clean_env();
    enum { W = 3 };
    int port = t_free_port();
    t_proc p[W];
    static char envs[W][6][700];
    char **base = env_for(NULL);
    for (int r = 0; r < W; r++) {
        snprintf(envs[r][0], 700, "%s", base[0]);
        snprintf(envs[r][1], 700, "%s", base[1]);
        snprintf(envs[r][2], 700, "MASTER_ADDR=127.0.0.1");
        snprintf(envs[r][3], 700, "MASTER_PORT=%d", port);
        snprintf(envs[r][4], 700, "RANK=%d", r);
        snprintf(envs[r][5], 700, "WORLD_SIZE=%d", W);
        char *env[] = {envs[r][0], envs[r][1], envs[r][2], envs[r][3], envs[r][4], envs[r][5], "LOCAL_RANK=0", NULL};
        char *argv[] = {(char *)python(), "python/tests/fail_check.py", (char *)mode, "2", stop ? "4" : "20", NULL};
        char name[32];
        snprintf(name, sizeof name, "fail-%d", r);
        t_spawn(&p[r], name, argv, env);
    }
    int rc[W];
    for (int r = 0; r < 2; r++) rc[r] = t_wait(&p[r], 120);
    rc[2] = t_wait(&p[2], stop ? 0.1 : 60); /* a stopped victim is killed here */
    double tk = 0;
    CHECKF((stop || rc[2] == 128 + 9) && sscanf(t_slurp(p[2].out), "killed at %lf", &tk) == 1,
           "victim exited %d: %s%s", rc[2], t_slurp(p[2].out), t_slurp(p[2].err));
    for (int r = 0; r < 2; r++) {
        const char *out = t_slurp(p[r].out);
        double tr = 0;
        CHECKF(rc[r] == 3 && sscanf(out, "raised at %lf", &tr) == 1, "rank %d exited %d\nstdout: %s\nstderr: %s", r,
               rc[r], out, t_slurp(p[r].err));
        const char *want = stop ? "rank 2 late" : "rank 2 closed the connection";
        CHECKF(strstr(out, want) && tr - tk < 20, "rank %d (%.1f s after the kill): no '%s' in: %s", r, tr - tk, want,
               out);
        /* A peer's failure is a PeerError (Horovod's HorovodInternalError); DDP rewraps it. */
        CHECKF(!strcmp(mode, "ddp") || strstr(out, ": PeerError: "), "rank %d: not a PeerError: %s", r, out);
    }
}

PTEST(python_sigkilled_rank_raises_naming_it) { if (have("numpy")) killed("numpy"); }
PTEST(python_stalled_rank_raises_naming_it_at_the_deadline) { if (have("numpy")) killed("stop"); }
PTEST(python_sigkilled_rank_fails_ddp_backward_naming_it) { if (have("torch")) killed("ddp"); }

/* pip install of a copy of python/ with the library in it (as `make python` does),
 * into a folder; the package found there loads its own library. */
PTEST(python_pip_install_carries_the_library)
{
    if (!have("numpy")) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "%s -m pip --version >/dev/null 2>&1", python());
    if (system(cmd)) {
        t_note("skipped: %s has no pip (apt-get install python3-pip)", python());
        return;
    }
    const char *d = t_proc_tmpdir(), *b = getenv("DDPRT_BUILD");
    static const char script[] =
        "set -e; T=\"$1\"; B=\"$2\"; PY=\"$3\"\n"
        "cp -r python \"$T/src\"; rm -rf \"$T/src/build\" \"$T/src/ddprt/libddprt.so\"*\n"
        "cp \"$B/libddprt.so.0\" \"$T/src/ddprt/\"\n"
        "\"$PY\" -m pip install -q --no-deps --no-build-isolation --no-index --target \"$T/site\" \"$T/src\" 2>&1 |"
        " grep -v 'root.* user\\|venv' || true\n"
        "cd /; PYTHONPATH=\"$T/site\" \"$PY\" -c 'import ddprt, ddprt._lib as l, numpy as np; ddprt.init(); "
        "print(\"lib\", l.path); print(\"sum\", ddprt.allreduce(np.arange(3.0))); ddprt.finalize()'\n";
    char *argv[] = {"/bin/sh", "-c", (char *)script, "sh", (char *)d, (char *)(b ? b : "build"), (char *)python(), NULL};
    t_clean_env();
    t_proc p;
    t_spawn(&p, "pip", argv, NULL);
    int rc = t_wait(&p, 180);
    const char *out = t_slurp(p.out);
    char want[600];
    snprintf(want, sizeof want, "lib %s/site/ddprt/libddprt.so.0", d);
    CHECKF(rc == 0 && strstr(out, want) && strstr(out, "sum [0. 1. 2.]"), "exit %d\nstdout: %s\nstderr: %s", rc, out,
           t_slurp(p.err));
}

/* The examples are the users' scripts with ddprt plugged in: against their gloo
 * baselines only lines are added, each says ddprt, and there are few. */
PTEST(python_examples_differ_from_their_gloo_scripts_only_where_ddprt_plugs_in)
{
    static const char *const pairs[][2] = {{"mnist_gloo.py", "mnist_ddprt.py"}, {"resnet18_gloo.py", "resnet18_ddprt.py"}};
    for (int i = 0; i < 2; i++) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "diff python/examples/%s python/examples/%s", pairs[i][0], pairs[i][1]);
        char *argv[] = {"/bin/sh", "-c", cmd, NULL};
        t_proc p;
        t_spawn(&p, "diff", argv, NULL);
        int rc = t_wait(&p, 20);
        const char *out = t_slurp(p.out);
        int added = 0, removed = 0, foreign = 0;
        for (const char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
            const char *e = strchr(l, '\n');
            size_t n = e ? (size_t)(e - l) : strlen(l);
            char line[400];
            snprintf(line, sizeof line, "%.*s", (int)(n < 399 ? n : 399), l);
            if (line[0] == '<') removed++;
            if (line[0] == '>') added++, foreign += !strstr(line, "ddprt");
        }
        CHECKF(rc == 1 && added >= 3 && added <= 6 && !removed && !foreign,
               "%s -> %s: %d added (%d without 'ddprt'), %d removed:\n%s", pairs[i][0], pairs[i][1], added, foreign,
               removed, out);
    }
}

/* Rank 0's loss lines of a short run: the seed script on gloo, with ddprt's hook, and
 * the Horovod-style script on ddprt.torch must print the same curve (2 ranks, bitwise).
 * The hook's run is started the seed's way (--tcp tcp://IP:PORT --rank R, one process
 * per rank, no launcher): torch's store and ddprt share that address. */
PTEST(python_mnist_loss_curves_equal_gloo_hook_and_horovod_api)
{
    if (!have("torch")) return;
    static const char *const scripts[] = {"mnist_gloo.py", "mnist_ddprt.py", "mnist_horovod.py"};
    static char curves[3][4096];
    for (int i = 0; i < 3; i++) {
        char path[200];
        snprintf(path, sizeof path, "python/examples/%s", scripts[i]);
        char *argv[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", "2", "--", (char *)python(), path,
                        "--data", "synthetic", "--epochs", "1", "--max-steps", "6", "--batch-size", "32",
                        "--log-interval", "1", NULL};
        char pp[700];
        snprintf(pp, sizeof pp, "%s:%s/python/examples", env_for(NULL)[0], strchr(env_for(NULL)[0], '=') + 1);
        char *env[] = {pp, env_for(NULL)[1], NULL};
        t_clean_env();
        t_proc p, p1;
        int rc, rc1 = 0;
        const char *pre = "[rank 0] ";
        if (i == 1) {
            char url[64];
            snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port());
            char *a0[] = {(char *)python(), path, "--tcp", url, "--rank", "0", "--world-size", "2", "--data", "synthetic",
                          "--epochs", "1", "--max-steps", "6", "--batch-size", "32", "--log-interval", "1", NULL};
            t_spawn(&p, "hook-0", a0, env);
            a0[5] = "1";
            t_spawn(&p1, "hook-1", a0, env);
            rc = t_wait(&p, 180), rc1 = t_wait(&p1, 60);
            pre = "";
        } else {
            t_spawn(&p, scripts[i], argv, env);
            rc = t_wait(&p, 180);
        }
        const char *out = t_slurp(p.out);
        CHECKF(rc == 0 && rc1 == 0, "%s: exit %d %d\n%s%s", scripts[i], rc, rc1, out, t_slurp(p.err));
        /* Rank 0's "Train Epoch" and "Test set" lines, in order, without the prefix. */
        size_t k = 0, np = strlen(pre);
        for (const char *l = out; *l && k < sizeof curves[i] - 200;) {
            const char *e = strchr(l, '\n');
            size_t n = e ? (size_t)(e - l) + 1 : strlen(l);
            if (!strncmp(l, pre, np) && (!strncmp(l + np, "Train", 5) || !strncmp(l + np, "Test", 4)))
                k += (size_t)snprintf(curves[i] + k, sizeof curves[i] - k, "%.*s", (int)(n - np), l + np);
            l += n;
        }
    }
    CHECKF(strstr(curves[0], "Loss:") && strstr(curves[0], "Test set"), "no loss lines: %s", curves[0]);
    CHECKF(!strcmp(curves[0], curves[1]), "gloo vs ddprt hook:\n%s---\n%s", curves[0], curves[1]);
    CHECKF(!strcmp(curves[1], curves[2]), "ddprt hook vs Horovod API:\n%s---\n%s", curves[1], curves[2]);
}

/* A Python driver that starts its own ranks: exit 0 and `want` on its stdout. */
static void py_ok(char *const argv[], const char *want)
{
    if (!have("torch")) return;
    t_clean_env();
    t_proc p;
    t_spawn(&p, "py", argv, env_for(NULL));
    int rc = t_wait(&p, 280);
    const char *out = t_slurp(p.out);
    CHECKF(rc == 0 && strstr(out, want), "exit %d\nstdout: %s\nstderr: %s", rc, out, t_slurp(p.err));
}

/* hvd.elastic (hvd_elastic_check.py), 2 ranks started directly: stopped at a restart
 * point (a faked DDPRT_ELASTIC file: exit 75, the state file at that commit) and killed
 * by a dead peer (HorovodInternalError: exit 1), each rerun resumes and ends with the
 * parameters of an uninterrupted run, bitwise; then ddprt-launch --nnodes 1:2 with a
 * node joining mid-run: exit 75, round 1 on 2 ranks resumes from rank 0's file. */
PTEST(python_horovod_elastic_stop_and_failure_resume_bitwise_2_ranks)
{
    char *argv[] = {(char *)python(), "python/tests/hvd_elastic_check.py", "drive", "2", NULL};
    py_ok(argv, "elastic ok: 2 ranks");
}

PTEST(python_horovod_elastic_under_ddprt_launch_nnodes_1_2_grows)
{
    char *argv[] = {(char *)python(), "python/tests/hvd_elastic_check.py", "launch", (char *)t_prog("ddprt-launch"),
                    NULL};
    py_ok(argv, "elastic launch ok");
}

/* The Horovod example copies (hvd_examples_check.py), 2 ranks under ddprt-launch: the
 * synthetic benchmark prints img/sec as Horovod's does and ends with the parameters of
 * the same script on a gloo reference of Horovod's semantics (its one import line
 * changed); the imagenet script's metrics and epoch-2 checkpoint equal the reference's,
 * and a run stopped after epoch 1 resumes from its checkpoint to the same one, bitwise. */
PTEST(python_horovod_examples_synthetic_and_imagenet_vs_gloo_and_resume_2_ranks)
{
    char *argv[] = {(char *)python(), "python/tests/hvd_examples_check.py", (char *)t_prog("ddprt-launch"), NULL};
    py_ok(argv, "examples ok");
}
