/* ddprt-bench: nccl-tests style collective benchmark.
 *
 *   ddprt-bench allreduce -b 4 -e 256M -f 2 -n 20 -w 5 -d float -o sum [--algo ring|rd|hier|auto]
 *                         [--backend tcp|verbs|auto|loopback] [--init-method URL] [--check 0|1]
 *   ddprt-bench --predict ... | --fit FILE ...   (the cost model: bench_predict.c)
 *
 * One process per rank (started by ddprt-launch, Slurm, mpirun, or by hand with
 * --init-method/--rank/--world-size) over tcp; or one process with --world-size
 * threads over the loopback backend. Rank 0 prints one row per size:
 * size count type op time algbw busbw #wrong, where busbw follows nccl-tests
 * (allreduce: algbw * 2(n-1)/n; reduce_scatter, allgather: algbw * (n-1)/n;
 * broadcast: algbw), time is the slowest rank's mean, and #wrong counts elements of
 * a separate checked run (inputs are small integers, so the exact result is known). */
#include "apps/bench/bench.h"
#include "apps/bench/bench_predict.h"
#include "rt/log.h"
#include "rt/rdzv.h"
#include "rt/version.h"
#include "transport/tp_reduce.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const coll_names[B_NCOLL] = {"allreduce", "broadcast", "reduce_scatter", "allgather"};
static const char *const type_names[RT_NDTYPE] = {"float", "double", "half", "bfloat16", "int32",
                                                  "int64", "uint8"};

static int parse_size(const char *s, size_t *out)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s || v < 0) return -1;
    switch (*e) {
    case 'k': case 'K': v *= 1024, e++; break;
    case 'm': case 'M': v *= 1024 * 1024, e++; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024, e++; break;
    }
    if (*e == 'B' || *e == 'b') e++;
    if (*e) return -1;
    *out = (size_t)v;
    return 0;
}

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

static int parse_dtype(const char *s)
{
    int i = lookup(s, type_names, RT_NDTYPE);
    if (i < 0) i = lookup(s, rt_dtype_names, RT_NDTYPE); /* f32, bf16, ... */
    if (i < 0 && !strcmp(s, "fp16")) i = RT_F16;
    if (i < 0 && !strcmp(s, "int")) i = RT_I32;
    return i;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ddprt-bench [allreduce|broadcast|reduce_scatter|allgather] [options]\n"
            "  -b, --min-bytes N      smallest size (default 4; suffixes K M G)\n"
            "  -e, --max-bytes N      largest size (default 64M)\n"
            "  -f, --step-factor N    size multiplier (default 2)\n"
            "  -n, --iters N          timed iterations per size (default 20)\n"
            "  -w, --warmup-iters N   untimed iterations per size (default 5)\n"
            "  -d, --dtype T          float double half bfloat16 int32 int64 uint8 (default float)\n"
            "  -o, --op OP            sum prod min max avg (default sum)\n"
            "  -r, --root N           broadcast root (default 0)\n"
            "  -c, --check 0|1        check results (default 1)\n"
            "  -R, --registered 0|1   buffers from tp_mem_alloc: ranks of a host read each\n"
            "                         other's in place (default 0: malloc)\n"
            "      --algo A           allreduce algorithm: ring rd hier auto (default auto)\n"
            "      --backend B        tcp, verbs, auto (one process per rank) or loopback (threads)\n"
            "      --byte-budget N    iterations shrink so one size moves at most N bytes\n"
            "                         per rank and direction (default 2G)\n"
            "      --arena N          communicator scratch (ring chunk = N / 9; default 2M)\n"
            "      --init-method URL  tcp://HOST:PORT, file:///path, env:// (default: env)\n"
            "      --rank N, --world-size N, --timeout S\n"
            "      --predict, --fit FILE  the alpha-beta cost model (ddprt-bench --predict --help)\n");
}

int main(int argc, char **argv)
{
    if (rt_version_arg(argc, argv)) return 0;
    bench_opts o = {.coll = B_ALLREDUCE, .min_bytes = 4, .max_bytes = 64u << 20, .factor = 2,
                    .iters = 20, .warmup = 5, .dtype = RT_F32, .op = TP_SUM, .check = 1,
                    .algo = TP_ALGO_DEFAULT, .byte_budget = 2ull << 30, .rank = -1, .world = -1};
    const char *backend = "tcp";
    enum { O_ALGO = 256, O_BACKEND, O_INIT, O_RANK, O_WORLD, O_TIMEOUT, O_BUDGET, O_ARENA };
    static const struct option lo[] = {
        {"min-bytes", 1, 0, 'b'}, {"max-bytes", 1, 0, 'e'}, {"step-factor", 1, 0, 'f'},
        {"iters", 1, 0, 'n'}, {"warmup-iters", 1, 0, 'w'}, {"dtype", 1, 0, 'd'}, {"op", 1, 0, 'o'},
        {"root", 1, 0, 'r'}, {"check", 1, 0, 'c'}, {"registered", 1, 0, 'R'}, {"algo", 1, 0, O_ALGO}, {"backend", 1, 0, O_BACKEND},
        {"init-method", 1, 0, O_INIT}, {"rank", 1, 0, O_RANK}, {"world-size", 1, 0, O_WORLD},
        {"timeout", 1, 0, O_TIMEOUT}, {"byte-budget", 1, 0, O_BUDGET}, {"arena", 1, 0, O_ARENA}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    rt_log_init();
    for (int i = 1; i < argc; i++) /* the cost model: no communicator, own options */
        if (!strcmp(argv[i], "--predict") || !strcmp(argv[i], "--fit") || !strncmp(argv[i], "--fit=", 6))
            return bench_predict_main(argc, argv);
    int k, bad = 0;
    if (argc > 1 && argv[1][0] != '-') {
        if ((k = lookup(argv[1], coll_names, B_NCOLL)) < 0) {
            fprintf(stderr, "ddprt-bench: unknown collective '%s'\n", argv[1]);
            usage(stderr);
            return 2;
        }
        o.coll = k;
        argv[1] = argv[0], argv++, argc--;
    }
    int ch;
    while ((ch = getopt_long(argc, argv, "b:e:f:n:w:d:o:r:c:R:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'b': bad |= parse_size(optarg, &o.min_bytes); break;
        case 'e': bad |= parse_size(optarg, &o.max_bytes); break;
        case 'f': o.factor = atoi(optarg); bad |= o.factor < 2; break;
        case 'n': o.iters = atoi(optarg); bad |= o.iters < 1; break;
        case 'w': o.warmup = atoi(optarg); bad |= o.warmup < 0; break;
        case 'd': o.dtype = parse_dtype(optarg); bad |= o.dtype < 0; break;
        case 'o': o.op = lookup(optarg, tp_op_names, TP_NOPS); bad |= o.op < 0; break;
        case 'r': o.root = atoi(optarg); break;
        case 'c': o.check = atoi(optarg); break;
        case 'R': o.registered = atoi(optarg); bad |= o.registered != 0 && o.registered != 1; break;
        case O_ALGO:
            o.algo = !strcmp(optarg, "ring") ? TP_ALGO_RING : !strcmp(optarg, "rd") ? TP_ALGO_RD
                   : !strcmp(optarg, "hier") ? TP_ALGO_HIER : !strcmp(optarg, "auto") ? TP_ALGO_AUTO : -2;
            bad |= o.algo == -2;
            break;
        case O_BACKEND: backend = optarg; break;
        case O_INIT: o.init_method = optarg; break;
        case O_RANK: o.rank = atoi(optarg); break;
        case O_WORLD: o.world = atoi(optarg); break;
        case O_TIMEOUT: o.timeout_s = atof(optarg); break;
        case O_BUDGET: { size_t v; bad |= parse_size(optarg, &v); o.byte_budget = v; break; }
        case O_ARENA: bad |= parse_size(optarg, &o.arena_bytes); break;
        case 'h': usage(stdout); return 0;
        default: bad = 1;
        }
        if (bad) {
            fprintf(stderr, "ddprt-bench: bad value for option %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || o.min_bytes > o.max_bytes) {
        fprintf(stderr, "ddprt-bench: %s\n", optind < argc ? "unexpected argument" : "min-bytes > max-bytes");
        usage(stderr);
        return 2;
    }
    o.coll_name = coll_names[o.coll];
    o.type_name = type_names[o.dtype];
    if (!strcmp(backend, "loopback")) return bench_loopback(&o);
    o.backend = backend;
    if (strcmp(backend, "tcp") && strcmp(backend, "verbs") && strcmp(backend, "auto")) {
        fprintf(stderr, "ddprt-bench: unknown backend '%s' (tcp, verbs, auto, loopback)\n", backend);
        return 2;
    }
    return bench_tcp(&o);
}
