/* The comm's connect step (tp_transport.h): at its first collective the ranks swap what
 * the transports' can_connect needs, every rank picks a transport per peer, rank 0 logs
 * the choice, and when every pair took shared memory the segment is mapped. */
#include "transport/tp_shm.h"
#include "transport/tp_transport.h"
#include "ports/posix/port_sock.h"
#include "rt/env.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>

/* Why no pair of this comm can take shm whatever the hosts, or NULL. */
static const char *shm_off(const tp_comm *c, char *buf, size_t n)
{
    static const char *const algo[] = {"auto", "ring", "rd", "hier"};
    if (c->algo != TP_ALGO_AUTO) { /* a forced algorithm is what the caller measures */
        snprintf(buf, n, "algorithm forced to %s", c->algo >= 0 && c->algo <= TP_ALGO_HIER ? algo[c->algo] : "?");
        return buf;
    }
    if (c->world > TP_SHM_MAX_WORLD) { snprintf(buf, n, "more than %d ranks", TP_SHM_MAX_WORLD); return buf; }
    if (!c->b->ops->peer_fd) { snprintf(buf, n, "the %s backend cannot watch peers", c->b->ops->name); return buf; }
    return NULL;
}

/* Every rank's host and DDPRT_SHM into info (the opts' fake hosts when given). */
static int swap_info(tp_comm *c, tp_peer_info *info)
{
    int w = c->world;
    int64_t mine[2] = {(int64_t)port_host_id(), rt_env_flag(RT_ENV_SHM, 1)}, *all = calloc(2 * (size_t)w, sizeof *all);
    if (!all) return TP_EIO;
    int rc = tp_ring_allgather(c, mine, all, 2, RT_I64);
    for (int r = 0; !rc && r < w; r++)
        info[r] = (tp_peer_info){c->topo == -1 ? c->host_ids[r] : (uint64_t)all[2 * r], (int)all[2 * r + 1]};
    free(all);
    return rc;
}

int tp_connect(tp_comm *c)
{
    int w = c->world, rc = 0;
    c->connected = 1;
    c->shm_state = -1;
    if (w < 2) return 0;
    char off[96];
    tp_peers p = {.world = w, .net = c->b->ops->name, .shm_off = shm_off(c, off, sizeof off)};
    tp_peer_info *info = calloc((size_t)w, sizeof *info);
    if (!info || !(c->peer_tp = calloc((size_t)w, 1))) { free(info); return TP_EIO; }
    if (!p.shm_off) rc = swap_info(c, info); /* as the shm layer did: only when shm may run */
    else for (int r = 0; c->topo == -1 && r < w; r++) info[r] = (tp_peer_info){c->host_ids[r], 1};
    if (rc) { free(info); return rc; }
    p.info = !p.shm_off || c->topo == -1 ? info : NULL;
    tp_peers_init(&p);
    int all_shm = tp_transport_plan(&p, c->rank, c->peer_tp);
    free(info);
    if (!all_shm) return 0;
    if ((rc = tp_shm_seg_open(c)) || !c->shm) return rc;
    c->shm_state = 1;
    return (rc = tp_shm_cma_setup(c)) ? rc : tp_shm_map_setup(c);
}
