/* Shared memory inside a host, the part under every protocol: the segment's life (made
 * at the first collective, unlinked once every rank has mapped it), its flags and the
 * futex bell, the waits, the failure line, and the rank-order reduction chain. Above it
 * the protocols (tp_shm_map.c registered buffers, tp_shm_cma.c single copy,
 * tp_shm_coll.c the copy protocol), and on top the comm's layer that decides and picks
 * among them (tp_shm_layer.c). The protocol is described in tp_shm.h. */
#include "transport/tp_link.h"
#include "transport/tp_shm.h"
#include "transport/tp_reduce.h"
#include "rt/env.h"
#include "rt/log.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x64647368u /* "ddsh" */
#define SHM_PREFIX "ddprt-shm."
/* Default spin before sleeping (DDPRT_SHM_SPIN_US). Short, as the tcp backend's: on a
 * loaded machine (2 cores, load 20-30, measured) long spins burn the CPU share the peer
 * needs and every op got slower (ms), both with pure spinning and with sched_yield. */
#define SHM_SPIN_NS 50000

static size_t ctl_bytes(int world)
{
    size_t b = sizeof(tp_shm_seg) + (size_t)world * sizeof(tp_shm_ctl);
    return (b + 4095) / 4096 * 4096;
}

static size_t seg_bytes(int world)
{
    return ctl_bytes(world) + (size_t)world * TP_SHM_NB * (sizeof(tp_shm_bufhdr) + TP_SHM_STEP);
}

/* Segments of ranks 0 that died between creating and unlinking theirs (SIGKILL in
 * that window of the first collective) are removed by the next job on the host. */
static void sweep_stale(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX))) continue;
        long pid = strtol(e->d_name + strlen(SHM_PREFIX), NULL, 10);
        if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char n[300];
        snprintf(n, sizeof n, "/%s", e->d_name);
        shm_unlink(n);
    }
    closedir(d);
}

static void *map_fd(int fd, size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Rank 0: a fresh segment named in name (or "" when it cannot). */
static void *create_seg(tp_comm *c, char *name, size_t nlen, size_t bytes)
{
    static unsigned serial;
    sweep_stale();
    snprintf(name, nlen, "/" SHM_PREFIX "%d.%u.%llx", (int)getpid(), __atomic_fetch_add(&serial, 1, __ATOMIC_RELAXED),
             (unsigned long long)(port_now_ns() ^ (int64_t)(uintptr_t)c));
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    void *p = NULL;
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0) p = map_fd(fd, bytes);
    int e = errno;
    if (fd >= 0) close(fd);
    if (!p) {
        if (fd >= 0) shm_unlink(name);
        rt_warn("comm: no shared memory segment (%s %zu bytes: %s); using sockets inside the host", name, bytes,
                strerror(e));
        name[0] = 0;
        return NULL;
    }
    if (tp_shm_fault("create")) raise(SIGKILL); /* test: die before unlinking (sweep_stale) */
    tp_shm_seg *s = p;
    s->magic = SHM_MAGIC;
    s->world = (uint32_t)c->world;
    return p;
}

static void *open_seg(const char *name, size_t bytes, int world)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = fstat(fd, &st) == 0 && (size_t)st.st_size == bytes ? map_fd(fd, bytes) : NULL;
    close(fd);
    if (p && (((tp_shm_seg *)p)->magic != SHM_MAGIC || ((tp_shm_seg *)p)->world != (uint32_t)world)) {
        munmap(p, bytes);
        p = NULL;
    }
    return p;
}

/* The peers' descriptors, watched for hang-ups while waiting (the backend's peer_fd:
 * shm is chosen only over a backend that has it, tp_transport.c). */
static int peer_fds(tp_comm *c, tp_shm *s)
{
    tp_backend *b = c->b;
    s->pfd = calloc((size_t)c->world, sizeof *s->pfd);
    s->pfd_rank = calloc((size_t)c->world, sizeof *s->pfd_rank);
    if (!s->pfd || !s->pfd_rank) return -1;
    for (int q = 0; q < c->world; q++) {
        int fd = q != c->rank && b->ops->peer_fd ? b->ops->peer_fd(b, q) : -1;
        if (fd >= 0) {
            s->pfd[s->npfd] = (struct pollfd){.fd = fd, .events = POLLRDHUP};
            s->pfd_rank[s->npfd++] = q;
        }
    }
    return 0;
}

int tp_shm_seg_open(tp_comm *c)
{
    int w = c->world, rc;
    char name[64] = "";
    size_t bytes = seg_bytes(w);
    void *map = c->rank == 0 ? create_seg(c, name, sizeof name, bytes) : NULL;
    rc = tp_chain_broadcast(c, name, sizeof name, 0);
    if (!rc && c->rank && name[0]) map = open_seg(name, bytes, w);
    unsigned char ok = map != NULL, *oks = calloc((size_t)w, 1);
    if (!rc && oks) rc = tp_ring_allgather(c, &ok, oks, 1, RT_U8);
    if (c->rank == 0 && name[0]) shm_unlink(name); /* every rank has it mapped, or gave up */
    int all_ok = !rc && oks && name[0];
    for (int r = 0; all_ok && r < w; r++) all_ok = oks[r];
    free(oks);
    tp_shm *s = all_ok ? calloc(1, sizeof *s) : NULL;
    if (s && peer_fds(c, s)) { free(s->pfd), free(s->pfd_rank), free(s); s = NULL; }
    if (!s) {
        if (map) munmap(map, bytes);
        return rc;
    }
    s->seg = map;
    s->map_bytes = bytes;
    s->bufs = (unsigned char *)map + ctl_bytes(w);
    s->spin_ns = (int64_t)rt_env_num(RT_ENV_SHM_SPIN_US, SHM_SPIN_NS / 1000) * 1000;
    s->my_cpu = -2;
    c->shm = s;
    if (c->rank == 0) rt_debug("comm: %d ranks on one host: collectives through shared memory (%s)", w, name);
    return 0;
}

void tp_shm_seg_close(tp_comm *c)
{
    tp_shm *s = c->shm;
    munmap(s->seg, s->map_bytes);
    free(s->pid);
    free(s->tmp);
    free(s->pfd);
    free(s->pfd_rank);
    free(s);
    c->shm = NULL;
}

/* ---- flags, waits, failure ----------------------------------------------------------- */

#define SHM_SLEEP_NS 1000000 /* futex sleep between looks at sockets and deadline */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void tp_shm_chain(void *dst, const void *const *in, int n, size_t m, rt_dtype dt, tp_op op)
{
    if (!m) return;
    tp_reduce(dst, in[0], in[1], m, dt, op);
    for (int k = 2; k < n; k++) tp_reduce(dst, dst, in[k], m, dt, op);
}

void tp_shm_reduce(tp_comm *c, int kind, void *dst, const void *const *in, size_t m, rt_dtype dt, tp_op op)
{
    if (kind == TP_K_TREE) tp_tree_fold(c->tree, c->ntree > 0 ? c->ntree : 0, dst, in, m, dt, op);
    else tp_shm_chain(dst, in, c->world, m, dt, op);
}

static void futex_wake_all(uint32_t *w) { syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

static void futex_wait(uint32_t *w, uint32_t v, int64_t ns)
{
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    syscall(SYS_futex, w, FUTEX_WAIT, v, &ts, NULL, 0);
}

static void ring_bell(tp_shm_seg *g)
{
    if (__atomic_load_n(&g->sleepers, __ATOMIC_SEQ_CST)) {
        __atomic_add_fetch(&g->bell, 1, __ATOMIC_SEQ_CST);
        futex_wake_all(&g->bell);
    }
}

/* Publishes the core this rank runs on (when it changed). */
static void note_cpu(tp_shm *s, int rank)
{
    int cpu = sched_getcpu();
    if (cpu != s->my_cpu) __atomic_store_n(&s->seg->ctl[rank].cpu, s->my_cpu = cpu, __ATOMIC_RELAXED);
}

void tp_shm_post(tp_shm *s, int rank, uint64_t *flag, uint64_t v)
{
    note_cpu(s, rank);
    /* seq_cst pairs with the sleeper's sleepers++ then re-check (Dekker): either it
     * sees v, or this thread sees it asleep and rings. */
    __atomic_store_n(flag, v, __ATOMIC_SEQ_CST);
    ring_bell(s->seg);
}

/* Tells the other ranks why this one fails (first failure wins). */
static void publish_abort(tp_comm *c, const char *why)
{
    tp_shm_seg *g = c->shm->seg;
    int32_t z = 0;
    if (!__atomic_compare_exchange_n(&g->abort_by, &z, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
    snprintf(g->why, sizeof g->why, "%.*s", (int)sizeof g->why - 1, why); /* cut to fit */
    __atomic_store_n(&g->abort_by, c->rank + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&g->bell, 1, __ATOMIC_SEQ_CST);
    futex_wake_all(&g->bell);
}

int tp_shm_fail(tp_comm *c, int code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    publish_abort(c, msg);
    /* Close the sockets too: ranks outside a wait (or past the segment) learn it there. */
    c->b->ops->abort(c->b, msg);
    snprintf(c->b->err, sizeof c->b->err, "%s", msg);
    return code;
}

/* Peer q's socket hung up: the backend names it (tp_backend_read_hangup); the segment's
 * other ranks learn it from the published abort. */
static int peer_gone(tp_comm *c, int q)
{
    int rc = tp_backend_read_hangup(c->b, q);
    if (!rc) return tp_shm_fail(c, TP_ECLOSED, "rank %d closed the connection", q);
    publish_abort(c, c->b->err);
    return rc;
}

int tp_shm_others_failed(tp_comm *c)
{
    tp_shm_seg *g = c->shm->seg;
    tp_backend *b = c->b;
    int ab = __atomic_load_n(&g->abort_by, __ATOMIC_ACQUIRE);
    if (ab <= 0 || ab - 1 == c->rank) return 0;
    char why[sizeof g->why + 40];
    snprintf(why, sizeof why, "%s (reported by rank %d)", g->why, ab - 1);
    b->ops->abort(b, why);
    snprintf(b->err, sizeof b->err, "%s", why);
    return TP_ECLOSED;
}

/* Slow path of a wait for *w >= v: 0, or why the op must fail. */
static int check_fail(tp_comm *c, int q, const uint64_t *w, uint64_t v)
{
    tp_shm *s = c->shm;
    tp_backend *b = c->b;
    int rc, bf = __atomic_load_n(&b->failed, __ATOMIC_RELAXED);
    if (bf) { publish_abort(c, b->err); return bf; }
    /* A peer that finished this op may have exited meanwhile: look at w once more. */
    if (s->npfd && poll(s->pfd, (nfds_t)s->npfd, 0) > 0 && __atomic_load_n(w, __ATOMIC_ACQUIRE) < v)
        for (int i = 0; i < s->npfd; i++)
            if (s->pfd[i].revents) return peer_gone(c, s->pfd_rank[i]);
    if ((rc = tp_shm_others_failed(c))) return rc;
    if (port_now_ns() >= c->deadline) return tp_shm_fail(c, TP_ETIMEOUT, "timed out waiting for rank %d", q);
    return 0;
}

static int wait_word(tp_comm *c, const uint64_t *w, uint64_t v, int q)
{
    if (__atomic_load_n(w, __ATOMIC_ACQUIRE) >= v) return 0;
    tp_shm *s = c->shm;
    tp_shm_seg *g = s->seg;
    int rc = 0;
    int64_t t0 = 0; /* the clock is read only once a wait lasts (every 64 spins): a
                       small op mostly waits a few hundred ns */
    int same_core;
    __atomic_store_n(&c->p_wait_peer, q, __ATOMIC_RELAXED);
    /* Spinning for a peer that shares this core only keeps it from running. */
    note_cpu(s, c->rank);
    same_core = __atomic_load_n(&g->ctl[q].cpu, __ATOMIC_RELAXED) == s->my_cpu;
    for (unsigned i = 1;; i++) {
        if (__atomic_load_n(w, __ATOMIC_ACQUIRE) >= v) break;
        cpu_relax();
        if (i % 64) continue;
        int64_t now = port_now_ns();
        if (!t0) t0 = now;
        if (now - t0 < s->spin_ns) {
            if (same_core) sched_yield();
            continue;
        }
        __atomic_add_fetch(&g->sleepers, 1, __ATOMIC_SEQ_CST);
        uint32_t bell = __atomic_load_n(&g->bell, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(w, __ATOMIC_SEQ_CST) < v) futex_wait(&g->bell, bell, SHM_SLEEP_NS);
        __atomic_sub_fetch(&g->sleepers, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(w, __ATOMIC_ACQUIRE) >= v) break;
        if ((rc = check_fail(c, q, w, v))) break;
    }
    __atomic_store_n(&c->p_wait_peer, -1, __ATOMIC_RELAXED);
    return rc;
}

int tp_shm_wait_ctl(tp_comm *c, size_t off, uint64_t v)
{
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank) continue;
        int rc = wait_word(c, (const uint64_t *)((const char *)&c->shm->seg->ctl[q] + off), v, q);
        if (rc) return rc;
    }
    return 0;
}

static void desc_text(char *s, size_t n, const tp_shm_bufhdr *d)
{
    char extra[48] = "";
    int kind = d->kind & ~(TP_SHM_CMA_KIND | TP_SHM_MAP_KIND);
    if (kind == TP_K_BROADCAST) snprintf(extra, sizeof extra, " root %d", d->root);
    if (d->kind & TP_SHM_CMA_KIND) strcat(extra, " (single copy)");
    if (d->kind & TP_SHM_MAP_KIND) strcat(extra, " (registered buffers)");
    /* Per rank, as the stall watch says it (bytes is what this rank passed). */
    int per = kind == TP_K_ALLGATHER || kind == TP_K_REDUCE_SCATTER;
    snprintf(s, n, "%s %s %s %llu B%s%s", tp_kind_name(kind),
             d->dt >= 0 && d->dt < RT_NDTYPE ? rt_dtype_names[d->dt] : "?",
             kind == TP_K_ALLREDUCE || kind == TP_K_REDUCE_SCATTER || kind == TP_K_TREE ? tp_op_names[d->op < TP_NOPS ? d->op : 0]
                                                                          : "-",
             (unsigned long long)d->bytes, per ? " per rank" : "", extra);
}

int tp_shm_wait_ready(tp_comm *c, uint64_t step, const tp_shm_bufhdr *mine)
{
    tp_shm *s = c->shm;
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank) continue;
        tp_shm_bufhdr *h = tp_shm_buf(s, q, step);
        int rc = wait_word(c, &h->ready, step + 1, q);
        if (rc) return rc;
        int p2p = __atomic_load_n(&c->p2p, __ATOMIC_RELAXED);
        if (h->ready == step + 1 && h->kind == mine->kind && h->bytes == mine->bytes && h->dt == mine->dt &&
            h->op == mine->op && h->root == mine->root && (p2p || h->seq == mine->seq))
            continue;
        /* The lower rank first: both ranks of the mismatch print the same line. */
        char a[96], b[96];
        int lo = c->rank < q;
        desc_text(a, sizeof a, lo ? mine : h);
        desc_text(b, sizeof b, lo ? h : mine);
        return tp_shm_fail(c, TP_EIO,
                           "collective mismatch at #%llu: rank %d issued %s, rank %d issued %s (every rank must "
                           "issue the same collectives in the same order)",
                           (unsigned long long)mine->seq, lo ? c->rank : q, a, lo ? q : c->rank, b);
    }
    return 0;
}

int tp_shm_publish(tp_comm *c, uint64_t st, const tp_shm_bufhdr *d)
{
    tp_shm *s = c->shm;
    tp_shm_bufhdr *h = tp_shm_buf(s, c->rank, st);
    h->seq = d->seq, h->bytes = d->bytes;
    h->kind = d->kind, h->dt = d->dt, h->op = d->op, h->root = d->root;
    tp_shm_post(s, c->rank, &h->ready, st + 1);
    return tp_shm_wait_ready(c, st, d);
}
