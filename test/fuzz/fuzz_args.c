/* libFuzzer target: the command lines of ddprt-data (every command) and ddprt-bench
 * (the collective benchmark and the cost model) through the one parser, rt/args. The
 * input is the arguments, separated by NUL bytes (at most 24). A parse that succeeds
 * must leave every value in its documented domain. Build and run: make fuzz. */
#include "apps/bench/bench.h"
#include "apps/bench/bench_predict.h"
#include "apps/data/data.h"
#include "rt/args.h"
#include "rt/log.h"
#include <stdlib.h>
#include <string.h>

/* The transport's op names (transport/tp_reduce.c, not linked into this target). */
const char *const tp_op_names[TP_NOPS] = {"sum", "prod", "min", "max", "avg"};

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static char buf[4096];
    char *argv[26] = {"prog"};
    int argc = 1;
    if (n >= sizeof buf) return 0;
    memcpy(buf, d, n);
    buf[n] = 0;
    for (char *p = buf; argc < 25 && p <= buf + n; p += strlen(p) + 1) argv[argc++] = p;
    argv[argc] = NULL;
    char err[1024];
    data_opts o;
    int rc = data_parse(argc, argv, &o, err, sizeof err);
    if (rc == RT_ARGS_OK) {
        if (o.cmd < 0 || o.cmd >= DATA_NCMD || o.limit < 0 || o.quality < 1 || o.quality > 100 || o.n < 1 ||
            o.classes < 1 || o.noise < 0 || o.size[0] < 1 || o.size[1] < 1 || o.size[0] > DATA_MAX_SIDE ||
            (long)o.size[0] * o.size[1] > DATA_MAX_PIXELS || o.threads < 1 || o.threads > 64 || !o.format ||
            (o.cmd != DATA_BENCH && !o.to) || (o.cmd == DATA_BENCH && !o.dir))
            abort();
    } else if (rc == RT_ARGS_ERROR && !err[0]) {
        abort(); /* an error always says what */
    }
    bench_opts b;
    rc = bench_parse(argc, argv, &b, err, sizeof err);
    if (rc == RT_ARGS_OK) {
        if (b.coll < 0 || b.coll >= B_NCOLL || b.min_bytes > b.max_bytes || b.max_bytes > (1ull << 40) ||
            b.factor < 2 || b.iters < 1 || b.warmup < 0 || b.dtype < 0 || b.dtype >= RT_NDTYPE || b.op < 0 ||
            b.op >= TP_NOPS || b.root < 0 || (b.world > 0 && b.root >= b.world) || b.check < 0 || b.check > 1 ||
            !b.coll_name || !b.type_name || (b.world != -1 && b.world < 1))
            abort();
    } else if (rc == RT_ARGS_ERROR && !err[0]) {
        abort();
    }
    bp_opts p;
    rc = bench_predict_parse(argc, argv, &p, err, sizeof err);
    if (rc == RT_ARGS_OK && (!(p.lo_bytes > 0) || p.factor < 2 || p.gpus[0] < 1 || p.gpus[1] < p.gpus[0] ||
                             !(p.bwd_frac >= 0 && p.bwd_frac <= 1) || !p.algo))
        abort();
    return 0;
}
