/* The SVG plot's axes: round ticks (1-2-5 steps) covering the data, readable labels. */
#include "test/t.h"
#include "test/t_proc.h"
#include "nn/metrics.h"
#include <stdio.h>
#include <string.h>

TEST(rates_print_with_3_significant_digits)
{
    const double v[] = {6.04, 21.83, 343.2, 21820.4, 0.512};
    const char *want[] = {"6.04", "21.8", "343", "21820", "0.512"};
    for (int i = 0; i < 5; i++) {
        char s[32];
        snprintf(s, sizeof s, "%.*f", nn_rate_decimals(v[i]), v[i]);
        CHECKF(strcmp(s, want[i]) == 0, "%g printed as %s, want %s", v[i], s, want[i]);
    }
}

TEST(plot_ticks_are_round_1_2_5_steps_covering_the_data)
{
    static const struct { double lo, hi, want_lo, want_hi, step; } c[] = {
        {0, 1875, 0, 2000, 500},          /* steps of one epoch: not 469.8, 938.5, 1407 */
        {0.31, 2.30, 0, 2.5, 0.5},        /* loss */
        {72.16, 83.05, 70, 85, 5},        /* accuracy % */
        {1, 10, 0, 10, 2},                /* epochs */
        {1, 2, 1, 2, 0.2},
        {72.16, 77.05, 72, 78, 2},        /* 0.1 * 10 leaves 6 intervals: the next decade's 2 */
        {0.0012, 0.0049, 0.001, 0.005, 0.001},
        {-3.2, 7.9, -5, 10, 5},
        {0.3, 0.6, 0.3, 0.6, 0.1},         /* 0.3 is not 0.30000000000000004 + one step */
        {100000, 100000, 100000, 200000, 20000}, /* a flat series still gets an axis */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        double lo = c[i].lo, hi = c[i].hi, step;
        int n = nn_nice_ticks(&lo, &hi, 5, 0, &step);
        CHECKF(n >= 1 && n <= 5, "case %zu: %d intervals", i, n);
        CHECK_NEAR(step, c[i].step, 1e-9);
        CHECK_NEAR(lo, c[i].want_lo, 1e-9);
        CHECK_NEAR(hi, c[i].want_hi, 1e-9);
        CHECKF(lo <= c[i].lo + 1e-9 * step && hi >= c[i].hi - 1e-9 * step, "case %zu: [%g, %g] does not cover the data",
               i, lo, hi);
    }
    double lo = 1, hi = 2, step; /* two epochs: whole-number ticks only */
    CHECK(nn_nice_ticks(&lo, &hi, 5, 1, &step) == 1 && step == 1 && lo == 1 && hi == 2);
    char s[32];
    nn_tick_label(s, sizeof s, 1500, 500);
    CHECKF(!strcmp(s, "1500"), "%s", s);
    nn_tick_label(s, sizeof s, 0.5 + 0.5 + 0.5, 0.5);
    CHECKF(!strcmp(s, "1.5"), "%s", s);
    nn_tick_label(s, sizeof s, 0.1 * 3, 0.1);
    CHECKF(!strcmp(s, "0.3"), "%s", s);
    nn_tick_label(s, sizeof s, -5 + 5 * (1 - 1e-17), 5);
    CHECKF(!strcmp(s, "0"), "%s", s);
    nn_tick_label(s, sizeof s, 0.003, 0.001);
    CHECKF(!strcmp(s, "0.003"), "%s", s);
}

/* The plot drawn from a metrics CSV labels its axes with those round values. */
PTEST(plot_svg_uses_the_round_ticks)
{
    char csv[600], svg[600], err[256];
    snprintf(csv, sizeof csv, "%s/m.csv", t_proc_tmpdir());
    snprintf(svg, sizeof svg, "%s/m.svg", t_proc_tmpdir());
    FILE *f = fopen(csv, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("kind,step,epoch,loss,accuracy,samples_per_s,compute_s,comm_wait_s,data_wait_s\n", f);
    for (int s = 0; s <= 1875; s += 25) fprintf(f, "train,%d,1,%.4f,,1,0,0,0\n", s, 2.3 - s / 1000.0);
    fputs("epoch,938,1,0.78,0.7216,1,0,0,0\nepoch,1876,2,0.61,0.7705,1,0,0,0\n", f);
    fclose(f);
    CHECKF(nn_metrics_plot(csv, svg, err, sizeof err) == 0, "%s", err);
    const char *s = t_slurp(svg);
    CHECKF(strstr(s, ">500</text>") && strstr(s, ">1500</text>") && strstr(s, ">2000</text>"), "%s", s);
    CHECKF(strstr(s, ">0.5</text>") && strstr(s, ">2.5</text>"), "%s", s); /* loss 0.42 .. 2.3 */
    CHECKF(strstr(s, ">72</text>") && strstr(s, ">78</text>"), "%s", s);   /* accuracy 72.2 .. 77.1 */
    CHECKF(!strstr(s, "469.") && !strstr(s, "938.5"), "%s", s);
}
