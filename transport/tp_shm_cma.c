/* Shared memory, single copy (protocol in tp_shm.h): from cma_min bytes on, ranks read
 * each other's user buffers with process_vm_readv (Linux cross-memory attach, as Open
 * MPI's vader does) instead of copying through the segment. A 16 MiB allreduce of 2
 * ranks then moves per rank 24 MiB read and 16 MiB written instead of about 40 and 32,
 * in 3 rounds instead of 2 per 128 KiB step. Opt-in (DDPRT_SHM_CMA=1; see env_cma):
 * where a system call is dear, the kernel's copy loses to the copy protocol's memcpy.
 *
 * Only reads: a rank writes nothing but its own memory, so a peer that failed and
 * returned from the op early (its buffers freed) is never written into.
 *
 * allreduce: rank r reduces share r (rank order, chunk by chunk: the peers' operands
 *   land in two small cache-resident buffers) into its recv; round `red`; it reads
 *   every other share from its owner's recv; round `done`. In place (send == recv) is
 *   safe: in the first phase rank r writes only share r of its buffer and the peers
 *   read only their own shares of it; after `red` nobody reads send any more.
 * reduce_scatter: rank r reduces block r reading the peers' send; round `done`.
 * allgather: every rank reads every other's send into its recv; round `done`.
 * broadcast: the others read the root's buffer; round `done`. */
#include "transport/tp_shm.h"
#include "rt/env.h"
#include "transport/tp_reduce.h"
#include "rt/log.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#define PROBE_MAGIC 0x646470726f626521ull

/* Off unless DDPRT_SHM_CMA=1: measured slower than the copy protocol at every size on
 * the machine this was built on (a VM with page-table isolation: a process_vm_readv
 * call costs about 5 us, and it copies at 6 GB/s against memcpy's 37), and the copy
 * protocol needs no ptrace permission. */
static int env_cma(void)
{
    return rt_env_flag(RT_ENV_SHM_CMA, 0);
}

static int64_t env_cma_min(void)
{
    return (int64_t)rt_env_num(RT_ENV_SHM_CMA_MIN, TP_SHM_CMA_MIN);
}

/* Yama (ptrace_scope 1) lets a process read only its descendants: the ranks are
 * siblings, so allow any process of this user, as Open MPI does. */
static void allow_readers(void)
{
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;
    if (!f) return;
    if (fscanf(f, "%d", &scope) != 1) scope = 0;
    fclose(f);
#ifdef PR_SET_PTRACER
    if (scope == 1) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

static int readv_from(pid_t pid, void *dst, uint64_t src, size_t len)
{
    struct iovec l = {dst, len}, r = {(void *)(uintptr_t)src, len};
    ssize_t k = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (k == (ssize_t)len) return 0;
    if (k >= 0) errno = EFAULT;
    return -1;
}

int tp_shm_cma_setup(tp_comm *c)
{
    tp_shm *s = c->shm;
    int w = c->world, rc, want = env_cma();
    if (want) allow_readers(); /* ptrace permission only where single copy is asked for */
    s->probe = PROBE_MAGIC ^ (uint64_t)getpid();
    /* Every rank's pid, probe word, wish and threshold: all decide alike (rank 0's
     * threshold, so that every rank picks the same protocol for an op). */
    int64_t mine[4] = {getpid(), (int64_t)(uintptr_t)&s->probe, want, env_cma_min()};
    int64_t *all = calloc(4 * (size_t)w, sizeof *all);
    unsigned char ok, *oks = calloc((size_t)w, 1);
    s->pid = calloc((size_t)w, sizeof *s->pid);
    if (want && posix_memalign((void **)&s->tmp, 64, 2 * TP_SHM_CMA_CHUNK)) s->tmp = NULL;
    ok = all && oks && s->pid && (!want || s->tmp);
    /* The allgather has a fixed size: a rank short of memory still takes part. */
    int64_t dummy[4 * TP_SHM_MAX_WORLD];
    rc = tp_ring_allgather(c, mine, all ? all : dummy, 4, RT_I64);
    for (int q = 0; !rc && all && s->pid && q < w; q++) s->pid[q] = (int)all[4 * q]; /* registered buffers too */
    for (int q = 0; !rc && ok && q < w; q++) {
        ok = all[4 * q + 2] != 0;
        if (q == c->rank || !ok) continue;
        /* Seccomp in containers, a ptrace policy: any failure keeps the copy protocol. */
        uint64_t v = 0;
        ok = readv_from(s->pid[q], &v, (uint64_t)all[4 * q + 1], sizeof v) == 0 &&
             v == (PROBE_MAGIC ^ (uint64_t)s->pid[q]) && !tp_shm_fault("cma_probe");
    }
    unsigned char dummy8[TP_SHM_MAX_WORLD];
    if (!rc) rc = tp_ring_allgather(c, &ok, oks ? oks : dummy8, 1, RT_U8);
    int use = !rc && oks && all;
    for (int q = 0; use && q < w; q++) use = oks[q];
    s->cma = use;
    s->cma_min = all && all[3] > 0 ? (size_t)all[3] : 0;
    free(all);
    free(oks);
    if (c->rank == 0 && !rc && want)
        rt_debug("comm: shared memory single copy %s", use ? "on" : "off (a rank cannot read another's memory)");
    return rc;
}

/* len bytes of rank q's memory at src into dst; 0 or the op's failure naming q. */
static int rd(tp_comm *c, int q, void *dst, uint64_t src, size_t len, const char *what)
{
    if (!len || !readv_from(c->shm->pid[q], dst, src, len)) return 0;
    int e = errno;
    /* A rank that failed first may have returned (freed its buffers, or exited after
     * naming a dead peer): its reason, which names the rank that failed first. */
    int rc = tp_shm_others_failed(c);
    if (rc) return rc;
    if (e == ESRCH)
        return tp_shm_fail(c, TP_ECLOSED, "rank %d exited during the op (its memory is gone: %s)", q, strerror(e));
    return tp_shm_fail(c, TP_EIO, "cannot read rank %d's %s (%zu bytes at %#llx): %s", q, what, len,
                       (unsigned long long)src, strerror(e));
}

typedef struct cma_op {
    tp_comm *c;
    tp_shm *s;
    int n, me;
    uint64_t st;
    uint64_t send[TP_SHM_MAX_WORLD], recv[TP_SHM_MAX_WORLD]; /* every rank's addresses */
} cma_op;

/* Publishes this rank's addresses with the descriptor and learns everyone's. */
static int start(cma_op *x, tp_comm *c, const tp_shm_bufhdr *d, const void *send, const void *recv)
{
    x->c = c, x->s = c->shm, x->n = c->world, x->me = c->rank;
    x->st = x->s->step++;
    uint64_t a[2] = {(uint64_t)(uintptr_t)send, (uint64_t)(uintptr_t)recv};
    memcpy(tp_shm_buf(x->s, x->me, x->st)->pad, a, sizeof a);
    int rc = tp_shm_publish(c, x->st, d);
    if (rc) return rc;
    static int ops;
    if (tp_shm_fault("cma_kill") && ++ops == 2) { /* test: die while the others read this rank */
        fprintf(stderr, "killed at %.6f\n", port_now_s());
        raise(SIGKILL);
    }
    for (int q = 0; q < x->n; q++) {
        memcpy(a, tp_shm_buf(x->s, q, x->st)->pad, sizeof a);
        x->send[q] = a[0], x->recv[q] = a[1];
    }
    return 0;
}

/* A round on the control word at off (red or done) for this op's step. */
static int round_on(cma_op *x, size_t off)
{
    uint64_t *w = (uint64_t *)((char *)&x->s->seg->ctl[x->me] + off);
    tp_shm_post(x->s, x->me, w, x->st + 1);
    return tp_shm_wait_ctl(x->c, off, x->st + 1);
}

/* dst = rank 0's op rank 1's op ... (m elements at byte offset roff of every rank's
 * send; this rank's own operand is mine), left to right as the copy protocol does, a
 * chunk at a time: bitwise equal to it and on every rank. dst may be mine. */
static int reduce_remote(cma_op *x, unsigned char *dst, const unsigned char *mine, size_t roff, size_t m,
                         rt_dtype dt, tp_op op)
{
    size_t es = rt_dtype_size(dt), ce = TP_SHM_CMA_CHUNK / es;
    unsigned char *ta = x->s->tmp, *tb = ta + TP_SHM_CMA_CHUNK;
    for (size_t off = 0; off < m; off += ce) {
        size_t k = m - off < ce ? m - off : ce, b0 = off * es, bytes = k * es;
        const unsigned char *a = mine + b0;
        int rc;
        if (x->me && (rc = rd(x->c, 0, ta, x->send[0] + roff + b0, bytes, "send buffer"))) return rc;
        if (x->me) a = ta;
        for (int q = 1; q < x->n; q++) {
            const unsigned char *b = mine + b0;
            if (q != x->me) {
                if ((rc = rd(x->c, q, tb, x->send[q] + roff + b0, bytes, "send buffer"))) return rc;
                b = tb;
            }
            unsigned char *d = q == x->n - 1 ? dst + b0 : ta;
            tp_reduce(d, a, b, k, dt, op);
            a = ta;
        }
        if (op == TP_AVG) tp_avg_finish(dst + b0, k, dt, x->n);
    }
    return 0;
}

int tp_shm_cma_run(tp_comm *c, tp_handle *h, const tp_shm_bufhdr *d)
{
    tp_shm *s = c->shm;
    int n = c->world, me = c->rank, rc;
    size_t es = rt_dtype_size((rt_dtype)h->dt), bytes = h->count * es;
    const unsigned char *send = h->send;
    unsigned char *recv = h->recv;
    rt_dtype dt = (rt_dtype)h->dt;
    tp_op op = (tp_op)h->op;
    cma_op x;
    /* The descriptor says single copy: should another rank take the copy protocol for
     * this op (buffers that overlap there as this one cannot take), both name it. */
    tp_shm_bufhdr dc = *d;
    dc.kind |= TP_SHM_CMA_KIND;
    d = &dc;
    /* Buffers that overlap only as the protocol allows (else the copy protocol). */
    switch (h->kind) {
    case TP_K_ALLREDUCE:
        if (bytes < s->cma_min || (send != recv && tp_shm_overlap(send, bytes, recv, bytes))) return 1;
        if ((rc = start(&x, c, d, send, recv))) return rc;
        {
            size_t lo = tp_shm_cut(h->count, n, me, es), hi = tp_shm_cut(h->count, n, me + 1, es);
            if ((rc = reduce_remote(&x, recv + lo * es, send + lo * es, lo * es, hi - lo, dt, op))) return rc;
        }
        if ((rc = round_on(&x, offsetof(tp_shm_ctl, red)))) return rc;
        for (int i = 1; i < n; i++) { /* start at the next rank: not everyone at rank 0 at once */
            int q = (me + i) % n;
            size_t lo = tp_shm_cut(h->count, n, q, es), hi = tp_shm_cut(h->count, n, q + 1, es);
            if ((rc = rd(c, q, recv + lo * es, x.recv[q] + lo * es, (hi - lo) * es, "result"))) return rc;
        }
        break;
    case TP_K_REDUCE_SCATTER: {
        const unsigned char *mine = send + (size_t)me * bytes;
        if (bytes * (size_t)n < s->cma_min || (recv != mine && tp_shm_overlap(send, bytes * (size_t)n, recv, bytes)))
            return 1;
        if ((rc = start(&x, c, d, send, recv))) return rc;
        if ((rc = reduce_remote(&x, recv, mine, (size_t)me * bytes, h->count, dt, op))) return rc;
        break;
    }
    case TP_K_ALLGATHER: {
        unsigned char *own = recv + (size_t)me * bytes;
        if (bytes * (size_t)n < s->cma_min || (send != own && tp_shm_overlap(send, bytes, recv, bytes * (size_t)n)))
            return 1;
        if ((rc = start(&x, c, d, send, recv))) return rc;
        if (send != own) memcpy(own, send, bytes);
        for (int i = 1; i < n; i++) {
            int q = (me + i) % n;
            if ((rc = rd(c, q, recv + (size_t)q * bytes, x.send[q], bytes, "send buffer"))) return rc;
        }
        break;
    }
    case TP_K_BROADCAST:
        if (bytes < s->cma_min) return 1;
        if ((rc = start(&x, c, d, recv, recv))) return rc;
        if (me != h->root && (rc = rd(c, h->root, recv, x.recv[h->root], bytes, "buffer"))) return rc;
        break;
    default: return 1;
    }
    /* Nobody returns (and lets its caller touch the buffers) while another reads them. */
    return round_on(&x, offsetof(tp_shm_ctl, done));
}
