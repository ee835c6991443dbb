/* One rank of a rendezvous test job (test/test_rdzv.c, test/test_launch.c).
 * usage: t-rdzv_rank INIT RANK WORLD [key=value...]   (INIT "-" = none; RANK/WORLD -1 = env)
 * keys: token=T  timeout=S  config=HEX  rounds=N  len=BYTES  die=1 (exit right after the
 * meeting)  sleep_ms=MS (before opening)  hold_ms=MS (after the rounds, before closing)
 * Prints "rank R of W local L ok" on success; the error line on stderr, exit 3, otherwise. */
#include "rt/log.h"
#include "rt/rdzv.h"
#include "transport/tp_backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fill_byte(int rank, int round, size_t i) { return (rank * 31 + round * 7 + (int)i) & 0xff; }

int main(int argc, char **argv)
{
    if (argc < 4) { fprintf(stderr, "usage: t-rdzv_rank INIT RANK WORLD [key=value...]\n"); return 2; }
    rt_log_init();
    rt_rdzv_opts o = {NULL, atoi(argv[2]), atoi(argv[3]), -1, 0, NULL, 0};
    if (strcmp(argv[1], "-")) o.init_method = argv[1];
    int rounds = 3, die = 0, sleep_ms = 0, hold_ms = 0;
    size_t len = 8;
    for (int i = 4; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (!v) continue;
        *v++ = 0;
        if (!strcmp(argv[i], "token")) o.token = v;
        else if (!strcmp(argv[i], "timeout")) o.timeout_s = atof(v);
        else if (!strcmp(argv[i], "config")) o.config_hash = strtoull(v, NULL, 16);
        else if (!strcmp(argv[i], "rounds")) rounds = atoi(v);
        else if (!strcmp(argv[i], "len")) len = (size_t)atol(v);
        else if (!strcmp(argv[i], "die")) die = atoi(v);
        else if (!strcmp(argv[i], "sleep_ms")) sleep_ms = atoi(v);
        else if (!strcmp(argv[i], "hold_ms")) hold_ms = atoi(v);
    }
    if (sleep_ms) usleep((useconds_t)sleep_ms * 1000);
    char err[512];
    rt_rdzv *r;
    if (rt_rdzv_open(&r, &o, err, sizeof err)) { fprintf(stderr, "ERR %s\n", err); return 3; }
    int rank = rt_rdzv_rank(r), world = rt_rdzv_world(r);
    if (die) _exit(0); /* gone without a word: the others must notice */
    unsigned char *mine = malloc(len + 1), *all = malloc(len * (size_t)world + 1);
    int *ranks = malloc(sizeof(int) * (size_t)world), rc = 0;
    for (int k = 0; k < rounds && !rc; k++) {
        for (size_t i = 0; i < len; i++) mine[i] = (unsigned char)fill_byte(rank, k, i);
        if (rt_rdzv_allgather(r, mine, len, all, err, sizeof err)) { fprintf(stderr, "ERR %s\n", err); rc = 3; break; }
        for (int q = 0; q < world && !rc; q++)
            for (size_t i = 0; i < len && !rc; i++)
                if (all[(size_t)q * len + i] != fill_byte(q, k, i)) {
                    fprintf(stderr, "ERR round %d: wrong byte %zu from rank %d\n", k, i, q);
                    rc = 4;
                }
        if (!rc && rt_rdzv_barrier(r, err, sizeof err)) { fprintf(stderr, "ERR %s\n", err); rc = 3; }
    }
    /* The transport bootstrap is the same allgather behind a callback. */
    tp_bootstrap bs;
    tp_bootstrap_rdzv(&bs, r);
    if (!rc && bs.allgather(bs.ctx, &rank, sizeof rank, ranks, err, sizeof err)) { fprintf(stderr, "ERR %s\n", err); rc = 3; }
    for (int q = 0; q < world && !rc; q++)
        if (ranks[q] != q) { fprintf(stderr, "ERR bootstrap allgather order\n"); rc = 4; }
    if (!rc)
        printf("rank %d of %d local %d ok token %s ip %s\n", rank, world, rt_rdzv_local_rank(r),
               rt_rdzv_token_hash(r) ? "yes" : "no", bs.self_ip[0] ? bs.self_ip : "-");
    fflush(stdout);
    if (hold_ms) usleep((useconds_t)hold_ms * 1000);
    rt_rdzv_close(r);
    free(mine);
    free(all);
    free(ranks);
    return rc;
}
