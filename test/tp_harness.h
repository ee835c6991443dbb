/* Test helpers for the collectives: a loopback world, one thread per rank, and the
 * exact-input generators and serial references the collective tests compare with.
 * Header-only (static functions) so each test file stands alone. */
#ifndef TP_HARNESS_H
#define TP_HARNESS_H
#include "ports/posix/port.h"
#include "transport/tp.h"
#include "transport/tp_reduce.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TPT_MAXW 8

typedef struct tpt_world {
    int n;
    tp_comm *c[TPT_MAXW];
} tpt_world;

static inline int tpt_open(tpt_world *w, int n, const tp_comm_opts *o)
{
    tp_backend *b[TPT_MAXW];
    char err[256];
    w->n = n;
    if (tp_loopback_create(n, b)) return -1;
    for (int r = 0; r < n; r++)
        if (tp_comm_create(&w->c[r], b[r], o, err, sizeof err)) {
            fprintf(stderr, "tp_comm_create: %s\n", err);
            return -1;
        }
    return 0;
}

static inline void tpt_close(tpt_world *w)
{
    for (int r = 0; r < w->n; r++) tp_comm_destroy(w->c[r]);
}

typedef void (*tpt_fn)(tp_comm *c, void *arg);
typedef struct { tpt_fn fn; tp_comm *c; void *arg; } tpt_job;

static inline void *tpt_thread(void *p)
{
    tpt_job *j = p;
    j->fn(j->c, j->arg);
    return NULL;
}

/* Runs fn on every rank at once, one thread each; returns when all are done. */
static inline void tpt_run(tpt_world *w, tpt_fn fn, void *arg)
{
    port_thread th[TPT_MAXW];
    tpt_job job[TPT_MAXW];
    for (int r = 0; r < w->n; r++) {
        job[r] = (tpt_job){fn, w->c[r], arg};
        port_thread_start(&th[r], tpt_thread, &job[r]);
    }
    for (int r = 0; r < w->n; r++) port_thread_join(th[r]);
}

/* ---- exact inputs -----------------------------------------------------------
 * Small integers, so every partial result is exact in every dtype (bf16 holds
 * integers up to 256): sums of 8 values in [-5, 5]; products of values in
 * {-2, -1, 1, 2} (powers of two up to 256); u8 gets [0, 10] (products wrap mod 256
 * the same way in the reference). Results then do not depend on reduction order and
 * are compared bit for bit. */
static inline int64_t tpt_val(rt_dtype dt, tp_op op, int r, size_t i)
{
    if (op == TP_PROD) {
        static const int64_t v[4] = {-2, -1, 1, 2};
        return v[((size_t)r * 3 + i % 4) % 4];
    }
    int64_t v = (int64_t)(((size_t)r * 7 + (i % 11) * 13) % 11) - 5; /* period 11 in i */
    return dt == RT_U8 ? v + 5 : v;
}

static inline void tpt_store(rt_dtype dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case RT_F32: ((float *)buf)[i] = (float)v; break;
    case RT_F64: ((double *)buf)[i] = v; break;
    case RT_F16: ((uint16_t *)buf)[i] = rt_f32_to_f16((float)v); break;
    case RT_BF16: ((uint16_t *)buf)[i] = rt_f32_to_bf16((float)v); break;
    case RT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case RT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case RT_U8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    default: break;
    }
}

static inline void tpt_fill(rt_dtype dt, tp_op op, int r, void *buf, size_t off, size_t n)
{
    for (size_t i = 0; i < n; i++) tpt_store(dt, buf, i, (double)tpt_val(dt, op, r, off + i));
}

/* The reduction of element i over ranks 0..world-1, stored into out[0]. */
static inline void tpt_expect(rt_dtype dt, tp_op op, int world, size_t i, void *out)
{
    int64_t acc = tpt_val(dt, op, 0, i);
    for (int r = 1; r < world; r++) {
        int64_t v = tpt_val(dt, op, r, i);
        switch (op) {
        case TP_PROD: acc *= v; break;
        case TP_MIN: acc = v < acc ? v : acc; break;
        case TP_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op != TP_AVG) { tpt_store(dt, out, 0, (double)acc); return; }
    switch (dt) { /* the same single division tp_avg_finish does */
    case RT_F32: case RT_F16: case RT_BF16: tpt_store(dt, out, 0, (double)((float)acc / (float)world)); break;
    case RT_F64: tpt_store(dt, out, 0, (double)acc / world); break;
    case RT_U8: tpt_store(dt, out, 0, (double)((uint8_t)acc / world)); break;
    default: tpt_store(dt, out, 0, (double)(acc / world)); break;
    }
}

/* Index of the first element of got that differs from the reference, or -1.
 * tpt_val is periodic in i (period 11 * 4), so the reference is computed for one
 * period and compared cyclically: cheap enough for big vectors under TSan. */
static inline long tpt_check(rt_dtype dt, tp_op op, int world, const void *got, size_t off, size_t n)
{
    enum { P = 44 };
    size_t es = rt_dtype_size(dt);
    unsigned char want[P][8];
    for (size_t k = 0; k < P; k++) tpt_expect(dt, op, world, k, want[k]);
    for (size_t i = 0; i < n; i++)
        if (memcmp(want[(off + i) % P], (const unsigned char *)got + i * es, es)) return (long)i;
    return -1;
}

/* Like tpt_check, against rank r's own inputs (allgather, broadcast). */
static inline long tpt_check_vals(rt_dtype dt, tp_op op, int r, const void *got, size_t off, size_t n)
{
    enum { P = 44 };
    size_t es = rt_dtype_size(dt);
    unsigned char want[P][8];
    for (size_t k = 0; k < P; k++) tpt_store(dt, want[k], 0, (double)tpt_val(dt, op, r, k));
    for (size_t i = 0; i < n; i++)
        if (memcmp(want[(off + i) % P], (const unsigned char *)got + i * es, es)) return (long)i;
    return -1;
}
#endif
