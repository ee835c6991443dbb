/* TCP backend internals shared by tp_tcp.c (data path) and tp_tcp_setup.c (listen,
 * handshake, full mesh). Not part of the public interface. */
#ifndef TP_TCP_INT_H
#define TP_TCP_INT_H
#include "transport/tp_backend.h"
#include <stddef.h>
#include <stdint.h>

/* Handshake: the connector sends a hello, the acceptor answers with a reply. */
#define TCP_MAGIC 0x64647074u /* "ddpt" */
#define TCP_VERSION 1u
enum { TCP_OK = 0, TCP_REFUSE_MAGIC = 1, TCP_REFUSE_VERSION = 2, TCP_REFUSE_TOKEN = 3,
       TCP_REFUSE_RANK = 4, TCP_REFUSE_WORLD = 5 };

/* flags: TCP_HELLO_ABORT | reason length: not a connection but "I could not build the
 * mesh, because <reason follows>" from a rank that gives up during setup, so ranks
 * waiting for it fail at once instead of at the deadline. */
typedef struct tcp_hello {
    uint32_t magic, version;
    int32_t from, to, world, flags;
    uint64_t token_hash;
} tcp_hello;
#define TCP_HELLO_ABORT 0x10000

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

typedef struct tcp_peer {
    int fd;
    /* Send side: FIFO of requests; hdr is the head's frame header, hdr_done how many
     * of its bytes went out (the payload offset lives in req->done). */
    tp_req *sq, *sq_tail;
    tcp_frame shdr;
    size_t shdr_done;
    uint32_t sseq;
    int64_t sq_since;       /* when the current head was posted (for timeout messages) */
    /* Recv side: the same, for the header that arrives in front of the head's data. */
    tp_req *rq, *rq_tail;
    tcp_frame rhdr;
    size_t rhdr_done;
    uint32_t rseq;
    int64_t rq_since;
} tcp_peer;

typedef struct tcp_backend {
    tp_backend b;           /* first: the public part */
    tcp_peer *peers;        /* [world]; peers[rank].fd = -1 */
    double timeout_s;
    int64_t spin_ns;        /* busy-poll this long without progress before blocking */
    struct pollfd *pfds;    /* [world] scratch for poll */
    int *pfd_peer;
} tcp_backend;

/* tp_tcp_setup.c: listens, swaps addresses through the bootstrap, connects the full
 * mesh and fills peers[].fd (blocking sockets, handshake done). 0 or -1 with err. */
int tcp_mesh_connect(tcp_backend *t, const tp_bootstrap *bs, char *err, size_t errlen);
#endif
