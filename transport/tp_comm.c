/* The communicator: options, scratch arena, sticky errors, and issue order.
 *
 * Who drives the backend: a blocking call made while no async op is queued or
 * running runs right on the calling thread (waking another thread costs ~100 us; a
 * 4-byte allreduce should cost a few). Otherwise the call is queued behind the
 * async ops and the comm thread runs it, so ops always run in issue order.
 * `busy` (under mu) says someone is driving the backend. */
#include "transport/tp_comm_int.h"
#include "transport/tp_link_shm.h"
#include "transport/tp_watch.h"
#include "rt/env.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int tp_rank(const tp_comm *c) { return c->rank; }
int tp_world(const tp_comm *c) { return c->world; }
size_t tp_comm_arena_bytes(const tp_comm *c) { return c->arena.size; }
const char *tp_errmsg(const tp_comm *c) { return c->errmsg; }

/* DDPRT_ALGO's choices (rt/env.c: ring|rd|hier|auto) in order. */
static int env_algo(void)
{
    static const int algos[] = {TP_ALGO_RING, TP_ALGO_RD, TP_ALGO_HIER, TP_ALGO_AUTO};
    return algos[rt_env_choice(RT_ENV_ALGO, 3)];
}

static void *comm_thread(void *arg);

int tp_comm_create(tp_comm **out, tp_backend *b, const tp_comm_opts *o, char *err, size_t errlen)
{
    tp_comm_opts d = {0};
    if (!o) o = &d;
    *out = NULL;
    size_t abytes = o->arena_bytes ? o->arena_bytes : TP_DEFAULT_ARENA_BYTES;
    size_t nbuf = 2 * TP_PIPE_DEPTH + 1;
    size_t chunk = abytes / nbuf / RT_ALIGN * RT_ALIGN;
    if (rt_env_check(err, errlen)) return TP_EINVAL;
    if (!b || chunk < 512) {
        snprintf(err, errlen, "tp_comm_create: %s", !b ? "no backend" : "arena_bytes below 4608");
        return TP_EINVAL;
    }
    tp_comm *c = calloc(1, sizeof *c);
    if (!c || rt_arena_init(&c->arena, "comm", chunk * nbuf)) {
        free(c);
        snprintf(err, errlen, "tp_comm_create: out of memory (%zu bytes of scratch)", abytes);
        return TP_EIO;
    }
    c->b = b;
    c->rank = b->rank;
    c->world = b->world;
    c->timeout_s = o->timeout_s > 0 ? o->timeout_s : rt_env_timeout_s();
    c->algo = o->algo == TP_ALGO_DEFAULT ? env_algo() : o->algo;
    /* A forced algorithm is what the caller measures: no shared memory then. */
    c->layer = c->algo == TP_ALGO_AUTO ? &tp_shm_layer : NULL;
    c->chunk = chunk;
    if (tp_hier_init(c, o)) {
        snprintf(err, errlen, "tp_comm_create: out of memory (host table)");
        tp_hier_free(c);
        rt_arena_free(&c->arena);
        free(c);
        return TP_EIO;
    }
    for (int i = 0; i < 2 * TP_PIPE_DEPTH; i++)
        c->slot[i] = rt_arena_alloc(&c->arena, chunk, RT_MEM_COMM, "ring chunk slot");
    c->rdbuf = rt_arena_alloc(&c->arena, chunk, RT_MEM_COMM, "recursive doubling buffer");
    if (b->ops->register_mem && b->ops->register_mem(b, c->arena.base, c->arena.size)) {
        snprintf(err, errlen, "tp_comm_create: %s: cannot register scratch: %s", b->ops->name, b->err);
        rt_arena_free(&c->arena);
        free(c);
        return TP_EIO;
    }
    port_mutex_init(&c->mu);
    port_cond_init(&c->cv_work);
    port_cond_init(&c->cv_done);
    c->p_wait_peer = -1;
    if (tp_trace_init(c, err, errlen)) {
        rt_arena_free(&c->arena);
        free(c);
        return TP_EIO;
    }
    if (port_thread_start(&c->thread, comm_thread, c)) {
        snprintf(err, errlen, "tp_comm_create: cannot start the communication thread");
        tp_trace_free(c);
        rt_arena_free(&c->arena);
        free(c);
        return TP_EIO;
    }
    c->watch = b->watch;
    b->watch = NULL;
    if (c->watch) tp_watch_start(c->watch, c);
    *out = c;
    return 0;
}

void tp_comm_destroy(tp_comm *c)
{
    if (!c) return;
    port_mutex_lock(&c->mu);
    c->stop = 1;
    port_cond_broadcast(&c->cv_work);
    port_mutex_unlock(&c->mu);
    port_thread_join(c->thread); /* it drains the queue first (each op has a deadline) */
    for (int i = 0; i < TP_MEM_MAX; i++) /* blocks the caller did not free */
        if (c->mem[i].gen) tp_mem_free(c, c->mem[i].base);
    tp_watch_destroy(c->watch);
    c->b->ops->destroy(c->b);
    tp_trace_free(c);
    pthread_cond_destroy(&c->cv_work);
    pthread_cond_destroy(&c->cv_done);
    pthread_mutex_destroy(&c->mu);
    rt_arena_free(&c->arena);
    tp_ipc_free(c);
    tp_hier_free(c);
    if (c->layer) c->layer->free(c);
    free(c->peer_tp);
    free(c->link);
    tp_link_shm_free(c);
    free(c);
}

static void fmt_size(char *s, size_t n, size_t bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = (double)bytes;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    if (v == (double)(size_t)v) snprintf(s, n, "%zu %s", (size_t)v, unit[u]);
    else snprintf(s, n, "%.1f %s", v, unit[u]);
}

static size_t op_bytes(const tp_comm *c, const tp_handle *h)
{
    size_t es = h->kind >= TP_K_SEND ? 1 : rt_dtype_size((rt_dtype)h->dt);
    size_t n = h->count * es;
    return h->kind == TP_K_REDUCE_SCATTER || h->kind == TP_K_ALLGATHER ? n * (size_t)c->world : n;
}

/* Makes the comm failed (first failure wins) with one line naming the op. */
static void comm_fail(tp_comm *c, const tp_handle *h, int rc)
{
    char size[32], what[520];
    const char *be = c->b->err[0] ? c->b->err : "backend error";
    fmt_size(size, sizeof size, op_bytes(c, h));
    /* Backends say "timed out waiting for rank 3"; the comm knows the timeout. */
    if (rc == TP_ETIMEOUT && !strstr(be, " after ")) {
        const char *rest = strncmp(be, "timed out", 9) ? be : be + 9;
        while (*rest == ' ') rest++;
        snprintf(what, sizeof what, "timed out after %g s %s", c->timeout_s, rest);
    } else {
        snprintf(what, sizeof what, "%s", be);
    }
    /* The watch knows more than this rank's backend: who the others wait on (a timeout
     * here names only the peer this rank was reading from), or a mismatched op. */
    char why[440];
    if (c->watch && tp_watch_on_fail(c->watch, h->seq, rc == TP_ETIMEOUT, !strncmp(be, "protocol error", 14), why,
                                     sizeof why)) {
        if (rc == TP_ETIMEOUT) snprintf(what, sizeof what, "timed out after %g s: %.440s", c->timeout_s, why);
        else snprintf(what, sizeof what, "%s", why);
    }
    port_mutex_lock(&c->mu);
    int first = !c->failed;
    if (first) {
        c->failed = rc;
        snprintf(c->errmsg, sizeof c->errmsg, "%s #%llu (%s): %.520s", tp_kind_name(h->kind),
                 (unsigned long long)h->seq, size, what);
    }
    port_mutex_unlock(&c->mu);
    if (first && c->watch) tp_trace_dump(c, c->errmsg); /* a job's comm, not an in-process test's */
}

void tp_fail_op(tp_comm *c, const tp_handle *h, int rc, const char *why)
{
    char size[32];
    fmt_size(size, sizeof size, op_bytes(c, h));
    port_mutex_lock(&c->mu);
    int first = !c->failed;
    if (first) {
        c->failed = rc;
        snprintf(c->errmsg, sizeof c->errmsg, "%s #%llu (%s): %.520s", tp_kind_name(h->kind),
                 (unsigned long long)h->seq, size, why);
    }
    port_mutex_unlock(&c->mu);
    if (!first) return;
    c->b->ops->abort(c->b, why);
    if (c->watch) tp_trace_dump(c, c->errmsg);
}

void tp_abort(tp_comm *c, const char *why)
{
    c->b->ops->abort(c->b, why);
    port_mutex_lock(&c->mu);
    if (!c->failed) {
        c->failed = TP_EIO;
        snprintf(c->errmsg, sizeof c->errmsg, "aborted: %s", why && *why ? why : "(no reason)");
    }
    port_mutex_unlock(&c->mu);
}

/* h by the algorithms over the backend. */
static int run_algo(tp_comm *c, tp_handle *h)
{
    size_t es = h->kind >= TP_K_SEND ? 1 : rt_dtype_size((rt_dtype)h->dt);
    size_t bytes = h->count * es;
    int algo = c->algo;
    if (algo == TP_ALGO_AUTO) algo = bytes < TP_AUTO_RD_MAX_BYTES ? TP_ALGO_RD : TP_ALGO_RING;
    switch (h->kind) {
    case TP_K_ALLREDUCE:
        if (h->root == TP_ROOT_CROSS) return tp_hier_cross(c, h); /* a piece of a device op (tp_ipc_hier.c) */
        /* Large auto and forced hier: hierarchical where the hosts allow it. */
        if (algo == TP_ALGO_RD) return tp_rd_allreduce(c, h->send, h->recv, h->count, h->dt, h->op);
        if (algo == TP_ALGO_RING && c->algo == TP_ALGO_RING)
            return tp_ring_allreduce(c, h->send, h->recv, h->count, h->dt, h->op);
        return tp_hier_allreduce(c, h->send, h->recv, h->count, h->dt, h->op);
    case TP_K_BROADCAST:
        return algo == TP_ALGO_RD ? tp_tree_broadcast(c, h->recv, bytes, h->root)
                                  : tp_chain_broadcast(c, h->recv, bytes, h->root);
    case TP_K_REDUCE_SCATTER: return tp_ring_reduce_scatter(c, h->send, h->recv, h->count, h->dt, h->op);
    case TP_K_ALLGATHER: return tp_ring_allgather(c, h->send, h->recv, h->count, h->dt);
    case TP_K_BARRIER: return tp_dissemination_barrier(c);
    case TP_K_TREE: return tp_tree_run(c, h);
    case TP_K_SEND: return tp_xfer(c, h->send, bytes, h->root, NULL, 0, -1);
    case TP_K_RECV: return tp_xfer(c, NULL, 0, -1, h->recv, bytes, h->root);
    default: return TP_EINVAL;
    }
}

/* t0: now (a blocking op run right away shares its issue's clock read). */
static int run_op_at(tp_comm *c, tp_handle *h, int64_t t0)
{
    port_mutex_lock(&c->mu);
    int rc = c->failed;
    port_mutex_unlock(&c->mu);
    if (rc) return rc;
    c->deadline = t0 + (int64_t)(c->timeout_s * 1e9);
    __atomic_store_n(&c->p_cur_start, t0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->p_cur, h->seq, __ATOMIC_RELEASE);
    tp_trace_state(c, h->seq, TP_TR_RUNNING, 0, t0);
    if (!c->connected && tp_connects_at(h)) rc = tp_connect(c);
    if (!rc) rc = c->layer && h->root != TP_ROOT_CROSS ? c->layer->run(c, h) : TP_PASS;
    if (rc == TP_PASS) rc = run_algo(c, h);
    if (rc) comm_fail(c, h, rc);
    int64_t t1 = port_now_ns(); /* one clock read per end: the recorder's and the watch's */
    tp_trace_state(c, h->seq, rc ? TP_TR_FAILED : TP_TR_DONE, rc, t1);
    __atomic_store_n(&c->p_done_at, t1, __ATOMIC_RELAXED);
    __atomic_store_n(&c->p_done, h->seq, __ATOMIC_RELEASE);
    __atomic_store_n(&c->p_cur, 0, __ATOMIC_RELEASE);
    return rc;
}

int tp_run_op(tp_comm *c, tp_handle *h) { return run_op_at(c, h, port_now_ns()); }

/* ---- issue order ---------------------------------------------------------- */

/* Checks arguments and hands out the sequence number; under mu. t: now. */
static int issue_locked(tp_comm *c, tp_handle *h, int64_t t)
{
    /* A staged device op takes one number per chunk: its chunks are the collectives
     * the peers see (and the shared-memory path checks numbers match). */
    size_t nseq = h->stage ? tp_staged_nchunks(h) : 1;
    h->seq = c->seq + 1;
    __atomic_store_n(&c->seq, c->seq + (nseq ? nseq : 1), __ATOMIC_RELEASE);
    h->next = NULL;
    h->rc = 0;
    if (c->failed) {
        h->state = TP_H_DONE;
        return h->rc = c->failed;
    }
    int bad = (unsigned)h->dt >= RT_NDTYPE || (unsigned)h->op >= TP_NOPS;
    if (h->kind == TP_K_BROADCAST || h->kind >= TP_K_SEND) /* root is the peer for p2p */
        bad |= h->root < 0 || h->root >= c->world || (h->kind >= TP_K_SEND && h->root == c->rank);
    if (bad) {
        h->state = TP_H_DONE;
        return h->rc = TP_EINVAL;
    }
    h->state = TP_H_QUEUED;
    if (h->kind >= TP_K_SEND) __atomic_store_n(&c->p2p, 1, __ATOMIC_RELAXED);
    if (!h->stage) tp_trace_issue(c, h->seq, h->kind, h->dt, h->op, h->root, op_bytes(c, h), t);
    for (size_t i = 0; h->stage && i < nseq; i++)
        tp_trace_issue(c, h->seq + i, h->kind, h->dt, h->op, h->root,
                       tp_staged_chunk_count(h, i) * rt_dtype_size((rt_dtype)h->dt), t);
    return 0;
}

/* The op itself: a host collective, or a staged device op (its chunks inline). The
 * staged layer (tp_staged.c) and the comm call each other by design: device ops queue
 * here so that host and device ops keep one order on every rank, the comm hands a
 * staged op back to run its chunks, and each chunk is a host op issued through here. */
static int run_handle(tp_comm *c, tp_handle *h, int64_t t)
{
    return h->stage ? tp_staged_run(c, h) : run_op_at(c, h, t);
}

static void enqueue_locked(tp_comm *c, tp_handle *h)
{
    if (c->qtail) c->qtail->next = h; else c->qhead = h;
    c->qtail = h;
    port_cond_signal(&c->cv_work);
}

static void *comm_thread(void *arg)
{
    tp_comm *c = arg;
    port_mutex_lock(&c->mu);
    for (;;) {
        while (!c->qhead || c->busy) {
            if (c->stop && !c->qhead && !c->busy) goto out;
            /* Idle: sleep with a deadline anyway (every wait has one). */
            port_cond_wait_until(&c->cv_work, &c->mu, port_now_ns() + 1000000000LL);
        }
        tp_handle *h = c->qhead;
        if (!(c->qhead = h->next)) c->qtail = NULL;
        c->busy = 1;
        h->state = TP_H_RUNNING;
        port_mutex_unlock(&c->mu);
        int rc = run_handle(c, h, port_now_ns());
        port_mutex_lock(&c->mu);
        h->rc = rc;
        h->state = TP_H_DONE;
        c->busy = 0;
        port_cond_broadcast(&c->cv_done);
    }
out:
    port_mutex_unlock(&c->mu);
    return NULL;
}

/* Waits for h, under mu. The comm thread finishes each op by its deadline, so
 * waiting much longer than that without the queue moving means a backend broke its
 * deadline contract: abort the backend (which wakes it), and if even that does not
 * bring h back, exit with a clear line rather than hang or return while the thread
 * may still write into h. */
static int wait_locked(tp_comm *c, tp_handle *h)
{
    uint64_t last_seq = 0;
    int64_t until = 0;
    int aborted = 0;
    while (h->state != TP_H_DONE) {
        /* Restart the allowance whenever the head of the queue moves on. */
        uint64_t head = c->qhead ? c->qhead->seq : c->seq + 1;
        if (head != last_seq && !aborted) {
            last_seq = head;
            until = port_now_ns() + (int64_t)((c->timeout_s + 10) * 1e9);
        }
        port_cond_wait_until(&c->cv_done, &c->mu, until);
        if (h->state == TP_H_DONE || port_now_ns() < until) continue;
        if (aborted)
            rt_fatal("tp_wait: op #%llu still not finished after aborting the %s backend",
                     (unsigned long long)h->seq, c->b->ops->name);
        rt_error("tp_wait: op #%llu made no progress in %g s; aborting the %s backend",
                 (unsigned long long)h->seq, c->timeout_s + 10, c->b->ops->name);
        port_mutex_unlock(&c->mu);
        tp_abort(c, "communication thread made no progress");
        port_mutex_lock(&c->mu);
        aborted = 1;
        until = port_now_ns() + 10000000000LL;
    }
    return h->rc;
}

/* Blocking op: direct on this thread when nothing is in flight, else in order. */
static int run_blocking(tp_comm *c, tp_handle *h)
{
    int64_t t = port_now_ns();
    port_mutex_lock(&c->mu);
    int rc = issue_locked(c, h, t);
    if (rc) { port_mutex_unlock(&c->mu); return rc; }
    if (!c->qhead && !c->busy) {
        c->busy = 1;
        port_mutex_unlock(&c->mu);
        rc = run_handle(c, h, t);
        port_mutex_lock(&c->mu);
        c->busy = 0;
        h->state = TP_H_DONE;
        if (c->qhead) port_cond_signal(&c->cv_work); /* an async op came in meanwhile */
        port_mutex_unlock(&c->mu);
        return rc;
    }
    enqueue_locked(c, h);
    rc = wait_locked(c, h);
    port_mutex_unlock(&c->mu);
    return rc;
}

static int run_async(tp_comm *c, tp_handle *h)
{
    int64_t t = port_now_ns();
    port_mutex_lock(&c->mu);
    int rc = issue_locked(c, h, t);
    if (!rc) enqueue_locked(c, h);
    port_mutex_unlock(&c->mu);
    return rc;
}

int tp_issue(tp_comm *c, tp_handle *h, int blocking) { return blocking ? run_blocking(c, h) : run_async(c, h); }

int tp_failed(tp_comm *c)
{
    port_mutex_lock(&c->mu);
    int rc = c->failed;
    port_mutex_unlock(&c->mu);
    return rc;
}

#define HANDLE(k, s, r, n, d, o, rt) \
    (tp_handle){.kind = (k), .send = (s), .recv = (r), .count = (n), .dt = (int)(d), .op = (int)(o), .root = (rt)}

/* The tree collectives' entry points (their algorithm: tp_tree.c). */
/* Issue checks beyond the comm's: a tree set for this world, an op that is one. */
static int tree_op(tp_comm *c, void *buf, size_t count, rt_dtype dt, tp_op op, int phases, tp_handle *h, int blocking,
                   int div)
{
    *h = (tp_handle){.kind = TP_K_TREE, .send = buf, .recv = buf, .count = count, .dt = (int)dt, .op = (int)op,
                     .root = phases, .div = div};
    port_mutex_lock(&c->mu);
    int set = c->ntree != 0;
    port_mutex_unlock(&c->mu);
    if (!set || op == TP_AVG || div < 1 || (!buf && count)) {
        h->state = TP_H_DONE;
        return h->rc = TP_EINVAL;
    }
    return tp_issue(c, h, blocking);
}

int tp_tree_allreduce(tp_comm *c, void *buf, size_t count, rt_dtype dt, tp_op op)
{
    tp_handle h;
    return tree_op(c, buf, count, dt, op, TP_TREE_ALL, &h, 1, 1);
}

int tp_itree_allreduce(tp_comm *c, void *buf, size_t count, rt_dtype dt, tp_op op, tp_handle *h)
{
    return tree_op(c, buf, count, dt, op, TP_TREE_ALL, h, 0, 1);
}

int tp_itree_allreduce_div(tp_comm *c, void *buf, size_t count, rt_dtype dt, int div, tp_handle *h)
{
    return tree_op(c, buf, count, dt, TP_SUM, TP_TREE_ALL, h, 0, div);
}

int tp_tree_reduce_scatter(tp_comm *c, void *buf, size_t count, rt_dtype dt, tp_op op)
{
    tp_handle h;
    return tree_op(c, buf, count, dt, op, TP_TREE_RS, &h, 1, 1);
}

int tp_tree_allgather(tp_comm *c, void *buf, size_t count, rt_dtype dt)
{
    tp_handle h;
    return tree_op(c, buf, count, dt, TP_SUM, TP_TREE_AG, &h, 1, 1);
}

int tp_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op)
{
    tp_handle h = HANDLE(TP_K_ALLREDUCE, send, recv, count, dt, op, 0);
    return run_blocking(c, &h);
}

int tp_broadcast(tp_comm *c, void *buf, size_t count, rt_dtype dt, int root)
{
    tp_handle h = HANDLE(TP_K_BROADCAST, buf, buf, count, dt, 0, root);
    return run_blocking(c, &h);
}

int tp_reduce_scatter(tp_comm *c, const void *send, void *recv, size_t recvcount, rt_dtype dt, tp_op op)
{
    tp_handle h = HANDLE(TP_K_REDUCE_SCATTER, send, recv, recvcount, dt, op, 0);
    return run_blocking(c, &h);
}

int tp_allgather(tp_comm *c, const void *send, void *recv, size_t sendcount, rt_dtype dt)
{
    tp_handle h = HANDLE(TP_K_ALLGATHER, send, recv, sendcount, dt, 0, 0);
    return run_blocking(c, &h);
}

int tp_barrier(tp_comm *c)
{
    tp_handle h = HANDLE(TP_K_BARRIER, NULL, NULL, 0, RT_U8, 0, 0);
    return run_blocking(c, &h);
}

int tp_send(tp_comm *c, const void *buf, size_t bytes, int peer)
{
    tp_handle h = HANDLE(TP_K_SEND, buf, NULL, bytes, RT_U8, 0, peer);
    return run_blocking(c, &h);
}

int tp_recv(tp_comm *c, void *buf, size_t bytes, int peer)
{
    tp_handle h = HANDLE(TP_K_RECV, NULL, buf, bytes, RT_U8, 0, peer);
    return run_blocking(c, &h);
}

int tp_iallreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op,
                  tp_handle *h)
{
    *h = HANDLE(TP_K_ALLREDUCE, send, recv, count, dt, op, 0);
    return run_async(c, h);
}

int tp_ibroadcast(tp_comm *c, void *buf, size_t count, rt_dtype dt, int root, tp_handle *h)
{
    *h = HANDLE(TP_K_BROADCAST, buf, buf, count, dt, 0, root);
    return run_async(c, h);
}

int tp_ireduce_scatter(tp_comm *c, const void *send, void *recv, size_t recvcount, rt_dtype dt,
                       tp_op op, tp_handle *h)
{
    *h = HANDLE(TP_K_REDUCE_SCATTER, send, recv, recvcount, dt, op, 0);
    return run_async(c, h);
}

int tp_iallgather(tp_comm *c, const void *send, void *recv, size_t sendcount, rt_dtype dt, tp_handle *h)
{
    *h = HANDLE(TP_K_ALLGATHER, send, recv, sendcount, dt, 0, 0);
    return run_async(c, h);
}

int tp_wait(tp_comm *c, tp_handle *h)
{
    port_mutex_lock(&c->mu);
    int rc = wait_locked(c, h);
    port_mutex_unlock(&c->mu);
    return rc;
}

int tp_test(tp_comm *c, tp_handle *h)
{
    port_mutex_lock(&c->mu);
    int rc = h->state != TP_H_DONE ? 0 : h->rc ? h->rc : 1;
    port_mutex_unlock(&c->mu);
    return rc;
}
