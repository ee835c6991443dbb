/* TCP backend internals shared by tp_tcp.c (data path) and tp_tcp_setup.c (listen,
 * handshake, full mesh). Not part of the public interface. */
#ifndef TP_TCP_INT_H
#define TP_TCP_INT_H
#include "transport/tp_backend.h"
#include <stddef.h>
#include <stdint.h>

/* Handshake: the connector sends a hello, the acceptor answers with a reply. */
#define TCP_MAGIC 0x64647074u /* "ddpt" */
#define TCP_VERSION 2u /* 2: lanes take whole messages in turn (tp_tcp.c lane_part) */
enum { TCP_OK = 0, TCP_REFUSE_MAGIC = 1, TCP_REFUSE_VERSION = 2, TCP_REFUSE_TOKEN = 3,
       TCP_REFUSE_RANK = 4, TCP_REFUSE_WORLD = 5, TCP_REFUSE_NSOCKS = 6 };

/* flags: TCP_HELLO_ABORT | reason length: not a connection but "I could not build the
 * mesh, because <reason follows>" from a rank that gives up during setup, so ranks
 * waiting for it fail at once instead of at the deadline. */
typedef struct tcp_hello {
    uint32_t magic, version;
    int32_t from, to, world, flags;
    uint64_t token_hash;
} tcp_hello;
#define TCP_HELLO_ABORT 0x10000
/* Otherwise flags = lane | nsocks << 8: which socket of the peer's set this is, and
 * how many the connector uses (0 from an older peer: 1). */
#define TCP_HELLO_LANE(f) ((f) & 0xff)
#define TCP_HELLO_NSOCKS(f) (((f) >> 8) & 0xff ? ((f) >> 8) & 0xff : 1)

typedef struct tcp_reply {
    uint32_t magic, status;
} tcp_reply;

/* What each rank publishes. Fixed-size so the allgather is a plain byte swap. */
typedef struct tcp_addr {
    char ip[48];
    uint64_t host_id;       /* port_host_id(): equal = same machine and network namespace */
    char uds[48];           /* abstract unix socket name for same-machine peers, or "" */
    int32_t port, pinned;   /* pinned: address chosen by DDPRT_SOCKET_IFNAME */
} tcp_addr;

/* Every message on the wire: a 16-byte frame header, then len payload bytes.
 * flags bit 0 = abort: the payload is a one-line reason, and the sender is closing. */
typedef struct tcp_frame {
    uint64_t len;
    uint32_t seq, flags;
} tcp_frame;
#define TCP_FRAME_ABORT 1u

/* Sockets per peer (DDPRT_TCP_NSOCKS, as NCCL_NSOCKS_PERTHREAD), "lanes". A message
 * below TCP_STRIPE_MIN goes whole on lane (its index per peer and direction) mod
 * lanes; a longer one is cut into equal stripes, one per lane. Each part has its own
 * frame header (full message length, the lane's own sequence). Both ends derive the
 * lanes from the index and the length. Whole messages, not stripes, for the ring's
 * chunks (227 KiB at the default arena): 128 KiB halves of a 1 MiB allreduce's
 * columns cost twice the syscalls and headers, and a column completed only once
 * the second lane, served after all of the first, got to it. The ring keeps 4 chunks
 * in flight per direction, so on a real NIC both sockets stay busy as with stripes.
 * Default 2: with one socket carrying both directions of a ring (2 ranks), 16 MiB
 * allreduce over loopback TCP cost 30 % more CPU per op (2.05 vs 1.45 s for 105 ops,
 * perf stat) and the receiver coalesced 18x more segments into a backlogged queue
 * (TCPRcvCoalesce 24.6k vs 1.4k), so under load busbw fell to about half; 4 sockets
 * measured no better than 2. */
#define TCP_MAX_NSOCKS 8
#define TCP_DEFAULT_NSOCKS 2
#define TCP_STRIPE_MIN ((size_t)1 << 20)

typedef struct tcp_lane {
    int fd;
    /* Send side: the queued request this socket works on (NULL: none left), its
     * frame header, how many header bytes and stripe bytes went out. */
    tp_req *scur;
    tcp_frame shdr;
    size_t shdr_done, soff;
    uint32_t sseq;
    int sbusy;              /* scur's header is built (the lane started it) */
    /* Recv side: the same for the header that arrives in front of the stripe. */
    tp_req *rcur;
    tcp_frame rhdr;
    size_t rhdr_done, roff;
    uint32_t rseq;
} tcp_lane;

/* Per peer a FIFO of posted sends and one of posted recvs; every lane walks both in
 * order, and a request completes when all lanes passed it (req->done counts them). */
typedef struct tcp_peer {
    int nl;                 /* lanes in use (t->nsocks; 0 for this rank itself) */
    tcp_lane lane[TCP_MAX_NSOCKS];
    tp_req *sq, *sq_tail;
    int64_t sq_since;       /* when the current head was posted (for timeout messages) */
    tp_req *rq, *rq_tail;
    int64_t rq_since;
    uint32_t snext, rnext;  /* messages posted so far, per direction (lane choice) */
} tcp_peer;

typedef struct tcp_backend {
    tp_backend b;           /* first: the public part */
    tcp_peer *peers;        /* [world]; peers[rank]'s lanes have fd -1 */
    int nsocks;             /* lanes per peer, 1..TCP_MAX_NSOCKS */
    double timeout_s;
    int64_t spin_ns;        /* busy-poll at most this long without progress before blocking */
    int64_t spin_cur;       /* the current spin, TCP_SPIN_MIN_NS..spin_ns (tcp_waitall) */
    struct pollfd *pfds;    /* [world * nsocks] scratch for poll */
    int *pfd_peer;
} tcp_backend;

/* tp_tcp_setup.c: listens, swaps addresses through the bootstrap, connects the full
 * mesh (nsocks sockets per pair) and fills peers[].lane[].fd (blocking sockets,
 * handshake done). 0 or -1 with err. */
int tcp_nsocks_env(int *n, char *err, size_t errlen); /* tp_tcp.c: DDPRT_TCP_NSOCKS */
int tcp_peer_connected(const tcp_backend *t, int j); /* all of j's lanes are up */
int tcp_mesh_connect(tcp_backend *t, const tp_bootstrap *bs, char *err, size_t errlen);
#endif
