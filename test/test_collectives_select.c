/* Transports per peer pair (transport/tp_transport.h): the selection over fake host
 * identities, and a loopback comm's connect step filling its per-peer table. */
#include "test/t.h"
#include "test/tp_harness.h"
#include "transport/tp_comm_int.h"
#include "transport/tp_transport.h"
#include <string.h>

#define SHM TP_TRANSPORT_SHM
#define NET TP_TRANSPORT_NET
_Static_assert(TP_TRANSPORT_CUDA_IPC < SHM && SHM < NET && NET == TP_NTRANSPORTS - 1, "preference order");

/* p over hosts[] and wishes[] (NULL: every rank allows shm). */
static tp_peers peers(int world, tp_peer_info *info, const uint64_t *hosts, const int *wish, const char *off)
{
    for (int r = 0; r < world; r++) info[r] = (tp_peer_info){hosts[r], wish ? wish[r] : 1, 1};
    tp_peers p = {.world = world, .info = info, .net = "tcp", .shm_off = off};
    tp_peers_init(&p);
    return p;
}

/* Pair (a, b) takes transport t with exactly that reason, both ways round. */
static void want(const tp_peers *p, int a, int b, int t, const char *why)
{
    char w[256];
    for (int k = 0; k < 2; k++) {
        int x = k ? b : a, y = k ? a : b, got = tp_transport_pick(p, x, y, w, sizeof w);
        CHECKF(got == t && !strcmp(w, why), "rank %d <-> %d: %s (%s), want %s (%s)", x, y, tp_transport_name(p, got),
               w, tp_transport_name(p, t), why);
    }
}

TEST(tp_select_one_host_takes_shm)
{
    tp_peer_info info[3];
    const uint64_t hosts[] = {7, 7, 7};
    tp_peers p = peers(3, info, hosts, NULL, NULL);
    want(&p, 0, 1, SHM, "same host");
    want(&p, 1, 2, SHM, "same host");
    uint8_t out[3];
    for (int me = 0; me < 3; me++) {
        CHECK(tp_transport_plan(&p, me, out) == 1);
        for (int q = 0; q < 3; q++) CHECK_EQ(out[q], q == me ? TP_NTRANSPORTS : SHM);
    }
}

/* Two hosts of two: across them the net (named by the backend); within one, shm's
 * point-to-point rings (the comm-wide segment needs every rank on one host, so the
 * plan does not say "every pair shm"). */
TEST(tp_select_two_hosts_same_host_pairs_take_shm)
{
    tp_peer_info info[4];
    const uint64_t hosts[] = {1, 1, 2, 2};
    tp_peers p = peers(4, info, hosts, NULL, NULL);
    want(&p, 0, 2, NET, "different hosts");
    want(&p, 1, 3, NET, "different hosts");
    want(&p, 0, 1, SHM, "same host, point-to-point");
    want(&p, 2, 3, SHM, "same host, point-to-point");
    CHECK(!strcmp(tp_transport_name(&p, NET), "tcp"));
    uint8_t out[4];
    CHECK(tp_transport_plan(&p, 1, out) == 0);
    CHECK(out[0] == SHM && out[1] == TP_NTRANSPORTS && out[2] == NET && out[3] == NET);
    CHECK(tp_transport_plan(&p, 2, out) == 0);
    CHECK(out[0] == NET && out[1] == NET && out[2] == TP_NTRANSPORTS && out[3] == SHM);
    /* DDPRT_SHM=0 on a rank of the other host still turns shm off for every pair. */
    const int wish[] = {1, 1, 1, 0};
    p = peers(4, info, hosts, wish, NULL);
    want(&p, 0, 1, NET, "same host; no shm: DDPRT_SHM=0 on rank 3");
}

/* DDPRT_SHM=0 on one rank turns the segment off for all: the reason names it. */
TEST(tp_select_shm_off_names_the_rank)
{
    tp_peer_info info[3];
    const uint64_t hosts[] = {5, 5, 5};
    const int wish[] = {1, 1, 0};
    tp_peers p = peers(3, info, hosts, wish, NULL);
    want(&p, 0, 1, NET, "same host; no shm: DDPRT_SHM=0 on rank 2");
    want(&p, 0, 2, NET, "same host; no shm: DDPRT_SHM=0 on rank 2");
    const int wish1[] = {1, 0, 0};
    p = peers(3, info, hosts, wish1, NULL);
    want(&p, 0, 2, NET, "same host; no shm: DDPRT_SHM=0 on rank 2");
    want(&p, 0, 1, NET, "same host; no shm: DDPRT_SHM=0 on rank 1");
}

/* Comm-wide reasons (a forced algorithm, a backend without a peer watch) keep every
 * pair on the net; with hosts unknown the line says only that. */
TEST(tp_select_comm_wide_reasons)
{
    tp_peer_info info[3];
    const uint64_t hosts[] = {9, 9, 4};
    tp_peers p = peers(3, info, hosts, NULL, "algorithm forced to ring");
    want(&p, 0, 1, NET, "same host; no shm: algorithm forced to ring");
    want(&p, 0, 2, NET, "different hosts");
    p = (tp_peers){.world = 3, .net = "verbs", .shm_off = "the verbs backend cannot watch peers"};
    tp_peers_init(&p);
    want(&p, 0, 1, NET, "no shm: the verbs backend cannot watch peers");
    CHECK(!strcmp(tp_transport_name(&p, NET), "verbs"));
}

/* The table's order, and CUDA IPC's entry point that never connects yet (issue 42). */
TEST(tp_select_table)
{
    CHECK(!strcmp(tp_transports[TP_TRANSPORT_CUDA_IPC].name, "cuda_ipc"));
    CHECK(!strcmp(tp_transports[SHM].name, "shm"));
    CHECK(tp_transports[NET].name == NULL);
    tp_peer_info info[2];
    const uint64_t hosts[] = {3, 3};
    tp_peers p = peers(2, info, hosts, NULL, NULL);
    char w[96];
    CHECK(tp_transports[TP_TRANSPORT_CUDA_IPC].can_connect(&p, 0, 1, w, sizeof w) < 0);
    CHECK(tp_transports[NET].can_connect(&p, 0, 1, w, sizeof w) == 1);
}

/* A loopback comm over fake hosts: its first collective fills the per-peer table (the
 * loopback backend has no peer watch, so the net everywhere) and the sums are right. */
static const uint64_t g_hosts4[] = {11, 11, 12, 12};
static void connect_rank(tp_comm *c, void *arg)
{
    int *bad = arg;
    float x = (float)(c->rank + 1), y = 0;
    if (c->peer_tp || tp_allreduce(c, &x, &y, 1, RT_F32, TP_SUM) || y != 10.0f || !c->peer_tp)
        __atomic_add_fetch(bad, 1, __ATOMIC_RELAXED);
    for (int q = 0; c->peer_tp && q < c->world; q++)
        if (c->peer_tp[q] != (q == c->rank ? TP_NTRANSPORTS : NET)) __atomic_add_fetch(bad, 1, __ATOMIC_RELAXED);
}
TEST(tp_select_loopback_comm_connects)
{
    tp_comm_opts o = {.timeout_s = 60, .host_ids = g_hosts4};
    tpt_world w;
    int bad = 0;
    CHECK(tpt_open(&w, 4, &o) == 0);
    tpt_run(&w, connect_rank, &bad);
    for (int r = 0; r < 4; r++) CHECK(w.c[r]->connected && w.c[r]->shm_state < 0);
    tpt_close(&w);
    CHECK_EQ(bad, 0);
}

/* The device plan (issue 42): cuda_ipc for ranks of one host whose devices reach each
 * other, unless DDPRT_P2P=0 somewhere; hierarchical on a regular grid of hosts; in the
 * host plan (no reach table) it is skipped quietly, so host messages keep shm. */
TEST(tp_select_device_plan_takes_cuda_ipc)
{
    tp_peer_info info[3];
    const uint64_t one[] = {7, 7, 7}, two[] = {7, 7, 9};
    uint8_t reach[9];
    char why[160];
    memset(reach, 2, sizeof reach);
    tp_peers p = peers(3, info, one, NULL, NULL);
    want(&p, 0, 1, SHM, "same host"); /* host plan */
    p.reach = reach;
    want(&p, 0, 1, TP_TRANSPORT_CUDA_IPC, "same device");
    CHECK(tp_transport_device_plan(&p, 1, why, sizeof why) == 1);
    reach[0 * 3 + 2] = reach[2 * 3 + 0] = 1; /* peer access between 0 and 2 */
    want(&p, 0, 2, TP_TRANSPORT_CUDA_IPC, "peer access");
    reach[1 * 3 + 2] = 0; /* rank 1 cannot reach rank 2's device */
    want(&p, 1, 2, SHM, "same host; no cuda_ipc: the devices cannot reach each other");
    CHECK(tp_transport_device_plan(&p, 1, why, sizeof why) == 0);
    CHECKF(!strcmp(why, "rank 1 <-> 2: the devices cannot reach each other"), "%s", why);
    memset(reach, 2, sizeof reach);
    info[2].p2p_ok = 0;
    tp_peers_init(&p);
    want(&p, 0, 1, SHM, "same host; no cuda_ipc: DDPRT_P2P=0 on rank 2");
    CHECK(tp_transport_device_plan(&p, 1, why, sizeof why) == 0);
    CHECKF(!strcmp(why, "rank 0 <-> 1: DDPRT_P2P=0 on rank 2"), "%s", why);
    p = peers(3, info, two, NULL, NULL);
    p.reach = reach;
    want(&p, 0, 1, TP_TRANSPORT_CUDA_IPC, "same device");
    want(&p, 0, 2, NET, "different hosts");
    CHECK(tp_transport_device_plan(&p, 1, why, sizeof why) == 0);
    CHECKF(!strcmp(why, "several hosts, not the same number (> 1) of ranks on each"), "%s", why);
    /* 2 hosts x 2 ranks: hierarchical (cuda_ipc inside each host, staged across), unless
     * a pair of one host cannot map the other's memory. */
    tp_peer_info info4[4];
    const uint64_t grid[] = {7, 9, 7, 9};
    uint8_t reach4[16];
    memset(reach4, 2, sizeof reach4);
    p = peers(4, info4, grid, NULL, NULL);
    p.reach = reach4;
    CHECK(tp_transport_device_plan(&p, 0, why, sizeof why) == 2);
    reach4[1 * 4 + 3] = 0;
    CHECK(tp_transport_device_plan(&p, 0, why, sizeof why) == 0);
    CHECKF(!strcmp(why, "rank 1 <-> 3: the devices cannot reach each other"), "%s", why);
}
