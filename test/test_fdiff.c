/* rt/fdiff.h: the one-line report of where two results differ, and the probes' dump. */
#include "test/t.h"
#include "rt/fdiff.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { R = 130, C = 72 };

static void fill(float *a)
{
    for (int i = 0; i < R * C; i++) a[i] = (float)((i * 37 % 101) - 50) / 32.0f;
}

/* A fragment-half bug (rows 8-15 of every 16 wrong in columns 0-7 of every 8) reads as
 * its residues; one value's rounding within the bound reads as no difference. */
TEST(fdiff_names_the_residues_of_a_fragment_bug)
{
    static float want[R * C], got[R * C];
    char line[512];
    fill(want);
    memcpy(got, want, sizeof got);
    got[5 * C + 3] += 1e-6f; /* within 2^-12 of the largest */
    CHECK_EQ(rt_fdiff_line(got, want, R, C, 0x1p-12, line, sizeof line), 0);
    CHECKF(strstr(line, "all 9360 within") != NULL, "%s", line);
    size_t n = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            if (r % 16 >= 8 && c % 8 == 0) got[r * C + c] += 1.0f, n++;
    got[100 * C + 64] = 9.0f; /* the worst: row 100 (36 mod 64), column 64 (0 mod 64) */
    CHECK_EQ(rt_fdiff_line(got, want, R, C, 0x1p-12, line, sizeof line), n + (100 % 16 < 8));
    CHECKF(strstr(line, "first [8][0] got") != NULL, "%s", line);
    CHECKF(strstr(line, "worst [100][64] got 9 ") != NULL, "%s", line);
    CHECKF(strstr(line, "rows mod 64 {8-15,24-31,36,40-47,56-63}") != NULL, "%s", line);
    CHECKF(strstr(line, "cols mod 64 {0,8,16,24,32,40,48,56}") != NULL, "%s", line);
    /* a NaN always differs, whatever the bound */
    memcpy(got, want, sizeof got);
    got[R * C - 1] = 0.0f / 0.0f;
    CHECK_EQ(rt_fdiff_line(got, want, R, C, 1e9, line, sizeof line), 1);
    CHECKF(strstr(line, "first [129][71] got ") && strstr(line, "nan want 0.15625"), "%s", line);
    CHECK_EQ(rt_fdiff_line(got, want, R, C, 1e9, NULL, 0), 1); /* the count alone */
}

/* DDPRT_PROBE_DUMP: both arrays with their header; unset, nothing; a folder that is not
 * there, the file and the reason. */
TEST(fdiff_dumps_both_results_where_asked)
{
    static float want[R * C], got[R * C], back[R * C];
    char why[512], dir[] = "/tmp/ddprt-fdiff-XXXXXX", path[600];
    fill(want);
    memcpy(got, want, sizeof got);
    got[7] = 100.0f;
    unsetenv("DDPRT_PROBE_DUMP");
    CHECK_EQ(rt_fdiff_dump("p", got, want, R, C, why, sizeof why), 0);
    CHECK(mkdtemp(dir) != NULL);
    setenv("DDPRT_PROBE_DUMP", dir, 1);
    CHECK_EQ(rt_fdiff_dump("conv-dx", got, want, R, C, why, sizeof why), 1);
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/conv-dx.%s.f32", dir, k ? "want" : "got");
        FILE *f = fopen(path, "rb");
        char magic[8];
        uint32_t h[2] = {0, 0};
        CHECKF(f && fread(magic, 8, 1, f) == 1 && fread(h, sizeof h, 1, f) == 1 &&
                   fread(back, sizeof(float), R * C, f) == R * C,
               "%s", path);
        if (f) fclose(f);
        CHECK(!memcmp(magic, "DDPRTF32", 8) && h[0] == R && h[1] == C);
        CHECK(!memcmp(back, k ? want : got, sizeof back));
        unlink(path);
    }
    /* the report: the count, the line in why, both arrays dumped */
    CHECK_EQ(rt_fdiff_report("probe-x", got, want, R, C, 0x1p-12, why, sizeof why), 1);
    CHECKF(strstr(why, "1 of 9360 differ") && strstr(why, "first [0][7] got 100 "), "%s", why);
    CHECK_EQ(rt_fdiff_report("probe-x", want, want, R, C, 0x1p-12, why, sizeof why), 0);
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/probe-x.%s.f32", dir, k ? "want" : "got");
        CHECKF(unlink(path) == 0, "%s", path);
    }
    rmdir(dir);
    setenv("DDPRT_PROBE_DUMP", "/nonexistent-ddprt/dir", 1);
    CHECK_EQ(rt_fdiff_dump("p", got, want, R, C, why, sizeof why), -1);
    CHECKF(strstr(why, "/nonexistent-ddprt/dir/p.got.f32: No such file") != NULL, "%s", why);
    unsetenv("DDPRT_PROBE_DUMP");
}

/* bench/probe_diff.py on a dump whose rows are a fragment half off (got row i = want
 * row i ^ 8): it names the map, which is what a failing probe on a lent GPU comes back
 * with. Skipped where /usr/bin/python3 has no numpy. */
TEST(fdiff_probe_diff_names_a_row_map)
{
    static float want[R * C], got[R * C];
    char dir[] = "/tmp/ddprt-pdiff-XXXXXX", why[300], cmd[400], out[4096] = "";
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1")) {
        t_note("skipped: /usr/bin/python3 has no numpy (Debian: apt-get install python3-numpy)");
        return;
    }
    fill(want);
    for (int r = 0; r < R; r++) {
        int s = (r ^ 8) < R ? r ^ 8 : r;
        memcpy(got + r * C, want + s * C, sizeof(float) * C);
    }
    CHECK(mkdtemp(dir) != NULL);
    setenv("DDPRT_PROBE_DUMP", dir, 1);
    CHECK_EQ(rt_fdiff_dump("frag", got, want, R, C, why, sizeof why), 1);
    unsetenv("DDPRT_PROBE_DUMP");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/probe_diff.py %s 2>&1", dir);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    CHECK(p && pclose(p) == 0);
    CHECKF(strstr(out, "frag: 130 x 72, ") && strstr(out, "got row i = want row i ^ 8: all match"), "%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}
