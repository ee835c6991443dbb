/* The ranks agree on the network they built, not on the --model-file string (#26):
 * two files named net.cfg in different directories that differ in a parameter-free
 * layer are refused with the node that differs; one file reached by two spellings of
 * its path trains. */
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char data_dir[PATH_MAX + 8], prog[PATH_MAX];

/* Rank r of 2 started in directory `dir` with `--model-file file` and the extra
 * flags, through sh so that the working directory differs per rank. */
static void start(t_proc *p, const char *dir, const char *file, int port, int r, const char *extra)
{
    static char cmd[2][3 * PATH_MAX];
    snprintf(cmd[r], sizeof cmd[r],
             "cd '%s' && exec '%s' --data '%s' --init-method tcp://127.0.0.1:%d --rank %d --world-size 2 "
             "--threads 1 --batch-size 32 --model-file %s %s",
             dir, prog, data_dir, port, r, file, extra);
    char *argv[] = {"/bin/sh", "-c", cmd[r], NULL}, name[16];
    snprintf(name, sizeof name, "rank%d", r);
    t_spawn(p, name, argv, NULL);
}

static void write_cfg(const char *dir, const char *mid)
{
    char text[512];
    mkdir(dir, 0755);
    int n = snprintf(text, sizeof text, "[conv2d]\nname=c1\nfilters=4\nsize=5\n[maxpool]\nsize=2\n%s[flatten]\n"
                     "[linear]\nname=fc\nout=classes\n", mid);
    t_write_file(dir, "net.cfg", text, (size_t)n, 0);
}

PTEST(ddp_ranks_compare_the_built_model_not_the_model_file_path)
{
    t_clean_env();
    const char *tmp = t_proc_tmpdir();
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp);
    mkdir(data_dir, 0755);
    t_write_synthetic_dataset(data_dir, 200, 64, 1);
    CHECK(realpath(t_prog("ddprt-train"), prog) != NULL);
    char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX];
    snprintf(a, sizeof a, "%s/mfA", tmp);
    snprintf(b, sizeof b, "%s/mfB", tmp);
    snprintf(c, sizeof c, "%s/cfg", tmp);
    write_cfg(a, "[relu]\n");
    write_cfg(b, "[dropout]\np=0.9\n");
    t_proc p[2];
    int port = t_free_port();
    start(&p[0], a, "net.cfg", port, 0, "--epochs 1 --max-steps 2");
    start(&p[1], b, "net.cfg", port, 1, "--epochs 1 --max-steps 2");
    for (int r = 0; r < 2; r++) {
        CHECK(t_wait(&p[r], 60) == 1);
        const char *e = t_slurp(p[r].err);
        CHECKF(strstr(e, "the model differs between ranks: rank 1 has 'node 3: dropout <- 2 p=0.9 2d=0 -> 4x12x12', "
                         "rank 0 has 'node 3: relu <- 2 -> 4x12x12'"), "rank %d: %s", r, e);
    }
    /* The same file, two spellings of its path: the same network, trained to the end. */
    write_cfg(c, "[relu]\n");
    port = t_free_port();
    start(&p[0], tmp, "cfg/net.cfg", port, 0, "--epochs 1 --max-steps 2 --no-eval");
    start(&p[1], tmp, "cfg/../cfg/net.cfg", port, 1, "--epochs 1 --max-steps 2 --no-eval");
    for (int r = 0; r < 2; r++) CHECKF(t_wait(&p[r], 60) == 0, "rank %d: %s", r, t_slurp(p[r].err));
}
