#include "nn/opts.h"
#include "test/t.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Parses argv with stderr captured; returns the parse result and the message. */
static int parse(nn_opts *o, const char *const *args, int n, char *msg, size_t len)
{
    char *argv[16] = {"ddprt-train"};
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    nn_opts_default(o);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int rc = nn_opts_parse(o, n + 1, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t k = fread(msg, 1, len - 1, tmp);
    msg[k] = 0;
    fclose(tmp);
    return rc;
}

TEST(opts_defaults_match_the_seed_script)
{
    nn_opts o;
    char msg[256];
    CHECK(parse(&o, NULL, 0, msg, sizeof msg) == 0);
    CHECK_EQ(o.batch_size, 64);
    CHECK_EQ(o.test_batch_size, 1000);
    CHECK_EQ(o.epochs, 10);
    CHECK(o.lr == 0.01 && o.momentum == 0.5);
    CHECK_EQ(o.seed, 1);
    CHECK_EQ(o.log_interval, 10);
    CHECK(strcmp(o.model, "lenet") == 0);
}

TEST(opts_parse_forms_and_errors)
{
    nn_opts o;
    char msg[256];
    const char *ok[] = {"--batch-size", "128", "--lr=0.1", "--no-cuda", "--test_batch_size", "500"};
    CHECK(parse(&o, ok, 6, msg, sizeof msg) == 0);
    CHECK(o.batch_size == 128 && o.lr == 0.1 && o.no_cuda && o.test_batch_size == 500);

    const char *typo[] = {"--bach-size", "3"};
    CHECK(parse(&o, typo, 2, msg, sizeof msg) == -1);
    CHECKF(strstr(msg, "unknown flag --bach-size") && strstr(msg, "did you mean --batch-size"), "%s", msg);

    const char *bad[] = {"--epochs", "ten"};
    CHECK(parse(&o, bad, 2, msg, sizeof msg) == -1);
    CHECKF(strstr(msg, "--epochs") && strstr(msg, "'ten'"), "%s", msg);

    const char *neg[] = {"--batch-size", "-4"};
    CHECK(parse(&o, neg, 2, msg, sizeof msg) == -1);
    CHECKF(strstr(msg, "positive"), "%s", msg);

    const char *missing[] = {"--lr"};
    CHECK(parse(&o, missing, 1, msg, sizeof msg) == -1);
    CHECKF(strstr(msg, "needs a value"), "%s", msg);

    const char *dev[] = {"--device", "tpu"};
    CHECK(parse(&o, dev, 2, msg, sizeof msg) == -1);
}

TEST(opts_values_outside_their_domain_are_refused)
{
    nn_opts o;
    char msg[256];
    static const char *const bad[][3] = {
        {"--momentum", "2", "--momentum: must be in [0, 1), got '2'"},
        {"--momentum", "1", "--momentum: must be in [0, 1), got '1'"},
        {"--momentum", "-0.1", "--momentum: must be in [0, 1), got '-0.1'"},
        {"--lr", "inf", "--lr: expected a finite number, got 'inf'"},
        {"--lr", "nan", "--lr: expected a finite number, got 'nan'"},
        {"--lr", "0", "--lr: must be > 0, got '0'"},
        {"--lr", "-1", "--lr: must be > 0, got '-1'"},
        {"--weight-decay", "-1e-4", "--weight-decay: must be >= 0, got '-1e-4'"},
        {"--bucket-mb", "0", "--bucket-mb: must be > 0, got '0'"},
        {"--max-steps", "-5", "--max-steps: expected a non-negative integer, got '-5'"},
        {"--check-sync", "-1", "--check-sync: expected a non-negative integer, got '-1'"},
        {"--rank", "-2", "--rank: expected a non-negative integer, got '-2'"},
        {"--backend", "ib", "--backend: expected one of tcp|verbs|auto, got 'ib'"},
        {"--device", "tpu", "--device: expected one of cpu|cuda, got 'tpu'"},
    };
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        CHECKF(parse(&o, bad[i], 2, msg, sizeof msg) == -1, "%s %s accepted", bad[i][0], bad[i][1]);
        CHECKF(strstr(msg, bad[i][2]), "%s %s: %s", bad[i][0], bad[i][1], msg);
    }
    const char *range[] = {"--rank", "2", "--world-size", "2"};
    CHECK(parse(&o, range, 4, msg, sizeof msg) == -1);
    CHECKF(strstr(msg, "--rank 2 is out of range for --world-size 2"), "%s", msg);
    const char *ok[] = {"--momentum", "0", "--lr", "1e-3", "--weight-decay", "0", "--rank", "1", "--world-size", "2"};
    CHECKF(parse(&o, ok, 10, msg, sizeof msg) == 0, "%s", msg);
    const char *inv0[] = {"--invariant", "0"}; /* off, as without the flag (the ranks' agreement too) */
    CHECKF(parse(&o, inv0, 2, msg, sizeof msg) == 0 && o.invariant == NULL, "%s", msg);
    const char *every[] = {"--save-every", "20", "--save", "x.st"};
    CHECK(parse(&o, every, 2, msg, sizeof msg) == -1);
    CHECKF(strstr(msg, "--save-every 20: the checkpoints need a path: --save PATH"), "%s", msg);
    CHECKF(parse(&o, every, 4, msg, sizeof msg) == 0 && o.save_every == 20, "%s", msg);
}

static int find(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

/* Every flag not marked per-rank is in the agreement, and a different value of it on
 * another rank shows as a different value (so --max-steps and --check-sync are covered,
 * and so is any flag added later). */
TEST(opts_agreement_covers_every_job_flag)
{
    const char *fn[128], *an[128], *bn[128];
    int per[128];
    int64_t av[128], bv[128];
    char msg[256], arg[80];
    int nf = nn_opts_flags(fn, per, 128), jobs = 0;
    CHECK(nf > 20);
    nn_opts a, b;
    CHECK(parse(&a, NULL, 0, msg, sizeof msg) == 0);
    int na = nn_opts_agreement(&a, an, av, 128);
    CHECK(na > 10);
    CHECK(nn_opts_agreement(&a, an, av, 3) == -1);
    for (int i = 0; i < nf; i++) {
        int k = find(an, na, fn[i]);
        CHECKF((k >= 0) == !per[i], "--%s: %s", fn[i], per[i] ? "per-rank but compared" : "missing from agreement");
        if (per[i]) continue;
        jobs++;
        /* A value other than the default that the parser accepts. */
        static const char *const tries[] = {"7", "0.25", "cuda", "tcp", "xyz", "text", "cifar", "skip", "off", "adam", "cosine", "30,60", "world", "fp16", "bf16", "1", "winograd", "high", "32"};
        int ok = 0;
        /* A flag that needs another one (milestones need the multistep schedule,
         * --save-every a --save path) is compared against a baseline that has that
         * other one too. */
        static const char *const companions[] = {NULL, "--lr-schedule=multistep", "--save=x.st"};
        const char *companion = NULL;
        for (int pass = 0; pass < 3 && !ok; pass++) {
            companion = companions[pass];
            for (int t = 0; t < (int)(sizeof tries / sizeof tries[0]) && !ok; t++) {
                snprintf(arg, sizeof arg, "--%s=%s", fn[i], tries[t]);
                const char *args[] = {arg, companion};
                ok = parse(&b, args, companion ? 2 : 1, msg, sizeof msg) == 0;
                if (!ok) {
                    snprintf(arg, sizeof arg, "--%s", fn[i]);
                    ok = parse(&b, args, companion ? 2 : 1, msg, sizeof msg) == 0;
                }
            }
        }
        CHECKF(ok, "--%s: no test value accepted", fn[i]);
        nn_opts base;
        char own[96];
        snprintf(own, sizeof own, "--%s=5", fn[i]); /* the baseline's own value for that flag */
        const char *cargs[] = {companion, own};
        CHECK(parse(&base, cargs, companion ? 2 : 0, msg, sizeof msg) == 0);
        static const char *cn[128];
        static int64_t cv[128];
        int nc = nn_opts_agreement(&base, cn, cv, 128);
        int nb = nn_opts_agreement(&b, bn, bv, 128);
        CHECK(nb == na && nc == na);
        CHECKF(k >= 0 && !strcmp(bn[k], fn[i]) && bv[k] != cv[k], "--%s: value change not visible", fn[i]);
        for (int j = 0; j < na; j++)
            if (j != k) CHECKF(bv[j] == cv[j], "--%s changed %s", fn[i], bn[j]);
    }
    CHECK(jobs == na);
    CHECK(find(an, na, "max-steps") >= 0 && find(an, na, "check-sync") >= 0 && find(an, na, "rank") < 0);
}

TEST(opts_output_directories_are_checked_naming_the_flag)
{
    nn_opts o;
    char msg[256], err[256];
    const char *args[] = {"--plot", "/nodir/m.svg", "--metrics", "/nodir/m.csv"};
    CHECK(parse(&o, args, 4, msg, sizeof msg) == 0);
    CHECK(nn_opts_check_paths(&o, err, sizeof err) == -1);
    CHECKF(!strcmp(err, "--plot /nodir/m.svg: cannot write into /nodir: No such file or directory"), "%s", err);
    const char *save[] = {"--save", "/nodir/x/p.st"};
    CHECK(parse(&o, save, 2, msg, sizeof msg) == 0);
    CHECK(nn_opts_check_paths(&o, err, sizeof err) == -1);
    CHECKF(strstr(err, "--save /nodir/x/p.st: cannot write into /nodir/x"), "%s", err);
    const char *good[] = {"--plot", "/tmp/m.svg", "--save", "p.st"};
    CHECK(parse(&o, good, 4, msg, sizeof msg) == 0);
    CHECKF(nn_opts_check_paths(&o, err, sizeof err) == 0, "%s", err);
}
