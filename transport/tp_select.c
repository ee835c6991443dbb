/* Making a backend: the bootstrap over the rendezvous, and the backend by name, for the
 * programs' --backend flag: "tcp", "verbs", or "auto" (verbs when every rank has an
 * active RDMA port, else TCP). The ranks agree through the bootstrap, so a job with one
 * port-less host falls back to TCP everywhere instead of mixing backends; rank 0 logs
 * the choice. */
#include "transport/tp_backend.h"
#include "transport/tp_watch.h"
#include "rt/log.h"
#include "rt/rdzv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int create(const tp_bootstrap *bs, const char *name, tp_backend **out, char *err, size_t errlen);

static int rdzv_allgather(void *ctx, const void *mine, size_t len, void *all, char *err, size_t errlen)
{
    return rt_rdzv_allgather(ctx, mine, len, all, err, errlen);
}

void tp_bootstrap_rdzv(tp_bootstrap *bs, rt_rdzv *r)
{
    memset(bs, 0, sizeof *bs);
    bs->ctx = r;
    bs->rank = rt_rdzv_rank(r);
    bs->world = rt_rdzv_world(r);
    bs->local_rank = rt_rdzv_local_rank(r);
    bs->token_hash = rt_rdzv_token_hash(r);
    bs->timeout_s = rt_rdzv_timeout_s(r);
    bs->allgather = rdzv_allgather;
    snprintf(bs->self_ip, sizeof bs->self_ip, "%s", rt_rdzv_self_ip(r));
}

/* Every backend made here gets a stall watch (transport/tp_watch.h): the bootstrap is
 * where the ranks can swap its addresses. */
int tp_backend_create(const tp_bootstrap *bs, const char *name, tp_backend **out, char *err, size_t errlen)
{
    if (create(bs, name, out, err, errlen)) return -1;
    if (bs->world > 1 && tp_watch_enabled() && tp_watch_create(bs, &(*out)->watch, err, errlen)) {
        (*out)->ops->destroy(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int create(const tp_bootstrap *bs, const char *name, tp_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!name || !*name) name = "auto";
    if (!strcmp(name, "tcp")) return tp_tcp_create(bs, out, err, errlen);
    if (!strcmp(name, "verbs")) return tp_verbs_create(bs, out, err, errlen);
    if (strcmp(name, "auto")) {
        snprintf(err, errlen, "--backend %s: unknown backend (tcp, verbs, auto)", name);
        return -1;
    }
    char desc[200], aerr[200] = "";
    unsigned char mine = (unsigned char)tp_verbs_available(desc, sizeof desc), *all = calloc((size_t)bs->world, 1);
    if (!all) { snprintf(err, errlen, "out of memory"); return -1; }
    int rc = bs->allgather(bs->ctx, &mine, 1, all, aerr, sizeof aerr), lacking = -1;
    for (int r = 0; !rc && r < bs->world; r++)
        if (!all[r] && lacking < 0) lacking = r;
    free(all);
    if (rc) { snprintf(err, errlen, "backend choice: %s", aerr); return -1; }
    if (lacking < 0) {
        if (bs->rank == 0) rt_info("backend auto: verbs (%s)", desc);
        return tp_verbs_create(bs, out, err, errlen);
    }
    if (bs->rank == 0) {
        if (lacking == 0) rt_info("backend auto: tcp (no verbs: %s)", desc);
        else rt_info("backend auto: tcp (rank %d has no usable RDMA port)", lacking);
    }
    return tp_tcp_create(bs, out, err, errlen);
}
