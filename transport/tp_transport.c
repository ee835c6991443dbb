/* The transport table (tp_transport.h): each transport's can_connect, the per-pair
 * pick, and the log of the choice. Pure functions of tp_peers, so a test can give them
 * fake hosts. */
#include "transport/tp_transport.h"
#include "transport/tp_link_shm.h"
#include "rt/log.h"
#include <stdio.h>
#include <string.h>

void tp_peers_init(tp_peers *p)
{
    p->one_host = p->shm_all = p->p2p_all = p->info != NULL;
    for (int r = 0; p->info && r < p->world; r++) {
        p->one_host &= p->info[r].host == p->info[0].host;
        p->shm_all &= p->info[r].shm_ok != 0;
        p->p2p_all &= p->info[r].p2p_ok != 0;
    }
}

/* Local GPUs that can map each other's memory (the device plan only). */
static int cuda_ipc_can_connect(const tp_peers *p, int a, int b, char *why, size_t n)
{
    if (!p->reach || !p->info) { snprintf(why, n, "device buffers only"); return -1; }
    if (p->info[a].host != p->info[b].host) { snprintf(why, n, "different hosts"); return -1; }
    for (int r = 0; !p->p2p_all && r < p->world; r++)
        if (!p->info[r].p2p_ok) { snprintf(why, n, "DDPRT_P2P=0 on rank %d", r); return 0; }
    int ab = p->reach[a * p->world + b], ba = p->reach[b * p->world + a];
    if (!ab || !ba) { snprintf(why, n, "the devices cannot reach each other"); return 0; }
    snprintf(why, n, "%s", ab == 2 && ba == 2 ? "same device" : "peer access");
    return 1;
}

static int shm_can_connect(const tp_peers *p, int a, int b, char *why, size_t n)
{
    if (!p->info) { snprintf(why, n, "%s", p->shm_off ? p->shm_off : "hosts unknown"); return 0; }
    if (p->info[a].host != p->info[b].host) { snprintf(why, n, "different hosts"); return -1; }
    if (p->shm_off) { snprintf(why, n, "%s", p->shm_off); return 0; }
    int off = !p->info[a].shm_ok ? a : !p->info[b].shm_ok ? b : -1;
    for (int r = 0; off < 0 && !p->shm_all && r < p->world; r++)
        if (!p->info[r].shm_ok) off = r;
    if (off >= 0) { snprintf(why, n, "DDPRT_SHM=0 on rank %d", off); return 0; }
    /* One host: the comm-wide segment runs the collectives (tp_shm.h); else the pair's
     * ring carries the algorithms' messages (tp_link_shm.c). */
    snprintf(why, n, "%s", p->one_host ? "same host" : "same host, point-to-point");
    return 1;
}

static int net_can_connect(const tp_peers *p, int a, int b, char *why, size_t n)
{
    if (!p->info) snprintf(why, n, "%s", "");
    else snprintf(why, n, "%s", p->info[a].host == p->info[b].host ? "same host" : "different hosts");
    return 1;
}

const tp_transport tp_transports[TP_NTRANSPORTS] = {
    [TP_TRANSPORT_CUDA_IPC] = {"cuda_ipc", cuda_ipc_can_connect, NULL},
    [TP_TRANSPORT_SHM] = {"shm", shm_can_connect, &tp_link_shm_ops},
    [TP_TRANSPORT_NET] = {NULL, net_can_connect, &tp_link_net},
};

const char *tp_transport_name(const tp_peers *p, int t)
{
    if (t < 0 || t >= TP_NTRANSPORTS) return "?";
    return tp_transports[t].name ? tp_transports[t].name : p->net ? p->net : "net";
}

int tp_transport_pick(const tp_peers *p, int a, int b, char *why, size_t n)
{
    char declined[TP_NTRANSPORTS][96];
    int nd = 0, t;
    for (t = 0; t < TP_NTRANSPORTS; t++) {
        char w[96];
        int ok = tp_transports[t].can_connect(p, a, b, w, sizeof w);
        if (ok > 0) break;
        if (ok == 0) snprintf(declined[nd++], sizeof declined[0], "no %.8s: %.80s", tp_transport_name(p, t), w);
    }
    if (t == TP_NTRANSPORTS) t = TP_TRANSPORT_NET; /* net connects every pair; never here */
    char own[96];
    tp_transports[t].can_connect(p, a, b, own, sizeof own);
    size_t k = (size_t)snprintf(why, n, "%s", own);
    for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(why + k, n - k, "%s%s", k ? "; " : "", declined[i]);
    return t;
}

int tp_transport_plan(const tp_peers *p, int me, uint8_t *out)
{
    char why[256];
    int count[TP_NTRANSPORTS] = {0}, lines = 0, all_shm = p->world > 1;
    for (int q = 0; q < p->world; q++)
        out[q] = q == me ? TP_NTRANSPORTS : (uint8_t)tp_transport_pick(p, me, q, why, sizeof why);
    for (int q = 0; q < p->world; q++) all_shm &= q == me || out[q] == TP_TRANSPORT_SHM;
    if (me != 0) return all_shm;
    /* Rank 0 names every pair (a few lines; then counts). */
    for (int a = 0; a < p->world; a++)
        for (int b = a + 1; b < p->world; b++) {
            int t = tp_transport_pick(p, a, b, why, sizeof why);
            count[t]++;
            if (lines++ < TP_LOG_PAIRS)
                rt_info("comm: rank %d <-> %d: %s%s%s%s", a, b, tp_transport_name(p, t), why[0] ? " (" : "", why,
                        why[0] ? ")" : "");
        }
    if (lines > TP_LOG_PAIRS) {
        char sum[160];
        size_t k = 0;
        for (int t = 0; t < TP_NTRANSPORTS; t++)
            if (count[t] && k < sizeof sum)
                k += (size_t)snprintf(sum + k, sizeof sum - k, "%s%d %s", k ? ", " : "", count[t],
                                      tp_transport_name(p, t));
        rt_info("comm: ... %d pairs in all: %s", lines, sum);
    }
    return all_shm;
}

/* Several hosts with the same number (> 1) of ranks each: the hierarchical device path
 * can run (tp_hier's condition). *nh, *nl: hosts, ranks on each. */
static int regular_hosts(const tp_peers *p, int *nh, int *nl)
{
    int regular = 1;
    *nh = 0, *nl = 0;
    for (int r = 0; r < p->world; r++) {
        int first = 1, cnt = 0;
        for (int q = 0; q < p->world; q++)
            if (p->info[q].host == p->info[r].host) first &= q >= r, cnt++;
        if (!first) continue;
        if (*nh && cnt != *nl) regular = 0;
        (*nh)++, *nl = cnt;
    }
    return regular && *nh > 1 && *nl > 1;
}

int tp_transport_device_plan(const tp_peers *p, int me, char *why, size_t n)
{
    int all = p->world > 1, lines = 0, nh = 0, nl = 0;
    why[0] = 0;
    for (int a = 0; a < p->world; a++)
        for (int b = a + 1; b < p->world; b++) {
            char w[96];
            int ok = tp_transports[TP_TRANSPORT_CUDA_IPC].can_connect(p, a, b, w, sizeof w);
            if (ok == 0 && all) snprintf(why, n, "rank %d <-> %d: %s", a, b, w);
            all &= ok != 0; /* -1: another host; the hierarchical plan below may take it */
            if (me == 0 && lines++ < TP_LOG_PAIRS)
                rt_info("comm: device buffers, rank %d <-> %d: %s (%s)", a, b, ok > 0 ? "cuda_ipc" : "staged", w);
        }
    int plan = all && p->one_host ? 1 : all && regular_hosts(p, &nh, &nl) ? 2 : 0;
    if (all && !plan) snprintf(why, n, "several hosts, not the same number (> 1) of ranks on each");
    if (me != 0) return plan;
    if (plan == 1)
        rt_info("comm: device collectives take cuda_ipc (every pair of one host reaches the others' device memory)");
    else if (plan == 2)
        rt_info("comm: device collectives take hierarchical: cuda_ipc inside each host, staged across hosts (%d hosts "
                "x %d ranks; the ranks of each host reach each other's device memory, other hosts only through "
                "pinned host memory and the %s link)", nh, nl, p->net ? p->net : "net");
    else
        rt_info("comm: device collectives take the pinned staging (%s)", why);
    return plan;
}
