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
 * numbered alike everywhere. In step s a rank fills its buffer s % NB, writes the op
 * descriptor in the buffer's header and ready = s + 1 there; every rank waits for all
 * ready flags, checks the descriptors (a mismatch is named at once) and works (reduce
 * its share, copy out). A rank reads the data of step s during steps s and s + 1 (the
 * large allreduce copies a step's results out in the next step; its last step has a
 * round of its own, `red`, before that copy), so all of it before it posts ready for
 * step s + 2. The owner refills buffer s % NB at step s + NB = s + 3 only after its
 * step s + 2, which waited for every rank's ready for s + 2 (every step of every op
 * waits for every rank's ready): no `done` round is needed.
 *
 * Single copy (tp_shm_cma.c, DDPRT_SHM_CMA=1): from cma_min bytes on, when every rank
 * could read every other's memory at setup (process_vm_readv: Linux cross-memory
 * attach), an op is one step whose descriptor carries the rank's send and recv
 * addresses; each rank reads
 * the peers' user buffers straight into its own (allreduce: reduce its share reading
 * the peers' send buffers, round `red`, then read every other share from its owner's
 * recv), and a last round (`done`) keeps every rank in the op until nobody reads its
 * buffers any more.
 *
 * Registered buffers (tp_shm_map.c, on by default, DDPRT_SHM_MAP=0 off): from
 * map_min bytes on (DDPRT_SHM_MAP_MIN, 16 KiB), an allreduce whose send and recv are
 * tp_mem_alloc memory on every rank (DDP's gradients are) reads and writes the peers'
 * buffers in place, the ranks taking chunks from a shared counter; otherwise, or when
 * a rank cannot map a peer's memory, every rank takes the copy protocol.
 *
 * Waits: spin briefly (DDPRT_SHM_SPIN_US, default 50; yielding the core instead when
 * the peer last ran on this one), then sleep on the segment's futex bell (1 ms at a
 * time), and between sleeps look at the peers' sockets (a dead peer's close shows as a hang-up;
 * the tcp backend then names it), the segment's abort line (another rank failed), the
 * backend's failed flag (tp_abort, the stall watch) and the op's deadline. */
#ifndef TP_SHM_H
#define TP_SHM_H
#include "transport/tp_comm_int.h"
#include "rt/env.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef TP_SHM_STEP
#define TP_SHM_STEP (256u << 10) /* data bytes per buffer (one pipeline step; 256 KiB measured 8-10 % faster than 128 at 1-16 MiB, no better at 512) */
#endif
#define TP_SHM_NB 3              /* buffers per rank (3: the protocol needs no `done`) */
_Static_assert(TP_SHM_NB >= 3, "step s data is read until ready for s + 2 is posted");
#define TP_SHM_SMALL (16u << 10) /* allreduce up to this: one round, every rank reduces all */
#define TP_SHM_MAX_WORLD 64

typedef struct tp_shm_bufhdr {
    uint64_t ready;            /* step + 1 once the buffer holds step's data */
    uint64_t seq, bytes;
    int32_t kind, dt, op, root;
    char pad[64 - 40];         /* an allreduce of <= 24 bytes travels here; the single
                                  copy ops' send and recv addresses */
} tp_shm_bufhdr;

/* A rank's tp_mem_alloc block as the others see it (gen 0: none; written by the
 * owner only, gen last). */
typedef struct tp_shm_region {
    uint64_t gen, base, len, ino;
    int64_t fd;
} tp_shm_region;

typedef struct tp_shm_ctl {
    _Alignas(64) uint64_t red;  /* steps whose share this rank has reduced */
    _Alignas(64) uint64_t done; /* single copy ops: step + 1 once it read the others' buffers */
    _Alignas(64) int32_t cpu;   /* the core it last ran on (a waiter on the same core yields) */
    _Alignas(64) uint64_t agree; /* registered ops: (step + 1) * 2 + "I mapped every peer's buffers" */
    _Alignas(64) tp_shm_region reg[TP_MEM_MAX];
} tp_shm_ctl;

typedef struct tp_shm_seg {
    uint32_t magic, world;
    _Alignas(64) uint32_t bell; /* futex word: bumped when a flag changes and someone sleeps */
    uint32_t sleepers;
    _Alignas(64) uint64_t claim;   /* registered allreduce: next chunk to take (rank 0 resets it) */
    _Alignas(64) int32_t abort_by; /* rank + 1 of the first rank that failed, 0 none */
    char why[192];
    tp_shm_ctl ctl[];              /* [world] */
} tp_shm_seg;

typedef struct tp_shm {
    tp_shm_seg *seg;
    size_t map_bytes;
    unsigned char *bufs;          /* world * NB buffers of sizeof hdr + TP_SHM_STEP */
    uint64_t step;                /* next step number (equal on every rank) */
    struct pollfd *pfd;           /* the peers' sockets, for hang-ups */
    int *pfd_rank, npfd;
    int64_t spin_ns;
    int my_cpu;                   /* last value this rank wrote into its ctl's cpu */
    /* Single copy (tp_shm_cma.c): cma set when every rank can read every other's
     * memory; ops of at least cma_min bytes use it. */
    int cma;
    size_t cma_min;
    int *pid;                     /* [world] */
    unsigned char *tmp;           /* 2 * TP_SHM_CMA_CHUNK: the peers' operands */
    uint64_t probe;               /* read by the peers at setup */
    /* Registered buffers (tp_shm_map.c): map set when every rank wants them; ops of
     * at least map_min bytes whose buffers are registered everywhere use them. */
    int map;
    size_t map_min;
    struct tp_shm_pmap *pm;       /* [world * TP_MEM_MAX]: the peers' blocks mapped here */
    unsigned char *mtmp;          /* TP_SHM_STEP: in place reduce of ranks >= 2 */
    uint64_t map_ops;             /* ops that ran on registered buffers (tests) */
} tp_shm;

#define TP_SHM_CMA_CHUNK (128u << 10)    /* bytes of a peer's operand read at a time */
#define TP_SHM_CMA_MIN (256u << 10)      /* default cma_min (DDPRT_SHM_CMA_MIN) */
#define TP_SHM_CMA_KIND 0x100            /* or'ed into a single copy op's descriptor kind */
#define TP_SHM_MAP_KIND 0x200            /* ... and into a registered-buffer op's */
/* Default map_min (DDPRT_SHM_MAP_MIN). Measured: 16 KiB took 1.6-2.2 us registered
 * against the copy protocol's 3.0, 32 KiB 2.0 against 6.6; at 8 KiB the gain (0.3 us)
 * is below what the attempt costs callers whose buffers are not registered (one flag
 * round, about 0.4 us), and at 4 KiB and below the copy protocol is faster. */
#define TP_SHM_MAP_MIN (16u << 10)
#ifndef TP_SHM_MAP_CHUNK
#define TP_SHM_MAP_CHUNK (64u << 10)     /* bytes per chunk taken from the counter */
#endif

/* tp_shm_layer.c, the comm's layer (tp_shm_layer). tp_shm_mode: 0 no shared memory, 1
 * the copy protocol only, 2 single copy too (for tests). */
int tp_shm_mode(const tp_comm *c);
/* tp_shm.c: maps the segment (collective); c->shm set, or left NULL when some rank
 * could not (then the sockets). 0 or a backend code. Close unmaps and frees it. */
int tp_shm_seg_open(tp_comm *c);
void tp_shm_seg_close(tp_comm *c);
/* tp_shm_coll.c: allreduce, broadcast, reduce_scatter, allgather or barrier h through
 * the copy protocol; d: its descriptor. */
int tp_shm_copy_run(tp_comm *c, tp_handle *h, const tp_shm_bufhdr *d);

/* tp_shm_cma.c: decides (collectively, at setup) whether single copy works; 0 or a
 * backend code. tp_shm_cma_run: h through single copy, or 1 when h cannot take it
 * (too small, overlapping buffers). */
int tp_shm_cma_setup(tp_comm *c);
int tp_shm_cma_run(tp_comm *c, tp_handle *h, const tp_shm_bufhdr *d);

/* tp_shm_map.c: setup (collective, after tp_shm_cma_setup), teardown, and h on the
 * peers' registered buffers, or 1 when h does not qualify or some rank's buffers are
 * not registered or mapped (then every rank returns 1 and runs the copy protocol). */
int tp_shm_map_setup(tp_comm *c);
void tp_shm_map_free(tp_comm *c);
int tp_shm_map_run(tp_comm *c, tp_handle *h, const tp_shm_bufhdr *d);
/* Ops that took the registered path (tests). */
uint64_t tp_shm_map_ops(const tp_comm *c);

/* tp_shm.c and inline helpers: what the protocols share. */
static inline tp_shm_bufhdr *tp_shm_buf(tp_shm *s, int rank, uint64_t step)
{
    return (tp_shm_bufhdr *)(s->bufs + ((size_t)rank * TP_SHM_NB + step % TP_SHM_NB) *
                                           (sizeof(tp_shm_bufhdr) + TP_SHM_STEP));
}
static inline unsigned char *tp_shm_data(tp_shm_bufhdr *h) { return (unsigned char *)(h + 1); }
/* The test fault DDPRT_SHM_TEST_FAULT names what (tests make the library fail there). */
static inline int tp_shm_fault(const char *what)
{
    const char *f = rt_env_str(RT_ENV_SHM_TEST_FAULT);
    return f && !strcmp(f, what);
}
/* Whether [a, a + an) and [b, b + bn) share a byte. */
static inline int tp_shm_overlap(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}
/* Start of rank q's share of cnt elements of es bytes: cache-line aligned cuts. */
static inline size_t tp_shm_cut(size_t cnt, int n, int q, size_t es)
{
    if (q >= n) return cnt;
    size_t a = 64 / es;
    return cnt * (size_t)q / (size_t)n / a * a;
}
/* dst = in[0] op in[1] op ... in[n-1], left to right (dst may be in[0] or in[1]). */
void tp_shm_chain(void *dst, const void *const *in, int n, size_t m, rt_dtype dt, tp_op op);
/* The op's reduce over every rank's operand: the chain, or the tree for TP_K_TREE. */
void tp_shm_reduce(tp_comm *c, int kind, void *dst, const void *const *in, size_t m, rt_dtype dt, tp_op op);
/* Stores v into *flag and rings the bell when someone sleeps. */
void tp_shm_post(tp_shm *s, int rank, uint64_t *flag, uint64_t v);
/* Waits until every other rank's word (at byte offset off of its control block, or
 * of its buffer header for step when off < 0) reaches v. 0 or a code with b->err. */
int tp_shm_wait_ctl(tp_comm *c, size_t off, uint64_t v);
int tp_shm_wait_ready(tp_comm *c, uint64_t step, const tp_shm_bufhdr *mine);
/* Writes d into this rank's header of step st, posts ready, waits for every rank's. */
int tp_shm_publish(tp_comm *c, uint64_t st, const tp_shm_bufhdr *d);
/* Another rank failed (the segment's abort line): its reason in b->err and
 * TP_ECLOSED; else 0. */
int tp_shm_others_failed(tp_comm *c);
/* Fails the op: err in b->err, the reason on the segment for the other ranks, and the
 * backend aborted so its sockets close. Returns code. */
int tp_shm_fail(tp_comm *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#endif
