/* The transformer kernels' table (apps/bench-kernels/bench_tfm.c). */
#ifndef BENCH_TFM_H
#define BENCH_TFM_H
void bench_tfm(int rounds);
#endif
