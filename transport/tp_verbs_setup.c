/* RDMA verbs backend, set-up: device and port choice, GID choice, the staging arena
 * (registered once), one RC queue pair per peer, the address exchange through the
 * bootstrap, and the INIT -> RTR -> RTS transitions.
 *
 * Device: DDPRT_IB_HCA (as NCCL_IB_HCA: "mlx5_0:1", "rxe0"; the first entry of a
 * comma list), else the first device with an ACTIVE port. GID (RoCE only):
 * DDPRT_IB_GID_INDEX, else the first RoCE v2 GID that is an IPv4-mapped address
 * (routable, what NCCL picks), else any RoCE v2 GID, else any non-zero GID. On an
 * InfiniBand link layer peers are addressed by LID. */
#include "transport/tp_verbs_int.h"
#include "rt/env.h"
#include "rt/log.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- device, port, GID -------------------------------------------------------------- */

typedef struct hca_pick {
    struct ibv_context *ctx;
    int port, gid_index, link_layer;
    struct ibv_port_attr pa;
    char name[64];
} hca_pick;

static const char *port_state_name(enum ibv_port_state s)
{
    switch (s) {
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    default: return "not active";
    }
}

static int is_ipv4_mapped(const uint8_t *g)
{
    static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return !memcmp(g, pre, sizeof pre);
}

/* -1 with err when the table holds nothing usable. */
static int choose_gid(hca_pick *h, char *err, size_t errlen)
{
    const char *e = rt_env_str(RT_ENV_IB_GID_INDEX);
    if (e) {
        union ibv_gid g;
        h->gid_index = atoi(e);
        if (h->gid_index < 0 || h->gid_index >= h->pa.gid_tbl_len ||
            ibv_query_gid(h->ctx, (uint8_t)h->port, h->gid_index, &g)) {
            snprintf(err, errlen, "DDPRT_IB_GID_INDEX=%s: no such GID on %s port %d (table has %d entries)", e,
                     h->name, h->port, h->pa.gid_tbl_len);
            return -1;
        }
        return 0;
    }
    int best = -1, best_score = 0;
    for (int i = 0; i < h->pa.gid_tbl_len; i++) {
        struct ibv_gid_entry ge;
        if (ibv_query_gid_ex(h->ctx, (uint32_t)h->port, (uint32_t)i, &ge, 0)) continue;
        static const uint8_t zero[16];
        if (!memcmp(ge.gid.raw, zero, 16)) continue;
        int v2 = ge.gid_type == IBV_GID_TYPE_ROCE_V2;
        int score = v2 && is_ipv4_mapped(ge.gid.raw) ? 3 : v2 ? 2 : 1;
        if (score > best_score) best = i, best_score = score;
    }
    if (best < 0) {
        snprintf(err, errlen, "%s port %d has no usable GID (is an IP address configured on its netdev?)",
                 h->name, h->port);
        return -1;
    }
    h->gid_index = best;
    return 0;
}

/* Picks the port of an open device: want > 0 that one, else the first ACTIVE one. */
static int choose_port(hca_pick *h, int want, char *why, size_t wlen)
{
    struct ibv_device_attr da;
    if (ibv_query_device(h->ctx, &da)) { snprintf(why, wlen, "%s: cannot query the device", h->name); return -1; }
    for (int p = 1; p <= da.phys_port_cnt; p++) {
        if (want > 0 && p != want) continue;
        if (ibv_query_port(h->ctx, (uint8_t)p, &h->pa)) continue;
        if (h->pa.state == IBV_PORT_ACTIVE) {
            h->port = p;
            h->link_layer = h->pa.link_layer;
            return 0;
        }
        snprintf(why, wlen, "%s port %d is %s", h->name, p, port_state_name(h->pa.state));
    }
    if (want > da.phys_port_cnt) snprintf(why, wlen, "%s has no port %d", h->name, want);
    return -1;
}

/* Opens the device and port to use; -1 with a one-line reason. */
static int pick_hca(hca_pick *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    char want[64] = "";
    int want_port = 0;
    const char *e = rt_env_str(RT_ENV_IB_HCA);
    if (e) {
        snprintf(want, sizeof want, "%s", e[0] == '=' || e[0] == '^' ? e + 1 : e);
        want[strcspn(want, ",")] = 0;
        char *colon = strchr(want, ':');
        if (colon) { *colon = 0; want_port = atoi(colon + 1); }
    }
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        snprintf(err, errlen, "no RDMA devices found (no driver loaded? `ibv_devices` lists none)");
        if (list) ibv_free_device_list(list);
        return -1;
    }
    char why[160] = "";
    size_t o = 0;
    char names[128] = "";
    for (int i = 0; i < n; i++) {
        const char *nm = ibv_get_device_name(list[i]);
        if (o < sizeof names) o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "", nm);
        if (h->ctx || (want[0] && strcmp(want, nm))) continue;
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) { snprintf(why, sizeof why, "%s: cannot open: %s", nm, strerror(errno)); continue; }
        h->ctx = ctx;
        snprintf(h->name, sizeof h->name, "%s", nm);
        if (choose_port(h, want_port, why, sizeof why)) { ibv_close_device(ctx); h->ctx = NULL; }
    }
    ibv_free_device_list(list);
    if (h->ctx) return 0;
    if (want[0] && !why[0])
        snprintf(err, errlen, "DDPRT_IB_HCA=%s: no such RDMA device (found: %s)", e, names);
    else
        snprintf(err, errlen, "no RDMA device with an active port (%s)", why[0] ? why : names);
    return -1;
}

static void describe(const hca_pick *h, char *s, size_t n)
{
    if (h->link_layer == IBV_LINK_LAYER_INFINIBAND)
        snprintf(s, n, "%s port %d (InfiniBand, LID %u)", h->name, h->port, h->pa.lid);
    else
        snprintf(s, n, "%s port %d (RoCE, GID index %d)", h->name, h->port, h->gid_index);
}

int tp_verbs_available(char *desc, size_t len)
{
    hca_pick h;
    char err[200];
    if (pick_hca(&h, err, sizeof err)) { snprintf(desc, len, "%s", err); return 0; }
    int ok = h.link_layer == IBV_LINK_LAYER_INFINIBAND || !choose_gid(&h, err, sizeof err);
    if (ok) describe(&h, desc, len);
    else snprintf(desc, len, "%s", err);
    ibv_close_device(h.ctx);
    return ok;
}

/* ---- queue pairs ------------------------------------------------------------------ */

static int env_int(rt_env name, int dflt, int lo, int hi)
{
    int v = (int)rt_env_num(name, dflt);
    return v < lo ? lo : v > hi ? hi : v;
}

static struct ibv_qp *make_qp(verbs_backend *v)
{
    struct ibv_qp_init_attr ia = {
        .send_cq = v->cq, .recv_cq = v->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
        .cap = {.max_send_wr = TP_VERBS_SQ, .max_recv_wr = TP_VERBS_RQ, .max_send_sge = 1, .max_recv_sge = 1},
    };
    struct ibv_qp *qp = ibv_create_qp(v->pd, &ia);
    if (!qp) return NULL;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)v->port,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        ibv_destroy_qp(qp);
        return NULL;
    }
    return qp;
}

/* INIT -> RTR -> RTS towards peer j. The timeouts are explicit (as NCCL_IB_TIMEOUT /
 * NCCL_IB_RETRY_CNT): 4.096 us * 2^14 = 67 ms per try, 7 retries, so a peer that
 * vanished shows as "retry exceeded" in about half a second. RNR cannot happen by
 * design (see the header), so a bounded RNR retry turns a bug into an error. */
static int connect_qp(verbs_backend *v, int j, const tp_verbs_addr *me, const tp_verbs_addr *them,
                      char *err, size_t errlen)
{
    struct ibv_qp *qp = v->peers[j].qp;
    uint32_t mtu = me->mtu < them->mtu ? me->mtu : them->mtu;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = (enum ibv_mtu)mtu,
                            .dest_qp_num = them->qpn[v->b.rank], .rq_psn = 0, .max_dest_rd_atomic = 1,
                            .min_rnr_timer = 12};
    a.ah_attr.port_num = (uint8_t)v->port;
    if (v->link_layer == IBV_LINK_LAYER_INFINIBAND) {
        a.ah_attr.dlid = (uint16_t)them->lid;
    } else {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, them->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)v->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) {
        snprintf(err, errlen, "verbs: queue pair to rank %d: INIT->RTR failed: %s", j, strerror(rc));
        return -1;
    }
    struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .sq_psn = 0, .max_rd_atomic = 1,
                            .timeout = (uint8_t)env_int(RT_ENV_IB_TIMEOUT, 14, 1, 31),
                            .retry_cnt = (uint8_t)env_int(RT_ENV_IB_RETRY_CNT, 7, 0, 7), .rnr_retry = 6};
    rc = ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT |
                                   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
    if (rc) {
        snprintf(err, errlen, "verbs: queue pair to rank %d: RTR->RTS failed: %s", j, strerror(rc));
        return -1;
    }
    return 0;
}

/* ---- open / close ----------------------------------------------------------------- */

/* Device, PD, CQ + channel, arena + MR, QPs in INIT. The arena: per peer NSLOT
 * receive + NSLOT send slots; slots shrink for big worlds so it stays <= 64 MiB. */
static int open_local(verbs_backend *v, char *err, size_t errlen)
{
    hca_pick h;
    if (pick_hca(&h, err, errlen)) return -1;
    v->ctx = h.ctx;
    v->port = h.port;
    v->link_layer = h.link_layer;
    snprintf(v->dev_name, sizeof v->dev_name, "%s", h.name);
    if (h.link_layer != IBV_LINK_LAYER_INFINIBAND && choose_gid(&h, err, errlen)) return -1;
    v->gid_index = h.gid_index;
    v->mtu = h.pa.active_mtu;
    v->lid = h.pa.lid;
    if (h.link_layer != IBV_LINK_LAYER_INFINIBAND &&
        ibv_query_gid(v->ctx, (uint8_t)v->port, v->gid_index, (union ibv_gid *)v->gid)) {
        snprintf(err, errlen, "verbs: cannot read GID %d of %s", v->gid_index, v->dev_name);
        return -1;
    }
    int world = v->b.world;
    if (!(v->pd = ibv_alloc_pd(v->ctx)) || !(v->ch = ibv_create_comp_channel(v->ctx)) ||
        !(v->cq = ibv_create_cq(v->ctx, world * (TP_VERBS_SQ + TP_VERBS_RQ) + 16, NULL, v->ch, 0))) {
        snprintf(err, errlen, "verbs: cannot create PD/CQ on %s: %s", v->dev_name, strerror(errno));
        return -1;
    }
    /* The channel fd goes into poll(); ibv_get_cq_event must then never block. */
    fcntl(v->ch->fd, F_SETFL, fcntl(v->ch->fd, F_GETFL) | O_NONBLOCK);
    fcntl(v->ctx->async_fd, F_SETFL, fcntl(v->ctx->async_fd, F_GETFL) | O_NONBLOCK);
    size_t slot = (size_t)env_int(RT_ENV_VERBS_SLOT_KB, 64, 4, 4096) * 1024;
    while (slot > 4096 && (size_t)world * 2 * TP_VERBS_NSLOT * slot > (64u << 20)) slot /= 2;
    v->slot = slot;
    v->stride = 2 * TP_VERBS_NSLOT * slot;
    v->arena_len = v->stride * (size_t)world;
    v->arena = aligned_alloc(4096, v->arena_len);
    if (!v->arena) { snprintf(err, errlen, "verbs: out of memory (%zu bytes of staging)", v->arena_len); return -1; }
    /* Registered once: this pins the pages for the life of the backend. */
    v->arena_mr = ibv_reg_mr(v->pd, v->arena, v->arena_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!v->arena_mr) {
        snprintf(err, errlen, "verbs: cannot register %zu bytes of staging: %s (ulimit -l?)", v->arena_len,
                 strerror(errno));
        return -1;
    }
    for (int j = 0; j < world; j++) {
        if (j == v->b.rank) continue;
        if (!(v->peers[j].qp = make_qp(v))) {
            snprintf(err, errlen, "verbs: cannot create a queue pair on %s: %s", v->dev_name, strerror(errno));
            return -1;
        }
        v->peers[j].credits = TP_VERBS_NSLOT;
    }
    return 0;
}

static int parse_fault(verbs_backend *v, uint32_t *rkey)
{
    const char *f = rt_env_str(RT_ENV_VERBS_TEST_FAULT);
    if (!f) return 0;
    int rank = -1, after = 10;
    if (sscanf(f, "rkey:%d", &rank) == 1 && rank == v->b.rank) {
        *rkey ^= 0x5a5a00u; /* an rkey that no MR of ours has */
        rt_warn("verbs: test fault: publishing a wrong rkey");
    } else if (sscanf(f, "qperr:%d:%d", &rank, &after) >= 1 && rank == v->b.rank) {
        v->fault_qperr_after = after > 0 ? after : 1;
        rt_warn("verbs: test fault: queue pair to rank %d goes to the error state after %d posts",
                (v->b.rank + 1) % v->b.world, v->fault_qperr_after);
    }
    return 0;
}

int tp_verbs_open(verbs_backend *v, const tp_bootstrap *bs, char *err, size_t errlen)
{
    int world = v->b.world;
    size_t alen = sizeof(tp_verbs_addr) + sizeof(uint32_t) * (size_t)world;
    tp_verbs_addr *me = calloc(1, alen);
    unsigned char *all = calloc((size_t)world, alen);
    int rc = -1;
    if (!me || !all) { snprintf(err, errlen, "verbs: out of memory"); goto done; }
    /* A rank that cannot open its device still takes part in the exchange, so every
     * rank fails with its reason instead of waiting for it. */
    char lerr[200] = "";
    if (open_local(v, lerr, sizeof lerr)) {
        snprintf(me->why, sizeof me->why, "%.95s", lerr);
    } else {
        memcpy(me->gid, v->gid, 16);
        me->rkey = v->arena_mr->rkey;
        me->lid = v->lid;
        me->mtu = v->mtu;
        me->link_layer = (uint32_t)v->link_layer;
        me->base = (uint64_t)(uintptr_t)v->arena;
        me->stride = v->stride;
        me->slot = (uint32_t)v->slot;
        for (int j = 0; j < world; j++) me->qpn[j] = v->peers[j].qp ? v->peers[j].qp->qp_num : 0;
        parse_fault(v, &me->rkey);
    }
    char aerr[200] = "";
    if (bs->allgather(bs->ctx, me, alen, all, aerr, sizeof aerr)) {
        snprintf(err, errlen, "verbs: address exchange failed: %s", lerr[0] ? lerr : aerr);
        goto done;
    }
    if (lerr[0]) { snprintf(err, errlen, "verbs: %s", lerr); goto done; }
    for (int j = 0; j < world; j++) {
        const tp_verbs_addr *a = (const tp_verbs_addr *)(all + alen * (size_t)j);
        if (a->why[0]) { snprintf(err, errlen, "verbs: rank %d cannot use verbs: %s", j, a->why); goto done; }
        if (a->slot != v->slot || (int)a->link_layer != v->link_layer) {
            snprintf(err, errlen, "verbs: rank %d uses %s slots of %u bytes, we %s and %zu (set "
                     "DDPRT_VERBS_SLOT_KB alike everywhere)", j,
                     a->link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "RoCE", a->slot,
                     v->link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "RoCE", v->slot);
            goto done;
        }
        if (j == v->b.rank) continue;
        v->peers[j].raddr = a->base + a->stride * (uint64_t)v->b.rank;
        v->peers[j].rkey = a->rkey;
        if (connect_qp(v, j, me, a, err, errlen)) goto done;
        for (int k = 0; k < TP_VERBS_RQ; k++)
            if (tp_verbs_post_recv(v, j)) {
                snprintf(err, errlen, "verbs: cannot post receives for rank %d", j);
                goto done;
            }
    }
    /* The side channel. Its mesh completes only when every peer got this far, so it
     * is also the barrier that makes sure no write reaches a QP not yet in RTR. */
    if (tp_tcp_create(bs, &v->side, err, errlen)) goto done;
    if (v->b.rank == 0) {
        char d[160];
        hca_pick h = {.name = "", .port = v->port, .gid_index = v->gid_index, .link_layer = v->link_layer};
        snprintf(h.name, sizeof h.name, "%s", v->dev_name);
        h.pa.lid = (uint16_t)v->lid;
        describe(&h, d, sizeof d);
        rt_info("verbs: %d ranks over %s, RC queue pairs, %d slots of %zu KiB per peer", world, d,
                TP_VERBS_NSLOT, v->slot >> 10);
    }
    rc = 0;
done:
    free(me);
    free(all);
    return rc;
}

void tp_verbs_close(verbs_backend *v)
{
    if (v->side) v->side->ops->destroy(v->side);
    v->side = NULL;
    for (int j = 0; v->peers && j < v->b.world; j++)
        if (v->peers[j].qp) ibv_destroy_qp(v->peers[j].qp);
    for (int i = 0; i < v->nmrs; i++) ibv_dereg_mr(v->mrs[i].mr);
    if (v->arena_mr) ibv_dereg_mr(v->arena_mr);
    if (v->cq) ibv_destroy_cq(v->cq);
    if (v->ch) ibv_destroy_comp_channel(v->ch);
    if (v->pd) ibv_dealloc_pd(v->pd);
    if (v->ctx) ibv_close_device(v->ctx);
    free(v->arena);
}
