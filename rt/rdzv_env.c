/* Where and as whom a rank meets the others: the init method (tcp://, file://, env://)
 * or, without one, what the launcher left in the environment (torchrun, Slurm, Open MPI,
 * MPICH/PMI). Explicit options always win over the environment. */
#include "rt/rdzv_int.h"
#include "rt/env.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A launcher flavour: its variables (a second name is tried when the first is unset)
 * and where its rank 0 listens. The table (FLAVOURS) is below the master functions. */
typedef struct flavour flavour;
typedef int master_fn(const flavour *f, const rt_rdzv_opts *o, rt_rdzv_plan *p, char *err, size_t errlen);
struct flavour {
    const char *name, *rank, *world, *world2, *local, *local2, *lsize; /* lsize: ranks on this node */
    master_fn *master;
};

/* 1 = set to a valid integer, 0 = unset/empty, -1 = set but not an integer (err set). */
/* The port derived from a job's id, the same on every rank: 20000-32767, below Linux's
 * ephemeral range (32768-60999 by default), where a connection of anything on the node
 * may already hold it (seen: rank 0 "Address already in use" at 38359). */
static int port_of_job(uint32_t id) { return 20000 + (int)(id % 12768u); }

static int env_int(const char *name, int *v, char *err, size_t errlen)
{
    const char *s = name ? getenv(name) : NULL;
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || x < -1 || x > 1000000000L) {
        snprintf(err, errlen, "%s=%s is not a valid integer", name, s);
        return -1;
    }
    *v = (int)x;
    return 1;
}

/* Fills rank/world/local_rank that the options left at -1 from flavour f. */
static int from_flavour(const flavour *f, rt_rdzv_plan *p, int need, char *err, size_t errlen)
{
    int v, k;
    if (p->rank < 0) {
        if ((k = env_int(f->rank, &v, err, errlen)) < 0) return -1;
        if (k) p->rank = v;
        else if (need) { snprintf(err, errlen, "%s: %s is not set (which rank is this?)", f->name, f->rank); return -1; }
    }
    if (p->world < 0) {
        if ((k = env_int(f->world, &v, err, errlen)) < 0) return -1;
        if (!k && (k = env_int(f->world2, &v, err, errlen)) < 0) return -1;
        if (k) p->world = v;
        else if (need) { snprintf(err, errlen, "%s: %s is not set (how many ranks?)", f->name, f->world); return -1; }
    }
    const char *lname = "the local rank";
    if (p->local_rank < 0) {
        if ((k = env_int(f->local, &v, err, errlen)) < 0) return -1;
        if (k) lname = f->local;
        else if ((k = env_int(f->local2, &v, err, errlen)) < 0) return -1;
        else if (k) lname = f->local2;
        if (k) p->local_rank = v;
    }
    /* A local rank outside the node's ranks would pick another rank's CPUs and device. */
    if ((k = env_int(f->lsize, &v, err, errlen)) < 0) return -1;
    if (k && (v < 1 || p->local_rank >= v)) {
        if (v < 1) snprintf(err, errlen, "%s: %s=%d: a node runs at least one rank", f->name, f->lsize, v);
        else snprintf(err, errlen, "%s: %s %d is out of range for %s=%d (local ranks are 0..%d)", f->name, lname,
                      p->local_rank, f->lsize, v, v - 1);
        return -1;
    }
    return 0;
}

/* "HOST:PORT" -> host, port; 0 or -1. */
static int parse_hostport(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= hostlen) return -1;
    if (memchr(s, '/', (size_t)(colon - s)) || memchr(s, '[', (size_t)(colon - s))) return -1;
    char *end;
    errno = 0;
    long v = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || (*end && strcmp(end, "/")) || v < 1 || v > 65535) return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    *port = (int)v;
    return 0;
}

/* MASTER_ADDR / MASTER_PORT (torchrun, and what we ask mpirun users to export). */
static int master_from_env(rt_rdzv_plan *p, const char *who, char *err, size_t errlen)
{
    const char *a = getenv("MASTER_ADDR"), *ps = getenv("MASTER_PORT");
    if (!a || !*a || !ps || !*ps) {
        snprintf(err, errlen, "%s: MASTER_ADDR and MASTER_PORT must be set (export MASTER_ADDR=<host of rank 0> "
                 "MASTER_PORT=<free port>%s)", who,
                 !strcmp(who, "Open MPI") ? "; pass them with mpirun -x MASTER_ADDR -x MASTER_PORT" : "");
        return -1;
    }
    int port = 0; /* set: MASTER_PORT is non-empty (GCC -O3 cannot tell) */
    if (env_int("MASTER_PORT", &port, err, errlen) < 0) return -1;
    if (port < 1 || port > 65535) { snprintf(err, errlen, "MASTER_PORT=%s is not a port (1-65535)", ps); return -1; }
    snprintf(p->host, sizeof p->host, "%s", a);
    p->port = port;
    return 0;
}

static int env_master(const flavour *f, const rt_rdzv_opts *o, rt_rdzv_plan *p, char *err, size_t errlen)
{
    (void)o;
    return master_from_env(p, f->name, err, errlen);
}

static int slurm_master(const flavour *f, const rt_rdzv_opts *o, rt_rdzv_plan *p, char *err, size_t errlen)
{
    (void)f, (void)o;
    const char *a = getenv("MASTER_ADDR"), *nl = getenv("SLURM_JOB_NODELIST");
    if (!nl || !*nl) nl = getenv("SLURM_NODELIST");
    if (a && *a) snprintf(p->host, sizeof p->host, "%s", a); /* the user's choice wins */
    else if (!nl || !*nl) { snprintf(err, errlen, "Slurm: SLURM_JOB_NODELIST is not set and no MASTER_ADDR"); return -1; }
    else if (rt_hostlist_first(nl, p->host, sizeof p->host)) {
        snprintf(err, errlen, "Slurm: cannot parse SLURM_JOB_NODELIST='%s'", nl);
        return -1;
    }
    int port, k = env_int("MASTER_PORT", &port, err, errlen), id;
    if (k < 0) return -1;
    if (!k) {
        /* Same port on every rank of the job without any extra exchange; different jobs
         * on the same master node get different ports. */
        if (env_int("SLURM_JOB_ID", &id, err, errlen) <= 0) {
            snprintf(err, errlen, "Slurm: neither MASTER_PORT nor SLURM_JOB_ID is set");
            return -1;
        }
        port = port_of_job((uint32_t)id);
    }
    if (port < 1 || port > 65535) { snprintf(err, errlen, "MASTER_PORT=%d is not a port (1-65535)", port); return -1; }
    p->port = port;
    return 0;
}

/* Open MPI's job identity: OMPI_MCA_ess_base_jobid (Open MPI 4, e.g. "1397096449"),
 * else PMIX_NAMESPACE (also Open MPI 5, e.g. "prterun-node01-12345@1"). Same on every
 * rank of one mpirun, different for the next one. */
static const char *ompi_job_id(void)
{
    const char *const names[] = {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"};
    for (int i = 0; i < 2; i++) {
        const char *s = getenv(names[i]);
        if (s && *s) return s;
    }
    return NULL;
}

/* A port every rank of the job computes alone, as port_of_job(SLURM_JOB_ID) does under
 * Slurm: FNV-1a of the job id, since Open MPI 5's id is not a number. */
static int port_from_id(const char *id)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *c = (const unsigned char *)id; *c; c++) h = (h ^ *c) * 16777619u;
    return port_of_job(h);
}

/* mpirun with no variables: when every rank is on this node (local size == world size)
 * rank 0 is on 127.0.0.1; across nodes MASTER_ADDR must name rank 0's host (we cannot
 * learn it without MPI itself). MASTER_ADDR / MASTER_PORT always win. */
static int ompi_master(const flavour *f, const rt_rdzv_opts *o, rt_rdzv_plan *p, char *err, size_t errlen)
{
    (void)f;
    int may_token = !o->token;
    const char *a = getenv("MASTER_ADDR"), *id = ompi_job_id();
    int local = -1, world = -1, port, k;
    if (env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &local, err, errlen) < 0) return -1;
    if (env_int("OMPI_COMM_WORLD_SIZE", &world, err, errlen) < 0) return -1;
    if (a && *a) snprintf(p->host, sizeof p->host, "%s", a);
    else if (local > 0 && local == world) snprintf(p->host, sizeof p->host, "127.0.0.1");
    else {
        snprintf(err, errlen, "Open MPI: the ranks are not all on this node (OMPI_COMM_WORLD_LOCAL_SIZE=%d of "
                 "OMPI_COMM_WORLD_SIZE=%d), so MASTER_ADDR must be set (export MASTER_ADDR=<host of rank 0> and "
                 "pass it with mpirun -x MASTER_ADDR; MASTER_PORT optional)", local, world);
        return -1;
    }
    if ((k = env_int("MASTER_PORT", &port, err, errlen)) < 0) return -1;
    if (!k) {
        if (!id) {
            snprintf(err, errlen, "Open MPI: neither MASTER_PORT nor a job id (OMPI_MCA_ess_base_jobid, "
                     "PMIX_NAMESPACE) is set; pass MASTER_PORT with mpirun -x MASTER_PORT=<free port>");
            return -1;
        }
        port = port_from_id(id);
    }
    if (port < 1 || port > 65535) { snprintf(err, errlen, "MASTER_PORT=%d is not a port (1-65535)", port); return -1; }
    p->port = port;
    if (may_token && !p->token[0] && id) snprintf(p->token, sizeof p->token, "ompi-job-%s", id);
    return 0;
}

/* The launchers whose environment we read, tried in this order. */
enum { F_TORCH, F_SLURM, F_OMPI, F_PMI, F_COUNT };
static const flavour FLAVOURS[F_COUNT] = {
    {"torchrun env", "RANK", "WORLD_SIZE", NULL, "LOCAL_RANK", NULL, "LOCAL_WORLD_SIZE", env_master},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID", NULL, NULL, slurm_master},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL, "OMPI_COMM_WORLD_LOCAL_RANK", NULL,
     "OMPI_COMM_WORLD_LOCAL_SIZE", ompi_master},
    {"MPICH/PMI", "PMI_RANK", "PMI_SIZE", NULL, "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "MPI_LOCALNRANKS", env_master},
};

static int detect_flavour(void)
{
    for (int f = 0; f < F_COUNT; f++) {
        const char *s = getenv(FLAVOURS[f].rank);
        if (s && *s) return f;
    }
    return -1;
}

/* ---- the init methods: what follows each prefix (im: the whole method, for errors) */
static int method_tcp(const char *rest, const char *im, rt_rdzv_plan *p, char *err, size_t errlen)
{
    if (parse_hostport(rest, p->host, sizeof p->host, &p->port)) {
        snprintf(err, errlen, "bad init method '%s': expected tcp://HOST:PORT (port 1-65535)", im);
        return -1;
    }
    p->kind = RT_RDZV_TCP;
    return 0;
}

static int method_file(const char *rest, const char *im, rt_rdzv_plan *p, char *err, size_t errlen)
{
    if (rest[0] != '/' || strlen(rest) >= sizeof p->path - 32 || im[strlen(im) - 1] == '/') {
        snprintf(err, errlen, "bad init method '%s': expected file:///absolute/path/to/file", im);
        return -1;
    }
    snprintf(p->path, sizeof p->path, "%s", rest);
    p->kind = RT_RDZV_FILE;
    return 0;
}

static int method_env(const char *rest, const char *im, rt_rdzv_plan *p, char *err, size_t errlen)
{
    if (*rest) {
        snprintf(err, errlen, "bad init method '%s': expected tcp://HOST:PORT, file:///path or env://", im);
        return -1;
    }
    p->kind = RT_RDZV_TCP;
    return master_from_env(p, "env://", err, errlen);
}

/* flavour: whose rank variables fill what the options leave out (-1: the launcher's
 * that is detected; env:// is torch's by definition). */
static const struct {
    const char *prefix;
    int flavour;
    int (*parse)(const char *rest, const char *im, rt_rdzv_plan *p, char *err, size_t errlen);
} METHODS[] = {{"tcp://", -1, method_tcp}, {"file://", -1, method_file}, {"env://", F_TORCH, method_env}};

int rt_rdzv_resolve(const rt_rdzv_opts *o, rt_rdzv_plan *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->rank = o->rank >= 0 ? o->rank : -1;
    p->world = o->world_size >= 0 ? o->world_size : -1;
    p->local_rank = o->local_rank >= 0 ? o->local_rank : -1;
    p->timeout_s = o->timeout_s;
    if (p->timeout_s <= 0) {
        if (rt_env_check_one(RT_ENV_TIMEOUT, err, errlen)) return -1;
        p->timeout_s = rt_env_timeout_s();
    }
    const char *tok = o->token ? o->token : rt_env_str(RT_ENV_JOB_TOKEN);
    const char *jid = getenv("SLURM_JOB_ID");
    if (tok && *tok) snprintf(p->token, sizeof p->token, "%s", tok);
    else if (!o->token && jid && *jid) snprintf(p->token, sizeof p->token, "slurm-job-%s", jid);

    const char *im = o->init_method;
    int f = detect_flavour();
    if (im && *im) {
        size_t m = 0, nm = sizeof METHODS / sizeof METHODS[0];
        while (m < nm && strncmp(im, METHODS[m].prefix, strlen(METHODS[m].prefix))) m++;
        if (m == nm) {
            snprintf(err, errlen, "bad init method '%s': expected tcp://HOST:PORT, file:///path or env://", im);
            return -1;
        }
        if (METHODS[m].parse(im + strlen(METHODS[m].prefix), im, p, err, errlen)) return -1;
        p->source = METHODS[m].prefix;
        if (METHODS[m].flavour >= 0) f = METHODS[m].flavour;
        /* torch wants rank/world beside tcp:// and file://; we also take them from the
         * launcher's environment when the caller left them out. */
        if (f >= 0 && from_flavour(&FLAVOURS[f], p, 0, err, errlen)) return -1;
        if (p->rank < 0 || p->world < 0) {
            snprintf(err, errlen, "%s needs the rank and world size (options, or RANK and WORLD_SIZE)", im);
            return -1;
        }
    } else if (f >= 0 || getenv("MASTER_ADDR")) {
        if (f < 0) f = F_TORCH;
        p->source = FLAVOURS[f].name;
        if (from_flavour(&FLAVOURS[f], p, 1, err, errlen) || FLAVOURS[f].master(&FLAVOURS[f], o, p, err, errlen))
            return -1;
        p->kind = RT_RDZV_TCP;
    } else if (p->world <= 1 && p->rank <= 0) {
        p->kind = RT_RDZV_SINGLE; /* no launcher, no init method: a one-process job */
        p->source = "single process";
        p->world = 1;
        p->rank = 0;
    } else {
        snprintf(err, errlen, "rank %d of %d but no init method: pass tcp://HOST:PORT or set MASTER_ADDR/MASTER_PORT",
                 p->rank, p->world);
        return -1;
    }
    if (p->world < 1 || p->world > RT_RDZV_MAX_WORLD) {
        snprintf(err, errlen, "world size %d is out of range (1-%d)", p->world, RT_RDZV_MAX_WORLD);
        return -1;
    }
    if (p->rank < 0 || p->rank >= p->world) {
        snprintf(err, errlen, "rank %d is out of range for world size %d (%s)", p->rank, p->world, p->source);
        return -1;
    }
    if (p->world == 1) p->kind = RT_RDZV_SINGLE, p->local_rank = 0;
    if (p->kind == RT_RDZV_TCP) snprintf(p->where, sizeof p->where, "tcp://%s:%d", p->host, p->port);
    else if (p->kind == RT_RDZV_FILE) snprintf(p->where, sizeof p->where, "file://%s", p->path);
    else snprintf(p->where, sizeof p->where, "single process");
    return 0;
}

/* ---- Slurm hostlists ---- */
typedef struct { int (*fn)(const char *, void *); void *ctx; int count, stop; } hl_walk;

/* Expands item (one comma-separated element, brackets allowed anywhere) behind prefix. */
static int hl_expand(hl_walk *w, char *out, size_t used, const char *s, size_t n)
{
    const char *lb = memchr(s, '[', n);
    if (!lb) {
        if (memchr(s, ']', n) || used + n >= 256) return -1;
        memcpy(out + used, s, n);
        out[used + n] = 0;
        /* A bound on the work: "a[0-999999]b[0-999999]" is a typo, not a cluster. */
        if (++w->count > RT_HOSTLIST_MAX) return -1;
        if (w->fn && w->fn(out, w->ctx)) w->stop = 1;
        return 0;
    }
    size_t lit = (size_t)(lb - s);
    const char *rb = memchr(lb, ']', n - lit);
    if (!rb || memchr(s, ']', lit) || memchr(lb + 1, '[', (size_t)(rb - lb - 1)) || used + lit >= 256) return -1;
    memcpy(out + used, s, lit);
    used += lit;
    const char *r = lb + 1, *suffix = rb + 1;
    size_t sufn = n - (size_t)(suffix - s);
    while (r < rb && !w->stop) {
        const char *comma = memchr(r, ',', (size_t)(rb - r));
        const char *end = comma ? comma : rb, *dash = memchr(r, '-', (size_t)(end - r));
        const char *hi_s = dash ? dash + 1 : r;
        size_t width = (size_t)((dash ? dash : end) - r);
        if (width == 0 || width > 18 || (size_t)(end - hi_s) == 0 || (size_t)(end - hi_s) > 18) return -1;
        unsigned long long lo = 0, hi = 0;
        for (const char *c = r; c < (dash ? dash : end); c++) {
            if (*c < '0' || *c > '9') return -1;
            lo = lo * 10 + (unsigned)(*c - '0');
        }
        for (const char *c = hi_s; c < end; c++) {
            if (*c < '0' || *c > '9') return -1;
            hi = hi * 10 + (unsigned)(*c - '0');
        }
        if (hi < lo || hi - lo > 1000000) return -1;
        for (unsigned long long v = lo; v <= hi && !w->stop; v++) {
            /* Zero padding is kept: the width of the lower bound ("01-04" -> 01 02 03 04). */
            int k = snprintf(out + used, 256 - used, "%0*llu", (int)width, v);
            if (k < 0 || used + (size_t)k >= 256) return -1;
            if (hl_expand(w, out, used + (size_t)k, suffix, sufn)) return -1;
        }
        r = comma ? comma + 1 : rb;
        if (comma && r == rb) return -1;
    }
    return 0;
}

int rt_hostlist_each(const char *list, int (*fn)(const char *host, void *ctx), void *ctx)
{
    hl_walk w = {fn, ctx, 0, 0};
    char out[256];
    const char *s = list;
    if (!s || !*s) return -1;
    while (*s && !w.stop) {
        /* Split on commas outside brackets. */
        const char *e = s;
        int depth = 0;
        while (*e && (depth || *e != ',')) {
            if (*e == '[') depth++;
            else if (*e == ']' && --depth < 0) return -1;
            e++;
        }
        if (depth || e == s || hl_expand(&w, out, 0, s, (size_t)(e - s))) return -1;
        s = *e ? e + 1 : e;
        if (*e && !*s) return -1; /* trailing comma */
    }
    return w.count;
}

typedef struct { char *out; size_t len; } first_ctx;
static int take_first(const char *host, void *ctx)
{
    first_ctx *c = ctx;
    snprintf(c->out, c->len, "%s", host);
    return 1;
}

int rt_hostlist_first(const char *list, char *out, size_t outlen)
{
    first_ctx c = {out, outlen};
    return rt_hostlist_each(list, take_first, &c) > 0 ? 0 : -1;
}
