/* Alpha-beta cost model (Hockney): a message of m bytes over a link costs
 * alpha + m / bw. An algorithm is a sequence of steps; within a step every rank sends
 * at once over its own link, so a step costs the slowest link's alpha + m / bw.
 *   ring  (n ranks, S bytes):  2(n-1) (alpha + S / (n bw))
 *   rd    (p = 2^floor(log2 n)): (log2 p + 2 [n != p]) (alpha + S / bw)
 *   hier  (H hosts x L local):   T_i = 2(L-1) (a_i + S / (L b_i))   intra RS + AG
 *                                T_e = 2(H-1) (a_e + S / (H b_e))   L inter rings of
 *                                S/L bytes each, sharing the host link: b_e / L each;
 *                                K pipelined segments: max(T_i, T_e) + min(T_i, T_e) / K
 *   flat ring over H x L:        2(HL-1) (a_e + S / (HL b_e))     (H > 1)
 * bw is in busbw terms (nccl-tests: busbw = algbw * 2(n-1)/n for allreduce), so a
 * published busbw figure is the bw to use. Not modelled: the reduction's compute,
 * ring pipelining across chunks (each chunk pays alpha in ddprt's ring: the fit
 * folds that into alpha and bw), contention from other traffic, multiple NICs. */
#include "apps/bench/bench_predict.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double bp_ring(int n, double bytes, bp_link l)
{
    if (n <= 1) return 0;
    return 2.0 * (n - 1) * (l.alpha + bytes / n / l.bw);
}

static int rd_steps(int n)
{
    int p = 1, k = 0;
    while (p * 2 <= n) p *= 2, k++;
    return k + (p != n ? 2 : 0);
}

double bp_rd(int n, double bytes, bp_link l)
{
    return rd_steps(n) * (l.alpha + bytes / l.bw);
}

int bp_hier_segs(double bytes)
{
    double k = floor(bytes / BP_HIER_SEG_BYTES);
    return k < 1 ? 1 : k > BP_HIER_MAX_SEGS ? BP_HIER_MAX_SEGS : (int)k;
}

double bp_hier(int hosts, int local, double bytes, bp_link intra, bp_link inter)
{
    double ti = bp_ring(local, bytes, intra); /* RS + AG: 2(L-1) steps of S/L */
    if (hosts <= 1) return ti;
    double te = 2.0 * (hosts - 1) * (inter.alpha + bytes / hosts / inter.bw);
    if (local <= 1) return te;
    /* K segments in a pipeline (tp_hier.c): the slower lane runs throughout, the
     * other adds its first and last segment (fill and drain). */
    int k = bp_hier_segs(bytes);
    return (ti > te ? ti : te) + (ti > te ? te : ti) / k;
}

double bp_ring2(int hosts, int local, double bytes, bp_link intra, bp_link inter)
{
    return bp_ring(hosts * local, bytes, hosts > 1 ? inter : intra);
}

int bp_fit(int n, int rd, const double *bytes, const double *secs, int nrows, bp_link *out)
{
    double ka = rd ? rd_steps(n) : 2.0 * (n - 1), kb = rd ? rd_steps(n) : 2.0 * (n - 1) / n;
    /* t = A + S X with A = ka alpha, X = kb / bw; weighted normal equations. */
    double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
    for (int i = 0; i < nrows; i++) {
        if (!(secs[i] > 0)) return -1;
        double w = 1 / (secs[i] * secs[i]), s = bytes[i];
        s00 += w, s01 += w * s, s11 += w * s * s, r0 += w * secs[i], r1 += w * s * secs[i];
    }
    double det = s00 * s11 - s01 * s01;
    if (n < 2 || nrows < 2 || !(fabs(det) > 1e-12 * s00 * s11)) return -1;
    double A = (r0 * s11 - r1 * s01) / det, X = (s00 * r1 - s01 * r0) / det;
    if (A < 0) A = 0, X = r1 / s11; /* alpha >= 0: the best fit through the origin */
    if (!(X > 0)) return -1;
    out->alpha = A / ka;
    out->bw = kb / X;
    return 0;
}

double bp_step_time(const bp_step *s, bp_allreduce_fn ar, const void *ctx)
{
    double bk = s->bucket_bytes > 0 ? s->bucket_bytes : s->grad_bytes;
    int nb = (int)ceil(s->grad_bytes / bk);
    if (nb < 1) nb = 1;
    double last = s->grad_bytes - (nb - 1) * bk, hidden = 0, bwd = s->bwd_frac * s->compute;
    for (int i = 0; i < nb - 1; i++) hidden += ar(bk, ctx);
    /* Buckets but the last run during backward; what does not fit spills past it. */
    return s->compute + (hidden > bwd ? hidden - bwd : 0) + ar(last, ctx);
}

/* ---- ddprt-bench --predict / --fit ---------------------------------------------- */

typedef struct pctx {
    int algo; /* 0 ring (flat), 1 rd, 2 hier */
    int hosts, local;
    bp_link intra, inter;
} pctx;

static double pc_ar(double bytes, const void *v)
{
    const pctx *p = v;
    if (p->algo == 1) return bp_rd(p->hosts * p->local, bytes, p->hosts > 1 ? p->inter : p->intra);
    if (p->algo == 2) return bp_hier(p->hosts, p->local, bytes, p->intra, p->inter);
    return bp_ring2(p->hosts, p->local, bytes, p->intra, p->inter);
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define MAXROWS 256
#define MAXRUNS 16

/* Rows of ddprt-bench output (several runs may be concatenated): per size, the
 * median time over the runs, sizes in [lo, hi] only. Returns the number of sizes, -1 on error. */
static int read_rows(const char *path, double lo, double hi, double *bytes, double *secs)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) { fprintf(stderr, "ddprt-bench: --fit: cannot open %s\n", path); return -1; }
    static double t[MAXROWS][MAXRUNS];
    int cnt[MAXROWS] = {0}, n = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        double sz, us;
        char ty[32], op[32];
        long long count, iters;
        char *q = line;
        if (*q == '[' && (q = strstr(line, "] "))) q += 2; /* ddprt-launch's "[rank 0] " */
        else q = line;
        if (*q == '#' || sscanf(q, "%lf %lld %31s %31s %lld %lf", &sz, &count, ty, op, &iters, &us) != 6)
            continue;
        if (sz < lo || sz > hi) continue;
        int i = 0;
        while (i < n && bytes[i] != sz) i++;
        if (i == n) {
            if (n == MAXROWS) continue;
            bytes[n++] = sz;
        }
        if (cnt[i] < MAXRUNS) t[i][cnt[i]++] = us * 1e-6;
    }
    if (f != stdin) fclose(f);
    for (int i = 0; i < n; i++) {
        qsort(t[i], (size_t)cnt[i], sizeof(double), cmpd);
        secs[i] = cnt[i] % 2 ? t[i][cnt[i] / 2] : (t[i][cnt[i] / 2 - 1] + t[i][cnt[i] / 2]) / 2;
    }
    return n;
}

static int do_fit(const char *path, int n, int rd, double lo, double hi)
{
    static double b[MAXROWS], s[MAXROWS];
    int k = read_rows(path, lo, hi, b, s);
    if (k < 0) return 1;
    bp_link l;
    if (bp_fit(n, rd, b, s, k, &l)) {
        fprintf(stderr, "ddprt-bench: --fit: %d rows in %s do not determine alpha and beta\n", k, path);
        return 1;
    }
    printf("# fit (%s, world %d, %d sizes, median per size): alpha %.2f us, beta %.3f GB/s\n",
           rd ? "rd" : "ring", n, k, l.alpha * 1e6, l.bw / 1e9);
    printf("# %10s %12s %12s %8s\n", "size (B)", "measured us", "predicted us", "error");
    double worst = 0;
    for (int i = 0; i < k; i++) {
        double p = rd ? bp_rd(n, b[i], l) : bp_ring(n, b[i], l), e = (p - s[i]) / s[i];
        if (fabs(e) > worst) worst = fabs(e);
        printf("  %10.0f %12.2f %12.2f %+7.1f%%\n", b[i], s[i] * 1e6, p * 1e6, e * 100);
    }
    printf("# worst |error| %.1f%%\n", worst * 100);
    return 0;
}

/* Predicted vs measured rows (median per size over the runs in path). */
static int do_compare(const pctx *p, const char *path, double lo, double hi)
{
    static double b[MAXROWS], s[MAXROWS];
    static const char *an[] = {"ring", "rd", "hier"};
    int k = read_rows(path, lo, hi, b, s), within = 0;
    if (k <= 0) {
        fprintf(stderr, "ddprt-bench: --measured: no ddprt-bench rows in %s\n", path);
        return 1;
    }
    printf("# %s, %d host(s) x %d, inter alpha %.2f us %.4f GB/s, intra %.2f us %.3f GB/s\n", an[p->algo],
           p->hosts, p->local, p->inter.alpha * 1e6, p->inter.bw / 1e9, p->intra.alpha * 1e6, p->intra.bw / 1e9);
    printf("# %10s %12s %12s %8s\n", "size (B)", "measured us", "predicted us", "error");
    double worst = 0;
    for (int i = 0; i < k; i++) {
        double t = pc_ar(b[i], p), e = (t - s[i]) / s[i];
        if (fabs(e) > worst) worst = fabs(e);
        within += fabs(e) <= 0.15;
        printf("  %10.0f %12.2f %12.2f %+7.1f%%\n", b[i], s[i] * 1e6, t * 1e6, e * 100);
    }
    printf("# within 15%%: %d of %d sizes; worst |error| %.1f%%\n", within, k, worst * 100);
    return 0;
}

static void do_table(const pctx *p, double lo, double hi, int factor)
{
    int n = p->hosts * p->local;
    static const char *an[] = {"ring", "rd", "hier"};
    printf("# predicted allreduce: %s, %d host(s) x %d, inter alpha %.2f us %.3f GB/s, intra %.2f us %.3f GB/s\n",
           an[p->algo], p->hosts, p->local, p->inter.alpha * 1e6, p->inter.bw / 1e9, p->intra.alpha * 1e6,
           p->intra.bw / 1e9);
    printf("# %10s %12s %8s %6s %6s %10s %8s %8s\n", "size", "count", "type", "redop", "iters", "time", "algbw",
           "busbw");
    for (double s = lo; s <= hi; s *= factor) {
        double t = pc_ar(s, p);
        printf("  %10.0f %12.0f %8s %6s %6s %10.2f %8.3f %8.3f\n", s, s / 4, "float", "sum", "-", t * 1e6,
               s / t / 1e9, s / t / 1e9 * 2 * (n - 1) / n);
    }
}

static void do_scale(pctx p, const bp_step *st, int g0, int g1)
{
    printf("# DDP step: compute %.1f ms/GPU (backward %.0f%%), gradients %.1f MiB in %.0f MiB buckets;\n"
           "# buckets but the last overlap backward, the last is exposed. %d GPUs/host, intra %.2f us %.0f GB/s,\n"
           "# inter %.2f us %.1f GB/s per host. Efficiency = compute / step (weak scaling).\n",
           st->compute * 1e3, st->bwd_frac * 100, st->grad_bytes / 1048576, st->bucket_bytes / 1048576, p.local,
           p.intra.alpha * 1e6, p.intra.bw / 1e9, p.inter.alpha * 1e6, p.inter.bw / 1e9);
    printf("# %6s %6s | %9s %9s %6s | %9s %9s %6s\n", "GPUs", "hosts", "ring AR", "step", "eff", "hier AR",
           "step", "eff");
    printf("# %6s %6s | %9s %9s %6s | %9s %9s %6s\n", "", "", "(ms)", "(ms)", "", "(ms)", "(ms)", "");
    int L = p.local;
    for (int g = g0; g <= g1; g *= 2) {
        p.hosts = g > L ? g / L : 1;
        p.local = g > L ? L : g;
        p.algo = 0;
        double ar = pc_ar(st->grad_bytes, &p), t = bp_step_time(st, pc_ar, &p);
        p.algo = 2;
        double har = pc_ar(st->grad_bytes, &p), ht = bp_step_time(st, pc_ar, &p);
        printf("  %6d %6d | %9.2f %9.2f %5.1f%% | %9.2f %9.2f %5.1f%%\n", g, p.hosts, ar * 1e3, t * 1e3,
               100 * st->compute / t, har * 1e3, ht * 1e3, 100 * st->compute / ht);
    }
}

int bench_predict_run(const bp_opts *o)
{
    pctx p = {0};
    p.algo = !strcmp(o->algo, "ring") ? 0 : !strcmp(o->algo, "rd") ? 1 : 2;
    double a = o->alpha_us * 1e-6, b = o->beta_gbs * 1e9;
    int world = o->world, per_node = o->per_node;
    p.inter = (bp_link){a, b};
    p.intra = (bp_link){o->intra_alpha_us >= 0 ? o->intra_alpha_us * 1e-6 : a, o->intra_gbs > 0 ? o->intra_gbs * 1e9 : b};
    double hi_b = o->hi_bytes >= 0 ? o->hi_bytes : INFINITY;
    if (o->fit) {
        if (world < 2 || p.algo == 2) {
            fprintf(stderr, "ddprt-bench: --fit needs --world-size N >= 2 and --algo ring or rd\n");
            return 2;
        }
        return do_fit(o->fit, world, p.algo == 1, o->lo_bytes, hi_b);
    }
    if (o->step_ms > 0 || o->grad_mb > 0) {
        if (!(o->step_ms > 0 && o->grad_mb > 0)) {
            fprintf(stderr, "ddprt-bench: --predict: --step-ms and --grad-mb go together\n");
            return 2;
        }
        bp_step st = {o->step_ms * 1e-3, o->grad_mb * 1048576, o->bucket_mb * 1048576, o->bwd_frac};
        p.local = per_node ? per_node : 8;
        do_scale(p, &st, o->gpus[0], o->gpus[1]);
        return 0;
    }
    if (world < 1) {
        fprintf(stderr, "ddprt-bench: --predict needs --world-size N (or --step-ms and --grad-mb)\n");
        return 2;
    }
    p.local = per_node && per_node < world ? per_node : world;
    p.hosts = world / p.local;
    if (p.hosts * p.local != world) {
        fprintf(stderr, "ddprt-bench: --predict: world %d is not a multiple of --per-node %d\n", world, per_node);
        return 2;
    }
    if (o->measured) return do_compare(&p, o->measured, o->lo_bytes, hi_b);
    do_table(&p, o->lo_bytes, o->hi_bytes >= 0 ? o->hi_bytes : 64.0 * 1048576, o->factor);
    return 0;
}
