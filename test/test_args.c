/* rt/args: the one option parser, and every program's use of it (issue 26: no program
 * ignores an unknown option; values outside their domain are one line, exit 2). */
#include "rt/args.h"
#include "test/t.h"
#include "test/t_data.h"
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

typedef struct topts { int n, flag; double x; const char *s, *c; size_t sz; } topts;
static const rt_arg tab[] = {
    {"count", 'n', RT_ARG_INT, RT_ARG_RANGE, offsetof(topts, n), 1, 10, NULL, NULL, "a count", 0, NULL},
    {"verbose", 'v', RT_ARG_FLAG, RT_ARG_ANY, offsetof(topts, flag), 0, 0, NULL, NULL, "a flag", 0, NULL},
    {"ratio", 0, RT_ARG_DOUBLE, RT_ARG_UNIT, offsetof(topts, x), 0, 0, NULL, NULL, "a ratio", 0, NULL},
    {"name", 0, RT_ARG_STR, RT_ARG_ANY, offsetof(topts, s), 0, 0, NULL, NULL, "a name", 0, NULL},
    {"color", 0, RT_ARG_STR, RT_ARG_ANY, offsetof(topts, c), 0, 0, "red|green", NULL, "a choice", 0, NULL},
    {"bytes", 'b', RT_ARG_SIZE, RT_ARG_RANGE, offsetof(topts, sz), 0, 1099511627776.0, NULL, NULL, "a size", 0, NULL},
};

static int parse(int max_pos, int stop, const char *const *args, topts *o, char **pos, int *np, char *err)
{
    char *argv[16] = {"prog"};
    int argc = 1;
    while (args[argc - 1]) argv[argc] = (char *)args[argc - 1], argc++;
    rt_args a = {"prog", tab, 6, max_pos, stop};
    memset(o, 0, sizeof *o);
    return rt_args_parse(&a, o, argc, argv, pos, np, err, 256);
}

/* A default is written once, in the table: set through the parser (its domain checked),
 * printed by the usage. */
TEST(args_defaults_come_from_the_table)
{
    rt_arg d[] = {
        {"count", 'n', RT_ARG_INT, RT_ARG_RANGE, offsetof(topts, n), 1, 10, NULL, NULL, "a count", 0, "7"},
        {"ratio", 0, RT_ARG_DOUBLE, RT_ARG_UNIT, offsetof(topts, x), 0, 0, NULL, NULL, "a ratio", 0, "0.25"},
        {"color", 0, RT_ARG_STR, RT_ARG_ANY, offsetof(topts, c), 0, 0, "red|green", NULL, "a choice", 0, "green"},
        {"name", 0, RT_ARG_STR, RT_ARG_ANY, offsetof(topts, s), 0, 0, NULL, NULL, "a name", 0, NULL},
    };
    rt_args a = {"prog", d, 4, 0, 0};
    topts o;
    char err[256] = "", text[2048] = "";
    memset(&o, 0, sizeof o);
    CHECKF(rt_args_defaults(&a, &o, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(o.n, 7);
    CHECK(o.x == 0.25);
    CHECK(o.c && !strcmp(o.c, "green"));
    CHECK(o.s == NULL);
    FILE *f = fmemopen(text, sizeof text - 1, "w");
    rt_args_usage(&a, f);
    fclose(f);
    CHECKF(strstr(text, "a count (default: 7)") && strstr(text, "a choice (default: green)") &&
           !strstr(text, "a name (default"), "%s", text);
    d[0].dflt = "11"; /* outside [1, 10]: the table is wrong, and says where */
    CHECK(rt_args_defaults(&a, &o, err, sizeof err) != 0);
    CHECKF(strstr(err, "--count") != NULL, "%s", err);
    d[0].dflt = "7", d[2].dflt = "blue";
    CHECK(rt_args_defaults(&a, &o, err, sizeof err) != 0);
    CHECKF(strstr(err, "--color: expected one of red|green, got 'blue'") != NULL, "%s", err);
}

TEST(args_forms)
{
    topts o;
    char err[256], *pos[16];
    int np;
    const char *a[] = {"-n", "3", "--verbose", "--ratio=0.5", "--name", "x", "--color", "green", "-b64K", "file", NULL};
    CHECK(parse(1, 0, a, &o, pos, &np, err) == RT_ARGS_OK);
    CHECK(o.n == 3 && o.flag && o.x == 0.5 && !strcmp(o.s, "x") && !strcmp(o.c, "green") && o.sz == 65536);
    CHECK(np == 1 && !strcmp(pos[0], "file"));
    const char *b[] = {"--count=10", "-n7", "--", "--name", NULL}; /* after --: positional */
    CHECK(parse(1, 0, b, &o, pos, &np, err) == RT_ARGS_OK && o.n == 7 && np == 1 && !strcmp(pos[0], "--name"));
    const char *c[] = {"-v", "prog2", "--count", "99", NULL}; /* stop at the first positional */
    CHECK(parse(-1, 1, c, &o, pos, &np, err) == RT_ARGS_OK && o.flag && o.n == 0 && np == 3);
    const char *sizes[][2] = {{"1.5G", "1610612736"}, {"2kb", "2048"}, {"7", "7"}, {"1T", "1099511627776"}};
    for (int i = 0; i < 4; i++) {
        size_t v;
        CHECKF(rt_args_size(sizes[i][0], 1e13, &v) == 0 && v == strtoull(sizes[i][1], NULL, 10), "%s", sizes[i][0]);
    }
}

TEST(args_errors_name_the_flag_and_the_value)
{
    topts o;
    char err[256], *pos[16];
    int np;
    static const struct { const char *args[4]; int max_pos; const char *msg; } cases[] = {
        {{"--cuont", "3"}, 0, "unknown flag --cuont (did you mean --count? see --help)"},
        {{"--frob"}, 0, "unknown flag --frob (see --help)"},
        {{"-x"}, 0, "unknown flag -x"},
        {{"--count", "0"}, 0, "--count: expected an integer in 1..10, got '0'"},
        {{"--count", "abc"}, 0, "--count: expected an integer in 1..10, got 'abc'"},
        {{"--count", "99999999999"}, 0, "got '99999999999'"},
        {{"--count"}, 0, "--count needs a value"},
        {{"--verbose=1"}, 0, "--verbose takes no value"},
        {{"--ratio", "1"}, 0, "--ratio: must be in [0, 1), got '1'"},
        {{"--ratio", "nan"}, 0, "--ratio: expected a finite number, got 'nan'"},
        {{"--color", "blue"}, 0, "--color: expected one of red|green, got 'blue'"},
        {{"-b", "99999999999G"}, 0, "--bytes: expected a size in bytes"},
        {{"-b", "-1"}, 0, "--bytes: expected a size"},
        {{"-b", "0x10"}, 0, "--bytes: expected a size"},
        {{"stray"}, 0, "unexpected argument 'stray'"},
        {{"a", "b"}, 1, "unexpected argument 'b' (at most 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECKF(parse(cases[i].max_pos, 0, cases[i].args, &o, pos, &np, err) == RT_ARGS_ERROR, "case %zu accepted", i);
        CHECKF(strstr(err, cases[i].msg), "case %zu: %s", i, err);
    }
    const char *h[] = {"--count", "0", "--help", NULL}; /* help after a mistake: the help */
    CHECK(parse(0, 0, h, &o, pos, &np, err) == RT_ARGS_HELP);
    const char *v[] = {"--version", NULL};
    CHECK(parse(0, 0, v, &o, pos, &np, err) == RT_ARGS_VERSION);
}

/* Runs a shell command; returns its exit status, output (stdout + stderr) in out. */
static int sh(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh(char *out, size_t n, const char *fmt, ...)
{
    char body[2000], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "{ %s; } 2>&1", body);
    FILE *f = popen(cmd, "r");
    size_t k = f ? fread(out, 1, n - 1, f) : 0;
    out[k] = 0;
    int st = f ? pclose(f) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Every program refuses an unknown option with one line and exit 2, before doing
 * anything (ddprt-data convert --form used to convert the default data set). */
TEST(args_every_program_refuses_unknown_flags)
{
    static const char *const progs[][2] = {
        {"ddprt-train", "--epoch 3"}, {"ddprt-launch", "--nproc 2 -- true"}, {"ddprt-bench", "--iter 3"},
        {"ddprt-bench", "--predict --world 2"}, {"ddprt-data", "convert --form /tmp"}, {"ddprt-data", "synth --to /tmp/x --size-x 3"},
        {"ddprt-data", "bench /tmp --thread 2"}, {"ddprt-bench-kernels", "--thread 2"}, {"ddprt-trace", "--frob x"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        int st = sh(out, sizeof out, "%s %s", t_prog(progs[i][0]), progs[i][1]);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        CHECKF(st == 2 && strstr(out, "unknown flag --") && lines == 1, "%s %s: %d: %s",
               progs[i][0], progs[i][1], st, out);
    }
}

/* Issue 26, defects 3 and 10 and the small ones of ddprt-bench / ddprt-launch: each one
 * line naming the flag and the value, exit 2, nothing done. */
TEST(args_bad_values_of_the_programs)
{
    static const struct { const char *prog, *args, *msg; } cases[] = {
        {"ddprt-data", "convert --to /nonexistent/x --limit abc", "--limit: expected a non-negative integer, got 'abc'"},
        {"ddprt-data", "synth --to /nonexistent/x --n -3", "--n: expected an integer in 1..10000000, got '-3'"},
        {"ddprt-data", "synth --to /nonexistent/x --size 100000x100000", "--size: expected WxH with sides 1..65500"},
        {"ddprt-data", "synth --to /nonexistent/x --size 30000x30000", "at most 268435456 pixels"},
        {"ddprt-data", "synth --to /nonexistent/x --size 3x", "got '3x'"},
        {"ddprt-data", "convert --to /nonexistent/x --format gif", "--format: expected one of png|jpeg|jpg|cifar"},
        {"ddprt-bench", "--world-size 0 --backend loopback", "--world-size: expected an integer in 1..65536, got '0'"},
        {"ddprt-bench", "-b 99999999999G --backend loopback", "--min-bytes: expected a size in bytes"},
        {"ddprt-bench", "broadcast -r 5 --world-size 2 --backend loopback", "--root 5 is out of range for --world-size 2"},
        {"ddprt-bench", "broadcast -r 5 -b 4 -e 8 --backend loopback", "--root 5 is out of range for 2 ranks (0..1)"},
        {"ddprt-bench", "allgather --check 2", "--check: expected an integer in 0..1, got '2'"},
        {"ddprt-bench", "alreduce", "unknown collective 'alreduce'"},
        {"ddprt-launch", "--nproc-per-node 1 --resume-arg x -- true", "--resume-arg is used on restarts only"},
        {"ddprt-launch", "--nproc-per-node 1 --control-port 5000 -- true", "--control-port is used only with"},
        {"ddprt-train", "--keep 5000", "--keep: expected an integer in 1..1000, got '5000'"},
        {"ddprt-bench-kernels", "--model vgg", "--model: expected one of lenet|resnet20|resnet18|linear|transformer, got 'vgg'"},
        {"ddprt-trace", "", "no trace files given"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = sh(out, sizeof out, "%s %s", t_prog(cases[i].prog), cases[i].args);
        CHECKF(st == 2 && strstr(out, cases[i].msg) && strstr(out, "error: "), "%s %s: %d: %s", cases[i].prog,
               cases[i].args, st, out);
    }
}

/* Defect 1: convert --format cifar wrote 64x64 images past a 32x32 record (a stack
 * overflow, then a segfault); now one line, exit 1, no output file written. 28x28
 * still converts, centred. */
TEST(args_data_convert_cifar_refuses_large_images)
{
    const char *d = t_tmpdir("cifar-big");
    char in[600], out[600], buf[4096], *px = calloc(64 * 64 * 4, 1);
    uint8_t labels[4] = {0, 1, 2, 3};
    for (int side = 34; side <= 64; side += 30) {
        snprintf(in, sizeof in, "%s/in%d", d, side);
        snprintf(out, sizeof out, "%s/out%d", d, side);
        snprintf(buf, sizeof buf, "mkdir -p %s", in);
        CHECK(system(buf) == 0);
        t_write_idx_images(in, "train-images-idx3-ubyte", 4, side, side, (uint8_t *)px, 0);
        t_write_idx_labels(in, "train-labels-idx1-ubyte", 4, labels, 0);
        t_write_idx_images(in, "t10k-images-idx3-ubyte", 4, side, side, (uint8_t *)px, 0);
        t_write_idx_labels(in, "t10k-labels-idx1-ubyte", 4, labels, 0);
        int st = sh(buf, sizeof buf, "%s convert --from %s --to %s --format cifar; ls %s", t_prog("ddprt-data"), in,
                    out, out);
        CHECKF(strstr(buf, "records hold at most 32x32") && strstr(buf, "No such file"), "%d: %s", st, buf);
    }
    snprintf(in, sizeof in, "%s/in28", d);
    snprintf(buf, sizeof buf, "mkdir -p %s", in);
    CHECK(system(buf) == 0);
    for (int i = 0; i < 28 * 28; i++) px[i] = (char)(i % 251);
    t_write_idx_images(in, "train-images-idx3-ubyte", 1, 28, 28, (uint8_t *)px, 0);
    t_write_idx_labels(in, "train-labels-idx1-ubyte", 1, labels + 3, 0);
    t_write_idx_images(in, "t10k-images-idx3-ubyte", 1, 28, 28, (uint8_t *)px, 0);
    t_write_idx_labels(in, "t10k-labels-idx1-ubyte", 1, labels + 3, 0);
    CHECK(sh(buf, sizeof buf, "%s convert --from %s --to %s/o28 --format cifar", t_prog("ddprt-data"), in, d) == 0);
    snprintf(out, sizeof out, "%s/o28/test_batch.bin", d);
    FILE *f = fopen(out, "rb");
    unsigned char rec[3073];
    CHECK(f && fread(rec, 1, sizeof rec, f) == sizeof rec && fgetc(f) == EOF);
    if (f) fclose(f);
    CHECK(rec[0] == 3 && rec[1 + 2 * 32 + 2] == 0 && rec[1 + 2048 + 2 * 32 + 2] == 0 && rec[1 + 3 * 32 + 3] == 29 % 251);
    free(px);
    snprintf(buf, sizeof buf, "rm -rf %s", d);
    CHECK(system(buf) == 0);
}
