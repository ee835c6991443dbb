/* Shared memory as the comm's layer (tp_layer, tp_comm_int.h): at the first collective
 * the ranks decide together whether they all sit on one host (and want it: DDPRT_SHM),
 * then map the segment (tp_shm.c) and set up the protocols; each op goes to registered
 * buffers (tp_shm_map.c), else single copy (tp_shm_cma.c), else the copy protocol
 * (tp_shm_coll.c). What it does not take goes to the algorithms over the sockets. */
#include "transport/tp_shm.h"
#include "ports/posix/port_sock.h"
#include "rt/env.h"
#include "rt/log.h"
#include <stdlib.h>
#include <string.h>

/* Collective: every rank calls it at the same op. c->shm_state becomes 1 (in use) or
 * -1 (sockets); 0 or a backend code. */
static int shm_setup(tp_comm *c)
{
    int w = c->world, rc;
    c->shm_state = -1;
    if (w < 2 || w > TP_SHM_MAX_WORLD || strcmp(c->b->ops->name, "tcp")) return 0;
    /* Every rank learns every rank's host and wish, so that all decide alike. */
    int64_t mine[2] = {(int64_t)port_host_id(), rt_env_flag(RT_ENV_SHM, 1)}, *all = calloc(2 * (size_t)w, sizeof *all);
    if (!all) return 0;
    if ((rc = tp_ring_allgather(c, mine, all, 2, RT_I64))) { free(all); return rc; }
    int same = 1;
    for (int r = 0; r < w; r++) {
        uint64_t id = c->topo == -1 ? c->host_ids[r] : (uint64_t)all[2 * r];
        uint64_t id0 = c->topo == -1 ? c->host_ids[0] : (uint64_t)all[0];
        same &= id == id0 && all[2 * r + 1];
    }
    free(all);
    if (!same) return 0;
    if ((rc = tp_shm_seg_open(c)) || !c->shm) return rc;
    c->shm_state = 1;
    return (rc = tp_shm_cma_setup(c)) ? rc : tp_shm_map_setup(c);
}

int tp_shm_mode(const tp_comm *c) { return c->shm_state > 0 ? 1 + (c->shm->cma != 0) : 0; }

static void shm_free(tp_comm *c)
{
    tp_shm *s = c->shm;
    if (!s) return;
    if (c->rank == 0 && s->map_ops) rt_debug("comm: %llu ops ran on registered buffers", (unsigned long long)s->map_ops);
    tp_shm_map_free(c);
    tp_shm_seg_close(c);
}

/* Every rank on one host: registered buffers, else single copy, else the copy protocol
 * (the first two pass, 1, what they cannot take). A tree allreduce (tp_tree.c) is an
 * allreduce with the tree's reduce: the map and copy protocols see every rank's operand
 * at once; single copy streams them in rank order, so it does not take it. Point to
 * point, the tree's halves, and comms with a rank elsewhere pass to the algorithms over
 * the sockets. */
static int shm_run(tp_comm *c, tp_handle *h)
{
    int rc, tree = h->kind == TP_K_TREE;
    if (h->kind > TP_K_BARRIER && !(tree && h->root == TP_TREE_ALL)) return TP_PASS;
    if (!c->shm_state && (rc = shm_setup(c))) return rc;
    if (c->shm_state < 0) return TP_PASS;
    /* A rank that failed while this one was away (its deadline ran out waiting here) may
     * have left its part of this op in the segment already; its waits would then pass
     * and the op succeed without it. Fail at the op's start, as the sockets would. */
    if ((rc = tp_shm_others_failed(c))) return rc;
    int red = h->kind == TP_K_ALLREDUCE || h->kind == TP_K_REDUCE_SCATTER || tree;
    tp_shm_bufhdr d = {.seq = h->seq, .bytes = h->count * rt_dtype_size((rt_dtype)h->dt), .kind = h->kind,
                       .dt = h->dt, .op = red ? h->op : 0, .root = h->kind == TP_K_BROADCAST ? h->root : 0};
    if (c->shm->map && (h->kind == TP_K_ALLREDUCE || h->kind == TP_K_REDUCE_SCATTER || tree) &&
        (rc = tp_shm_map_run(c, h, &d)) <= 0)
        return rc;
    if (c->shm->cma && h->kind != TP_K_BARRIER && !tree && (rc = tp_shm_cma_run(c, h, &d)) <= 0) return rc;
    return tp_shm_copy_run(c, h, &d);
}

const tp_layer tp_shm_layer = {"shm", shm_run, shm_free};
