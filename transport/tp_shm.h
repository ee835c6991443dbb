/* Shared memory inside a host (internal to transport/): when every rank of a tcp comm
 * sits on one host (port_host_id: machine and network namespace), the collectives run
 * through one POSIX shm segment instead of the sockets.
 *
 * Segment (made by rank 0 at the first collective, named once, unlinked as soon as
 * every rank has mapped it): a header (futex bell, abort line), per rank a control
 * block (`red` and `done` counters, each on its own cache line) and TP_SHM_NB buffers
 * of one 64-byte header line plus TP_SHM_STEP data bytes.
 *
 * Protocol: ops run in the same order on every rank, each as whole pipeline steps
 * numbered alike everywhere. In step s a rank fills its buffer s % NB (after every
 * rank's done >= s + 1 - NB, i.e. nobody still reads it), writes the op descriptor in
 * the buffer's header and ready = s + 1 there; every rank waits for all ready flags,
 * checks the descriptors (a mismatch is named at once), works (reduce its share,
 * copy out), and sets done = s + 1. The large allreduce has one more round (`red`)
 * between the reduce of the shares and the copy out.
 *
 * Waits: spin briefly (DDPRT_SHM_SPIN_US, default 50; yielding the core instead when
 * the peer last ran on this one), then sleep on the segment's futex bell (1 ms at a time), and
 * between sleeps look at the peers' sockets (a dead peer's close shows as a hang-up;
 * the tcp backend then names it), the segment's abort line (another rank failed), the
 * backend's failed flag (tp_abort, the stall watch) and the op's deadline. */
#ifndef TP_SHM_H
#define TP_SHM_H
#include "transport/tp_comm_int.h"
#include <stdint.h>

#define TP_SHM_STEP (128u << 10) /* data bytes per buffer (one pipeline step) */
#define TP_SHM_NB 2              /* buffers per rank */
#define TP_SHM_SMALL (16u << 10) /* allreduce up to this: one round, every rank reduces all */
#define TP_SHM_MAX_WORLD 64

typedef struct tp_shm_bufhdr {
    uint64_t ready;            /* step + 1 once the buffer holds step's data */
    uint64_t seq, bytes;
    int32_t kind, dt, op, root;
    char pad[64 - 40];         /* an allreduce of <= 24 bytes travels here */
} tp_shm_bufhdr;

typedef struct tp_shm_ctl {
    _Alignas(64) uint64_t red;  /* steps whose share this rank has reduced */
    _Alignas(64) uint64_t done; /* steps this rank has finished reading */
    _Alignas(64) int32_t cpu;   /* the core it last ran on (a waiter on the same core yields) */
} tp_shm_ctl;

typedef struct tp_shm_seg {
    uint32_t magic, world;
    _Alignas(64) uint32_t bell; /* futex word: bumped when a flag changes and someone sleeps */
    uint32_t sleepers;
    _Alignas(64) int32_t abort_by; /* rank + 1 of the first rank that failed, 0 none */
    char why[192];
    tp_shm_ctl ctl[];              /* [world] */
} tp_shm_seg;

typedef struct tp_shm {
    tp_shm_seg *seg;
    size_t map_bytes;
    unsigned char *bufs;          /* world * NB buffers of sizeof hdr + TP_SHM_STEP */
    uint64_t step;                /* next step number (equal on every rank) */
    uint64_t done_min;            /* least `done` of the others seen so far */
    struct pollfd *pfd;           /* the peers' sockets, for hang-ups */
    int *pfd_rank, npfd;
    int64_t spin_ns;
    int my_cpu;                   /* last value this rank wrote into its ctl's cpu */
} tp_shm;

/* Decides at the first collective (collectively: every rank calls it at the same op)
 * and maps the segment; c->shm_state becomes 1 (in use) or -1 (sockets). 0 or a
 * backend code. */
int tp_shm_setup(tp_comm *c);
void tp_shm_free(tp_comm *c);
/* Runs allreduce, broadcast, reduce_scatter, allgather or barrier h through shm. */
int tp_shm_run(tp_comm *c, tp_handle *h);

/* For tp_shm_coll.c. */
static inline tp_shm_bufhdr *tp_shm_buf(tp_shm *s, int rank, uint64_t step)
{
    return (tp_shm_bufhdr *)(s->bufs + ((size_t)rank * TP_SHM_NB + step % TP_SHM_NB) *
                                           (sizeof(tp_shm_bufhdr) + TP_SHM_STEP));
}
static inline unsigned char *tp_shm_data(tp_shm_bufhdr *h) { return (unsigned char *)(h + 1); }
/* Stores v into *flag and rings the bell when someone sleeps. */
void tp_shm_post(tp_shm *s, int rank, uint64_t *flag, uint64_t v);
/* Waits until every other rank's word (at byte offset off of its control block, or
 * of its buffer header for step when off < 0) reaches v. 0 or a code with b->err. */
int tp_shm_wait_ctl(tp_comm *c, size_t off, uint64_t v);
int tp_shm_wait_ready(tp_comm *c, uint64_t step, const tp_shm_bufhdr *mine);
/* Fails the op: err in b->err, the reason on the segment for the other ranks, and the
 * backend aborted so its sockets close. Returns code. */
int tp_shm_fail(tp_comm *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#endif
