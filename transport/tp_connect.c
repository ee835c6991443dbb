/* The comm's connect step (tp_transport.h): at its first collective the ranks swap what
 * the transports' can_connect needs, every rank picks a transport per peer, rank 0 logs
 * the choice, each peer gets its transport's link (tp_link.h), the shm pairs their
 * rings (tp_link_shm.c), and when every pair took shared memory the comm-wide segment
 * is mapped. */
#include "transport/tp_link_shm.h"
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

/* What each rank tells: host, DDPRT_SHM, a send/recv issued before this step (its
 * messages went on the net: the pairs' links must stay there), its inbox's pid and fd. */
enum { SW_HOST, SW_SHM, SW_P2P, SW_PID, SW_FD, SW_N };

/* Every rank's SW_N words into all (the opts' fake hosts when given). */
static int swap_info(tp_comm *c, const int64_t *pid_fd, tp_peer_info *info, int64_t *all)
{
    int64_t mine[SW_N] = {(int64_t)port_host_id(), rt_env_flag(RT_ENV_SHM, 1), __atomic_load_n(&c->p2p, __ATOMIC_RELAXED),
                          pid_fd[0], pid_fd[1]};
    int rc = tp_ring_allgather(c, mine, all, SW_N, RT_I64);
    for (int r = 0; !rc && r < c->world; r++)
        info[r] = (tp_peer_info){c->topo == -1 ? c->host_ids[r] : (uint64_t)all[SW_N * r + SW_HOST],
                                 (int)all[SW_N * r + SW_SHM], 0};
    return rc;
}

/* The shm pairs' rings, or their links back to the net (logged) when they cannot. */
static int shm_links(tp_comm *c, const tp_peer_info *info, const int64_t *all)
{
    int w = c->world, rc = 0, n = 0;
    int64_t *pid_fd = malloc(2 * (size_t)w * sizeof *pid_fd);
    const char *why = NULL;
    for (int r = 0; r < w; r++) {
        if (all[SW_N * r + SW_P2P] && !why) why = "send/recv before the first collective";
        n += r != c->rank && c->peer_tp[r] == TP_TRANSPORT_SHM;
    }
    int shared = 0; /* some two ranks on one host: else nothing to set up (alike everywhere) */
    for (int r = 0; r < w; r++)
        for (int q = r + 1; q < w; q++) shared |= info[r].host == info[q].host;
    if (!shared) { tp_link_shm_free(c); return 0; }
    if (!pid_fd) why = "out of memory";
    for (int r = 0; pid_fd && r < w; r++) pid_fd[2 * r] = all[SW_N * r + SW_PID], pid_fd[2 * r + 1] = all[SW_N * r + SW_FD];
    if (!why && (rc = tp_link_shm_setup(c, info, pid_fd, c->peer_tp)) == 1) why = "a rank could not map its peers' rings";
    free(pid_fd);
    if (!why) return rc;
    tp_link_shm_free(c);
    if (n && c->rank == 0) rt_info("comm: shm pairs send through %s (%s)", c->b->ops->name, why);
    for (int r = 0; r < w; r++)
        if (c->link[r] == &tp_link_shm_ops) c->link[r] = &tp_link_net;
    return rc < 0 ? rc : 0;
}

int tp_connect(tp_comm *c)
{
    int w = c->world, rc = 0, any_shm = 0;
    c->connected = 1;
    c->shm_state = -1;
    if (w < 2) return 0;
    char off[96];
    tp_peers p = {.world = w, .net = c->b->ops->name, .shm_off = shm_off(c, off, sizeof off)};
    tp_peer_info *info = calloc((size_t)w, sizeof *info);
    int64_t *all = calloc((size_t)w * SW_N, sizeof *all), pid_fd[2] = {0, -1};
    uint8_t *tp = calloc((size_t)w, 1);
    const tp_link **link = calloc((size_t)w, sizeof *link);
    if (!info || !all || !tp || !link) { free(info), free(all), free(tp), free(link); return TP_EIO; }
    if (!p.shm_off) { /* as the shm layer did: swapped only when shm may run */
        tp_link_shm_open(c, pid_fd);
        rc = swap_info(c, pid_fd, info, all);
    } else {
        for (int r = 0; c->topo == -1 && r < w; r++) info[r] = (tp_peer_info){c->host_ids[r], 1, 0};
    }
    if (!rc) {
        p.info = !p.shm_off || c->topo == -1 ? info : NULL;
        tp_peers_init(&p);
        int all_shm = tp_transport_plan(&p, c->rank, tp);
        for (int q = 0; q < w; q++) {
            const tp_link *l = q == c->rank ? NULL : tp_transports[tp[q]].link;
            link[q] = l ? l : &tp_link_net;
            any_shm |= q != c->rank && tp[q] == TP_TRANSPORT_SHM;
        }
        c->peer_tp = tp, tp = NULL;
        if (!p.shm_off) rc = shm_links(c, info, all); /* collective: every rank when shm may run */
        if (!rc && !any_shm) tp_link_shm_free(c);
        c->link = link, link = NULL; /* from now on, the pairs' own links */
        if (!rc && all_shm && !(rc = tp_shm_seg_open(c)) && c->shm) {
            c->shm_state = 1;
            if (!(rc = tp_shm_cma_setup(c))) rc = tp_shm_map_setup(c);
        }
    }
    if (rc) tp_link_shm_free(c);
    free(info), free(all), free(tp), free(link);
    return rc;
}
