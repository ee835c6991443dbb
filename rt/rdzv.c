/* Rendezvous front door: resolve where to meet (rt/rdzv_env.c), meet (rt/rdzv_tcp.c,
 * rt/rdzv_file.c), then serve small collectives (rt/rdzv_coll.c), over which the
 * transport's bootstrap runs (tp_bootstrap_rdzv, transport/tp_select.c). */
#include "rt/rdzv_int.h"
#include "ports/posix/port_sock.h"
#include "rt/env.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void rdzv_free(rt_rdzv *r)
{
    if (!r) return;
    rt_rdzv_door_close(r);
    port_sock_close(r->lfd);
    port_sock_close(r->master);
    for (int q = 0; r->fds && q < r->world; q++) port_sock_close(r->fds[q]);
    free(r->fds);
    free(r->peer);
    free(r);
}

int rt_rdzv_open(rt_rdzv **out, const rt_rdzv_opts *o, char *err, size_t errlen)
{
    static const rt_rdzv_opts none = {NULL, -1, -1, -1, 0, NULL, 0};
    rt_rdzv_plan p;
    *out = NULL;
    if (rt_env_check(err, errlen)) return -1;
    if (rt_rdzv_resolve(o ? o : &none, &p, err, errlen)) return -1;
    rt_rdzv *r = calloc(1, sizeof *r);
    if (!r) { snprintf(err, errlen, "rendezvous: out of memory"); return -1; }
    r->rank = p.rank;
    r->world = p.world;
    r->local_rank = p.local_rank;
    r->timeout_s = p.timeout_s;
    r->token_hash = rt_rdzv_token_hash_of(p.token);
    r->config_hash = o ? o->config_hash : 0;
    r->lfd = r->master = -1;
    snprintf(r->where, sizeof r->where, "%s", p.where);
    int rc = 0;
    if (p.kind != RT_RDZV_SINGLE && r->rank == 0) {
        r->fds = malloc(sizeof *r->fds * (size_t)r->world);
        r->peer = calloc((size_t)r->world, sizeof *r->peer);
        if (!r->fds || !r->peer) { snprintf(err, errlen, "rank 0: out of memory"); rdzv_free(r); return -1; }
        for (int q = 0; q < r->world; q++) r->fds[q] = -1;
        snprintf(r->peer[0], sizeof r->peer[0], "the rendezvous master");
    }
    rt_debug("rank %d: rendezvous of %d ranks via %s (%s)%s", r->rank, r->world, r->where, p.source,
             r->token_hash ? ", job token set" : "");
    if (p.kind == RT_RDZV_TCP) rc = rt_rdzv_open_tcp(r, &p, err, errlen);
    else if (p.kind == RT_RDZV_FILE) rc = rt_rdzv_open_file(r, &p, err, errlen);
    else r->local_rank = r->local_rank < 0 ? 0 : r->local_rank;
    if (rc) { rdzv_free(r); return -1; }
    *out = r;
    return 0;
}

int rt_rdzv_rank(const rt_rdzv *r) { return r->rank; }
int rt_rdzv_world(const rt_rdzv *r) { return r->world; }
int rt_rdzv_local_rank(const rt_rdzv *r) { return r->local_rank; }
uint64_t rt_rdzv_token_hash(const rt_rdzv *r) { return r->token_hash; }
double rt_rdzv_timeout_s(const rt_rdzv *r) { return r->timeout_s; }
const char *rt_rdzv_self_ip(const rt_rdzv *r) { return r->self_ip; }
void rt_rdzv_close(rt_rdzv *r) { rdzv_free(r); }
