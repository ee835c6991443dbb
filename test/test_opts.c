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
