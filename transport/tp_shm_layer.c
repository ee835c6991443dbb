/* Shared memory as the comm's layer (tp_layer, tp_comm_int.h): at the first collective
 * the comm picks a transport per peer pair (tp_connect.c); when every pair took shm the
 * segment is mapped (tp_shm.c) and the protocols set up; each op goes to registered
 * buffers (tp_shm_map.c), else single copy (tp_shm_cma.c), else the copy protocol
 * (tp_shm_coll.c). What it does not take goes to the algorithms over the sockets. */
#include "transport/tp_shm.h"
#include "rt/env.h"
#include "rt/log.h"
#include <string.h>

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
    if (!tp_connects_at(h) || c->shm_state <= 0) return TP_PASS; /* tp_connect ran before (tp_comm.c) */
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
