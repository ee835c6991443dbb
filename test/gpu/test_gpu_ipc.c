/* The cuda_ipc device allreduce (transport/tp_ipc.c): 2 and 4 processes on one device
 * (the executor's, or a GPU's: CUDA allows IPC within a device), every rank's buffer
 * inside its registered region at its own offset, sizes of 1 element, odd sizes, more
 * than one chunk and more than TP_IPC_NCH chunks; the result bitwise equal to the host
 * allreduce of the same data on the same comm (one host: the shared-memory chain, rank
 * order). DDPRT_P2P=0 on one rank takes the staged path (the device plan's log line);
 * a rank killed during a device allreduce is named by the others, which exit non-zero
 * within the deadline (their comm's IPC handles closed by tp_comm_destroy). */
#include "test/gpu/g.h"
#include "test/gpu/gpu_models.h"
#include "test/gpu/gpu_procs.h"
#include "test/t_data.h"
#include "nn/ddp.h"
#include "nn/graph_cuda.h"
#include "transport/tp_reduce.h"
#include "transport/tp_staged.h"
#include "rt/half.h"
#include "rt/log.h"
#include "rt/rdzv.h"
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GI_REGION (64u << 10) /* floats */
#define GI_CHUNK 4096u        /* staging chunk bytes: 1024 floats, so 3001 elements take 3 chunks */
#define GI_SCRATCH (4u << 20) /* floats: the victim's slow device work */

/* A rank's comm (file rendezvous in dir, 30 s deadlines) and its device; 0, or 2 with
 * the reason printed. */
static int gi_comm(const char *dir, int rank, int world, rt_rdzv **rz, tp_comm **c)
{
    char init[600], err[512];
    snprintf(init, sizeof init, "file://%s/rdzv", dir);
    rt_log_init();
    rt_log_set_rank(rank);
    rt_rdzv_opts o = {init, rank, world, -1, 30, NULL, 0};
    tp_bootstrap bs;
    tp_backend *b;
    tp_comm_opts co = {.timeout_s = 30, .algo = TP_ALGO_DEFAULT};
    if (rt_rdzv_open(rz, &o, err, sizeof err)) return printf("rank %d: rendezvous: %s\n", rank, err), 2;
    tp_bootstrap_rdzv(&bs, *rz);
    if (tp_tcp_create(&bs, &b, err, sizeof err) || tp_comm_create(c, b, &co, err, sizeof err))
        return printf("rank %d: comm: %s\n", rank, err), 2;
    if (port_cuda_init(0, err, sizeof err)) return printf("rank %d: %s\n", rank, err), 2;
    return 0;
}

/* One rank: 0 all sizes matched, 1 a mismatch, 2 a setup failure, 3 an allreduce failed. */
static int gi_rank(const char *dir, int rank, int world, int victim)
{
    rt_rdzv *rz;
    tp_comm *c;
    if (gi_comm(dir, rank, world, &rz, &c)) return 2;
    float *region, *scratch = NULL, *h = malloc(GI_REGION * 4), *ref = malloc(GI_REGION * 4), *got = malloc(GI_REGION * 4);
    port_stream compute;
    void *pinned;
    tp_dev_cuda dc;
    tp_staging st;
    if (port_dev_malloc((void **)&region, GI_REGION * 4, "region") || port_stream_create(&compute, "compute") ||
        tp_dev_cuda_init(&dc, 0, compute, 4) || port_pinned_malloc(&pinned, tp_staging_bytes(GI_CHUNK, 4), "pin") ||
        tp_staging_init(&st, &tp_dev_cuda_ops, &dc, pinned, GI_CHUNK, 4))
        return printf("rank %d: setup: %s\n", rank, port_cuda_errmsg()), 2;
    if (rank == victim && port_dev_malloc((void **)&scratch, GI_SCRATCH * 4, "scratch"))
        return printf("rank %d: setup: %s\n", rank, port_cuda_errmsg()), 2;
    int rc = tp_staging_ipc(c, &st, 0, region, GI_REGION * 4, compute);
    printf("rank %d: path %s (rc %d)\n", rank, tp_staging_path(&st), rc);
    if (rc) return 2;
    static const size_t sizes[] = {1, 7, 1000, 3001, 12345};
    int bad = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes && !bad; i++) {
        size_t n = sizes[i], off = 64 * (size_t)(rank + 1) + i; /* each rank its own offset */
        tp_op op = i % 2 ? TP_AVG : TP_SUM;
        for (size_t j = 0; j < n; j++) h[j] = 2.0f * k_rand_uniform(1000 + 7 * (unsigned)rank + (unsigned)i, j) - 1.0f;
        if (port_memcpy_h2d(region + off, h, n * 4, compute, "in") || port_stream_sync(compute, "in"))
            return printf("rank %d: upload: %s\n", rank, port_cuda_errmsg()), 2;
        if (rank == victim) {
            /* Device work queued before the op (on the executor it outlasts this process:
             * its input is never ready, the peers' reduce waits on it, and their host
             * waits name this rank; on a GPU it is done sooner and the peers name it in
             * a later op); the comm thread runs the op while this rank dies. */
            for (int k = 0; k < 100; k++) k_cuda_relu_fwd(GI_SCRATCH, scratch, scratch, compute);
            tp_handle hd;
            tp_iallreduce_device(c, region + off, n, RT_F32, op, &st, &hd);
            struct timespec ts = {1, 0};
            nanosleep(&ts, NULL);
            raise(SIGKILL);
        }
        int dev = 1;
        if (!(rc = tp_allreduce_device(c, region + off, n, RT_F32, op, &st))) {
            dev = 0;
            if (port_memcpy_d2h(got, region + off, n * 4, compute, "out") || port_stream_sync(compute, "out"))
                return printf("rank %d: download: %s\n", rank, port_cuda_errmsg()), 2;
            rc = tp_allreduce(c, h, ref, n, RT_F32, op);
        }
        if (rc) {
            printf("rank %d: allreduce failed (%s, %zu elements): %s [%s]\n", rank, dev ? "device" : "host", n,
                   tp_errmsg(c), tp_staging_errmsg(&st));
            tp_comm_destroy(c); /* closes the IPC handles: must not hang on the dead peer's events */
            printf("rank %d: comm destroyed\n", rank);
            return 3;
        }
        size_t nd = g_ndiff(got, ref, n, 4);
        printf("rank %d: %zu elements (%s): %zu differ\n", rank, n, op == TP_AVG ? "avg" : "sum", nd);
        bad |= nd != 0;
    }
    /* 16-bit buffers (DDP's --grad-compress buckets): reduced in f32, rounded after every
     * step, as the host. */
    static const rt_dtype hdt[] = {RT_BF16, RT_F16};
    uint16_t *h16 = (uint16_t *)h, *r16 = (uint16_t *)ref, *g16 = (uint16_t *)got, *d16 = (uint16_t *)region;
    for (int i = 0; i < 4 && !bad; i++) {
        size_t n = i % 2 ? 1 : 3001, off = 256 + 2 * (size_t)rank;
        rt_dtype dt = hdt[i / 2];
        tp_op op = i % 2 ? TP_SUM : TP_AVG;
        for (size_t j = 0; j < n; j++) {
            float v = 4.0f * k_rand_uniform(2000 + 3 * (unsigned)rank + (unsigned)i, j) - 2.0f;
            h16[j] = dt == RT_BF16 ? rt_f32_to_bf16(v) : rt_f32_to_f16(v);
        }
        if (port_memcpy_h2d(d16 + off, h16, n * 2, compute, "in") || port_stream_sync(compute, "in") ||
            tp_allreduce_device(c, d16 + off, n, dt, op, &st) ||
            port_memcpy_d2h(g16, d16 + off, n * 2, compute, "out") || port_stream_sync(compute, "out") ||
            tp_allreduce(c, h16, r16, n, dt, op))
            return printf("rank %d: %s allreduce failed: %s\n", rank, rt_dtype_names[dt], tp_errmsg(c)), 3;
        size_t nd = g_ndiff(g16, r16, n, 2);
        printf("rank %d: %zu elements %s (%s): %zu differ\n", rank, n, rt_dtype_names[dt], op == TP_AVG ? "avg" : "sum",
               nd);
        bad |= nd != 0;
    }
    printf("rank %d: %llu device allreduces over cuda_ipc\n", rank, (unsigned long long)st.ipc_ops);
    tp_dev_cuda_destroy(&dc);
    tp_comm_destroy(c);
    rt_rdzv_close(rz);
    port_pinned_free(pinned);
    port_dev_free(region);
    free(h), free(ref), free(got);
    return bad;
}

/* Runs `world` ranks as processes, each fn(dir, rank, world, arg) (gpu_procs.h: env in
 * rank env_rank only, outputs in out, exit statuses in rcs, killed at 90 s). */
typedef int (*gi_fn)(const char *dir, int rank, int world, int arg);
typedef struct gi_call { gi_fn fn; int arg; } gi_call;
static int gi_body(const char *dir, int rank, int world, const void *a)
{
    const gi_call *c = a;
    return c->fn(dir, rank, world, c->arg);
}
static void gi_run(gi_fn fn, const char *tag, int world, int arg, const char *env, int env_rank, char *out, size_t n,
                   int *rcs)
{
    gi_call c = {fn, arg};
    g_run_ranks(gi_body, &c, tag, world, env, env_rank, 90, out, n, rcs);
}

static void gi_world(const char *tag, int world, int victim, const char *env, int env_rank, char *out, size_t n,
                     int *rcs)
{
    gi_run(gi_rank, tag, world, victim, env, env_rank, out, n, rcs);
}


TEST(gpu_ipc_allreduce_2_and_4_processes_match_host)
{
    static char out[1 << 16];
    if (g_ipc_skip()) return;
    int rcs[4];
    for (int world = 2; world <= 4; world += 2) {
        gi_world(world == 2 ? "gi2" : "gi4", world, -1, NULL, -1, out, sizeof out, rcs);
        for (int r = 0; r < world; r++) CHECKF(rcs[r] == 0, "world %d rank %d: exit %d\n%s", world, r, rcs[r], out);
        CHECKF(strstr(out, "rank 0: path cuda_ipc") && strstr(out, "device collectives take cuda_ipc") &&
               strstr(out, "rank 0 <-> 1: cuda_ipc (same device)") && strstr(out, "12345 elements (sum): 0 differ") && strstr(out, "rank 1: 9 device allreduces over cuda_ipc") &&
               strstr(out, "rank 1: 3001 elements bfloat16 (avg): 0 differ") && strstr(out, "rank 1: 3001 elements half (avg): 0 differ"),
               "world %d:\n%s", world, out);
    }
}

TEST(gpu_ipc_p2p_0_takes_the_staged_path)
{
    static char out[1 << 16];
    if (g_ipc_skip()) return;
    int rcs[2];
    gi_world("gip2p", 2, -1, "DDPRT_P2P=0", 1, out, sizeof out, rcs);
    CHECKF(rcs[0] == 0 && rcs[1] == 0, "exit %d %d\n%s", rcs[0], rcs[1], out);
    CHECKF(strstr(out, "rank 0: path staged") && strstr(out, "rank 1: path staged") &&
           strstr(out, "device collectives take the pinned staging (rank 0 <-> 1: DDPRT_P2P=0 on rank 1)") &&
           strstr(out, "12345 elements (sum): 0 differ") && strstr(out, "rank 0: 0 device allreduces over cuda_ipc"),
           "%s", out);
}

TEST(gpu_ipc_killed_rank_is_named)
{
    static char out[1 << 16];
    int rcs[4];
    gi_world("gikill", 4, 3, NULL, -1, out, sizeof out, rcs);
    CHECKF(rcs[3] == 128 + SIGKILL, "the victim: exit %d\n%s", rcs[3], out);
    int ipc_wait = 0;
    for (int r = 0; r < 3; r++) {
        char want[64], done[64];
        snprintf(want, sizeof want, "rank %d: allreduce failed (", r);
        snprintf(done, sizeof done, "rank %d: comm destroyed", r);
        const char *p = strstr(out, want), *e = p ? strchr(p, '\n') : NULL, *q = p ? strstr(p, "rank 3") : NULL;
        CHECKF(rcs[r] == 3 && q && q < e && strstr(out, done), "rank %d: exit %d\n%s", r, rcs[r], out);
        ipc_wait += p && strstr(p, "waited for its device buffers") && strstr(p, "waited for its device buffers") < e;
    }
    t_note("%d of 3 survivors named rank 3 in the IPC wait (the others in a host op)", ipc_wait);
}

/* DDP's --grad-compress buckets on the device (nn/ddp_cuda.c) against the host path on
 * the same f32 gradients: lenet's device graph wired to nn_ddp with small buckets (a
 * parameter or two each), its gradients set to values that exercise the rounding (ties, f16 subnormals
 * and flushes to 0, f16 sums past 65504 that become inf), nn_ddp_finish_grads (each
 * bucket rounded on the device, allreduced and averaged in 16 bits, widened back), and
 * the CPU path's steps (tp_f32_to_half, tp_allreduce TP_AVG in 16 bits, tp_half_to_f32)
 * on the host copies: bit for bit. One host, so every path adds in rank order (the
 * shared-memory chain, the cuda_ipc kernel); arg: the wire (RT_F16 / RT_BF16). */
static int gc_rank(const char *dir, int rank, int world, int arg)
{
    rt_rdzv *rz;
    tp_comm *c;
    if (gi_comm(dir, rank, world, &rz, &c)) return 2;
    rt_dtype wire = (rt_dtype)arg;
    char err[512] = "";
    gm_model host;
    nn_cuda *cu = NULL;
    nn_ddp *d = nn_ddp_wrap(c);
    if (!d || gm_build(&host, "lenet", (nn_shape){1, 28, 28, 0}, 10, 0, 2) || !(cu = nn_cuda_open(0, err, sizeof err)) ||
        nn_cuda_setup(cu, &host.g, nn_ddp_cuda_stage_bytes(d), 0, err, sizeof err) ||
        nn_ddp_use_cuda(d, cu, wire, err, sizeof err))
        return printf("rank %d: setup: %s\n", rank, err), 2;
    nn_ddp_attach(d, &host.g, 1e-4); /* a bucket per parameter or two */
    if (nn_ddp_set_compress(d, wire)) return printf("rank %d: set_compress failed\n", rank), 2;
    size_t n = host.g.nparams, inf = 0, zero = 0;
    float *g = malloc(n * 4), *ref = malloc(n * 4), *dg = nn_cuda_graph(cu)->grads;
    uint16_t *h16 = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        float u = 2.0f * k_rand_uniform(3000 + (unsigned)rank, i) - 1.0f;
        switch (i % 8) {
        case 0: g[i] = u * 4e4f; break;                 /* f16: two of them may sum past 65504 */
        case 1: g[i] = u * 1e-7f; break;                /* f16 subnormals, some flushed to 0 */
        case 2: g[i] = 1.0f + (float)(i % 3) * 0x1p-9f; break; /* bf16 ties (to even) */
        default: g[i] = u * 1e-2f; break;
        }
    }
    port_stream s = nn_cuda_stream(cu);
    if (port_memcpy_h2d(dg, g, n * 4, s, "grads") || port_stream_sync(s, "grads"))
        return printf("rank %d: upload: %s\n", rank, port_cuda_errmsg()), 2;
    if (nn_ddp_finish_grads(d)) return printf("rank %d: finish_grads: %s\n", rank, nn_ddp_errmsg(d)), 3;
    if (port_stream_sync(s, "unpacked")) return printf("rank %d: %s\n", rank, port_cuda_errmsg()), 3;
    float *got = gm_down(dg, n * 4);
    tp_f32_to_half(h16, g, n, wire);
    if (tp_allreduce(c, h16, h16, n, wire, TP_AVG)) return printf("rank %d: host allreduce: %s\n", rank, tp_errmsg(c)), 3;
    tp_half_to_f32(ref, h16, n, wire);
    for (size_t i = 0; i < n; i++) inf += isinf(ref[i]) != 0, zero += ref[i] == 0 && g[i] != 0;
    size_t nd = g_ndiff(got, ref, n, 4);
    nn_ddp_stats ds = nn_ddp_get_stats(d);
    printf("rank %d: %s buckets: %zu gradients in %d buckets, %zu differ (%zu inf, %zu became 0)\n", rank,
           rt_dtype_names[wire], n, ds.nbuckets, nd, inf, zero);
    nn_ddp_use_cuda(d, NULL, RT_F32, NULL, 0);
    nn_cuda_close(cu);
    nn_ddp_close(d, 0);
    tp_comm_destroy(c);
    rt_rdzv_close(rz);
    gm_drop(&host);
    free(g), free(ref), free(h16), free(got);
    return nd != 0 || ds.nbuckets < 4 || (wire == RT_F16 && (!inf || !zero));
}

TEST(gpu_ddp_compress_matches_host)
{
    static char out[1 << 16];
    if (g_ipc_skip()) return;
    static const rt_dtype wires[] = {RT_BF16, RT_F16};
    /* bf16 and f16 over cuda_ipc, then over the staging (DDPRT_P2P=0), then both on 4 ranks */
    for (int k = 0; k < 6; k++) {
        int world = k >= 4 ? 4 : 2, staged = k == 2 || k == 3, rcs[4];
        rt_dtype w = wires[k % 2];
        gi_run(gc_rank, "gicomp", world, (int)w, staged ? "DDPRT_P2P=0" : NULL, 0, out, sizeof out, rcs);
        for (int r = 0; r < world; r++)
            CHECKF(rcs[r] == 0, "%s, world %d, rank %d: exit %d\n%s", rt_dtype_names[w], world, r, rcs[r], out);
        const char *line = strstr(out, "rank 0: "), *e = line ? strchr(line, '\n') : NULL;
        CHECKF(strstr(out, staged ? "device collectives take the pinned staging" : "device collectives take cuda_ipc") &&
               strstr(out, "--grad-compress") && line && e, "%s:\n%s", rt_dtype_names[w], out);
        if (line && e) t_note("%d ranks, %s: %.*s", world, staged ? "staged" : "cuda_ipc", (int)(e - line), line);
    }
}
