/* The run's settings: one object built from the options in the trainer's set-up and
 * carried with the run (nn_trainer.set). The kernels get theirs applied from it (the
 * thread pool, the ISA path, the conv algorithm, the fp32 matmul precision), the
 * device path says here which it honours and refuses the rest with one line: nothing
 * is poked into process globals from main(), and a second embedder (the Python
 * package, a test) builds the same object. */
#ifndef NN_SETTINGS_H
#define NN_SETTINGS_H
#include "kernels/k_settings.h"
#include "nn/opts.h"
#include <stddef.h>

typedef enum { NN_DEVICE_CPU, NN_DEVICE_CUDA } nn_device;
enum { NN_SET_AMP_NONE, NN_SET_AMP_BF16, NN_SET_AMP_FP16 };

typedef struct nn_settings {
    k_settings k;     /* the CPU kernels' (under --device cuda: the host's work) */
    nn_device device; /* --device cuda (and not --no-cuda) */
    int amp;          /* --amp: NN_SET_AMP_NONE, _BF16, _FP16 */
    int act16;        /* device --amp: activations in 16 bits (--amp-activations 16, the default) */
    int channels_last; /* device --amp: NHWC activations where the graph allows (--channels-last on / auto) */
} nn_settings;

/* From the options and, for what no flag names, the environment (DDPRT_ISA,
 * DDPRT_CONV, DDPRT_BF16_GEMM); threads: --threads, else the host's CPUs shared by the
 * ranks on it (local_world). 0, or -1 with a one-line error naming the flag. */
int nn_settings_build(nn_settings *s, const nn_opts *o, int local_world, char *err, size_t errlen);
/* Makes them the ones in force (the kernel pool started, the dispatch set). */
int nn_settings_apply(const nn_settings *s, char *err, size_t errlen);
/* "2 thread(s) per rank, avx512bf16 kernels, fp32 matmuls in bf16x3 (AMX)": the start-up line's part. */
void nn_settings_describe(const nn_settings *s, char *buf, size_t len);
#endif
