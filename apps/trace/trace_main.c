/* ddprt-trace FILES...: merges the flight-recorder files of a job (ddprt-trace.RANK,
 * written on a failure, SIGUSR1 or a stall warning; see transport/tp_trace.h) and
 * prints where each rank was, who is behind, and ops that differ between ranks at the
 * same sequence number. The reader (trace_read.c) checks every field; a file not whole
 * or of another job stops the merge (docs/reliability.md). */
#include "apps/trace/trace.h"
#include "rt/args.h"
#include "rt/env.h"
#include "rt/version.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef trace_ent ent;
typedef trace_file rank_file;

/* A whole file into memory (start-up sized: the recorder keeps at most 2^24 rows). */
static int load(const char *path, rank_file *f)
{
    FILE *in = fopen(path, "rb");
    char err[1200];
    if (!in) { fprintf(stderr, "ddprt-trace: cannot read %s\n", path); return -1; }
    size_t n = 0, cap = 0;
    char *buf = NULL;
    for (;;) {
        if (n == cap) {
            char *nb = cap < ((size_t)4 << 30) ? realloc(buf, cap = cap ? 2 * cap : 65536) : NULL;
            if (!nb) { fprintf(stderr, "ddprt-trace: %s: too large to read\n", path); free(buf); fclose(in); return -1; }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, in);
        if (!r) break;
        n += r;
    }
    int bad = ferror(in);
    fclose(in);
    if (bad) { fprintf(stderr, "ddprt-trace: cannot read %s\n", path); free(buf); return -1; }
    int rc = trace_parse(buf, n, path, f, err, sizeof err);
    free(buf);
    if (rc) { fprintf(stderr, "ddprt-trace: %s\n", err); return -1; }
    if (f->cut)
        fprintf(stderr, "ddprt-trace: warning: %s:%d: the last line is cut (the rank died while writing?): using the "
                "%d complete rows before it\n", path, f->cut, f->n);
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

static rank_file *fs; /* by rank, nfs = world entries */
static int nfs;

/* Merges and prints the files; the exit status (1 when one could not be read). A file
 * of another world, or a second file of one rank, is refused naming both. */
static int trace(char **files, int nfiles)
{
    int world = 0, bad = 0;
    const char *first = NULL;
    for (int i = 0; i < nfiles; i++) {
        rank_file f;
        if (load(files[i], &f)) {
            bad = 1;
            continue;
        }
        if (world && f.world != world) {
            fprintf(stderr, "ddprt-trace: %s: world %d, but %s has world %d (files of two jobs?)\n", files[i], f.world,
                    first, world);
            trace_file_free(&f);
            bad = 1;
            continue;
        }
        if (!world && !(fs = calloc((size_t)f.world, sizeof *fs))) {
            fprintf(stderr, "ddprt-trace: out of memory for %d ranks\n", f.world);
            trace_file_free(&f);
            return 1;
        }
        if (!world) world = nfs = f.world, first = files[i];
        if (fs[f.rank].ok) {
            fprintf(stderr, "ddprt-trace: %s and %s are both rank %d's (give each rank's file once)\n", fs[f.rank].file,
                    files[i], f.rank);
            trace_file_free(&f);
            bad = 1;
            continue;
        }
        fs[f.rank] = f;
    }
    if (!world) return 1;
    if (bad) return 1; /* a merge of what was read would blame the wrong ranks */
    printf("%-5s %-16s %-8s %-28s %-28s %s\n", "rank", "host", "pid", "last finished", "running (since, s)", "dumped because");
    for (int r = 0; r < world; r++) {
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
    unsigned long long *reached = calloc((size_t)world, sizeof *reached), maxr = 0;
    if (!reached) return 1;
    for (int r = 0; r < world; r++)
        for (int i = 0; fs[r].ok && i < fs[r].n; i++)
            if (strcmp(fs[r].e[i].state, "issued") && fs[r].e[i].seq > reached[r]) reached[r] = fs[r].e[i].seq;
    for (int r = 0; r < world; r++)
        if (fs[r].ok && reached[r] > maxr) maxr = reached[r];
    int nbehind = 0;
    for (int r = 0; r < world; r++) {
        if (!fs[r].ok) { printf("behind: rank %d (no trace file)\n", r); nbehind++; continue; }
        if (reached[r] < maxr) {
            printf("behind: rank %d reached #%llu, others up to #%llu\n", r, reached[r], maxr);
            nbehind++;
        }
    }
    if (!nbehind) printf("behind: none (every rank with a file reached #%llu)\n", maxr);
    /* Ops that differ between ranks at one sequence number. */
    for (int r = 1; r < world; r++) {
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
    free(reached);
    return 0;
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
    for (int r = 0; r < nfs; r++) trace_file_free(&fs[r]);
    free(fs);
    free(files);
    return rc;
}
