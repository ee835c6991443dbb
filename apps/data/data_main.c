/* ddprt-data: data set tools (ddprt-data --help; the commands: data_args.c).
 *   convert  Fashion-MNIST (IDX) as an image folder or as CIFAR-10-style binary.
 *   synth    JPEGs of ImageNet-like size with structure and noise (benchmark input).
 *   bench    decode + transform throughput per thread on an image folder's train split.
 *   tokenize text to llm.c token shards (apps/data/tokenize.c). */
#include "apps/data/data.h"
#include "rt/args.h"
#include "rt/env.h"
#include "rt/version.h"
#include "nn/data/dataset.h"
#include "nn/data/jhuff.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bench_arg { const nn_dataset *d; int n, first, train; double secs; char err[1024]; } bench_arg;

static void *bench_thread(void *p)
{
    bench_arg *b = p;
    nn_data_scratch s = {malloc(b->d->scratch_bytes), b->d->scratch_bytes};
    void *x = malloc(nn_data_sample_bytes(b->d));
    int32_t y;
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    for (int i = 0; i < b->n; i++)
        if (nn_data_sample(b->d, (b->first + i) % b->d->n, 1, b->train, x, &y, &s, b->err, sizeof b->err)) break;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    b->secs = (double)(c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9; /* CPU time: the machine may be shared */
    free(s.buf);
    free(x);
    return NULL;
}

static int bench(const data_opts *o)
{
    nn_data_cfg cfg = {.dir = o->dir, .dataset = "imagefolder", .image_size = o->image_size, .augment = o->augment,
                       .seed = 1};
    int n = o->n, T = o->threads, train = !o->eval;
    if (o->libjpeg_huffman) nn_jhuff_enabled = 0; /* for comparison */
    char err[1024];
    nn_dataset d;
    rt_arena a;
    if (nn_data_open(&d, &cfg, "train", err, sizeof err)) rt_fatal("%s", err);
    rt_arena_plan(&a, "bench");
    nn_data_load(&d, &a, err, sizeof err);
    if (rt_arena_init(&a, "bench", a.high)) rt_fatal("%s: out of memory for %zu bytes", d.dir, a.high);
    if (nn_data_load(&d, &a, err, sizeof err)) rt_fatal("%s", err);
    /* Warm the page cache so the table measures decoding, not the disk. */
    nn_data_scratch s = {malloc(d.scratch_bytes), d.scratch_bytes};
    void *x = malloc(nn_data_sample_bytes(&d));
    int32_t y;
    for (int i = 0; i < d.n && i < n; i++) nn_data_sample(&d, i, 0, 1, x, &y, &s, err, sizeof err);
    free(s.buf);
    free(x);
    bench_arg b[64];
    port_thread th[64];
    double t0 = port_now_s();
    for (int t = 0; t < T; t++) {
        b[t] = (bench_arg){&d, n, t * n, train, 0, ""};
        port_thread_start(&th[t], bench_thread, &b[t]);
    }
    for (int t = 0; t < T; t++) port_thread_join(th[t]);
    double wall = port_now_s() - t0, per = 0;
    for (int t = 0; t < T; t++) {
        if (b[t].err[0]) rt_fatal("%s", b[t].err);
        per += n / b[t].secs / T;
    }
    printf("| ddprt (C)%s | %s | %d | %d | %dx%d %s | %.1f | %.2f | %.1f |\n", nn_jhuff_enabled ? "" : " libjpeg-huffman", d.dir, d.n, T, d.h, d.w, train ? cfg.augment : "eval", per,
           1000.0 / per, n * T / wall);
    rt_arena_free(&a);
    return 0;
}

int main(int argc, char **argv)
{
    data_opts o;
    char err[1024];
    rt_log_init();
    int rc = data_parse(argc, argv, &o, err, sizeof err);
    if (rc == RT_ARGS_HELP) {
        data_usage(o.cmd, 0);
        return 0;
    }
    if (rc == RT_ARGS_VERSION) {
        printf("ddprt-data (ddprt) %s\n", DDPRT_VERSION);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "ddprt-data: error: %s\n", err);
        if (argc < 2) data_usage(-1, 1);
        return 2;
    }
    if (rt_env_check(err, sizeof err)) {
        fprintf(stderr, "ddprt-data: error: %s\n", err);
        return 2;
    }
    if (o.cmd == DATA_BENCH) return bench(&o);
    rc = o.cmd == DATA_CONVERT ? data_convert(&o, err, sizeof err)
       : o.cmd == DATA_TOKENIZE ? data_tokenize(&o, err, sizeof err) : data_synth(&o, err, sizeof err);
    if (rc) fprintf(stderr, "ddprt-data: error: %s\n", err);
    return rc ? 1 : 0;
}
