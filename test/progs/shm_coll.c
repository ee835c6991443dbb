/* One rank of a shared-memory collectives job (test/test_shm.c), tcp backend.
 * usage: t-shm_coll MODE INIT RANK WORLD [key=value...]
 *   MODE matrix: every collective x every dtype x every redop over tiny, odd and
 *        step-crossing sizes (in place and not), checked element by element, then
 *        rounded float sums and averages (1.2 MB) compared bit by bit across ranks and
 *        with the rank-order reference; prints "shm 1|0" (is a ddprt-shm segment
 *        mapped: /proc/self/maps), "cma 1|0" (single copy on) then "rank R of W ok (N
 *        checks)"; then tree allreduces checked against the tree written out.
 *   MODE ping: a barrier, "shm 1|0", "rank R of W ok (0 checks)".
 *   MODE pairs: matrix's checks without the bitwise comparison of reduce_scatter with
 *        allreduce (on several hosts the allreduce is hierarchical: another order).
 *   MODE kill: coll_matrix.h's allreduce loop (len=, victim=, iters=). With
 *        DDPRT_SHM_TEST_FAULT=cma_kill the library kills the rank inside its second
 *        single copy op instead, after publishing its buffers.
 *   MODE mismatch: rank 0 allreduces 1000 floats, the others 2000: prints "failed: MSG".
 * keys: timeout=S, len=, victim= (-2: nobody), iters=.
 * T_SHM_DENY_CMA=1: a seccomp filter refuses this rank process_vm_readv (EPERM), as
 * some container runtimes do. T_SHM_MEM=1: the buffers of matrix, bitwise and kill
 * come from tp_mem_alloc (registered: the ranks read and write each other's); matrix
 * and ping then also print "map N" (ops that ran on registered buffers) and "fds N"
 * (the blocks' memfds left open after they were freed). T_SHM_HOSTS=1,1,2,2: fake host
 * identities (tp_comm_opts.host_ids), so that one machine plays several hosts; matrix
 * then also sends 1 MiB + 4099 bytes to its partner on each fake host and prints "p2p ok"
 * and "p2p inboxes N" (the shm pairs' inboxes mapped). */
#include <stddef.h>
static void *balloc(size_t n);
static void bfree(void *p);
#define COLL_ALLOC balloc
#define COLL_FREE bfree
#include "test/progs/coll_matrix.h"
#include "apps/bench/bench_values.h"
#include "rt/hash.h"
#include "transport/tp_shm.h"
#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <math.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static void deny_cma(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof *f, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp");
        exit(2);
    }
}

/* Buffers for the collectives: registered (T_SHM_MEM=1) or malloc. */
static int reg_mem(void) { return getenv("T_SHM_MEM") != NULL; }
static void *balloc(size_t n) { return reg_mem() ? tp_mem_alloc(comm, n) : malloc(n); }
static void bfree(void *p)
{
    if (reg_mem()) tp_mem_free(comm, p);
    else free(p);
}

/* Open memfds of this process ("/memfd:ddprt-mem" links in /proc/self/fd). */
static int memfds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[300], to[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, to, sizeof to - 1);
        if (k > 0) to[k] = 0, n += strstr(to, "memfd:ddprt-mem") != NULL;
    }
    if (d) closedir(d);
    return n;
}

static const rt_dtype all_dt[] = {RT_F32, RT_F64, RT_F16, RT_BF16, RT_I32, RT_I64, RT_U8};

static void scheck(const char *what, rt_dtype dt, int op, size_t n, size_t i, double got, double want)
{
    if (got != want && bad++ < 5)
        fprintf(stderr, "rank %d: %s %s %s n=%zu: element %zu is %g, want %g\n", rank_, what, rt_dtype_names[dt],
                tp_op_names[op], n, i, got, want);
}

static void matrix(void)
{
    /* 4096 f32 = the one-round allreduce limit (16 KiB); 196613: several 256 KiB steps. */
    static const size_t sizes[] = {0, 1, 2, 3, 7, 63, 1027, 4096, 4097, 196613};
    size_t maxn = 196613 * (size_t)world_;
    unsigned char *s = balloc(maxn * 8 + 64), *r = balloc(maxn * 8 + 64);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        for (size_t d = 0; d < sizeof all_dt / sizeof *all_dt; d++) {
            rt_dtype dt = all_dt[d];
            size_t es = rt_dtype_size(dt);
            for (int op = 0; op < TP_NOPS; op++) {
                int inplace = (int)(k + d + (size_t)op) % 2;
                unsigned char *out = inplace ? s : r;
                for (size_t i = 0; i < n; i++) bench_put(s, i, dt, (double)bench_value(op, dt, rank_, i));
                if (!inplace) memset(r, 0x5a, n * es + 1);
                if (tp_allreduce(comm, s, out, n, dt, (tp_op)op)) die("allreduce");
                for (size_t i = 0; i < n; i++) scheck("allreduce", dt, op, n, i, bench_get(out, i, dt), bench_reduced(op, dt, world_, i));
                checks++;
                if (!inplace && ((unsigned char *)r)[n * es] != 0x5a && bad++ < 5)
                    fprintf(stderr, "rank %d: allreduce wrote past the end (n=%zu)\n", rank_, n);
                /* reduce_scatter: block rank_ of every rank's world_ * n vector, into r or
                 * (ZeRO-1's buckets) into the rank's own block of s. */
                for (size_t i = 0; i < n * (size_t)world_; i++) bench_put(s, i, dt, (double)bench_value(op, dt, rank_, i));
                unsigned char *rr = inplace ? s + (size_t)rank_ * n * es : r;
                if (tp_reduce_scatter(comm, s, rr, n, dt, (tp_op)op)) die("reduce_scatter");
                for (size_t i = 0; i < n; i++)
                    scheck("reduce_scatter", dt, op, n, i, bench_get(rr, i, dt), bench_reduced(op, dt, world_, (size_t)rank_ * n + i));
                checks++;
            }
            int root = (int)(k + d) % world_;
            for (size_t i = 0; i < n; i++) bench_put(r, i, dt, rank_ == root ? (double)bench_value(TP_SUM, dt, root, i) : 99);
            if (tp_broadcast(comm, r, n, dt, root)) die("broadcast");
            for (size_t i = 0; i < n; i++)
                scheck("broadcast", dt, 0, n, i, bench_get(r, i, dt), bench_as(dt, (double)bench_value(TP_SUM, dt, root, i)));
            checks++;
            /* allgather, from a separate buffer or from recv's own block */
            unsigned char *src = d % 2 ? r + (size_t)rank_ * n * es : s;
            for (size_t i = 0; i < n; i++) bench_put(src, i, dt, (double)bench_value(TP_SUM, dt, rank_, i));
            if (tp_allgather(comm, src, r, n, dt)) die("allgather");
            for (size_t i = 0; i < n * (size_t)world_; i++)
                scheck("allgather", dt, 0, n, i, bench_get(r, i, dt),
                       bench_as(dt, (double)bench_value(TP_SUM, dt, (int)(i / n), i % n)));
            checks++;
        }
        if (tp_barrier(comm)) die("barrier");
        checks++;
    }
    bfree(s), bfree(r);
}

/* Rounded float sums and averages of 1.2 MB (above the single copy threshold), in
 * place and not: the result must be the same bits on every rank, and a sum the
 * rank-order chain ((x0 + x1) + x2) ... that every shared memory path promises. */
static void bitwise(void)
{
    size_t n = 300007;
    float *s = balloc(n * 4), *r = balloc(n * 4), *want = malloc(n * 4);
    uint64_t h, *hs = malloc((size_t)world_ * 8);
    for (int k = 0; k < 4; k++) {
        tp_op op = k < 2 ? TP_SUM : TP_AVG;
        float *out = k % 2 ? s : r;
        for (size_t i = 0; i < n; i++) {
            float x0 = sinf((float)i * 0.37f) * 1000.0f;
            want[i] = x0;
            for (int q = 1; q < world_; q++) want[i] += sinf((float)i * 0.37f + (float)q) * 1000.0f / (float)(q + 2);
            s[i] = rank_ ? sinf((float)i * 0.37f + (float)rank_) * 1000.0f / (float)(rank_ + 2) : x0;
        }
        if (tp_allreduce(comm, s, out, n, RT_F32, op)) die("allreduce (bitwise)");
        h = rt_fnv1a(RT_FNV1A_INIT, out, n * 4);
        if (tp_allgather(comm, &h, hs, 1, RT_I64)) die("allgather (bitwise)");
        for (int q = 0; q < world_; q++)
            if (hs[q] != h && bad++ < 5) fprintf(stderr, "rank %d: allreduce %s result differs from rank %d's\n", rank_,
                                               tp_op_names[op], q);
        if (op == TP_SUM && tp_shm_mode(comm) && memcmp(out, want, n * 4) && bad++ < 5)
            fprintf(stderr, "rank %d: allreduce sum is not the rank-order chain\n", rank_);
        checks++;
        /* reduce_scatter in place (ZeRO-1): this rank's block has the allreduce's bits */
        size_t q = n / (size_t)world_;
        memcpy(want, out, n * 4);
        for (size_t i = 0; i < n; i++)
            s[i] = rank_ ? sinf((float)i * 0.37f + (float)rank_) * 1000.0f / (float)(rank_ + 2) : sinf((float)i * 0.37f) * 1000.0f;
        if (tp_reduce_scatter(comm, s, s + (size_t)rank_ * q, q, RT_F32, op)) die("reduce_scatter (bitwise)");
        if (memcmp(s + (size_t)rank_ * q, want + (size_t)rank_ * q, q * 4) && bad++ < 5)
            fprintf(stderr, "rank %d: reduce_scatter %s has other bits than the allreduce\n", rank_, tp_op_names[op]);
        checks++;
    }
    bfree(s), bfree(r), free(want), free(hs);
}

/* Tree allreduces (transport/tp_tree.c) over the tree of world's prime factors,
 * smallest first, on values whose sums round differently in every association: every
 * element must be the tree written out serially (tp_reduce's arithmetic), through
 * whichever path this job's settings take (copy protocol, registered buffers, or
 * sockets). */
static double wild(int r, size_t i)
{
    uint64_t h = (i * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)r * 0xbf58476d1ce4e5b9ull);
    h ^= h >> 29;
    return ((double)(h % 2001) - 1000.0) * ldexp(1.0, (int)((h >> 20) % 31) - 15) / 997.0;
}

static void tree_ref(const int *radix, int lev, int first, size_t i, rt_dtype dt, unsigned char *out)
{
    if (lev < 0) { bench_put(out, 0, dt, wild(first, i)); return; }
    int sub = 1;
    for (int l = 0; l < lev; l++) sub *= radix[l];
    unsigned char x[8];
    for (int k = 0; k < radix[lev]; k++) {
        tree_ref(radix, lev - 1, first + k * sub, i, dt, k ? x : out);
        if (k) tp_reduce(out, out, x, 1, dt, TP_SUM);
    }
}

static void tree(void)
{
    static const size_t sizes[] = {1, 63, 4097, 196613};
    static const rt_dtype dts[] = {RT_F32, RT_F64, RT_BF16};
    int radix[16], nl = 0;
    for (int w = world_, p = 2; w > 1;) {
        if (w % p) p++;
        else radix[nl++] = p, w /= p;
    }
    if (tp_set_tree(comm, radix, nl)) die("tp_set_tree");
    unsigned char *b = balloc(196613 * 8), want[8];
    for (size_t k = 0; k < 4; k++)
        for (int d = 0; d < 3; d++) {
            size_t n = sizes[k], es = rt_dtype_size(dts[d]);
            for (size_t i = 0; i < n; i++) bench_put(b, i, dts[d], wild(rank_, i));
            if (tp_tree_allreduce(comm, b, n, dts[d], TP_SUM)) die("tree allreduce");
            for (size_t i = 0; i < n; i++) {
                tree_ref(radix, nl - 1, 0, i, dts[d], want);
                if (memcmp(b + i * es, want, es) && bad++ < 5)
                    fprintf(stderr, "rank %d: tree allreduce %s n=%zu: element %zu is %g, the tree gives %g\n", rank_,
                            rt_dtype_names[dts[d]], n, i, bench_get(b, i, dts[d]), bench_get(want, 0, dts[d]));
            }
            checks++;
        }
    bfree(b);
}

/* Point-to-point with rank ^ 1 and rank ^ 2 (a fake host's partner and the other
 * host's): each sends its pattern (bigger than the shm ring's 1 MiB once) and checks the
 * partner's; the lower rank sends first. */
static void p2p(void)
{
    size_t n = (1u << 20) + 4099;
    unsigned char *out = malloc(n), *in = malloc(n);
    if (!out || !in) die("p2p alloc");
    for (int k = 1; k <= 2; k++) {
        int peer = rank_ ^ k;
        if (peer >= world_) continue;
        for (size_t i = 0; i < n; i++) out[i] = (unsigned char)(i * 7 + (size_t)rank_), in[i] = 0;
        int rc = rank_ < peer ? tp_send(comm, out, n, peer) || tp_recv(comm, in, n, peer)
                              : tp_recv(comm, in, n, peer) || tp_send(comm, out, n, peer);
        if (rc) die("p2p");
        for (size_t i = 0; i < n; i++)
            if (in[i] != (unsigned char)(i * 7 + (size_t)peer)) die("p2p data");
    }
    free(out), free(in);
    /* Rounding-heavy float sums over every algorithm the sizes pick (several hosts:
     * hierarchical), hashed: a job whose pairs take tcp must print the same. */
    static const size_t sizes[] = {1, 1000, 70001, (3u << 20) / 4 + 77};
    uint64_t h = RT_FNV1A_INIT;
    for (int k = 0; k < 4; k++) {
        float *v = malloc(sizes[k] * sizeof *v);
        if (!v) die("p2p alloc");
        for (size_t i = 0; i < sizes[k]; i++) v[i] = sinf((float)i * 0.37f + (float)rank_) * 1000.0f + 1.0f / (float)(i + 3);
        if (tp_allreduce(comm, v, v, sizes[k], RT_F32, TP_SUM)) die("p2p allreduce");
        h = rt_fnv1a(h, v, sizes[k] * sizeof *v);
        free(v);
    }
    printf("p2p ok\nsums %016llx\n", (unsigned long long)h);
}

/* Mappings of the shm pairs' inboxes (tp_link_shm.c's memfds) in this process. */
static int p2p_inboxes(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, "/memfd:ddprt-p2p") != NULL;
    if (f) fclose(f);
    return n;
}

/* Whether this process maps a shared segment (unlinked, so "(deleted)" in maps). */
static int shm_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) found |= strstr(line, "/ddprt-shm.") != NULL;
    if (f) fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    (void)coll_sizes; /* coll_matrix.h's matrix: t-tcp_coll's */
    coll_args a;
    if (coll_args_parse(&a, argc, argv, "t-shm_coll", 32u << 20)) return 2;
    rt_log_init();
    if (getenv("T_SHM_DENY_CMA")) deny_cma();
    tp_bootstrap bs;
    rt_rdzv *rz = coll_join(&a.o, &bs);
    if (!rz) return 3;
    char err[512];
    tp_backend *b;
    tp_comm_opts co = {.timeout_s = a.o.timeout_s, .algo = TP_ALGO_DEFAULT};
    static uint64_t hosts[64];
    const char *hs = getenv("T_SHM_HOSTS");
    for (int i = 0; hs && *hs && i < 64; i++, hs += *hs == ',') hosts[i] = strtoull(hs, (char **)&hs, 10);
    if (getenv("T_SHM_HOSTS")) co.host_ids = hosts;
    if (tp_tcp_create(&bs, &b, err, sizeof err) || tp_comm_create(&comm, b, &co, err, sizeof err)) {
        fprintf(stderr, "ERR %s\n", err);
        return 3;
    }
    int rc = 0;
    if (!strcmp(argv[1], "kill")) {
        rc = coll_loop(a.len, a.victim == -2 ? -1 : a.victim < 0 ? world_ - 1 : a.victim, a.iters, -1);
    } else if (!strcmp(argv[1], "mismatch")) {
        float *v = calloc(2000, sizeof *v);
        if (tp_barrier(comm)) die("barrier");
        rc = tp_allreduce(comm, v, v, rank_ ? 2000 : 1000, RT_F32, TP_SUM);
        printf("failed: %s\n", rc ? tp_errmsg(comm) : "no failure");
        free(v);
        rc = rc ? 3 : 4;
    } else {
        if (tp_barrier(comm)) die("barrier");
        printf("shm %d\ncma %d\n", shm_mapped(), tp_shm_mode(comm) == 2);
        if (!strcmp(argv[1], "pairs")) matrix(), tree();
        else if (strcmp(argv[1], "ping")) matrix(), bitwise(), tree();
        if (strcmp(argv[1], "ping") && co.host_ids) p2p(), printf("p2p inboxes %d\n", p2p_inboxes());
        if (reg_mem()) printf("map %llu\nfds %d\n", (unsigned long long)tp_shm_map_ops(comm), memfds());
    }
    return coll_leave(rz, rc);
}
