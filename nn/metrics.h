/* --metrics FILE: one CSV row per log interval ("train") and per epoch ("epoch");
 * --plot FILE.svg: loss and accuracy curves drawn from that CSV, self-contained SVG. */
#ifndef NN_METRICS_H
#define NN_METRICS_H
#include <stdint.h>
#include <stdio.h>

/* lr, acc1, acc5: extra columns of the next rows, set by the trainer (< 0: empty). */
typedef struct nn_metrics { FILE *f; double lr, acc1, acc5; } nn_metrics;

/* path NULL: rows are dropped. */
int nn_metrics_open(nn_metrics *m, const char *path, char *err, size_t errlen);
/* accuracy < 0: not measured in this row. Times are seconds of this epoch so far. */
void nn_metrics_row(nn_metrics *m, const char *kind, uint64_t step, int epoch, double loss, double accuracy,
                    double samples_per_s, double compute_s, double comm_s, double data_s);
void nn_metrics_close(nn_metrics *m);
int nn_metrics_plot(const char *csv, const char *svg, char *err, size_t errlen);
/* Round axis ticks: widens [*lo, *hi] to multiples of *step, a 1, 2 or 5 times a power
 * of ten, the smallest (>= min_step) giving at most max_intervals intervals. Returns
 * the intervals. */
int nn_nice_ticks(double *lo, double *hi, int max_intervals, double min_step, double *step);
/* v with as many decimals as step needs ("0.5", "1500"). */
void nn_tick_label(char *out, size_t len, double v, double step);
/* Decimals that print a rate with at least 3 significant digits (6.04, 21.8, 343, and
 * 3 for anything under 1): whole units hid 5 % differences at ResNet-18's 6 samples/s. */
int nn_rate_decimals(double v);
#endif
