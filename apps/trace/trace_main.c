/* ddprt-trace FILES...: merges the flight-recorder files of a job (ddprt-trace.RANK,
 * written on a failure, SIGUSR1 or a stall warning; see transport/tp_trace.h) and
 * prints where each rank was, who is behind, and ops that differ between ranks at the
 * same sequence number. */
#include "rt/args.h"
#include "rt/env.h"
#include "rt/version.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 4096
typedef struct { unsigned long long seq, bytes; char kind[24], dt[12], op[8], state[12]; double t0, t1, t2; } ent;
typedef struct {
    int ok, rank, world, pid, n;
    char host[128], why[600], file[512];
    double now;
    unsigned long long issued;
    ent *e;
} rank_file;

static int load(const char *path, rank_file *f)
{
    FILE *in = fopen(path, "r");
    char line[1024];
    if (!in) { fprintf(stderr, "ddprt-trace: cannot read %s\n", path); return -1; }
    snprintf(f->file, sizeof f->file, "%s", path);
    f->rank = -1;
    int cap = 0, lineno = 0;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '#' || !line[0]) continue;
        if (sscanf(line, "rank %d", &f->rank) == 1 || sscanf(line, "world %d", &f->world) == 1 ||
            sscanf(line, "pid %d", &f->pid) == 1 || sscanf(line, "host %127s", f->host) == 1 ||
            sscanf(line, "now %lf", &f->now) == 1 || sscanf(line, "issued %llu", &f->issued) == 1)
            continue;
        if (!strncmp(line, "why ", 4)) { snprintf(f->why, sizeof f->why, "%.590s", line + 4); continue; }
        ent e;
        int root, rc;
        if (sscanf(line, "%llu %23s %11s %7s %d %llu %11s %d %lf %lf %lf", &e.seq, e.kind, e.dt, e.op, &root, &e.bytes,
                   e.state, &rc, &e.t0, &e.t1, &e.t2) != 11) {
            fprintf(stderr, "ddprt-trace: %s:%d: not a trace line\n", path, lineno);
            fclose(in);
            return -1;
        }
        if (f->n == cap) {
            cap = cap ? 2 * cap : 256;
            ent *ne = realloc(f->e, sizeof *ne * (size_t)cap);
            if (!ne) { fclose(in); return -1; }
            f->e = ne;
        }
        f->e[f->n++] = e;
    }
    fclose(in);
    if (f->rank < 0 || f->world <= 0 || f->rank >= f->world) {
        fprintf(stderr, "ddprt-trace: %s: no valid rank/world header\n", path);
        return -1;
    }
    f->ok = 1;
    return 0;
}

static const ent *find(const rank_file *f, unsigned long long seq)
{
    for (int i = f->n - 1; i >= 0; i--)
        if (f->e[i].seq == seq) return &f->e[i];
    return NULL;
}

static const char head[] = "usage: ddprt-trace ddprt-trace.0 ddprt-trace.1 ...\n\nMerges the flight-recorder files "
                           "of one job: where each rank was, who is behind, ops that differ between ranks.\n\n";

static rank_file fs[MAXR];

/* Merges and prints the files; the exit status (1 when one could not be read). */
static int trace(char **files, int nfiles)
{
    int world = 0, bad = 0;
    for (int i = 0; i < nfiles; i++) {
        rank_file f = {0};
        if (load(files[i], &f)) {
            free(f.e);
            bad = 1;
            continue;
        }
        if ((world && f.world != world) || f.rank >= MAXR) {
            fprintf(stderr, "ddprt-trace: %s: world %d, others %d\n", files[i], f.world, world);
            free(f.e);
            bad = 1;
            continue;
        }
        world = f.world;
        free(fs[f.rank].e); /* a rank given twice: the last file */
        fs[f.rank] = f;
    }
    if (!world) return 1;
    printf("%-5s %-16s %-8s %-28s %-28s %s\n", "rank", "host", "pid", "last finished", "running (since, s)", "dumped because");
    for (int r = 0; r < world && r < MAXR; r++) {
        rank_file *f = &fs[r];
        if (!f->ok) { printf("%-5d (no file: stopped, killed before it could write, or not given)\n", r); continue; }
        char last[64] = "none", run[64] = "-";
        unsigned long long done = 0;
        for (int i = 0; i < f->n; i++) {
            const ent *e = &f->e[i];
            if (!strcmp(e->state, "done") && e->seq > done) {
                done = e->seq;
                snprintf(last, sizeof last, "%s #%llu", e->kind, e->seq);
            }
            if (!strcmp(e->state, "running") || !strcmp(e->state, "failed"))
                snprintf(run, sizeof run, "%s #%llu %s (%.1f)", e->kind, e->seq, e->state, f->now - e->t1);
        }
        printf("%-5d %-16.16s %-8d %-28s %-28s %.120s\n", r, f->host, f->pid, last, run, f->why);
    }
    /* Reached: the furthest op a rank started. Behind: not yet where others are. */
    unsigned long long reached[MAXR] = {0}, maxr = 0;
    for (int r = 0; r < world && r < MAXR; r++)
        for (int i = 0; fs[r].ok && i < fs[r].n; i++)
            if (strcmp(fs[r].e[i].state, "issued") && fs[r].e[i].seq > reached[r]) reached[r] = fs[r].e[i].seq;
    for (int r = 0; r < world && r < MAXR; r++)
        if (fs[r].ok && reached[r] > maxr) maxr = reached[r];
    int nbehind = 0;
    for (int r = 0; r < world && r < MAXR; r++) {
        if (!fs[r].ok) { printf("behind: rank %d (no trace file)\n", r); nbehind++; continue; }
        if (reached[r] < maxr) {
            printf("behind: rank %d reached #%llu, others up to #%llu\n", r, reached[r], maxr);
            nbehind++;
        }
    }
    if (!nbehind) printf("behind: none (every rank with a file reached #%llu)\n", maxr);
    /* Ops that differ between ranks at one sequence number. */
    for (int r = 1; r < world && r < MAXR; r++) {
        if (!fs[r].ok || !fs[0].ok) continue;
        for (int i = 0; i < fs[r].n; i++) {
            const ent *a = &fs[r].e[i], *b = find(&fs[0], a->seq);
            if (b && (strcmp(a->kind, b->kind) || strcmp(a->dt, b->dt) || strcmp(a->op, b->op) || a->bytes != b->bytes)) {
                printf("mismatch at #%llu: rank 0 %s %s %s %llu B, rank %d %s %s %s %llu B\n", a->seq, b->kind, b->dt, b->op,
                       b->bytes, r, a->kind, a->dt, a->op, a->bytes);
                break;
            }
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    /* No flags of its own: the table only gives --help, --version and the strict check
     * (an unknown --flag is an error, not a file name). */
    static const rt_args spec = {"ddprt-trace", NULL, 0, -1, 0};
    char **files = calloc((size_t)argc, sizeof *files), err[512];
    int nfiles = 0, rc = files ? rt_args_main(&spec, NULL, argc, argv, files, &nfiles, head, NULL) : 1;
    if (rc < 0 && rt_env_check(err, sizeof err)) {
        fprintf(stderr, "ddprt-trace: error: %s\n", err);
        rc = 2;
    } else if (rc < 0 && !nfiles) {
        fprintf(stderr, "ddprt-trace: error: no trace files given (see ddprt-trace --help)\n");
        rc = 2;
    } else if (rc < 0) {
        rc = trace(files, nfiles);
    }
    for (int r = 0; r < MAXR; r++) free(fs[r].e);
    free(files);
    return rc;
}
