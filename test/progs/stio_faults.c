/* Fault-injection matrix for nn/stio saves: t-stio_faults DIR [keep [pair]]
 * A clean save is traced to list its steps; then each step in turn is made to fail
 * (EIO) and the program checks that PATH still loads and holds the previous
 * checkpoint (or, for a failed fsync of the directory after the rename, the new one),
 * that no temporary file is left, and that the save reported the failure. pair: the
 * save is two files (PATH, PATH.state: a model and its optimizer state), and what
 * loads must be both files of one save. Prints one row per injected step; exit 0 when
 * every row is OK. */
#include "nn/stio.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXSTEPS 256
static char steps[MAXSTEPS][16];
static int idx[MAXSTEPS], nsteps, fail_at = -1, seen;

static int hook(const char *step, int index, void *ctx)
{
    (void)ctx;
    if (fail_at < 0) {
        if (nsteps < MAXSTEPS) snprintf(steps[nsteps], sizeof steps[0], "%s", step), idx[nsteps++] = index;
        return 0;
    }
    return seen++ == fail_at ? EIO : 0;
}

static float W[320 * 50], B[50], M[320 * 50];
static int pair;

static int save(const char *path, float v, int keep, char *err)
{
    for (int i = 0; i < 320 * 50; i++) W[i] = v, M[i] = -v;
    for (int i = 0; i < 50; i++) B[i] = v + i;
    char gen[32];
    snprintf(gen, sizeof gen, "%g", v);
    stio_tensor t[3] = {{"fc1.weight", STIO_F32, 2, {50, 320}, W}, {"fc1.bias", STIO_F32, 1, {50}, B},
                        {"optim.momentum.fc1.weight", STIO_F32, 2, {50, 320}, M}};
    stio_meta m[1] = {{"generation", gen}};
    if (pair) {
        stio_part p[2] = {{"", t, 2, m, 1}, {".state", t + 2, 1, m, 1}};
        return stio_save_parts(path, p, 2, keep, err, 512);
    }
    return stio_save(path, t, 3, m, 1, keep, err, 512);
}

/* The value path holds (its generation), or -1 when it does not load. */
static float load(const char *path)
{
    stio_file *f;
    char err[512];
    static float w[320 * 50], b[50], m[320 * 50];
    stio_tensor t[3] = {{"fc1.weight", STIO_F32, 2, {50, 320}, w}, {"fc1.bias", STIO_F32, 1, {50}, b},
                        {"optim.momentum.fc1.weight", STIO_F32, 2, {50, 320}, m}};
    if (stio_open(&f, path, err, sizeof err)) return -1;
    stio_file *sf = NULL;
    int rc = pair ? stio_open_part(&sf, path, ".state", f, err, sizeof err) || stio_read(f, t, 2, err, sizeof err) ||
                    stio_read(sf, t + 2, 1, err, sizeof err)
                  : stio_read(f, t, 3, err, sizeof err);
    const char *g = stio_meta_get(f, "generation");
    float v = g ? strtof(g, NULL) : -1;
    stio_close(sf);
    stio_close(f);
    if (rc || w[7] != v || m[7] != -v || b[3] != v + 3) return -1;
    return v;
}

static int leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.") || strstr(e->d_name, ".prev")) n++;
    if (d) closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: t-stio_faults DIR [keep]\n"); return 2; }
    int keep = argc > 2 ? atoi(argv[2]) : 3, bad = 0;
    pair = argc > 3 && !strcmp(argv[3], "pair");
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/ckpt.st", argv[1]);
    if (save(path, 1, keep, err) || save(path, 2, keep, err)) { fprintf(stderr, "%s\n", err); return 1; }
    stio_set_fault(hook, NULL);
    if (save(path, 3, keep, err)) { fprintf(stderr, "%s\n", err); return 1; } /* traced */
    printf("# save%s with keep=%d over an existing checkpoint: %d steps; each made to fail with EIO\n",
           pair ? " of PATH and PATH.state" : "", keep, nsteps);
    printf("# %-4s %-10s %-6s %-8s %-12s %-10s %s\n", "no.", "step", "index", "save rc", "PATH holds", "tmp left", "verdict");
    for (int k = 0; k < nsteps; k++) {
        float before = load(path);
        fail_at = k, seen = 0;
        int rc = save(path, before + 1, keep, err);
        fail_at = -1;
        float after = load(path);
        int late = !strcmp(steps[k], "fsync-dir"); /* after the rename: the new file is in place */
        int ok = rc == -1 && after == (late ? before + 1 : before) && !leftovers(argv[1]) && strstr(err, path);
        char holds[32];
        snprintf(holds, sizeof holds, after < 0 ? "UNLOADABLE" : after == before ? "previous" : "new");
        printf("  %-4d %-10s %-6d %-8d %-12s %-10d %s\n", k, steps[k], idx[k], rc, holds, leftovers(argv[1]),
               ok ? "OK" : "FAIL");
        if (!ok) { bad = 1; fprintf(stderr, "step %s #%d: %s\n", steps[k], idx[k], err); }
    }
    stio_set_fault(NULL, NULL);
    return bad;
}
