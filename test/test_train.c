/* End-to-end single-process training on a small synthetic dataset in IDX format. */
#include "test/t.h"
#include "test/t_util.h"
#include "test/t_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(train_no_heap_allocation_in_the_loop)
{
    static char dir[400];
    snprintf(dir, sizeof dir, "%s", t_tmpdir("alloc"));
    t_write_synthetic_dataset(dir, 256, 64, 0);
    char cmd[1024], out[4096];
    /* A text set for textcnn: 256 lines "label<TAB>words". */
    static char text[400], buf[32768];
    snprintf(text, sizeof text, "%s", t_tmpdir("alloc-text"));
    size_t n = 0, n64 = 0;
    for (int i = 0; i < 256; i++) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%d\tword%d and word%d then w%d\n", i % 3, i % 17, i % 5, i);
        if (i == 63) n64 = n;
    }
    t_write_file(text, "train.tsv", buf, n, 0);
    t_write_file(text, "test.tsv", buf, n64, 0);
    /* The last: resnet20 recomputing every conv and BN/ReLU in backward. */
    static const char *const models[] = {"lenet", "resnet20", "textcnn", "resnet20 100000"};
    for (int m = 0; m < 4; m++)
        for (int threads = 1; threads <= 2; threads++) {
            snprintf(cmd, sizeof cmd, "%s %s %d %s 2>&1", t_prog("t-alloc_count"), m == 2 ? text : dir, threads,
                     models[m]);
            CHECK(t_sh(cmd, out, sizeof out) == 0);
            CHECKF(strstr(out, "skipped") || strstr(out, "allocations: 0 over 8 steps"), "%s: %s", models[m], out);
        }
}

TEST(train_learns_synthetic_data_and_prints_seed_lines)
{
    const char *dir;
    char out[16384];
    CHECK(t_train_synthetic("train", 1, 2, "--mem-report", out, sizeof out, &dir) == 0);
    CHECKF(strstr(out, "Train Epoch: 1 [0/1200 (0%)]\tLoss: "), "%s", out);
    CHECKF(strstr(out, "Train Epoch: 2 [320/1200 (26%)]"), "%s", out);
    CHECK(strstr(out, "Epoch 1 of 2 took ") != NULL);
    CHECK(strstr(out, "memory plan (host arena)") != NULL);
    CHECK(strstr(out, "Total time= ") != NULL);
    t_check_accuracy(out, 300, 270, "on an easy synthetic task");
}

TEST(train_bad_flags_and_missing_data_fail_clearly)
{
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s --epoch 3 2>&1", t_prog("ddprt-train"));
    CHECK(t_sh(cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "did you mean --epochs"), "%s", out);
    const char *dir = t_tmpdir("nodata");
    snprintf(cmd, sizeof cmd, "%s --data %s 2>&1", t_prog("ddprt-train"), dir);
    CHECK(t_sh(cmd, out, sizeof out) == 1);
    CHECKF(strstr(out, "error") && strstr(out, dir), "%s", out);
    snprintf(cmd, sizeof cmd, "%s --device cuda --data %s 2>&1", t_prog("ddprt-train"), dir);
    CHECK(t_sh(cmd, out, sizeof out) == 1);
}
