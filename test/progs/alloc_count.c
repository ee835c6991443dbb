/* Counts heap allocations made by training steps: malloc & co are replaced here
 * (forwarding to glibc) and counted only between start and stop. Prints
 * "allocations: N over S steps". Args: DATA THREADS [MODEL|FILE.cfg [RECOMPUTE_MACS]]. Sanitizer builds replace malloc themselves: skip. */
#include "kernels/k.h"
#include "nn/train_epoch.h"
#include "nn/train_setup.h"
#include "nn/train_step.h"
#include "nn/lm.h"
#include "rt/log.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
int main(void) { puts("skipped: sanitizer build"); return 0; }
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_int counting, count;
static void note(void) { if (atomic_load(&counting)) atomic_fetch_add(&count, 1); }
void *malloc(size_t n) { note(); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { note(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { note(); return __libc_realloc(p, n); }
void *aligned_alloc(size_t al, size_t n) { note(); return __libc_memalign(al, n); }
void *memalign(size_t al, size_t n) { note(); return __libc_memalign(al, n); }
int posix_memalign(void **p, size_t al, size_t n)
{
    note();
    *p = __libc_memalign(al, n);
    return *p ? 0 : 12;
}
void free(void *p) { __libc_free(p); }

int main(int argc, char **argv)
{
    nn_opts o;
    nn_trainer t;
    char err[512];
    if (argc < 3) return 2;
    nn_opts_default(&o);
    o.data = argv[1];
    o.batch_size = 32;
    if (argc > 3 && strstr(argv[3], ".cfg")) o.model_file = argv[3], o.batch_size = 4, o.optimizer = "adamw", o.seq_len = 16;
    else if (argc > 3) o.model = argv[3];
    if (argc > 4) o.recompute_macs = atoi(argv[4]);
    k_set_threads(atoi(argv[2]));
    if (nn_trainer_setup(&t, &o, NULL, err, sizeof err)) rt_fatal("%s", err);
    const void *x;
    const int32_t *y;
    int n, steps = 0;
    /* Epoch 1 warms up (first-use allocations in libc are not the loop's). */
    for (int epoch = 1; epoch <= 2; epoch++) {
        if (epoch == 2) atomic_store(&counting, 1);
        nn_sampler_set_epoch(&t.sampler, epoch);
        nn_loader_begin(&t.loader, &t.train, t.sampler.indices, 0, t.sampler.num_samples, o.batch_size, epoch, 1);
        while ((n = nn_loader_next(&t.loader, &x, &y)) > 0) {
            nn_trainer_step(&t, x, y, n);
            steps += epoch == 2;
        }
        double loss;
        long correct, cnt;
        nn_trainer_eval(&t, &loss, &correct, &cnt);
        if (t.g.lm) nn_lm_eval(&t, &t.lm); /* the mid-epoch validation of language models */
    }
    atomic_store(&counting, 0);
    printf("allocations: %d over %d steps\n", atomic_load(&count), steps);
    nn_trainer_free(&t);
    return 0;
}
#endif
