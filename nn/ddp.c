#include "nn/ddp_int.h"
#include "rt/env.h"
#include "rt/hash.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include "transport/tp_reduce.h"
#include "transport/tp_staged.h"
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MSG_LEN 240 /* status message bytes per rank in nn_ddp_agree */

/* What the rendezvous compares before anything else: settings that change the wire
 * protocol or the model's shape. The trainer's flags are compared field by field
 * later (nn_ddp_check_config), so a mismatch there can name the field. */
static uint64_t config_hash(const nn_opts *o)
{
    char s[256];
    const char *algo = rt_env_str(RT_ENV_ALGO);
    snprintf(s, sizeof s, "ddprt-train/1 model=%s backend=%s algo=%s", o->model, o->backend ? o->backend : "auto",
             algo ? algo : "auto");
    return rt_fnv1a_str(RT_FNV1A_INIT, s);
}

/* Scratch for the agreement steps (status, config, sync hashes), sized once so the
 * per-step --check-sync allocates nothing. */
static int alloc_scratch(nn_ddp *d)
{
    size_t per = MSG_LEN + 1 > 8 * NN_DDP_MAX_FIELDS ? MSG_LEN + 1 : 8 * NN_DDP_MAX_FIELDS;
    return (d->scratch = calloc((size_t)d->world, per)) ? 0 : -1;
}

int nn_ddp_connect(nn_ddp **out, const nn_opts *o, char *err, size_t errlen)
{
    nn_ddp *d = *out = calloc(1, sizeof *d); /* start-up */
    if (!d) {
        snprintf(err, errlen, "out of memory for the data-parallel group");
        return -1;
    }
    d->own_comm = 1;
    rt_rdzv_opts ro = {.init_method = o->init_method, .rank = o->rank, .world_size = o->world_size,
                       .local_rank = -1, .config_hash = config_hash(o)};
    if (rt_rdzv_open(&d->rz, &ro, err, errlen)) goto fail;
    d->rank = rt_rdzv_rank(d->rz);
    d->world = rt_rdzv_world(d->rz);
    d->local_rank = rt_rdzv_local_rank(d->rz);
    const char *lw = getenv("LOCAL_WORLD_SIZE");
    d->local_world = lw && atoi(lw) > 0 ? atoi(lw) : 1;
    if (d->world == 1) return 0;
    /* From here on every log line names this rank; other ranks keep to warnings. */
    rt_log_set_rank(d->rank);
    if (d->rank != 0 && !rt_env_str(RT_ENV_LOG)) rt_log_set_level(RT_LOG_WARN);
    tp_bootstrap bs;
    tp_bootstrap_rdzv(&bs, d->rz);
    if (alloc_scratch(d)) {
        snprintf(err, errlen, "rank %d: out of memory for %d ranks", d->rank, d->world);
        goto fail;
    }
    tp_backend *b = NULL;
    /* tcp, verbs, or auto (verbs when every rank has an active RDMA port). */
    if (tp_backend_create(&bs, o->backend, &b, err, errlen) || tp_comm_create(&d->comm, b, NULL, err, errlen))
        goto fail;
    return 0;
fail:
    nn_ddp_close(d, 0);
    *out = NULL;
    return -1;
}

nn_ddp *nn_ddp_wrap(tp_comm *c)
{
    nn_ddp *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->comm = c;
    d->rank = tp_rank(c), d->world = tp_world(c);
    d->local_world = 1;
    if (alloc_scratch(d)) {
        free(d);
        return NULL;
    }
    return d;
}

int nn_ddp_rank(const nn_ddp *d) { return d->rank; }
int nn_ddp_world(const nn_ddp *d) { return d->world; }
int nn_ddp_local_rank(const nn_ddp *d) { return d->local_rank; }
int nn_ddp_local_world(const nn_ddp *d) { return d->local_world; }
tp_comm *nn_ddp_comm(const nn_ddp *d) { return d->comm; }

nn_ddp_stats nn_ddp_get_stats(const nn_ddp *d)
{
    nn_ddp_stats s = d->s;
    s.nbuckets = d->nbuckets;
    s.wire = d->wire;
    return s;
}

const char *nn_ddp_errmsg(const nn_ddp *d) { return d->comm ? tp_errmsg(d->comm) : ""; }

int nn_ddp_agree(nn_ddp *d, int ok, const char *msg, char *err, size_t errlen)
{
    if (!d->comm) return ok ? 0 : (snprintf(err, errlen, "%s", msg), -1);
    /* Fixed-size records: a status byte then the message; allgather is rank order. */
    char *all = d->scratch, mine[MSG_LEN + 1] = {0};
    mine[0] = ok ? 1 : 0;
    snprintf(mine + 1, MSG_LEN, "%s", ok ? "" : msg);
    if (tp_allgather(d->comm, mine, all, MSG_LEN + 1, RT_U8)) {
        snprintf(err, errlen, "%s", tp_errmsg(d->comm));
        return -1;
    }
    for (int r = 0; r < d->world; r++)
        if (!all[r * (MSG_LEN + 1)]) {
            snprintf(err, errlen, "rank %d: %s", r, all + r * (MSG_LEN + 1) + 1);
            return -1;
        }
    return 0;
}

int nn_ddp_check_config(nn_ddp *d, const char *const *names, const int64_t *vals, int n,
                        char *err, size_t errlen)
{
    if (!d->comm) return 0;
    int64_t *all = d->scratch;
    if (n > NN_DDP_MAX_FIELDS) {
        snprintf(err, errlen, "nn_ddp_check_config: %d fields, at most %d", n, NN_DDP_MAX_FIELDS);
        return -1;
    }
    if (tp_allgather(d->comm, vals, all, (size_t)n, RT_I64)) {
        snprintf(err, errlen, "%s", tp_errmsg(d->comm));
        return -1;
    }
    for (int r = 1; r < d->world; r++)
        for (int i = 0; i < n; i++)
            if (all[r * n + i] != all[i]) {
                long long a = (long long)all[r * n + i], b = (long long)all[i];
                /* Flags compare as hashes or IEEE bits: their values would only confuse. */
                if (a > -(1LL << 40) && a < (1LL << 40) && b > -(1LL << 40) && b < (1LL << 40))
                    snprintf(err, errlen, "configuration differs: %s is %lld on rank %d but %lld on rank 0; "
                             "every rank must run with the same flags and data", names[i], a, r, b);
                else
                    snprintf(err, errlen, "configuration differs: %s is not the same on rank %d as on rank 0; "
                             "every rank must run with the same flags and data", names[i], r);
                return -1;
            }
    return 0;
}

int nn_ddp_check_lines(nn_ddp *d, const char *what, int n, nn_ddp_line_fn line, void *ctx, char *err, size_t errlen)
{
    if (!d->comm) return 0;
    int64_t *all = d->scratch, mine = n, most = 0;
    /* Everyone learns every count first, so every later allgather has the same size. */
    if (tp_allgather(d->comm, &mine, all, 1, RT_I64)) goto comm;
    for (int r = 0; r < d->world; r++)
        if (all[r] > most) most = all[r];
    char text[MSG_LEN + 1];
    int first = -1, who = 0;
    /* Hashes of the lines in chunks of NN_DDP_MAX_FIELDS (0 past a rank's last line). */
    for (int c0 = 0; c0 < most && first < 0; c0 += NN_DDP_MAX_FIELDS) {
        int k = most - c0 < NN_DDP_MAX_FIELDS ? (int)(most - c0) : NN_DDP_MAX_FIELDS;
        int64_t h[NN_DDP_MAX_FIELDS];
        for (int i = 0; i < k; i++) {
            h[i] = 0;
            if (c0 + i >= n) continue;
            line(ctx, c0 + i, text, sizeof text);
            h[i] = (int64_t)(rt_fnv1a_str(RT_FNV1A_INIT, text) | 1);
        }
        if (tp_allgather(d->comm, h, all, (size_t)k, RT_I64)) goto comm;
        for (int i = 0; i < k && first < 0; i++)
            for (int r = 1; r < d->world && first < 0; r++)
                if (all[r * k + i] != all[i]) first = c0 + i, who = r;
    }
    if (first < 0) return 0;
    /* The line that differs, as each rank has it. */
    char *txt = d->scratch;
    memset(text, 0, sizeof text);
    if (first < n) line(ctx, first, text, sizeof text);
    else snprintf(text, sizeof text, "nothing (%d in all)", n);
    if (tp_allgather(d->comm, text, txt, MSG_LEN + 1, RT_U8)) goto comm;
    txt[MSG_LEN] = txt[(size_t)who * (MSG_LEN + 1) + MSG_LEN] = 0;
    snprintf(err, errlen, "%s differs between ranks: rank %d has '%s', rank 0 has '%s'", what, who,
             txt + (size_t)who * (MSG_LEN + 1), txt);
    return -1;
comm:
    snprintf(err, errlen, "%s", tp_errmsg(d->comm));
    return -1;
}

/* The one launch path: host gradients through tp_iallreduce, device gradients through
 * tp_iallreduce_device (pinned staging); either way an async op on the comm that its
 * thread runs in issue order, waited for in nn_ddp_finish_grads. */
static void launch(nn_ddp *d, nn_bucket *bk)
{
    bk->launched = 1;
    d->s.launches++;
    d->s.wire_bytes += bk->count * rt_dtype_size(d->wire);
    /* An error here is sticky in the comm; nn_ddp_finish_grads reports it. */
    if (d->tree) {
        nn_ddp_tree_launch(d, bk);
        return;
    }
    if (d->dev) {
        if (d->wire == RT_F32)
            tp_iallreduce_device(d->comm, d->dev->grads + bk->off, bk->count, RT_F32, TP_AVG, d->st, &bk->h);
        else /* converted on the device first, reduced and averaged in 16 bits as below */
            tp_iallreduce_device(d->comm, nn_ddp_cuda_pack(d, bk), bk->count, d->wire, TP_AVG, d->st, &bk->h);
        return;
    }
    if (d->zero && d->wire == RT_F32) {
        nn_ddp_zero_launch(d, bk);
        return;
    }
    float *g = d->m->grads + bk->off;
    if (d->wire == RT_F32) {
        tp_iallreduce(d->comm, g, g, bk->count, RT_F32, TP_AVG, &bk->h);
        return;
    }
    uint16_t *h = d->half + bk->off;
    if (d->cref) memcpy(d->cref + bk->off, g, bk->count * sizeof *g);
    tp_f32_to_half(h, g, bk->count, d->wire);
    tp_iallreduce(d->comm, h, h, bk->count, d->wire, TP_AVG, &bk->h);
}

static int unpack(nn_ddp *d, const nn_bucket *bk)
{
    if (d->dev) return nn_ddp_cuda_unpack(d, bk);
    float *g = d->m->grads + bk->off;
    const uint16_t *h = d->half + bk->off;
    tp_half_to_f32(g, h, bk->count, d->wire);
    return 0;
}

/* The grads_alloc hook: one block for the life of the comm (the trainer carves once). */
static void *grads_alloc(void *ctx, size_t bytes)
{
    nn_ddp *d = ctx;
    if (!d->reg && (d->reg = tp_mem_alloc(d->comm, bytes))) d->s.reg_bytes = bytes;
    return d->s.reg_bytes >= bytes ? d->reg : NULL;
}

void nn_ddp_place_grads(nn_ddp *d, nn_graph *m)
{
    if (!d->comm) return;
    m->grads_alloc = grads_alloc;
    m->grads_ctx = d;
}

int nn_ddp_set_compress(nn_ddp *d, rt_dtype wire)
{
    if (d->dev) {
        /* nn_ddp_use_cuda planned the device's 16-bit buffer for its wire */
        if (wire != d->wire) return -1;
        if (wire == RT_F32 || d->cref || !rt_env_flag(RT_ENV_COMPRESS_CHECK, 0)) return 0;
        size_t n = d->m->nparams ? d->m->nparams : 1; /* start-up: the check's host copies */
        d->cref = calloc(n, sizeof *d->cref), d->cgot = calloc(n, sizeof *d->cgot);
        return d->cref && d->cgot ? 0 : -1;
    }
    d->wire = wire;
    if (!d->comm || wire == RT_F32 || d->half) return 0;
    /* start-up, once; registered too, as the 16-bit buckets are what is reduced */
    d->half = tp_mem_alloc(d->comm, (d->m->nparams ? d->m->nparams : 1) * sizeof *d->half);
    if (rt_env_flag(RT_ENV_COMPRESS_CHECK, 0) && !(d->cref = calloc(d->m->nparams ? d->m->nparams : 1, sizeof *d->cref))) return -1;
    return d->half ? 0 : -1;
}

void nn_ddp_compress_measure(nn_ddp *d, const float *g, const float *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double e = (double)g[i] - r[i];
        d->cerr2 += e * e, d->cref2 += (double)r[i] * r[i];
        d->czero += g[i] == 0 && r[i] != 0, d->cnz += r[i] != 0;
    }
}

/* After the compressed round: the f32 average of the same gradients, compared. */
static int compress_check(nn_ddp *d)
{
    int rc = tp_allreduce(d->comm, d->cref, d->cref, d->m->nparams, RT_F32, TP_AVG);
    if (!rc) nn_ddp_compress_measure(d, d->m->grads, d->cref, d->m->nparams);
    return rc;
}

void nn_ddp_compress_report(nn_ddp *d, int epoch)
{
    if (!d->cref) return;
    if (d->rank == 0)
        rt_info("epoch %d: --grad-compress %s vs f32 average: relative L2 error %.3g, %.4f %% of nonzero "
                "gradients became 0", epoch, rt_dtype_names[d->wire], d->cref2 > 0 ? sqrt(d->cerr2 / d->cref2) : 0.0,
                d->cnz ? 100.0 * (double)d->czero / (double)d->cnz : 0.0);
    d->cerr2 = d->cref2 = 0, d->czero = d->cnz = 0;
}

static void sync_sum(void *ctx, double *v, int n)
{
    nn_ddp *d = ctx;
    int64_t t0 = port_now_ns();
    d->s.sync_calls++;
    if (tp_allreduce(d->comm, v, v, (size_t)n, RT_F64, TP_SUM)) rt_fatal("--sync-bn: %s", tp_errmsg(d->comm));
    d->s.wait_s += (port_now_ns() - t0) * 1e-9;
}

void nn_ddp_enable_sync_bn(nn_ddp *d)
{
    if (!d->comm) return;
    d->m->sync_sum = sync_sum;
    d->m->sync_ctx = d;
}

/* Backward hook (host or device graph): params [first, end) have final gradients. */
static void on_grad_ready(void *ctx, int first)
{
    nn_ddp *d = ctx;
    if (d->tree && d->shard != nn_fold_shards(&d->fold) - 1) return; /* folded after its backward */
    for (int i = 0; i < d->nbuckets; i++)
        if (!d->b[i].launched && d->b[i].first_param >= first) launch(d, &d->b[i]), d->from_hook++;
}

static void hook(nn_ddp *d, nn_graph *g)
{
    g->on_grad_ready = on_grad_ready;
    g->on_grad_ctx = d;
}

void nn_ddp_attach(nn_ddp *d, nn_graph *m, double bucket_mb)
{
    d->m = m;
    d->nbuckets = 0;
    if (!d->comm) return;
    static nn_bucket_span sp[NN_MAX_PARAMS]; /* start-up only */
    d->nbuckets = nn_buckets(m, bucket_mb, sp);
    for (int i = 0; i < d->nbuckets; i++) {
        nn_bucket *b = &d->b[i];
        b->first_param = sp[i].first_param, b->last_param = sp[i].last_param;
        b->off = sp[i].f.lo;
        b->count = sp[i].f.hi - sp[i].f.lo;
        rt_debug("bucket %d: %s..%s, %zu floats", i, m->p[b->first_param].name, m->p[b->last_param].name,
                 b->count);
    }
    hook(d, m);
}

void nn_ddp_set_device(nn_ddp *d, nn_graph *dev, tp_staging *st)
{
    if (!d->comm) return;
    d->dev = dev;
    d->st = st;
    hook(d, dev);
}

int nn_ddp_broadcast_params(nn_ddp *d)
{
    if (!d->comm) return 0;
    if (tp_broadcast(d->comm, d->m->params, d->m->nparams, RT_F32, 0)) return -1;
    return nn_ddp_sync_buffers(d);
}

int nn_ddp_sync_buffers(nn_ddp *d)
{
    nn_graph *g = d->dev ? d->dev : d->m;
    if (!d->comm || !g || !g->buf_bytes) return 0;
    if (d->dev) return tp_broadcast_device(d->comm, g->bufs, g->buf_bytes, RT_U8, 0, d->st);
    return tp_broadcast(d->comm, g->bufs, g->buf_bytes, RT_U8, 0);
}

int nn_ddp_finish_grads(nn_ddp *d)
{
    if (!d->comm && !d->tree) return 0;
    int64_t t0 = port_now_ns();
    int rc = 0;
    for (int i = 0; i < d->nbuckets; i++)
        if (!d->b[i].launched) launch(d, &d->b[i]);
    for (int i = 0; i < d->nbuckets; i++) {
        int r = tp_wait(d->comm, &d->b[i].h);
        if (d->b[i].tail) {
            int r2 = tp_wait(d->comm, &d->b[i].h2);
            r = r ? r : r2;
            d->b[i].tail = 0;
        }
        /* (the device's check unpacks after its f32 reference) */
        if (!r && d->wire != RT_F32 && !d->tree && !(d->dev && d->cref)) r = unpack(d, &d->b[i]);
        if (r && !rc) rc = r;
        d->b[i].launched = 0;
    }
    if (!rc && d->tree) rc = nn_ddp_tree_finish(d);
    if (!rc && d->cref) rc = d->dev ? nn_ddp_cuda_check(d) : compress_check(d);
    d->s.rounds++;
    d->s.last_from_hook = d->from_hook;
    d->from_hook = 0;
    d->s.wait_s += (port_now_ns() - t0) * 1e-9;
    return rc;
}

int nn_ddp_check_sync(nn_ddp *d, uint64_t step, char *err, size_t errlen)
{
    if (!d->comm) return 0;
    nn_graph *m = d->m;
    int64_t mine[NN_MAX_PARAMS], *all = d->scratch;
    for (int p = 0; p < m->np; p++)
        mine[p] = (int64_t)rt_fnv1a(RT_FNV1A_INIT, m->params + m->p[p].offset, m->p[p].numel * sizeof(float));
    if (tp_allgather(d->comm, mine, all, (size_t)m->np, RT_I64)) {
        snprintf(err, errlen, "%s", tp_errmsg(d->comm));
        return -1;
    }
    for (int r = 1; r < d->world; r++)
        for (int p = 0; p < m->np; p++)
            if (all[r * m->np + p] != all[p]) {
                snprintf(err, errlen, "--check-sync: after step %llu parameter %s on rank %d differs from rank 0",
                         (unsigned long long)step, m->p[p].name, r);
                return -1;
            }
    return 0;
}

int nn_ddp_sum_f64(nn_ddp *d, double *v, int n)
{
    if (!d->comm) return 0;
    return tp_allreduce(d->comm, v, v, (size_t)n, RT_F64, TP_SUM);
}

void nn_ddp_fail(nn_ddp *d, const char *why)
{
    if (d->comm) tp_abort(d->comm, why);
}

void nn_ddp_close(nn_ddp *d, int failed)
{
    if (!d) return;
    if (d->comm) {
        if (failed) tp_abort(d->comm, "this rank stopped after an error");
        tp_mem_free(d->comm, d->half);
        tp_mem_free(d->comm, d->reg);
        if (d->own_comm) tp_comm_destroy(d->comm);
    }
    nn_ddp_tree_free(d);
    if (d->rz) rt_rdzv_close(d->rz);
    free(d->scratch);
    free(d->cref);
    free(d->cgot);
    free(d);
}
