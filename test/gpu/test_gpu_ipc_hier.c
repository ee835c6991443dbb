/* The cuda_ipc path's hierarchical allreduce and its broadcast (transport/tp_ipc_hier.c),
 * as processes on one device (the executor's, or a GPU's).
 *
 * Hierarchical: a fake topology (tp_comm_opts.host_ids) of 2 hosts x 2 ranks, and 2 x 3
 * and 3 x 2 (where the order of the in-host and the cross-host sums shows: with two
 * operands a sum has one order), every rank's buffer at its own offset in its region,
 * sizes of 1 element, odd, more than one staging chunk, two of tp_hier's 4 MiB segments;
 * fp32 and bf16; sum and avg. The
 * result is bitwise the host's hierarchical allreduce (DDPRT_ALGO hier: tp_hier) of the
 * same data on the same comm. DDPRT_P2P=0 on one rank takes the staged path; a rank
 * killed in a hierarchical allreduce is named by its cross-host peer, and every survivor
 * fails naming a rank that hung up and exits within the deadline, its comm destroyed.
 * Broadcast: one host, 2 and 4 processes, several roots and sizes (fp32, and bytes as
 * DDP's buffers), every rank's buffer bitwise the root's. */
#include "test/gpu/g.h"
#include "test/gpu/gpu_procs.h"
#include "test/t_data.h"
#include "transport/tp_staged.h"
#include "rt/half.h"
#include "rt/log.h"
#include "rt/rdzv.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GH_REGION (2112u << 10) /* floats: 8 MiB and more, two of tp_hier's segments */
#define GH_CHUNK 4096u        /* staging chunk bytes: 3001 floats over 2 x 2 take 2 cross chunks each */

typedef struct gh_job {
    int world, bcast;
    const uint64_t *hosts; /* NULL: one host */
    int victim;            /* killed in its third allreduce (-1: none) */
} gh_job;

#define GH_SCRATCH (4u << 20) /* floats: the victim's slow device work */

static int gh_allreduces(tp_comm *c, tp_staging *st, float *region, port_stream compute, int rank, float *h,
                         float *ref, float *got, int victim)
{
    float *scratch = NULL;
    if (rank == victim && port_dev_malloc((void **)&scratch, GH_SCRATCH * 4, "scratch")) return 2;
    static const size_t sizes[] = {1, 7, 3001, 12345};
    for (int i = 0; i < 8; i++) {
        int bf = i >= 4 && i < 7;
        /* The last: 2^21 + 5 floats, two segments (each shard's columns span both). */
        size_t n = i == 7 ? (2u << 20) + 5 : sizes[bf ? i - 4 : i], es = bf ? 2 : 4;
        size_t off = 64 * (size_t)(rank + 1) + (size_t)i;
        tp_op op = i % 2 ? TP_AVG : TP_SUM;
        rt_dtype dt = bf ? RT_BF16 : RT_F32;
        uint16_t *h16 = (uint16_t *)h;
        for (size_t j = 0; j < n; j++) {
            float v = 2.0f * k_rand_uniform(3000 + 7 * (unsigned)rank + (unsigned)i, j) - 1.0f;
            if (bf) h16[j] = rt_f32_to_bf16(v);
            else h[j] = v;
        }
        void *d = (unsigned char *)region + off * es;
        if (rank == victim && i == 2) {
            /* Device work queued before the op, then the op, then death (as test_gpu_ipc's
             * victim): its local peer's reduce waits on it, the others on the wire. */
            for (int k = 0; k < 100; k++) k_cuda_relu_fwd(GH_SCRATCH, scratch, scratch, compute);
            tp_handle hd;
            tp_iallreduce_device(c, d, n, dt, op, st, &hd);
            struct timespec ts = {1, 0};
            nanosleep(&ts, NULL);
            raise(SIGKILL);
        }
        if (port_memcpy_h2d(d, h, n * es, compute, "in") || port_stream_sync(compute, "in") ||
            tp_allreduce_device(c, d, n, dt, op, st) || port_memcpy_d2h(got, d, n * es, compute, "out") ||
            port_stream_sync(compute, "out") || tp_allreduce(c, h, ref, n, dt, op))
            return printf("rank %d: allreduce of %zu failed: %s [%s]\n", rank, n, tp_errmsg(c), tp_staging_errmsg(st)),
                   3;
        size_t nd = g_ndiff(got, ref, n, es);
        printf("rank %d: %zu elements %s (%s): %zu differ\n", rank, n, rt_dtype_names[dt], op == TP_AVG ? "avg" : "sum",
               nd);
        if (nd) return 1;
    }
    return 0;
}

static int gh_broadcasts(tp_comm *c, tp_staging *st, float *region, port_stream compute, int rank, int world,
                         float *h, float *got)
{
    static const size_t sizes[] = {1, 1001, 12345, 7};
    int roots[3] = {0, 1, world - 1};
    for (int i = 0; i < 12; i++) {
        int root = roots[i % 3], bytes = i >= 9;
        size_t n = sizes[i / 3], es = bytes ? 1 : 4, off = 32 * (size_t)(rank + 1) + (size_t)i;
        rt_dtype dt = bytes ? RT_U8 : RT_F32;
        /* The root's data; the others start from their own (different) values. */
        for (size_t j = 0; j < n; j++) h[j] = k_rand_uniform(4000 + (unsigned)i, j);
        if (rank != root)
            for (size_t j = 0; j < n; j++) got[j] = -k_rand_uniform(5000 + (unsigned)rank, j);
        void *d = region + off;
        if (port_memcpy_h2d(d, rank == root ? h : got, n * es, compute, "in") || port_stream_sync(compute, "in") ||
            tp_broadcast_device(c, d, n, dt, root, st) || port_memcpy_d2h(got, d, n * es, compute, "out") ||
            port_stream_sync(compute, "out"))
            return printf("rank %d: broadcast of %zu failed: %s [%s]\n", rank, n, tp_errmsg(c), tp_staging_errmsg(st)),
                   3;
        size_t nd = g_ndiff(got, h, n, es);
        printf("rank %d: broadcast %zu %s from %d: %zu differ\n", rank, n, rt_dtype_names[dt], root, nd);
        if (nd) return 1;
    }
    return 0;
}

/* One rank: 0 all matched, 1 a mismatch, 2 a setup failure, 3 a collective failed. */
static int gh_rank(const char *dir, int rank, const gh_job *j)
{
    char init[600], err[512];
    snprintf(init, sizeof init, "file://%s/rdzv", dir);
    rt_log_init();
    rt_log_set_rank(rank);
    rt_rdzv_opts o = {init, rank, j->world, -1, 30, NULL, 0};
    rt_rdzv *rz;
    tp_bootstrap bs;
    tp_backend *b;
    tp_comm *c;
    tp_comm_opts co = {.timeout_s = 30, .algo = TP_ALGO_HIER, .host_ids = j->hosts};
    if (rt_rdzv_open(&rz, &o, err, sizeof err)) return printf("rank %d: rendezvous: %s\n", rank, err), 2;
    tp_bootstrap_rdzv(&bs, rz);
    if (tp_tcp_create(&bs, &b, err, sizeof err) || tp_comm_create(&c, b, &co, err, sizeof err))
        return printf("rank %d: comm: %s\n", rank, err), 2;
    if (port_cuda_init(0, err, sizeof err)) return printf("rank %d: %s\n", rank, err), 2;
    float *region, *h = malloc(GH_REGION * 4), *ref = malloc(GH_REGION * 4), *got = malloc(GH_REGION * 4);
    port_stream compute;
    void *pinned;
    tp_dev_cuda dc;
    tp_staging st;
    if (port_dev_malloc((void **)&region, GH_REGION * 4, "region") || port_stream_create(&compute, "compute") ||
        tp_dev_cuda_init(&dc, 0, compute, 4) || port_pinned_malloc(&pinned, tp_staging_bytes(GH_CHUNK, 4), "pin") ||
        tp_staging_init(&st, &tp_dev_cuda_ops, &dc, pinned, GH_CHUNK, 4))
        return printf("rank %d: setup: %s\n", rank, port_cuda_errmsg()), 2;
    int rc = tp_staging_ipc(c, &st, 0, region, GH_REGION * 4, compute);
    printf("rank %d: path %s (rc %d)\n", rank, tp_staging_path(&st), rc);
    if (rc) return 2;
    rc = j->bcast ? gh_broadcasts(c, &st, region, compute, rank, j->world, h, got)
                  : gh_allreduces(c, &st, region, compute, rank, h, ref, got, j->victim);
    printf("rank %d: %llu device ops over cuda_ipc\n", rank, (unsigned long long)st.ipc_ops);
    tp_dev_cuda_destroy(&dc);
    tp_comm_destroy(c); /* closes the IPC handles: must not hang on a dead peer's events */
    printf("rank %d: comm destroyed\n", rank);
    rt_rdzv_close(rz);
    port_pinned_free(pinned);
    port_dev_free(region);
    free(h), free(ref), free(got);
    return rc;
}

static int gh_body(const char *dir, int rank, int world, const void *j)
{
    (void)world;
    return gh_rank(dir, rank, j);
}

/* Runs the job's ranks as processes (gpu_procs.h: env in rank env_rank only, outputs in
 * out, exit statuses in rcs, killed at 120 s). */
static void gh_world(const char *tag, const gh_job *j, const char *env, int env_rank, char *out, size_t n, int *rcs)
{
    g_run_ranks(gh_body, j, tag, j->world, env, env_rank, 120, out, n, rcs);
}

TEST(gpu_ipc_hier_allreduce_matches_host_hier)
{
    static char out[1 << 17];
    static const uint64_t h22[] = {7, 9, 7, 9}, h23[] = {7, 7, 9, 7, 9, 9}, h32[] = {5, 7, 9, 5, 7, 9};
    static const gh_job jobs[] = {{4, 0, h22, -1}, {6, 0, h23, -1}, {6, 0, h32, -1}};
    static const char *const shape[] = {"2 hosts x 2 ranks", "2 hosts x 3 ranks", "3 hosts x 2 ranks"};
    int rcs[8];
    if (g_ipc_skip()) return;
    for (int i = 0; i < 3; i++) {
        const gh_job *j = &jobs[i];
        gh_world(i == 0 ? "gh22" : i == 1 ? "gh23" : "gh32", j, NULL, -1, out, sizeof out, rcs);
        for (int r = 0; r < j->world; r++) CHECKF(rcs[r] == 0, "%s rank %d: exit %d\n%s", shape[i], r, rcs[r], out);
        char want[160];
        snprintf(want, sizeof want, "hierarchical: cuda_ipc inside each host, staged across hosts (%s;", shape[i]);
        CHECKF(strstr(out, want) && strstr(out, "rank 0: path cuda_ipc+staged") &&
               strstr(out, "rank 1: 12345 elements float (avg): 0 differ") &&
               strstr(out, "rank 3: 3001 elements bfloat16 (sum): 0 differ") &&
               strstr(out, "rank 2: 1 elements bfloat16 (sum): 0 differ") &&
               strstr(out, "rank 3: 7 elements bfloat16 (avg): 0 differ") &&
               strstr(out, "rank 2: 2097157 elements float (avg): 0 differ") &&
               strstr(out, "rank 1: 8 device ops over cuda_ipc"),
               "%s:\n%s", shape[i], out);
    }
}

TEST(gpu_ipc_hier_p2p_0_takes_the_staged_path)
{
    static char out[1 << 17];
    static const uint64_t h22[] = {7, 9, 7, 9};
    const gh_job j = {4, 0, h22, -1};
    int rcs[4];
    if (g_ipc_skip()) return;
    gh_world("ghp2p", &j, "DDPRT_P2P=0", 2, out, sizeof out, rcs);
    for (int r = 0; r < 4; r++) CHECKF(rcs[r] == 0, "rank %d: exit %d\n%s", r, rcs[r], out);
    CHECKF(strstr(out, "rank 0: path staged") && strstr(out, "rank 3: path staged") &&
           strstr(out, "device collectives take the pinned staging (rank 0 <-> 2: DDPRT_P2P=0 on rank 2)") &&
           strstr(out, "rank 1: 12345 elements float (avg): 0 differ") &&
           strstr(out, "rank 0: 0 device ops over cuda_ipc"),
           "%s", out);
}

TEST(gpu_ipc_broadcast_2_and_4_processes)
{
    static char out[1 << 17];
    int rcs[4];
    if (g_ipc_skip()) return;
    for (int world = 2; world <= 4; world += 2) {
        const gh_job j = {world, 1, NULL, -1};
        gh_world(world == 2 ? "ghb2" : "ghb4", &j, NULL, -1, out, sizeof out, rcs);
        for (int r = 0; r < world; r++) CHECKF(rcs[r] == 0, "world %d rank %d: exit %d\n%s", world, r, rcs[r], out);
        char last[80];
        snprintf(last, sizeof last, "rank %d: broadcast 7 uint8 from %d: 0 differ", world - 1, world - 1);
        CHECKF(strstr(out, "rank 0: path cuda_ipc") && strstr(out, "rank 1: broadcast 12345 float from 0: 0 differ") &&
               strstr(out, "rank 0: broadcast 1001 float from 1: 0 differ") && strstr(out, last) &&
               strstr(out, "rank 1: 12 device ops over cuda_ipc"),
               "world %d:\n%s", world, out);
    }
}

TEST(gpu_ipc_hier_killed_rank_is_named)
{
    static char out[1 << 17];
    static const uint64_t h22[] = {7, 9, 7, 9};
    const gh_job j = {4, 0, h22, 3};
    int rcs[4];
    if (g_ipc_skip()) return; /* the staged path's rings would name whichever neighbour gave up first */
    gh_world("ghkill", &j, NULL, -1, out, sizeof out, rcs);
    CHECKF(rcs[3] == 128 + SIGKILL, "the victim: exit %d\n%s", rcs[3], out);
    for (int r = 0; r < 3; r++) {
        char want[64], done[64];
        snprintf(want, sizeof want, "rank %d: allreduce of 3001 failed: ", r);
        snprintf(done, sizeof done, "rank %d: comm destroyed", r);
        const char *p = strstr(out, want), *e = p ? strchr(p, '\n') : NULL, *q = p ? strstr(p, "rank 3") : NULL;
        const char *cl = p ? strstr(p, " closed the connection") : NULL;
        /* Its cross-host peer (2: on the wire with it) names it; the others name a rank
         * that hung up (its local peer 1 waits on its device work and prefers the local
         * rank, but names another if that one's close comes later than its grace). */
        CHECKF(rcs[r] == 3 && p && (r != 2 || (q && q < e)) && cl && cl < e &&
                   strstr(out, done),
               "rank %d: exit %d\n%s", r, rcs[r], out);
    }
}
