/* One line on where two float results differ (rt/fdiff.h). */
#include "rt/fdiff.h"
#include "rt/env.h"
#include "rt/log.h"
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The set bits of a 64-bit residue mask as ranges: "{0-7,16-23}". */
static void mask_ranges(uint64_t m, char *out, size_t len)
{
    size_t n = (size_t)snprintf(out, len, "{");
    for (int i = 0; i < 64 && n < len; i++) {
        if (!(m >> i & 1)) continue;
        int j = i;
        while (j + 1 < 64 && (m >> (j + 1) & 1)) j++;
        n += (size_t)snprintf(out + n, len - n, n > 1 ? ",%d" : "%d", i);
        if (j > i && n < len) n += (size_t)snprintf(out + n, len - n, "-%d", j);
        i = j;
    }
    if (n < len) snprintf(out + n, len - n, "}");
}

size_t rt_fdiff_line(const float *got, const float *want, size_t rows, size_t cols, double tol, char *line,
                     size_t len)
{
    const size_t total = rows * cols;
    double big = 0;
    for (size_t i = 0; i < total; i++)
        if (isfinite(want[i])) big = fmax(big, fabs((double)want[i]));
    const double bound = tol * big;
    size_t bad = 0, first = 0, worst = 0;
    double werr = -1;
    uint64_t rm = 0, cm = 0;
    for (size_t i = 0; i < total; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!isfinite(got[i]) && isfinite(want[i])) e = INFINITY;
        else if (isnan(e)) e = got[i] == want[i] ? 0 : INFINITY; /* inf against the same inf is no difference */
        if (!(e > bound)) continue;
        if (!bad++) first = i;
        if (e > werr) werr = e, worst = i;
        rm |= 1ull << (i / cols % 64), cm |= 1ull << (i % cols % 64);
    }
    if (!len) return bad;
    if (!bad) {
        snprintf(line, len, "all %zu within %.3g of %.3g", total, tol, big);
        return 0;
    }
    char r[200], c[200];
    mask_ranges(rm, r, sizeof r);
    mask_ranges(cm, c, sizeof c);
    snprintf(line, len,
             "%zu of %zu differ beyond %.3g of %.3g: first [%zu][%zu] got %.6g want %.6g, worst [%zu][%zu] got %.6g "
             "want %.6g; rows mod 64 %s, cols mod 64 %s",
             bad, total, tol, big, first / cols, first % cols, got[first], want[first], worst / cols, worst % cols,
             got[worst], want[worst], r, c);
    return bad;
}

static int dump_one(const char *path, const float *v, size_t rows, size_t cols, char *why, size_t len)
{
    FILE *f = fopen(path, "wb");
    uint32_t h[2] = {(uint32_t)rows, (uint32_t)cols};
    if (!f || fwrite("DDPRTF32", 1, 8, f) != 8 || fwrite(h, sizeof h, 1, f) != 1 ||
        fwrite(v, sizeof(float), rows * cols, f) != rows * cols) {
        snprintf(why, len, "%s: %s", path, strerror(errno ? errno : EIO));
        if (f) fclose(f);
        return -1;
    }
    if (fclose(f)) {
        snprintf(why, len, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int rt_fdiff_dump(const char *name, const float *got, const float *want, size_t rows, size_t cols, char *why,
                  size_t len)
{
    const char *dir = rt_env_str(RT_ENV_PROBE_DUMP);
    if (!dir) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.got.f32", dir, name);
    if (dump_one(path, got, rows, cols, why, len)) return -1;
    snprintf(path, sizeof path, "%s/%s.want.f32", dir, name);
    return dump_one(path, want, rows, cols, why, len) ? -1 : 1;
}

size_t rt_fdiff_report(const char *name, const float *got, const float *want, size_t rows, size_t cols, double tol,
                       char *why, size_t len)
{
    char line[600], dump[300] = "";
    size_t bad = rt_fdiff_line(got, want, rows, cols, tol, line, sizeof line);
    if (!bad) return 0;
    char err[260];
    int d = rt_fdiff_dump(name, got, want, rows, cols, err, sizeof err);
    if (d > 0) snprintf(dump, sizeof dump, " (both results in %s/%s.*.f32)", rt_env_str(RT_ENV_PROBE_DUMP), name);
    else if (d < 0) snprintf(dump, sizeof dump, " (the dump failed: %s)", err);
    rt_warn("%s: %s%s", name, line, dump);
    if (len) snprintf(why, len, "%s", line);
    return bad;
}
