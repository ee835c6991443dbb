/* The README's sample output (issue 41 point 10): tools/readme_run.sh's block, what
 * `make run RUN_ARGS=--epochs 1` prints, compared with a real run of the same command.
 * Timings, speeds, the thread count, the kernels and the transports are the machine's;
 * every loss, accuracy and count must be the README's. The ranks' info lines (stderr)
 * and the seed script's lines (stdout) reach the launcher on two pipes, so the info
 * lines are checked for presence, the others in order. */
#include "test/t.h"
#include "test/t_proc.h"
#include "test/t_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXL 400

/* The machine's part of a line cut off: after a marker, or a number before one. */
static void mask(char *s)
{
    static const char *const keep[] = {"info: backend ", "info: comm: ", " rank(s), ", "\t(", " took ", "Total time="};
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) {
        char *m = strstr(s, keep[i]);
        if (m) m[strlen(keep[i])] = 0;
    }
    char *m = strstr(s, " samples/s; ");
    if (m) {
        while (m > s && (m[-1] == '.' || (m[-1] >= '0' && m[-1] <= '9'))) m--;
        *m = 0;
    }
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n')) s[--n] = 0;
}

static int lines(char *text, char **out)
{
    int n = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && n < MAXL; l = strtok_r(NULL, "\n", &save)) {
        mask(l);
        out[n++] = l;
    }
    return n;
}

static int is_info(const char *l) { return strstr(l, "ddprt[rank 0]: ") != NULL; }

TEST(readme_sample_output_is_a_real_run)
{
    if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) || getenv("DDPRT_DATA")) {
        t_note("readme: Fashion-MNIST is not in /usr/share/datasets (or DDPRT_DATA is set): the block is not checked");
        return;
    }
    static char readme[1 << 16], run[1 << 20];
    const char *r = t_slurp("README.md");
    const char *b = strstr(r, "tools/readme_run.sh");
    b = b ? strstr(b, "```\n") : NULL;
    const char *e = b ? strstr(b + 4, "```") : NULL;
    CHECKF(b && e && e - b < (long)sizeof readme, "README.md: no block after tools/readme_run.sh");
    if (!b || !e) return;
    memcpy(readme, b + 4, (size_t)(e - b - 4));
    t_clean_env();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s --nproc-per-node 2 -- %s --epochs 1 2>&1", t_prog("ddprt-launch"), t_prog("ddprt-train"));
    int st = t_sh(cmd, run, sizeof run);
    CHECKF(st == 0, "%s: %d: %s", cmd, st, run);
    char *want[MAXL], *got[MAXL];
    int nw = lines(readme, want), ng = lines(run, got), g = 0, info = 0;
    for (int w = 0; w < nw; w++) {
        if (is_info(want[w])) { /* somewhere in the run */
            int found = 0;
            for (int k = 0; k < ng && !found; k++) found = !strcmp(want[w], got[k]);
            CHECKF(found, "README line %d not in the run: '%s'", w + 1, want[w]);
            info++;
            continue;
        }
        if (!strcmp(want[w], "...")) { /* skip to the next README line that is not info */
            int n = w + 1;
            while (n < nw && is_info(want[n])) n++;
            while (n < nw && g < ng && strcmp(got[g], want[n])) g++;
            continue;
        }
        while (g < ng && is_info(got[g])) g++;
        CHECKF(g < ng && !strcmp(want[w], got[g]), "README line %d: '%s', the run: '%s'", w + 1, want[w],
               g < ng ? got[g] : "(end)");
        g++;
    }
    while (g < ng && is_info(got[g])) g++;
    CHECKF(g == ng, "the run goes on past the README's block: '%s'", g < ng ? got[g] : "");
    CHECK(nw >= 10 && info >= 3); /* the block has the lines this test is about */
}
