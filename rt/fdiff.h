/* Where two float results differ, said in one line: the start-up probes' and the device
 * tests' report when a tensor-core path disagrees with the one it replaces. A GPU is lent
 * rarely and briefly, so the line has to tell a layout bug from a rounding difference on
 * its own: how many elements differ, the first and the worst with their indices, and
 * which row and column residues they fall on (fragments and swizzles repeat every 8, 16
 * or 64 rows and columns: "rows mod 64 {8-15}" is a fragment half, all rows and columns
 * a scale or a k-order difference). DDPRT_PROBE_DUMP=DIR also writes both arrays there
 * for a closer look off the GPU machine. */
#ifndef RT_FDIFF_H
#define RT_FDIFF_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

/* got against want, rows x cols row-major: the elements where |got - want| > tol * the
 * largest |want| (NaN or inf in got: always), their count returned. line (len > 0) gets
 * "N of M differ beyond T of S: first [r][c] got G want W, worst [r][c] got G want W;
 * rows mod 64 {..}, cols mod 64 {..}" (or "all M within T of S"). */
size_t rt_fdiff_line(const float *got, const float *want, size_t rows, size_t cols, double tol, char *line,
                     size_t len);

/* DIR/NAME.got.f32 and DIR/NAME.want.f32 (a 16-byte header "DDPRTF32", rows, cols as
 * little-endian uint32, then the floats) where DDPRT_PROBE_DUMP=DIR is set: 1 written,
 * 0 unset, -1 with why (the file and errno's text). */
int rt_fdiff_dump(const char *name, const float *got, const float *want, size_t rows, size_t cols, char *why,
                  size_t len);

/* A probe's or a test's comparison: the elements beyond tol (rt_fdiff_line's count; 0:
 * they agree and nothing is said). Where some differ: "NAME: " and the line logged as a
 * warning, both arrays dumped where DDPRT_PROBE_DUMP asks (a dump that fails is said in
 * the warning), and the line in why (len > 0) for the caller's own report. NAME is a
 * file name's stem: letters, digits, '-', '_', '.'. */
size_t rt_fdiff_report(const char *name, const float *got, const float *want, size_t rows, size_t cols, double tol,
                       char *why, size_t len);
#ifdef __cplusplus
}
#endif
#endif
