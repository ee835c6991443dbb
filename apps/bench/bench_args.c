/* ddprt-bench's flags (rt/args tables): the collective benchmark and the cost model
 * (--predict / --fit). Parsing returns errors, never exits (test/fuzz/fuzz_args.c). */
#include "apps/bench/bench.h"
#include "apps/bench/bench_predict.h"
#include "rt/args.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const bench_coll_names[B_NCOLL] = {"allreduce", "broadcast", "reduce_scatter", "allgather"};
const char *const bench_type_names[RT_NDTYPE] = {"float", "double", "half", "bfloat16", "int32", "int64", "uint8"};
#define MAX_BYTES 1099511627776.0 /* 1T: a size past any host's memory, far from overflowing */

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

static int parse_dtype(const char *v, void *field, char *err, size_t errlen)
{
    int i = lookup(v, bench_type_names, RT_NDTYPE);
    if (i < 0) i = lookup(v, rt_dtype_names, RT_NDTYPE); /* f32, bf16, ... */
    if (i < 0 && !strcmp(v, "fp16")) i = RT_F16;
    if (i < 0 && !strcmp(v, "int")) i = RT_I32;
    if (i < 0) {
        snprintf(err, errlen, "--dtype: expected float, double, half, bfloat16, int32, int64 or uint8, got '%s'", v);
        return -1;
    }
    *(int *)field = i;
    return 0;
}

static int parse_op(const char *v, void *field, char *err, size_t errlen)
{
    int i = lookup(v, tp_op_names, TP_NOPS);
    if (i < 0) {
        snprintf(err, errlen, "--op: expected sum, prod, min, max or avg, got '%s'", v);
        return -1;
    }
    *(int *)field = i;
    return 0;
}

static int parse_algo(const char *v, void *field, char *err, size_t errlen)
{
    static const char *const names[] = {"auto", "ring", "rd", "hier"}; /* TP_ALGO_AUTO.. */
    int i = lookup(v, names, 4);
    if (i < 0) {
        snprintf(err, errlen, "--algo: expected ring, rd, hier or auto, got '%s'", v);
        return -1;
    }
    *(int *)field = TP_ALGO_AUTO + i;
    return 0;
}

#define B(n, s, t, dom, field, lo, hi, ch, h) {n, s, t, dom, offsetof(bench_opts, field), lo, hi, ch, NULL, h, 0, NULL}
#define BF(n, s, field, fn, h) {n, s, RT_ARG_FN, RT_ARG_ANY, offsetof(bench_opts, field), 0, 0, NULL, fn, h, 0, NULL}
static const rt_arg bench_flags[] = {
    B("min-bytes", 'b', RT_ARG_SIZE, RT_ARG_RANGE, min_bytes, 0, MAX_BYTES, NULL, "smallest size (default 4; suffixes K M G)"),
    B("max-bytes", 'e', RT_ARG_SIZE, RT_ARG_RANGE, max_bytes, 0, MAX_BYTES, NULL, "largest size (default 64M)"),
    B("step-factor", 'f', RT_ARG_INT, RT_ARG_RANGE, factor, 2, 1024, NULL, "size multiplier (default 2)"),
    B("iters", 'n', RT_ARG_INT, RT_ARG_RANGE, iters, 1, 1e9, NULL, "timed iterations per size (default 20)"),
    B("warmup-iters", 'w', RT_ARG_INT, RT_ARG_RANGE, warmup, 0, 1e9, NULL, "untimed iterations per size (default 5)"),
    BF("dtype", 'd', dtype, parse_dtype, "float double half bfloat16 int32 int64 uint8 (default float)"),
    BF("op", 'o', op, parse_op, "sum prod min max avg (default sum)"),
    B("root", 'r', RT_ARG_INT, RT_ARG_NONNEG, root, 0, 0, NULL, "broadcast root (default 0)"),
    B("check", 'c', RT_ARG_INT, RT_ARG_RANGE, check, 0, 1, NULL, "check results 0|1 (default 1)"),
    B("registered", 'R', RT_ARG_INT, RT_ARG_RANGE, registered, 0, 1, NULL,
      "buffers from tp_mem_alloc 0|1: ranks of a host read each other's in place (default 0: malloc)"),
    BF("algo", 0, algo, parse_algo, "allreduce algorithm: ring rd hier auto (default auto)"),
    B("backend", 0, RT_ARG_STR, RT_ARG_ANY, backend, 0, 0, "tcp|verbs|auto|loopback",
      "tcp, verbs, auto (one process per rank) or loopback (threads)"),
    B("byte-budget", 0, RT_ARG_SIZE, RT_ARG_POS, byte_budget, 0, 0, NULL,
      "iterations shrink so one size moves at most N bytes per rank and direction (default 2G)"),
    B("arena", 0, RT_ARG_SIZE, RT_ARG_RANGE, arena_bytes, 0, MAX_BYTES, NULL, "communicator scratch (ring chunk = N / 9; default 2M)"),
    B("device", 0, RT_ARG_STR, RT_ARG_ANY, device, 0, 0, "cpu|cuda",
      "cpu (host buffers) or cuda: device allreduce, cuda_ipc vs pinned staging vs the D2D copy"),
    B("init-method", 0, RT_ARG_STR, RT_ARG_ANY, init_method, 0, 0, NULL, "tcp://HOST:PORT, file:///path, env:// (default: env)"),
    B("rank", 0, RT_ARG_INT, RT_ARG_NONNEG, rank, 0, 0, NULL, "rank of this process (default: the environment's)"),
    B("world-size", 0, RT_ARG_INT, RT_ARG_RANGE, world, 1, 65536, NULL,
      "number of ranks (default: the environment's; loopback: 2)"),
    B("timeout", 0, RT_ARG_DOUBLE, RT_ARG_POS, timeout_s, 0, 0, NULL, "seconds every wait may take (default: DDPRT_TIMEOUT)"),
    /* Listed so --help shows them; bench_main sends such runs to bench_predict. */
    B("predict", 0, RT_ARG_FLAG, RT_ARG_ANY, predict, 0, 0, NULL, "the alpha-beta cost model (ddprt-bench --predict --help)"),
    B("fit", 0, RT_ARG_STR, RT_ARG_ANY, fit, 0, 0, NULL, "fit the cost model to measured rows (ddprt-bench --fit - --help)"),
};
static const rt_args bench_spec = {"ddprt-bench", bench_flags, RT_NARGS(bench_flags), 1, 0};

void bench_usage(FILE *f)
{
    fprintf(f, "usage: ddprt-bench [allreduce|broadcast|reduce_scatter|allgather] [options]\n\n"
               "nccl-tests style table per size: time, algbw, busbw, #wrong.\n\n");
    rt_args_usage(&bench_spec, f);
}

void bench_defaults(bench_opts *o)
{
    *o = (bench_opts){.coll = B_ALLREDUCE, .min_bytes = 4, .max_bytes = 64u << 20, .factor = 2, .iters = 20,
                      .warmup = 5, .dtype = RT_F32, .op = TP_SUM, .check = 1, .algo = TP_ALGO_DEFAULT,
                      .byte_budget = (size_t)2 << 30, .rank = -1, .world = -1, .backend = "tcp",
                      .device = "cpu"};
}

int bench_parse(int argc, char **argv, bench_opts *o, char *err, size_t errlen)
{
    char *pos[1];
    int np = 0;
    bench_defaults(o);
    int rc = rt_args_parse(&bench_spec, o, argc, argv, pos, &np, err, errlen);
    if (rc) return rc;
    if (np && (o->coll = lookup(pos[0], bench_coll_names, B_NCOLL)) < 0) {
        snprintf(err, errlen, "unknown collective '%.64s' (allreduce, broadcast, reduce_scatter, allgather)", pos[0]);
        return RT_ARGS_ERROR;
    }
    if (o->min_bytes > o->max_bytes) {
        snprintf(err, errlen, "--min-bytes %zu is larger than --max-bytes %zu", o->min_bytes, o->max_bytes);
        return RT_ARGS_ERROR;
    }
    if (o->rank >= 0 && o->world > 0 && o->rank >= o->world) {
        snprintf(err, errlen, "--rank %d is out of range for --world-size %d", o->rank, o->world);
        return RT_ARGS_ERROR;
    }
    if (o->world > 0 && o->root >= o->world) {
        snprintf(err, errlen, "--root %d is out of range for --world-size %d (0..%d)", o->root, o->world, o->world - 1);
        return RT_ARGS_ERROR;
    }
    if (!strcmp(o->device, "cuda") && (o->coll != B_ALLREDUCE || !strcmp(o->backend, "loopback") || o->registered)) {
        snprintf(err, errlen, "--device cuda: the allreduce, one process per rank (not loopback), no -R");
        return RT_ARGS_ERROR;
    }
    o->coll_name = bench_coll_names[o->coll];
    o->type_name = bench_type_names[o->dtype];
    return RT_ARGS_OK;
}

/* ---- the cost model's flags ---- */

static int parse_bytes(const char *v, void *field, char *err, size_t errlen)
{
    size_t x;
    if (rt_args_size(v, MAX_BYTES, &x)) {
        snprintf(err, errlen, "expected a size in bytes such as 4, 64K or 256M, up to 1T, got '%s'", v);
        return -1;
    }
    *(double *)field = (double)x;
    return 0;
}

static int parse_gpus(const char *v, void *field, char *err, size_t errlen)
{
    int *g = field, a, b, n = 0;
    if (sscanf(v, "%d-%d%n", &a, &b, &n) != 2 || v[n] || a < 1 || b < a || b > 1 << 20) {
        snprintf(err, errlen, "--gpus: expected A-B with 1 <= A <= B, got '%s'", v);
        return -1;
    }
    g[0] = a, g[1] = b;
    return 0;
}

#define P(n, s, t, dom, field, lo, hi, ch, h) {n, s, t, dom, offsetof(bp_opts, field), lo, hi, ch, NULL, h, 0, NULL}
#define PF(n, s, field, fn, h) {n, s, RT_ARG_FN, RT_ARG_ANY, offsetof(bp_opts, field), 0, 0, NULL, fn, h, 0, NULL}
static const rt_arg predict_flags[] = {
    P("predict", 0, RT_ARG_FLAG, RT_ARG_ANY, predict, 0, 0, NULL, "predicted allreduce table or DDP step time"),
    P("fit", 0, RT_ARG_STR, RT_ARG_ANY, fit, 0, 0, NULL, "fit alpha and beta to the ddprt-bench rows in FILE (- = stdin)"),
    P("measured", 0, RT_ARG_STR, RT_ARG_ANY, measured, 0, 0, NULL, "predicted vs measured for the rows in FILE (- = stdin)"),
    P("world-size", 0, RT_ARG_INT, RT_ARG_RANGE, world, 1, 1 << 24, NULL, "ranks"),
    P("algo", 0, RT_ARG_STR, RT_ARG_ANY, algo, 0, 0, "ring|rd|hier", "ring, rd or hier (default ring)"),
    P("per-node", 0, RT_ARG_INT, RT_ARG_RANGE, per_node, 1, 1 << 20, NULL, "ranks per host"),
    P("alpha-us", 0, RT_ARG_DOUBLE, RT_ARG_NONNEG, alpha_us, 0, 0, NULL, "latency between hosts, us (default 5)"),
    P("beta-gbs", 0, RT_ARG_DOUBLE, RT_ARG_POS, beta_gbs, 0, 0, NULL, "bandwidth between hosts, GB/s busbw (default 24)"),
    P("intra-alpha-us", 0, RT_ARG_DOUBLE, RT_ARG_NONNEG, intra_alpha_us, 0, 0, NULL, "latency inside a host (default: alpha-us)"),
    P("intra-gbs", 0, RT_ARG_DOUBLE, RT_ARG_POS, intra_gbs, 0, 0, NULL, "bandwidth inside a host (default: beta-gbs)"),
    P("step-ms", 0, RT_ARG_DOUBLE, RT_ARG_POS, step_ms, 0, 0, NULL, "compute time of one training step, ms"),
    P("grad-mb", 0, RT_ARG_DOUBLE, RT_ARG_POS, grad_mb, 0, 0, NULL, "gradient MiB per step"),
    P("bucket-mb", 0, RT_ARG_DOUBLE, RT_ARG_POS, bucket_mb, 0, 0, NULL, "DDP bucket MiB (default 25)"),
    P("bwd-frac", 0, RT_ARG_DOUBLE, RT_ARG_RANGE, bwd_frac, 0, 1, NULL, "backward's share of the step (default 0.667)"),
    PF("gpus", 0, gpus, parse_gpus, "range of GPU counts A-B (default 8-1024)"),
    PF("min-bytes", 'b', lo_bytes, parse_bytes, "smallest size (default 4)"),
    PF("max-bytes", 'e', hi_bytes, parse_bytes, "largest size (default 64M; --fit: all)"),
    P("step-factor", 'f', RT_ARG_INT, RT_ARG_RANGE, factor, 2, 1024, NULL, "size multiplier (default 2)"),
};
static const rt_args predict_spec = {"ddprt-bench", predict_flags, RT_NARGS(predict_flags), 1, 0};

void bench_predict_usage(FILE *f)
{
    fprintf(f,
            "usage: ddprt-bench --fit FILE|- --world-size N [--algo ring|rd]\n"
            "         [-b MIN -e MAX]  fit alpha and beta to ddprt-bench allreduce rows (median\n"
            "         per size over concatenated runs, sizes MIN..MAX); print predicted vs measured\n"
            "       ddprt-bench --predict --world-size N [--per-node L] [--algo ring|rd|hier]\n"
            "         [-b MIN -e MAX -f F]             predicted allreduce table (bench's rows)\n"
            "         [--measured FILE|-]    predicted vs measured for the rows of ddprt-bench runs\n"
            "       ddprt-bench --predict --step-ms T --grad-mb G [--per-node L] [--gpus A-B]\n"
            "         [--bucket-mb 25] [--bwd-frac 0.667]   DDP step time, flat ring vs hierarchical\n\n");
    rt_args_usage(&predict_spec, f);
}

int bench_predict_parse(int argc, char **argv, bp_opts *p, char *err, size_t errlen)
{
    char *pos[1];
    int np = 0;
    *p = (bp_opts){.algo = "ring", .alpha_us = 5, .beta_gbs = 24, .intra_alpha_us = -1, .intra_gbs = -1,
                   .bucket_mb = 25, .bwd_frac = 2.0 / 3, .gpus = {8, 1024}, .lo_bytes = 4, .hi_bytes = -1, .factor = 2};
    int rc = rt_args_parse(&predict_spec, p, argc, argv, pos, &np, err, errlen);
    if (rc) return rc;
    if (np && strcmp(pos[0], "allreduce")) {
        snprintf(err, errlen, "--predict/--fit model the allreduce only, not '%.64s'", pos[0]);
        return RT_ARGS_ERROR;
    }
    if (!(p->lo_bytes > 0)) {
        snprintf(err, errlen, "--min-bytes: expected a size above 0");
        return RT_ARGS_ERROR;
    }
    return RT_ARGS_OK;
}
