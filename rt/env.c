#include "rt/env.h"
#include "rt/isa.h"
#include "rt/log.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

enum { E_ENUM, E_POS, E_NONNEG, E_INT, E_ANY };
/* choices: '|'-separated for E_ENUM. E_POS: number > 0; E_NONNEG: number >= 0;
 * E_INT: integer >= 0; E_ANY: free text (checked where it is used). dflt and doc are
 * docs/env.md's columns (Markdown); the code that reads a variable owns its default,
 * and the page says what that code does. */
typedef struct { const char *name; int kind; const char *choices, *dflt, *doc; } env_var;
#define V(id, k, ch, d, doc) [RT_ENV_##id] = {"DDPRT_" #id, k, ch, d, doc}
static const env_var vars[RT_ENV_COUNT] = {
    V(TIMEOUT, E_POS, NULL, "300", "seconds any wait may take (rendezvous, each collective, the launcher's peers, the GPU's work)"),
    V(JOB_TOKEN, E_ANY, NULL, "`ddprt-launch`: random for one node; for several, derived from the rendezvous address, port and node count",
      "job secret every rank must present at the rendezvous and to its peers"),
    V(RDZV_HELLO_TIMEOUT, E_POS, NULL, "5",
      "seconds the rendezvous master waits for a connection's hello before dropping it (at most `DDPRT_TIMEOUT`)"),
    V(LAUNCH_GRACE, E_NONNEG, NULL, "10", "`ddprt-launch`: seconds between SIGTERM and SIGKILL when a rank fails"),
    V(RESTART_COUNT, E_INT, NULL, "unset", "set by `ddprt-launch --max-restarts`: which restart this start is"),
    V(ELASTIC, E_ANY, NULL, "unset",
      "set by an elastic `ddprt-launch --nnodes MIN:MAX` to a file it creates when a node waits to join: ddprt-train "
      "then stops after its next checkpoint (exit 75) so that the node can enter"),
    V(ELASTIC_WAIT, E_POS, NULL, "10",
      "`ddprt-launch --nnodes MIN:MAX`, node 0: seconds it waits for the missing nodes once MIN are there"),
    V(ALGO, E_ENUM, "ring|rd|hier|auto", "auto",
      "allreduce algorithm: `ring`, `rd` (recursive doubling), `hier` (hierarchical), `auto` (rd below 512 KiB, "
      "else hierarchical on several hosts of several ranks each, else ring)"),
    V(SOCKET_IFNAME, E_ANY, NULL, "the route to the rendezvous",
      "interface(s) for TCP, NCCL syntax (`eth0`, `=eth0`, `^docker`)"),
    V(TCP_LOCAL, E_ENUM, "tcp|unix", "unix", "`tcp`: no unix sockets between ranks of one host"),
    V(TCP_NSOCKS, E_ENUM, "1|2|3|4|5|6|7|8" /* TCP_MAX_NSOCKS */, "2",
      "sockets per peer: whole messages take them in turn, messages of 1 MiB and more are striped over all (as "
      "`NCCL_NSOCKS_PERTHREAD`); every rank must use the same value"),
    V(TCP_SPIN_US, E_INT, NULL, "200", "TCP: longest busy-poll before a wait sleeps in `poll()` (adapts down to 5)"),
    V(TCP_BUFSIZE, E_INT, NULL, "1 MiB to same-host peers, autotuning to others",
      "socket buffer bytes (`0`: the kernel's autotuning everywhere)"),
    V(SHM, E_ENUM, "0|1", "1", "`0`: no shared memory between ranks of one host (collectives over the sockets)"),
    V(SHM_SPIN_US, E_INT, NULL, "50", "shared memory: microseconds a wait spins before it sleeps on a futex"),
    V(SHM_CMA, E_ENUM, "0|1", "0", "`1`: shared memory reads peers' buffers with `process_vm_readv` for large ops"),
    V(SHM_CMA_MIN, E_INT, NULL, "262144",
      "with `DDPRT_SHM_CMA=1`: bytes from which an op uses it (rank 0's value counts)"),
    V(SHM_MAP, E_ENUM, "0|1", "1",
      "`0`: no allreduce in place on registered buffers (`tp_mem_alloc` memory, DDP's gradients)"),
    V(SHM_MAP_MIN, E_INT, NULL, "16384",
      "bytes from which an allreduce on registered buffers reads them in place (rank 0's value counts)"),
    V(P2P, E_ENUM, "0|1", "1",
      "`0`: no CUDA IPC between the GPUs of one host (device collectives through pinned host staging; 0 on "
      "any rank turns it off for the comm)"),
    V(IB_HCA, E_ANY, NULL, "the first device with an active port",
      "RDMA device[:port], as `NCCL_IB_HCA` (`mlx5_0:1`, `rxe0`; the first entry of a list)"),
    V(IB_GID_INDEX, E_INT, NULL, "RoCE v2, IPv4", "RoCE GID index"),
    V(IB_TIMEOUT, E_INT, NULL, "14", "RC queue pair ACK timeout exponent (4.096 us * 2^n), 1 to 31"),
    V(IB_RETRY_CNT, E_INT, NULL, "7", "RC queue pair retransmissions before an error, 0 to 7"),
    V(VERBS_SPIN_US, E_INT, NULL, "50", "verbs: longest busy-poll of the completion queue before a wait sleeps"),
    V(VERBS_SLOT_KB, E_INT, NULL, "64",
      "verbs: KiB per send/receive slot, 4 to 4096 (halved for large worlds; alike on every rank)"),
    V(VERBS_CLOSE_GRACE_MS, E_INT, NULL, "1000",
      "verbs: milliseconds a peer's closed side channel is tolerated while its last completions arrive"),
    V(STALL_WARN, E_POS, NULL, "10", "seconds of waiting on a late rank before every rank names it (at most `DDPRT_TIMEOUT`)"),
    V(STALL_WATCH, E_ENUM, "0|1", "1", "`0`: no stall watch, no flight recorder (to measure their cost)"),
    V(TRACE_ENTRIES, E_INT, NULL, "2000", "flight recorder: collectives kept per rank (16 to 2^24)"),
    V(TRACE_DIR, E_ANY, NULL, "`.`", "flight recorder: where `ddprt-trace.RANK` goes"),
    V(COMPRESS_CHECK, E_ENUM, "0|1", "0",
      "`1` (on every rank) with `--grad-compress`: each step also averages the f32 gradients and the epoch line "
      "reports the compression's relative L2 error and the share of gradients it flushed to 0"),
    V(ISA, E_ENUM, RT_ISA_CHOICES, "the best this CPU has",
      "a lower SIMD path for the CPU kernels and the reductions (`avx512bf16`: `avx512` plus `vdpbf16ps` for "
      "`--amp bf16`; the reductions run it as `avx512`)"),
    V(CONV, E_ENUM, "auto|direct|winograd|winograd4|winograd4c", "auto",
      "the fp32 CPU 3x3 stride-1 pad-1 convs: `winograd` (F(2x2,3x3): fewer multiplies, other rounding), "
      "`winograd4` (F(4x4,3x3) forward and dX on 14x14+ planes with 64+ channels, else F(2x2,3x3)), "
      "`winograd4c` (F(4x4,3x3) forward and dX, F(2x2,3x3) dW, channels-last where the channel counts are "
      "multiples of the SIMD vector's floats, else as `winograd4`), `direct` "
      "(the shifted-row GEMMs, the bits of ddprt before Winograd), `auto` (Winograd where measured faster: see "
      "[models.md](models.md)); `ddprt-train --conv-algo` sets it too"),
    V(BF16_GEMM, E_ENUM, "auto|dpbf16|fma|amx", "auto",
      "`--amp bf16`'s linear layers and convs on AVX512-BF16 CPUs: `dpbf16` (`vdpbf16ps`: the blocked bf16 "
      "GEMMs and conv kernels), `fma` (operands rounded to bf16, then the fp32 FMA kernels: the same products, "
      "summed in another order), `amx` (the linear layers on Intel AMX tiles, `tdpbf16ps`: 2-6x the fp32 GEMMs "
      "on Sapphire Rapids, where the CPU has AMX-BF16; convs as `fma`), `auto` (`amx` where the CPU has it, else "
      "`fma` on Intel, whose `vdpbf16ps` ran at half the FMA rate here (Sapphire Rapids: 112 vs 224 GFLOP/s a "
      "thread; ResNets at 0.58-0.66x fp32), else `dpbf16`)"),
    V(CUDA_SYNC, E_ENUM, "0|1", "0", "`1`: wait after every CUDA kernel so a fault names the kernel that caused it"),
    V(WGMMA, E_ENUM, "auto|0|1", "auto",
      "the tensor-core products (conv, linear, GPT's Conv1D, `k_cuda_tc_gemm`, the attention) on an sm_90 GPU "
      "(H100/H200): `auto` runs them on `wgmma` once a probe GEMM at start-up agrees with the `mma.sync` kernel (else "
      "`mma.sync`, said in the start-up line); the attention's wgmma kernels and 1x1 convs' plain products then have "
      "probes of their own, and one that disagrees goes back alone; `0` keeps `mma.sync`, `1` takes `wgmma` without "
      "the probes (and on the SIMT executor)"),
    V(TMA, E_ENUM, "auto|0|1", "auto",
      "with `wgmma` on (`DDPRT_WGMMA`), products of two plain 16-bit arrays (`k_cuda_tc_gemm`, linear's and "
      "Conv1D's forward on 16-bit activations, their dX and dW on the rounded dy, split-K too) fed by TMA (`wt_gemm`: "
      "`cp.async.bulk.tensor` and mbarriers, a producer warpgroup, persistent) in place of `cp.async` (`wg_gemm`): "
      "`auto` once a probe GEMM at start-up agrees with `wg_gemm` (else `wg_gemm`, said in the start-up line), `0` "
      "keeps `wg_gemm`, `1` takes TMA without the probe"),
    V(PROBE_DUMP, E_ANY, NULL, "unset",
      "a folder where a start-up probe that disagrees (`DDPRT_WGMMA`, `DDPRT_TMA` and the paths' own) writes both "
      "results (`NAME.got.f32`, `NAME.want.f32`: the header `DDPRTF32`, rows and columns as uint32, the floats) "
      "beside its one-line report of where they differ"),
    V(SIMT_SCHED, E_ENUM, "forward|reversed|random|warps", "forward",
      "the SIMT executor (the CUDA kernels on the CPU in the test builds, [simt.md](simt.md)): the order a block's "
      "threads run in between synchronisations (`warps`: each warp alone up to the next barrier)"),
    V(SIMT_SEED, E_INT, NULL, "1", "the SIMT executor's `random` order: its seed"),
    V(SIMT_TRACE, E_ANY, NULL, "unset", "the SIMT executor: a file the name of every kernel launched goes to (once each)"),
    V(SIMT_BANKS, E_ANY, NULL, "unset", "the SIMT executor: a file each launch appends its kernels' ldmatrix "
      "shared-memory bank conflicts to (phases, conflicted phases, worst n-way)"),
    V(LOG, E_ENUM, "error|warn|warning|info|debug", "info", "log level"),
    V(DATA, E_ANY, NULL, "`./data`, then the Debian dataset packages' folder", "where data sets are looked for"),
    V(VERBS_TEST_FAULT, E_ANY, NULL, "unset", "tests: a fault for the verbs backend to inject"),
    V(SHM_TEST_FAULT, E_ANY, NULL, "unset", "tests: a fault for the shared-memory layer to inject"),
    V(BUILD, E_ANY, NULL, "`build`", "`make test`: the build folder the tests find the programs in"),
    V(TEST_TIMEOUT, E_ANY, NULL, "300 (ASan 600, TSan 900)", "`make test`: seconds one test may take"),
    V(SAN, E_ANY, NULL, "unset", "`make test`: the sanitizer flags of the build"),
    V(LIB, E_ANY, NULL, "the package's folder, `build/`, the system's", "the Python package: the path of `libddprt.so`"),
    V(PYTHON, E_ANY, NULL, "`/usr/bin/python3`", "`make test`: the Python with numpy and torch for the Python tests"),
    V(HVD_CHECK, E_ENUM, "0|1", "1",
      "the Python package's Horovod API: `0` turns off the check that every rank's raw `allreduce` calls name the "
      "same tensor (name, shape, dtype, op) in the same order"),
    V(ELASTIC_STATE, E_ANY, NULL, "beside `DDPRT_ELASTIC`'s file",
      "the Python package's `hvd.elastic.TorchState`: the file rank 0 commits the state to, loaded when a restarted "
      "job starts"),
};
#undef V

int rt_choice_index(const char *v, const char *choices)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *c = choices; *c; i++) {
        size_t k = strcspn(c, "|");
        if (k == n && !strncmp(c, v, n)) return i;
        c += k + (c[k] == '|');
    }
    return -1;
}

int rt_in_choices(const char *v, const char *choices) { return rt_choice_index(v, choices) >= 0; }

static int check_one(const env_var *e, const char *v, char *err, size_t errlen)
{
    char *end;
    if (e->kind == E_ANY || !*v) return 0; /* empty = unset, as everywhere */
    if (e->kind == E_ENUM) {
        if (rt_in_choices(v, e->choices)) return 0;
        snprintf(err, errlen, "%s=%s: expected one of %s", e->name, v, e->choices);
        return -1;
    }
    double x = strtod(v, &end);
    int ok = *v && !*end && isfinite(x);
    if (e->kind == E_POS) ok = ok && x > 0;
    if (e->kind == E_NONNEG) ok = ok && x >= 0;
    if (e->kind == E_INT) ok = ok && x >= 0 && x == floor(x) && x < 2147483648.0 && !strpbrk(v, ".eExXpP");
    if (ok) return 0;
    snprintf(err, errlen, "%s=%s: expected %s", e->name, v,
             e->kind == E_POS ? "a number > 0" : e->kind == E_NONNEG ? "a number >= 0" : "an integer >= 0");
    return -1;
}

int rt_edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b), d[64];
    if (la > 62 || lb > 62) return 99;
    for (int j = 0; j <= lb; j++) d[j] = j;
    for (int i = 1; i <= la; i++) {
        int prev = d[0];
        d[0] = i;
        for (int j = 1; j <= lb; j++) {
            int cur = d[j], best = prev + (a[i - 1] != b[j - 1]);
            if (d[j] + 1 < best) best = d[j] + 1;
            if (d[j - 1] + 1 < best) best = d[j - 1] + 1;
            d[j] = best;
            prev = cur;
        }
    }
    return d[lb];
}

int rt_env_check(char *err, size_t errlen)
{
    static int warned;
    for (char **ep = environ; ep && *ep; ep++) {
        if (strncmp(*ep, "DDPRT_", 6)) continue;
        const char *eq = strchr(*ep, '=');
        if (!eq) continue;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *ep < 63 ? eq - *ep : 63), *ep);
        int best = 99, bi = -1;
        for (int i = 0; i < RT_ENV_COUNT; i++) {
            if (!strcmp(vars[i].name, name)) { bi = i; best = 0; break; }
            int dd = rt_edit_distance(name, vars[i].name);
            if (dd < best) { best = dd; bi = i; }
        }
        if (best == 0) {
            if (check_one(&vars[bi], eq + 1, err, errlen)) return -1;
        } else if (!warned && strncmp(name, "DDPRT_TEST", 10)) { /* DDPRT_TEST*: test programs' own */
            warned = 1;
            if (best <= 3) rt_warn("%s is not a ddprt variable (did you mean %s?); ignored", name, vars[bi].name);
            else rt_warn("%s is not a ddprt variable; ignored", name);
        }
    }
    return 0;
}

int rt_env_check_one(rt_env v, char *err, size_t errlen)
{
    const char *s = getenv(vars[v].name);
    return s ? check_one(&vars[v], s, err, errlen) : 0;
}

const char *rt_env_name(rt_env v) { return vars[v].name; }

const char *rt_env_str(rt_env v)
{
    const char *s = getenv(vars[v].name);
    return s && *s ? s : NULL;
}

double rt_env_num(rt_env v, double dflt)
{
    const char *s = rt_env_str(v);
    char *end;
    if (!s) return dflt;
    double x = strtod(s, &end);
    return *end || !isfinite(x) ? dflt : x;
}

double rt_env_number(rt_env v)
{
    return rt_env_num(v, strtod(vars[v].dflt, NULL));
}

int rt_env_flag(rt_env v, int dflt)
{
    const char *s = rt_env_str(v);
    return s && !strcmp(s, "0") ? 0 : s && !strcmp(s, "1") ? 1 : dflt;
}

int rt_env_choice(rt_env v, int dflt)
{
    const char *s = rt_env_str(v);
    int i = s && vars[v].choices ? rt_choice_index(s, vars[v].choices) : -1;
    return i >= 0 ? i : dflt;
}

double rt_env_timeout_s(void)
{
    double t = rt_env_num(RT_ENV_TIMEOUT, 0);
    return t > 0 ? t : RT_DEFAULT_TIMEOUT_S;
}

/* Choices print as `a`, `b`; '|' would end a Markdown table cell. */
static void doc_values(FILE *f, const env_var *e)
{
    static const char *const kinds[] = {"", "number > 0", "number >= 0", "integer >= 0", "text"};
    if (e->kind != E_ENUM) {
        fputs(kinds[e->kind], f);
        return;
    }
    for (const char *c = e->choices; *c;) {
        size_t k = strcspn(c, "|");
        fprintf(f, "%s`%.*s`", c == e->choices ? "" : ", ", (int)k, c);
        c += k + (c[k] == '|');
    }
}

void rt_env_doc(FILE *f)
{
    fputs("# Environment variables\n\n[Back to the README](../README.md)\n\n"
          "Generated from the table in `rt/env.c` by `make env-doc` (`make test` fails when this page\n"
          "is stale). Every `DDPRT_*` variable is checked when a rendezvous or a communicator starts:\n"
          "a value outside its domain is one error line, an unknown `DDPRT_*` name a warning with the\n"
          "closest known one. An empty value counts as unset.\n\n"
          "| variable | values | default | meaning |\n| --- | --- | --- | --- |\n",
          f);
    for (int i = 0; i < RT_ENV_COUNT; i++) {
        fprintf(f, "| `%s` | ", vars[i].name);
        doc_values(f, &vars[i]);
        fprintf(f, " | %s | %s |\n", vars[i].dflt, vars[i].doc);
    }
}
