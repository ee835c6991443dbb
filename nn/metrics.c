#include "nn/metrics.h"
#include <errno.h>
#include <math.h>
#include <string.h>

#define CSV_HEADER "kind,step,epoch,loss,accuracy,samples_per_s,compute_s,comm_wait_s,data_wait_s,lr,acc1,acc5\n"

int nn_metrics_open(nn_metrics *m, const char *path, char *err, size_t errlen)
{
    m->f = NULL;
    m->lr = m->acc1 = m->acc5 = -1;
    if (!path) return 0;
    m->f = fopen(path, "w");
    if (!m->f) {
        snprintf(err, errlen, "--metrics %s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    fputs(CSV_HEADER, m->f);
    return 0;
}

void nn_metrics_row(nn_metrics *m, const char *kind, uint64_t step, int epoch, double loss, double accuracy,
                    double samples_per_s, double compute_s, double comm_s, double data_s)
{
    if (!m->f) return;
    fprintf(m->f, "%s,%llu,%d,%.6f,", kind, (unsigned long long)step, epoch, loss);
    if (accuracy >= 0) fprintf(m->f, "%.6f", accuracy);
    int dec = nn_rate_decimals(samples_per_s);
    fprintf(m->f, ",%.*f,%.4f,%.4f,%.4f,", dec > 1 ? dec : 1, samples_per_s, compute_s, comm_s, data_s);
    if (m->lr >= 0) fprintf(m->f, "%.8g", m->lr);
    fputc(',', m->f);
    if (!strcmp(kind, "epoch") && m->acc1 >= 0) fprintf(m->f, "%.6f", m->acc1);
    fputc(',', m->f);
    if (!strcmp(kind, "epoch") && m->acc5 >= 0) fprintf(m->f, "%.6f", m->acc5);
    fputc('\n', m->f);
    fflush(m->f);
}

void nn_metrics_close(nn_metrics *m)
{
    if (m->f) fclose(m->f);
    m->f = NULL;
}

/* ---- SVG plot: two panels (loss over steps; test accuracy over epochs) ---------- */

#define MAXPTS 100000
typedef struct series { double x[MAXPTS], y[MAXPTS]; int n; } series;
static series train_loss, test_loss, test_acc;

static void add(series *s, double x, double y)
{
    if (s->n < MAXPTS) { s->x[s->n] = x; s->y[s->n] = y; s->n++; }
}

static void range(const series *a, const series *b, double *lo, double *hi, int use_x)
{
    *lo = 1e300;
    *hi = -1e300;
    const series *s[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int i = 0; s[k] && i < s[k]->n; i++) {
            double v = use_x ? s[k]->x[i] : s[k]->y[i];
            if (v < *lo) *lo = v;
            if (v > *hi) *hi = v;
        }
    if (*lo > *hi) { *lo = 0; *hi = 1; }
    if (*hi - *lo < 1e-12) *hi = *lo + 1;
}

static void polyline(FILE *f, const series *s, double x0, double x1, double y0, double y1, int px, int py,
                     int w, int h, const char *color)
{
    if (!s->n) return;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (int i = 0; i < s->n; i++)
        fprintf(f, "%.1f,%.1f ", px + (s->x[i] - x0) / (x1 - x0) * w, py + h - (s->y[i] - y0) / (y1 - y0) * h);
    fprintf(f, "\"/>\n");
}

int nn_nice_ticks(double *lo, double *hi, int max_intervals, double min_step, double *step)
{
    if (max_intervals < 1) max_intervals = 1;
    double span = *hi - *lo;
    if (!(span > 0)) {
        span = fabs(*lo) > 0 ? fabs(*lo) : 1;
        *hi = *lo + span;
    }
    double mag = pow(10, floor(log10(span / max_intervals))), s = mag, a = *lo, b = *hi;
    static const double m[] = {1, 2, 5};
    /* Aligning to multiples can add an interval, hence up to three decades. */
    for (int i = 0; i < 9; i++) {
        s = m[i % 3] * mag * pow(10, i / 3);
        if (s < min_step) continue;
        /* The slack keeps 0.30000000000000004 from becoming one more step. */
        a = floor(*lo / s + 1e-9) * s;
        b = ceil(*hi / s - 1e-9) * s;
        if ((b - a) / s <= max_intervals + 1e-9) break;
    }
    *lo = a, *hi = b, *step = s;
    return (int)lround((b - a) / s);
}

int nn_rate_decimals(double v)
{
    return v >= 100 || v <= 0 ? 0 : v >= 10 ? 1 : v >= 1 ? 2 : 3;
}

void nn_tick_label(char *out, size_t len, double v, double step)
{
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(v) < step * 1e-6) v = 0; /* no "-0.0" */
    snprintf(out, len, "%.*f", decimals, v);
}

/* Widens [x0,x1] and [y0,y1] to round ticks (1-2-5 steps; x, steps or epochs, in whole
 * numbers) and draws the frame and labels. */
static void axes(FILE *f, int px, int py, int w, int h, const char *title, double *x0, double *x1, double *y0,
                 double *y1, const char *xlabel)
{
    double xs, ys;
    int nx = nn_nice_ticks(x0, x1, 5, 1, &xs), ny = nn_nice_ticks(y0, y1, 5, 0, &ys);
    char s[32];
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", px, py, w, h);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\">%s</text>\n", px + w / 2, py - 8, title);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", px + w / 2, py + h + 30, xlabel);
    for (int i = 0; i <= ny; i++) {
        nn_tick_label(s, sizeof s, *y0 + i * ys, ys);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">%s</text>\n", px - 4,
                py + h - h * i / ny + 3, s);
    }
    for (int i = 0; i <= nx; i++) {
        nn_tick_label(s, sizeof s, *x0 + i * xs, xs);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%s</text>\n",
                px + w * i / nx, py + h + 14, s);
    }
}

int nn_metrics_plot(const char *csv, const char *svg, char *err, size_t errlen)
{
    FILE *in = csv ? fopen(csv, "r") : NULL;
    if (!in) {
        snprintf(err, errlen, "--plot: cannot read the metrics file %s", csv ? csv : "(none: pass --metrics FILE)");
        return -1;
    }
    char line[512], kind[16];
    unsigned long long step;
    int epoch;
    double loss, acc;
    train_loss.n = test_loss.n = test_acc.n = 0;
    while (fgets(line, sizeof line, in)) {
        if (sscanf(line, "%15[^,],%llu,%d,%lf,", kind, &step, &epoch, &loss) != 4) continue;
        if (!strcmp(kind, "train")) add(&train_loss, (double)step, loss);
        else if (!strcmp(kind, "epoch")) {
            add(&test_loss, (double)step, loss);
            const char *p = line;
            for (int c = 0; c < 4 && p; c++) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
            if (p && sscanf(p, "%lf", &acc) == 1) add(&test_acc, epoch, 100 * acc);
        }
    }
    fclose(in);
    FILE *f = fopen(svg, "w");
    if (!f) {
        snprintf(err, errlen, "--plot %s: cannot write: %s", svg, strerror(errno));
        return -1;
    }
    int W = 900, H = 360, w = 340, h = 250;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    double x0, x1, y0, y1;
    range(&train_loss, &test_loss, &x0, &x1, 1);
    range(&train_loss, &test_loss, &y0, &y1, 0);
    axes(f, 70, 40, w, h, "loss (blue: train, red: test)", &x0, &x1, &y0, &y1, "step");
    polyline(f, &train_loss, x0, x1, y0, y1, 70, 40, w, h, "#1f77b4");
    polyline(f, &test_loss, x0, x1, y0, y1, 70, 40, w, h, "#d62728");
    range(&test_acc, NULL, &x0, &x1, 1);
    range(&test_acc, NULL, &y0, &y1, 0);
    axes(f, 520, 40, w, h, "test accuracy (%)", &x0, &x1, &y0, &y1, "epoch");
    polyline(f, &test_acc, x0, x1, y0, y1, 520, 40, w, h, "#2ca02c");
    fprintf(f, "</svg>\n");
    fclose(f);
    return 0;
}
