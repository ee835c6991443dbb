/* Transports per peer pair (NCCL's transport table: each transport says whether it can
 * connect two ranks, canConnect, and every pair takes the first that can). Internal to
 * transport/.
 *
 * The table, in order of preference:
 *   cuda_ipc  device buffers between GPUs of one host (tp_ipc.c): ranks on the same host
 *             whose devices reach each other (the same device, or cudaDeviceCanAccessPeer
 *             both ways) and none of the comm with DDPRT_P2P=0. It carries no host
 *             messages: it applies to the device plan only (tp_peers.reach set, at
 *             tp_staging_ipc), and in the host plan it is quietly skipped.
 *   shm       ranks on the same host (port_host_id: machine and network namespace)
 *             that both allow it (DDPRT_SHM; 0 on any rank turns it off for all), when
 *             the algorithm is auto, the comm has at most 64 ranks and the net backend
 *             can show it a dead peer (tp_backend_ops.peer_fd). Its pairs' messages go
 *             through a byte ring per direction (tp_link_shm.c); when every rank sits
 *             on one host the comm-wide segment (tp_shm.h) runs the collectives too.
 *   net       the comm's backend (tcp, verbs, loopback): connects every pair; its name
 *             is the backend's.
 * Capabilities are asked (peer_fd, host identities, the env), never names compared.
 *
 * The ranks swap what the choice needs (host identity, DDPRT_SHM) once, at the comm's
 * first collective (tp_connect), so that every rank computes the same table; the
 * comm's collectives then run through the shm segment when every pair took shm, else
 * through the algorithms (ring, tree, hierarchical). Every message of the algorithms
 * and of send/recv to peer p goes through the link (tp_link.h: isend, irecv, test,
 * waitall) of the pair's transport: the shm pair's ring or the net backend. */
#ifndef TP_TRANSPORT_H
#define TP_TRANSPORT_H
#include <stddef.h>
#include <stdint.h>

enum { TP_TRANSPORT_CUDA_IPC, TP_TRANSPORT_SHM, TP_TRANSPORT_NET, TP_NTRANSPORTS };

/* What one rank tells the others. */
typedef struct tp_peer_info {
    uint64_t host;  /* port_host_id(), or a test's fake identity */
    int shm_ok;     /* DDPRT_SHM is not 0 on that rank */
    int p2p_ok;     /* DDPRT_P2P is not 0 on that rank (the device plan's) */
} tp_peer_info;

/* The comm as the transports see it: every rank's info (equal on every rank) and the
 * comm-wide facts. */
typedef struct tp_peers {
    int world;
    const tp_peer_info *info; /* world entries; NULL: not swapped (shm_off says why) */
    const char *net;          /* the backend's name, for the log */
    const char *shm_off;      /* NULL, or why no pair can take shm ("DDPRT_ALGO=ring"
                                 / "the verbs backend cannot watch its peers") */
    int one_host, shm_all;    /* every rank on info[0]'s host / allowing shm (tp_peers_init) */
    /* The device plan only (NULL in the host plan): reach[a * world + b] is how rank a's
     * device reaches rank b's (port_cuda_reach: 2 same device, 1 peer access, 0 not). */
    const uint8_t *reach;
    int p2p_all;              /* every rank allowing CUDA IPC (tp_peers_init) */
} tp_peers;

/* Fills the derived fields of p (world, info, net, shm_off set). */
void tp_peers_init(tp_peers *p);

typedef struct tp_transport {
    const char *name; /* NULL: the net backend's name */
    /* Ranks a != b: 1 it connects them, 0 it cannot (why: a reason worth logging),
     * -1 it does not apply to them (why: quiet). why: a short phrase. */
    int (*can_connect)(const tp_peers *p, int a, int b, char *why, size_t n);
    /* The pair's point-to-point ops (tp_link.h); NULL: the net backend's. */
    const struct tp_link *link;
} tp_transport;
extern const tp_transport tp_transports[TP_NTRANSPORTS];

/* The first transport of the table that connects a and b (a TP_TRANSPORT_* index);
 * why: its reason, then those of the ones before it that could not ("same host; no
 * shm: DDPRT_SHM=0 on rank 1"). */
int tp_transport_pick(const tp_peers *p, int a, int b, char *why, size_t n);
const char *tp_transport_name(const tp_peers *p, int t);
/* Picks for every peer of rank me into out[world] (out[me] = TP_NTRANSPORTS) and, on
 * rank 0, logs each pair's choice (info level; at most TP_LOG_PAIRS lines, then a
 * count per transport). 1 when every pair of the comm took shm, else 0. */
#define TP_LOG_PAIRS 16
int tp_transport_plan(const tp_peers *p, int me, uint8_t *out);
/* The device plan (p->reach set): 1 when every pair takes cuda_ipc (one host); 2
 * hierarchical, when every pair of the same host takes it and the hosts are several with
 * the same number (> 1) of ranks each (cuda_ipc inside each host, staged across); else 0
 * with why the device collectives take the pinned staging ("rank 0 <-> 1: DDPRT_P2P=0
 * on rank 1"). Rank 0 logs each pair's device transport and the path. */
int tp_transport_device_plan(const tp_peers *p, int me, char *why, size_t n);
#endif
