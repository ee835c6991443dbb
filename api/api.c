/* The stable C API (include/ddprt.h): a thin layer over the rendezvous (rt/rdzv.h) and
 * the communicator (transport/tp.h). What it adds: its own error line per thread,
 * request slots handed out from a pool sized at init (no allocation per op), a
 * one-process job without any transport, and the port offset that lets ddprt and
 * torch.distributed share MASTER_ADDR/MASTER_PORT. The collectives are in
 * api/api_coll.c. */
#include "api/api_int.h"
#include "ports/posix/port_sock.h"
#include "rt/env.h"
#include "rt/hash.h"
#include "rt/log.h"
#include "rt/rdzv_int.h"
#include "rt/version.h"
#include "transport/tp_watch.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(DDPRT_FLOAT32 == (int)RT_F32 && DDPRT_BFLOAT16 == (int)RT_BF16 && DDPRT_UINT8 == (int)RT_U8 &&
                   DDPRT_INT64 == (int)RT_I64 && RT_NDTYPE == 7, "ddprt_dtype mirrors rt_dtype");
_Static_assert(DDPRT_SUM == (int)TP_SUM && DDPRT_PROD == (int)TP_PROD && DDPRT_MIN == (int)TP_MIN &&
                   DDPRT_MAX == (int)TP_MAX && DDPRT_AVG == (int)TP_AVG && TP_NOPS == 5, "ddprt_op mirrors tp_op");
_Static_assert((int)DDPRT_EIO == (int)TP_EIO && (int)DDPRT_ETIMEOUT == (int)TP_ETIMEOUT &&
                   (int)DDPRT_ECLOSED == (int)TP_ECLOSED && (int)DDPRT_EINVAL == (int)TP_EINVAL, "codes mirror the transport's");

#define DEFAULT_MAX_REQUESTS 1024
#define DEFAULT_PORT_OFFSET 2

static _Thread_local char last_err[700];

int api_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof last_err, fmt, ap);
    va_end(ap);
    return code;
}

int api_comm_fail(const ddprt_comm *c, int code)
{
    const char *m = c->tc ? tp_errmsg(c->tc) : "";
    /* A code without a comm failure: the transport refused the arguments. */
    return api_fail(code, "%s", *m ? m : code == TP_EINVAL ? "invalid argument" : "communication error");
}

const char *ddprt_last_error(void) { return last_err; }
const char *ddprt_comm_error(const ddprt_comm *c)
{
    return c && !__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE) && c->tc ? tp_errmsg(c->tc) : "";
}
const char *ddprt_version(void) { return DDPRT_VERSION; }
int ddprt_api_version(void) { return DDPRT_API_VERSION; }
size_t ddprt_dtype_size(ddprt_dtype dt) { return (unsigned)dt < RT_NDTYPE ? rt_dtype_size((rt_dtype)dt) : 0; }

int api_null_comm(const char *who)
{
    return api_fail(DDPRT_EINVAL, "%s: the communicator is NULL (call ddprt_init first)", who);
}

int api_live(const ddprt_comm *c, const char *who)
{
    if (!c) return api_null_comm(who);
    if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE))
        return api_fail(DDPRT_EINVAL, "%s: the communicator was finalized", who);
    return 0;
}

/* A NULL or finalized comm is an error like any call's, not a crash: a rank is never
 * negative. */
#define COMM_FIELD(fn, field) \
    int fn(const ddprt_comm *c) { int rc = api_live(c, #fn); return rc ? rc : c->field; }
COMM_FIELD(ddprt_rank, rank)
COMM_FIELD(ddprt_size, world)
COMM_FIELD(ddprt_local_rank, local_rank)
COMM_FIELD(ddprt_local_size, local_size)

void ddprt_opts_default(ddprt_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->rank = o->world_size = o->local_rank = -1;
    o->port_offset = DEFAULT_PORT_OFFSET;
    o->log_level = -1;
}

/* ---- meeting ------------------------------------------------------------------------ */

/* The rendezvous options: the caller's, with the port moved by port_offset when the
 * meeting is over TCP. url receives the rewritten init method. */
static int meeting(const ddprt_opts *o, rt_rdzv_opts *ro, char *url, size_t urllen, char *tok, size_t toklen,
                   char *err, size_t errlen)
{
    *ro = (rt_rdzv_opts){.init_method = o->init_method, .rank = o->rank, .world_size = o->world_size,
                         .local_rank = o->local_rank, .timeout_s = o->timeout_s, .token = o->token};
    const char *algo = rt_env_str(RT_ENV_ALGO);
    char conf[160];
    /* The algorithm is part of the wire protocol: ranks that disagree are refused. */
    snprintf(conf, sizeof conf, "ddprt-api/%d algo=%s", DDPRT_API_VERSION, algo ? algo : "auto");
    ro->config_hash = rt_fnv1a_str(RT_FNV1A_INIT, conf);
    if (!o->port_offset) return 0;
    rt_rdzv_plan p;
    if (rt_rdzv_resolve(ro, &p, err, errlen)) return -1;
    if (p.kind != RT_RDZV_TCP) return 0;
    int port = p.port + o->port_offset <= 65535 ? p.port + o->port_offset : p.port - o->port_offset;
    if (port < 1) {
        snprintf(err, errlen, "%.300s: port %d + port_offset %d is not a port", p.where, p.port, o->port_offset);
        return -1;
    }
    snprintf(url, urllen, "tcp://%s:%d", p.host, port);
    snprintf(tok, toklen, "%s", p.token);
    ro->init_method = url;
    ro->rank = p.rank, ro->world_size = p.world, ro->local_rank = p.local_rank;
    ro->timeout_s = p.timeout_s;
    ro->token = tok; /* "" = none: the plan already weighed DDPRT_JOB_TOKEN and job ids */
    return 0;
}

static void log_setup(int level)
{
    if (level >= 0) rt_log_set_level(level > RT_LOG_DEBUG ? RT_LOG_DEBUG : level);
    else if (rt_env_str(RT_ENV_LOG)) rt_log_init();
    else rt_log_set_level(-1); /* below error: silent */
}

/* Ranks on this host, from every rank's host id (machine and network namespace). */
static int count_local(ddprt_comm *c, rt_rdzv *rz, char *err, size_t errlen)
{
    uint64_t mine = port_host_id(), *all = calloc((size_t)c->world, sizeof *all);
    if (!all) return snprintf(err, errlen, "out of memory"), -1;
    int rc = rt_rdzv_allgather(rz, &mine, sizeof mine, all, err, errlen);
    c->local_size = 0;
    for (int r = 0; !rc && r < c->world; r++) c->local_size += all[r] == mine;
    free(all);
    return rc;
}

static int requests_init(ddprt_comm *c, int n)
{
    c->nreq = n > 0 ? n : DEFAULT_MAX_REQUESTS;
    if (!(c->reqs = calloc((size_t)c->nreq, sizeof *c->reqs))) return -1;
    for (int i = c->nreq - 1; i >= 0; i--) {
        c->reqs[i].c = c;
        c->reqs[i].next = c->free;
        c->free = &c->reqs[i];
    }
    port_mutex_init(&c->mu);
    return 0;
}

/* ddprt_init's failure path: nothing was handed out, so everything goes. */
static void comm_free(ddprt_comm *c)
{
    tp_comm_destroy(c->tc);
    if (c->reqs) pthread_mutex_destroy(&c->mu);
    free(c->reqs);
    free(c);
}

int ddprt_init(ddprt_comm **out, const ddprt_opts *opts)
{
    ddprt_opts o;
    ddprt_opts_default(&o);
    if (!out) return api_fail(DDPRT_EINVAL, "ddprt_init: out is NULL");
    *out = NULL;
    /* A caller built against an older header passes a shorter struct. */
    if (opts) memcpy(&o, opts, opts->size && opts->size < sizeof o ? opts->size : sizeof o);
    o.size = sizeof o;
    log_setup(o.log_level);
    char err[600] = "", url[300], tok[256];
    rt_rdzv_opts ro;
    rt_rdzv *rz = NULL;
    if (meeting(&o, &ro, url, sizeof url, tok, sizeof tok, err, sizeof err) || rt_rdzv_open(&rz, &ro, err, sizeof err))
        return api_fail(DDPRT_EINVAL, "ddprt_init: rendezvous: %s", err);
    ddprt_comm *c = calloc(1, sizeof *c);
    if (!c || requests_init(c, o.max_requests)) {
        free(c);
        rt_rdzv_close(rz);
        return api_fail(DDPRT_ENOMEM, "ddprt_init: out of memory");
    }
    c->rank = rt_rdzv_rank(rz);
    c->world = rt_rdzv_world(rz);
    c->local_rank = rt_rdzv_local_rank(rz);
    c->local_size = 1;
    int rc = 0;
    if (c->world > 1) {
        rt_log_set_rank(c->rank);
        /* A rank that the others gave up on fails its comm instead of ending the
         * process: the caller (a Python script) gets an error it can report. */
        tp_watch_set_exit(0);
        tp_bootstrap bs;
        tp_bootstrap_rdzv(&bs, rz);
        tp_backend *b = NULL;
        tp_comm_opts co = {.timeout_s = o.timeout_s > 0 ? o.timeout_s : rt_rdzv_timeout_s(rz), .algo = TP_ALGO_DEFAULT};
        if (tp_backend_create(&bs, o.backend, &b, err, sizeof err)) rc = -1;
        else if (tp_comm_create(&c->tc, b, &co, err, sizeof err)) b->ops->destroy(b), rc = -1;
        /* The last exchange over the rendezvous: after it nobody writes to rank 0's
         * sockets any more, so closing them loses nothing. */
        if (!rc) rc = count_local(c, rz, err, sizeof err);
    }
    rt_rdzv_close(rz);
    if (rc) {
        int r = c->rank;
        comm_free(c);
        return api_fail(DDPRT_EIO, "ddprt_init: rank %d: %s", r, err);
    }
    *out = c;
    return DDPRT_OK;
}

/* The transport goes when the comm is finalized and no ddprt_mem_alloc block is left:
 * arrays over such blocks (Python's ddprt.empty) stay valid until they are freed. */
static void release_tc(ddprt_comm *c)
{
    port_mutex_lock(&c->mu);
    tp_comm *tc = __atomic_load_n(&c->dead, __ATOMIC_ACQUIRE) && !c->nblocks ? c->tc : NULL;
    if (tc) c->tc = NULL;
    port_mutex_unlock(&c->mu);
    tp_comm_destroy(tc); /* waits for the ops in flight, frees registered blocks */
}

void ddprt_finalize(ddprt_comm *c)
{
    if (!c) return;
    if (__atomic_exchange_n(&c->dead, 1, __ATOMIC_ACQ_REL))
        return (void)api_fail(DDPRT_EINVAL, "ddprt_finalize: the communicator was finalized already");
    /* Requests in flight finish here (each op has its deadline) and are left to report
     * "finalized" to a later ddprt_wait/ddprt_test, which releases them. */
    for (int i = 0; i < c->nreq; i++) {
        ddprt_request *r = &c->reqs[i];
        if (!__atomic_load_n(&r->in_use, __ATOMIC_ACQUIRE)) continue;
        if (r->local_rc > 0) tp_wait(c->tc, &r->h);
        r->local_rc = DDPRT_ECLOSED;
    }
    release_tc(c);
}

void ddprt_abort(ddprt_comm *c, const char *why)
{
    if (!api_live(c, "ddprt_abort") && c->tc) tp_abort(c->tc, why && *why ? why : "ddprt_abort");
}

void *ddprt_mem_alloc(ddprt_comm *c, size_t bytes)
{
    void *p = NULL;
    if (api_live(c, "ddprt_mem_alloc")) return NULL;
    if (c->tc) p = tp_mem_alloc(c->tc, bytes);
    else if (posix_memalign(&p, 4096, bytes ? bytes : 1)) p = NULL;
    if (!p) return api_fail(DDPRT_ENOMEM, "ddprt_mem_alloc: out of memory (%zu bytes)", bytes), NULL;
    port_mutex_lock(&c->mu);
    c->nblocks++;
    port_mutex_unlock(&c->mu);
    return p;
}

/* Also after ddprt_finalize: the last block's free closes the transport. */
void ddprt_mem_free(ddprt_comm *c, void *p)
{
    /* Whose block p is cannot be known without c: it is left alone. */
    if (!c) return (void)api_null_comm("ddprt_mem_free");
    if (!p) return;
    if (c->tc) tp_mem_free(c->tc, p);
    else free(p);
    port_mutex_lock(&c->mu);
    c->nblocks -= c->nblocks > 0;
    port_mutex_unlock(&c->mu);
    release_tc(c);
}

/* ---- requests ----------------------------------------------------------------------- */

ddprt_request *api_req_get(ddprt_comm *c)
{
    port_mutex_lock(&c->mu);
    ddprt_request *r = c->free;
    if (r) {
        c->free = r->next;
        r->next = NULL;
        r->in_use = 1;
        r->local_rc = 1; /* not a local op unless the caller says so */
    }
    port_mutex_unlock(&c->mu);
    if (!r) api_fail(DDPRT_EBUSY, "rank %d: %d async ops in flight: wait for some first (ddprt_opts.max_requests)",
                     c->rank, c->nreq);
    return r;
}

void api_req_put(ddprt_request *r)
{
    ddprt_comm *c = r->c;
    port_mutex_lock(&c->mu);
    r->in_use = 0;
    r->next = c->free;
    c->free = r;
    port_mutex_unlock(&c->mu);
}

/* A request of a finalized comm: finalize completed it; released with its error. */
static int finalized(ddprt_request *r, const char *who)
{
    api_req_put(r);
    return api_fail(DDPRT_ECLOSED, "%s: the communicator was finalized before the request was waited for", who);
}

int ddprt_wait(ddprt_request *r)
{
    int rc = api_req_check(r, "ddprt_wait");
    if (rc) return rc;
    ddprt_comm *c = r->c;
    if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE)) return finalized(r, "ddprt_wait");
    rc = r->local_rc <= 0 ? r->local_rc : tp_wait(c->tc, &r->h);
    api_req_put(r);
    return rc ? api_comm_fail(c, rc) : DDPRT_OK;
}

int api_req_check(ddprt_request *r, const char *who)
{
    /* in_use is read without the lock: waiting for a released request is the caller's
     * bug, caught here when it is plainly so, not a race to arbitrate. */
    if (!r || !__atomic_load_n(&r->in_use, __ATOMIC_RELAXED))
        return api_fail(DDPRT_EINVAL, "%s: the request is NULL or already completed", who);
    return 0;
}

int api_test(ddprt_request *r)
{
    ddprt_comm *c = r->c;
    if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE)) return finalized(r, "ddprt_test");
    int rc = r->local_rc <= 0 ? (r->local_rc ? r->local_rc : 1) : tp_test(c->tc, &r->h);
    if (!rc) return 0;
    api_req_put(r);
    return rc < 0 ? api_comm_fail(c, rc) : 1;
}

int ddprt_test(ddprt_request **req, int *done)
{
    if (done) *done = 0;
    if (!req || !done) return api_fail(DDPRT_EINVAL, "ddprt_test: %s is NULL", req ? "done" : "req");
    int rc = api_req_check(*req, "ddprt_test");
    if (rc || !(rc = api_test(*req))) return rc;
    *done = 1, *req = NULL; /* released: ok or failed */
    return rc < 0 ? rc : DDPRT_OK;
}
