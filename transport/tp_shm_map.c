/* Shared memory, registered buffers (as NCCL's user buffer registration): tp_mem_alloc
 * hands out memory backed by a memfd, which the other ranks of the host map through
 * /proc/PID/fd/FD (no name to clean up; the memory goes with the last mapping, and a
 * peer's mapping stays readable after the owner died). An allreduce whose send and
 * recv lie in such memory on every rank then reads the peers' operands and results in
 * place: no copy in and out through the segment.
 *
 * allreduce: publish the descriptor with this rank's send and recv (0 when they are not
 *   registered); round `agree`: could this rank map every peer's buffers? Unless every
 *   rank could, all return 1 and run the copy protocol (they decide on the same words).
 *   Then the ranks take chunks of TP_SHM_MAP_CHUNK bytes from a shared counter: the
 *   taker reduces the chunk (rank order, every send read in place) into its recv and
 *   copies the result into every other rank's recv. Nobody waits on anybody until the
 *   last round, and a core that runs slower (a VM's vCPU shares its core with another
 *   guest's) takes fewer chunks, where fixed shares would make the other wait for it.
 *   The round `done` keeps every rank in the op until nobody touches its buffers.
 * In place is safe: a chunk's inputs and outputs are touched by its taker only, which
 *   reads all the inputs (into a scratch where its own recv would be overwritten
 *   first) before writing any output. The counter is reset by rank 0 before it
 *   publishes an op: every rank took its last chunk of the op before (round `done`).
 * Results are the same bits whoever reduces a chunk, and equal to the copy protocol's. */
#include "transport/tp_shm.h"
#include "rt/env.h"
#include "transport/tp_reduce.h"
#include "rt/log.h"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct tp_shm_pmap {
    uint64_t gen;         /* of the owner's block mapped here (or that failed to map) */
    unsigned char *local; /* NULL: could not map */
    size_t len;
} tp_shm_pmap;

/* ---- the blocks --------------------------------------------------------------------- */

/* Slot i of this rank's table in the segment: gen last, so a reader that sees it sees
 * the rest (and re-checks it after reading them). Under c->mu, shm in use. */
static void publish_region(tp_comm *c, int i)
{
    tp_shm_region *r = &c->shm->seg->ctl[c->rank].reg[i];
    const tp_mem_region *m = &c->mem[i];
    __atomic_store_n(&r->gen, 0, __ATOMIC_RELEASE);
    if (!m->gen || m->fd < 0) return;
    __atomic_store_n(&r->base, (uint64_t)(uintptr_t)m->base, __ATOMIC_RELAXED);
    __atomic_store_n(&r->len, (uint64_t)m->len, __ATOMIC_RELAXED);
    __atomic_store_n(&r->ino, m->ino, __ATOMIC_RELAXED);
    __atomic_store_n(&r->fd, (int64_t)m->fd, __ATOMIC_RELAXED);
    __atomic_store_n(&r->gen, m->gen, __ATOMIC_RELEASE);
}

void *tp_mem_alloc(tp_comm *c, size_t bytes)
{
    size_t len = ((bytes ? bytes : 1) + 4095) / 4096 * 4096;
    int fd = tp_shm_fault("memfd") ? -1 : memfd_create("ddprt-mem", MFD_CLOEXEC);
    struct stat st;
    void *p = NULL;
    if (fd >= 0 && ftruncate(fd, (off_t)len) == 0 && fstat(fd, &st) == 0) {
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) p = NULL;
    }
    if (p) madvise(p, len, MADV_HUGEPAGE); /* where shmem may use huge pages; else a no-op */
    port_mutex_lock(&c->mu);
    int i = 0;
    while (i < TP_MEM_MAX && c->mem[i].gen) i++;
    if (p && i < TP_MEM_MAX) {
        c->mem[i] = (tp_mem_region){p, len, fd, ++c->mem_gen, (uint64_t)st.st_ino};
        if (c->shm_state > 0) publish_region(c, i);
        port_mutex_unlock(&c->mu);
        return p;
    }
    if (p) munmap(p, len);
    if (fd >= 0) close(fd);
    /* Plain memory, remembered so that tp_mem_free knows it (or, with every slot
     * taken, a header-less posix_memalign block that tp_mem_free passes to free). */
    p = NULL;
    if (posix_memalign(&p, 4096, len)) p = NULL;
    if (p && i < TP_MEM_MAX) c->mem[i] = (tp_mem_region){p, len, -1, ++c->mem_gen, 0};
    port_mutex_unlock(&c->mu);
    return p;
}

void tp_mem_free(tp_comm *c, void *p)
{
    if (!p) return;
    port_mutex_lock(&c->mu);
    for (int i = 0; i < TP_MEM_MAX; i++) {
        tp_mem_region *m = &c->mem[i];
        if (!m->gen || m->base != p) continue;
        if (m->fd >= 0) {
            m->gen = 0;
            if (c->shm_state > 0) publish_region(c, i);
            munmap(m->base, m->len);
            close(m->fd);
        } else {
            free(m->base);
        }
        *m = (tp_mem_region){0};
        port_mutex_unlock(&c->mu);
        return;
    }
    port_mutex_unlock(&c->mu);
    free(p);
}

/* Whether [p, p + len) lies in one of this rank's shareable blocks. */
static int registered(tp_comm *c, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    int ok = 0;
    port_mutex_lock(&c->mu);
    for (int i = 0; i < TP_MEM_MAX && !ok; i++) {
        const tp_mem_region *m = &c->mem[i];
        ok = m->gen && m->fd >= 0 && a >= (uintptr_t)m->base && a + len <= (uintptr_t)m->base + m->len;
    }
    port_mutex_unlock(&c->mu);
    return ok;
}

/* Maps rank q's block (slot i, generation g) here; NULL when it cannot. */
static unsigned char *map_peer(tp_comm *c, int q, const tp_shm_region *r, uint64_t g)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%lld", c->shm->pid[q], (long long)r->fd);
    int fd = tp_shm_fault("map_open") ? -1 : open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    void *p = NULL;
    /* The inode check: a pid of another namespace, or an fd reused meanwhile. */
    if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_ino == r->ino && (uint64_t)st.st_size >= r->len)
        p = mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (p == MAP_FAILED || !p) {
        rt_debug("comm: cannot map rank %d's registered block %llu (%s): copying through the segment", q,
                 (unsigned long long)g, path);
        return NULL;
    }
    madvise(p, r->len, MADV_HUGEPAGE);
    return p;
}

/* Rank q's registered memory holding [a, a + len), mapped here; NULL when it is not
 * registered or cannot be mapped. */
static unsigned char *peer_ptr(tp_comm *c, int q, uint64_t a, size_t len)
{
    tp_shm *s = c->shm;
    for (int i = 0; i < TP_MEM_MAX; i++) {
        tp_shm_region *r = &s->seg->ctl[q].reg[i], v;
        uint64_t g = __atomic_load_n(&r->gen, __ATOMIC_ACQUIRE);
        if (!g) continue;
        /* Acquire loads: the second look at gen cannot pass them (a slot being
         * rewritten by another thread of the owner is not this op's). */
        v.base = __atomic_load_n(&r->base, __ATOMIC_ACQUIRE), v.len = __atomic_load_n(&r->len, __ATOMIC_ACQUIRE);
        v.ino = __atomic_load_n(&r->ino, __ATOMIC_ACQUIRE), v.fd = __atomic_load_n(&r->fd, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&r->gen, __ATOMIC_ACQUIRE) != g) continue;
        if (a < v.base || a + len > v.base + v.len) continue;
        tp_shm_pmap *pm = &s->pm[(size_t)q * TP_MEM_MAX + (size_t)i];
        if (pm->gen != g) {
            if (pm->local) munmap(pm->local, pm->len);
            pm->local = map_peer(c, q, &v, g);
            pm->len = v.len, pm->gen = g;
        }
        return pm->local ? pm->local + (a - v.base) : NULL;
    }
    return NULL;
}

int tp_shm_map_setup(tp_comm *c)
{
    tp_shm *s = c->shm;
    int w = c->world, rc;
    /* Rank 0's threshold and everyone's wish: all decide alike (the pids came with
     * tp_shm_cma_setup; without them no peer maps and the agree rounds say no). */
    int64_t mine[2] = {rt_env_flag(RT_ENV_SHM_MAP, 1), (int64_t)rt_env_num(RT_ENV_SHM_MAP_MIN, TP_SHM_MAP_MIN)};
    int64_t all[2 * TP_SHM_MAX_WORLD];
    if ((rc = tp_ring_allgather(c, mine, all, 2, RT_I64))) return rc;
    s->map = 1;
    for (int q = 0; q < w; q++) s->map &= all[2 * q] != 0;
    s->map_min = all[1] > 0 ? (size_t)all[1] : 1;
    s->pm = calloc((size_t)w * TP_MEM_MAX, sizeof *s->pm);
    if (posix_memalign((void **)&s->mtmp, 64, TP_SHM_STEP)) s->mtmp = NULL;
    /* Short of memory, this rank says no in every agree round (s->map stays as all
     * decided: the ranks must take the same first step). */
    port_mutex_lock(&c->mu);
    for (int i = 0; i < TP_MEM_MAX; i++) publish_region(c, i);
    port_mutex_unlock(&c->mu);
    return 0;
}

void tp_shm_map_free(tp_comm *c)
{
    tp_shm *s = c->shm;
    for (size_t i = 0; s->pm && i < (size_t)c->world * TP_MEM_MAX; i++)
        if (s->pm[i].local) munmap(s->pm[i].local, s->pm[i].len);
    free(s->pm);
    free(s->mtmp);
    s->pm = NULL, s->mtmp = NULL;
}

uint64_t tp_shm_map_ops(const tp_comm *c) { return c->shm_state > 0 ? c->shm->map_ops : 0; }

/* ---- allreduce and reduce-scatter ----------------------------------------------------- */

int tp_shm_map_run(tp_comm *c, tp_handle *h, const tp_shm_bufhdr *d)
{
    tp_shm *s = c->shm;
    int n = c->world, me = c->rank, rc;
    rt_dtype dt = (rt_dtype)h->dt;
    tp_op op = (tp_op)h->op;
    /* Reduce-scatter (ZeRO-1's buckets): block b of every rank's send reduced into rank
     * b's recv (count elements each); recv may be the rank's own block of send. */
    int rs = h->kind == TP_K_REDUCE_SCATTER;
    size_t es = rt_dtype_size(dt), count = h->count, bytes = count * es, sbytes = rs ? bytes * (size_t)n : bytes;
    if (!s->map || (h->kind != TP_K_ALLREDUCE && h->kind != TP_K_TREE && !rs) || sbytes < s->map_min)
        return 1; /* the same on every rank */
    const unsigned char *send = h->send;
    unsigned char *recv = h->recv;
    int own = rs && recv == send + (size_t)me * bytes;
    int mine = s->pm && s->mtmp && s->pid && registered(c, send, sbytes) && registered(c, recv, bytes) &&
               (send == recv || own || !tp_shm_overlap(send, sbytes, recv, bytes));
    tp_shm_bufhdr dm = *d;
    dm.kind |= TP_SHM_MAP_KIND;
    uint64_t st = s->step++, a[2] = {mine ? (uint64_t)(uintptr_t)send : 0, mine ? (uint64_t)(uintptr_t)recv : 0};
    memcpy(tp_shm_buf(s, me, st)->pad, a, sizeof a); /* send 0: not registered */
    if (me == 0) __atomic_store_n(&s->seg->claim, 0, __ATOMIC_RELAXED); /* published by the ready flag */
    if ((rc = tp_shm_publish(c, st, &dm))) return rc;
    const unsigned char *ps[TP_SHM_MAX_WORLD];
    unsigned char *pr[TP_SHM_MAX_WORLD];
    /* Some rank's buffers are not registered: every rank sees it in the same words,
     * so the copy protocol follows at once (this round is all it cost). */
    for (int q = 0; q < n; q++) {
        uint64_t sq;
        memcpy(&sq, tp_shm_buf(s, q, st)->pad, sizeof sq);
        if (!sq) return 1;
    }
    int ok = 1;
    for (int q = 0; q < n && ok; q++) {
        if (q == me) { ps[q] = send, pr[q] = recv; continue; }
        memcpy(a, tp_shm_buf(s, q, st)->pad, sizeof a);
        ps[q] = peer_ptr(c, q, a[0], sbytes);
        pr[q] = peer_ptr(c, q, a[1], bytes);
        ok = ps[q] && pr[q];
    }
    /* Agree: mapping can fail on one rank only. */
    tp_shm_post(s, me, &s->seg->ctl[me].agree, (st + 1) * 2 + (uint64_t)ok);
    if ((rc = tp_shm_wait_ctl(c, offsetof(tp_shm_ctl, agree), (st + 1) * 2))) return rc;
    for (int q = 0; q < n && ok; q++) ok = __atomic_load_n(&s->seg->ctl[q].agree, __ATOMIC_ACQUIRE) & 1;
    if (!ok) return 1;
    static int kills;
    if (tp_shm_fault("map_kill") && ++kills == 2) { /* test: die while the others use this rank's buffers */
        fprintf(stderr, "killed at %.6f\n", port_now_s());
        raise(SIGKILL);
    }

    size_t per = TP_SHM_MAP_CHUNK / es, nch = (count + per - 1) / per, nall = rs ? nch * (size_t)n : nch;
    const void *in[TP_SHM_MAX_WORLD];
    for (;;) {
        uint64_t k = __atomic_fetch_add(&s->seg->claim, 1, __ATOMIC_RELAXED);
        if (k >= nall) break;
        if (rs) { /* chunk k % nch of block k / nch: reduced into its owner's recv only */
            int b = (int)(k / nch);
            size_t base = (size_t)(k % nch) * per, m = count - base < per ? count - base : per;
            size_t off = base * es, soff = (size_t)b * bytes + off;
            for (int q = 0; q < n; q++) in[q] = ps[q] + soff;
            /* the owner's recv may be its send block: every input read before it is written */
            tp_shm_reduce(c, h->kind, s->mtmp, in, m, dt, op);
            tp_avg_finish(s->mtmp, m, dt, tp_op_div(h, n));
            memcpy(pr[b] + off, s->mtmp, m * es);
            continue;
        }
        size_t base = (size_t)k * per, m = count - base < per ? count - base : per, off = base * es;
        for (int q = 0; q < n; q++) in[q] = ps[q] + off;
        /* In place, the chain from rank 2 on would overwrite an input it reads later. */
        int tmp = send == recv && me >= 2;
        unsigned char *out = tmp ? s->mtmp : recv + off;
        tp_shm_reduce(c, h->kind, out, in, m, dt, op);
        tp_avg_finish(out, m, dt, tp_op_div(h, n));
        for (int i = 0; i < n; i++) { /* mine first when tmp, the next rank's first otherwise */
            int q = (me + i) % n;
            if (q != me || tmp) memcpy(pr[q] + off, out, m * es);
        }
    }
    s->map_ops++;
    /* Nobody returns (and lets its caller touch the buffers) while another may still
     * read or write them. */
    uint64_t dn = s->step++;
    tp_shm_post(s, me, &s->seg->ctl[me].done, dn + 1);
    return tp_shm_wait_ctl(c, offsetof(tp_shm_ctl, done), dn + 1);
}
