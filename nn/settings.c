#include "nn/settings.h"
#include "kernels/k.h"
#include "ports/posix/port.h"
#include "rt/isa.h"
#include "rt/log.h"
#include <stdio.h>
#include <string.h>

/* What --device cuda does with each setting: the host-side ones (threads, ISA: the
 * loader and the CPU's share of the work) hold; the CPU kernels' algorithm choices have
 * no device meaning, so a flag that asks for one is refused rather than ignored. */
static int check_device(const nn_settings *s, const nn_opts *o, char *err, size_t errlen)
{
    if (s->amp == NN_SET_AMP_FP16 && s->device != NN_DEVICE_CUDA) {
        snprintf(err, errlen, "--amp fp16 needs the CUDA build and a GPU (--device cuda); on the CPU use --amp bf16");
        return -1;
    }
    if (s->device != NN_DEVICE_CUDA) return 0;
    if (s->amp == NN_SET_AMP_FP16 && !(o->loss_scale <= 3.4e38)) {
        snprintf(err, errlen, "--loss-scale %g: at most 3.4e38 (fp32's largest)", o->loss_scale);
        return -1;
    }
    if (o->conv_algo && strcmp(o->conv_algo, "auto")) {
        snprintf(err, errlen, "--conv-algo %s: the CPU convs' algorithm; --device cuda runs its own convs "
                 "(leave --conv-algo out, or auto)", o->conv_algo);
        return -1;
    }
    return 0;
}

int nn_settings_build(nn_settings *s, const nn_opts *o, int local_world, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    k_settings_default(&s->k);
    int ncpu = port_ncpus() / (local_world > 0 ? local_world : 1);
    s->k.threads = o->threads ? o->threads : ncpu > 0 ? ncpu : 1;
    /* The option table checked the names (FC choices): an unknown one cannot get here. */
    if (o->conv_algo) s->k.conv_algo = k_conv_algo_parse(o->conv_algo);
    /* high runs on AMX tiles with the bf16 ISA level; elsewhere it is highest (said once) */
    s->k.matmul_high = k_matmul_precision_parse(o->matmul_precision) == 1;
    static const char *const amps[] = {"none", "bf16", "fp16"};
    for (int i = 0; i < 3; i++)
        if (o->amp && !strcmp(o->amp, amps[i])) s->amp = i;
    s->device = o->device && !strcmp(o->device, "cuda") && !o->no_cuda ? NN_DEVICE_CUDA : NN_DEVICE_CPU;
    if (o->amp_act && (s->device != NN_DEVICE_CUDA || !s->amp)) {
        snprintf(err, errlen, "--amp-activations %s: the device's --amp bf16 / fp16 only (with --device cuda)", o->amp_act);
        return -1;
    }
    s->act16 = s->device == NN_DEVICE_CUDA && s->amp && !(o->amp_act && !strcmp(o->amp_act, "32"));
    /* auto is on wherever it can be: the device's 16-bit convs (nn/plan.c's pass_nhwc
     * then picks the tensors); on elsewhere is refused, not ignored */
    const char *cl = o->channels_last ? o->channels_last : "auto";
    if (strcmp(cl, "auto") && strcmp(cl, "on") && strcmp(cl, "off")) {
        snprintf(err, errlen, "--channels-last %s: auto, on or off", cl);
        return -1;
    }
    int cl_can = s->device == NN_DEVICE_CUDA && s->amp;
    if (!strcmp(cl, "on") && !cl_can) {
        snprintf(err, errlen, "--channels-last on: the device's --amp bf16 / fp16 only (with --device cuda)");
        return -1;
    }
    s->channels_last = cl_can && strcmp(cl, "off");
    return check_device(s, o, err, errlen);
}

int nn_settings_apply(const nn_settings *s, char *err, size_t errlen)
{
    if (k_settings_apply(&s->k, err, errlen)) return -1;
    if (s->k.matmul_high && !k_f32_matmul_high() && s->device == NN_DEVICE_CPU && s->amp == NN_SET_AMP_NONE)
        rt_info("--matmul-precision high: no AMX-BF16 here (CPU or DDPRT_ISA), the fp32 products stay at highest");
    return 0;
}

void nn_settings_describe(const nn_settings *s, char *buf, size_t len)
{
    int amp_bf16 = s->amp == NN_SET_AMP_BF16;
    snprintf(buf, len, "%d thread(s) per rank, %s kernels%s", k_threads(), rt_isa_name(s->k.isa),
             amp_bf16 ? (s->device == NN_DEVICE_CUDA ? ", amp bf16 (tensor cores)" : ", amp bf16")
             : s->amp == NN_SET_AMP_FP16 ? ", amp fp16 (tensor cores, dynamic loss scaling)"
             : s->k.matmul_high && s->device == NN_DEVICE_CUDA ? ", fp32 matmuls in TF32 (tensor cores)"
             : k_f32_matmul_high() ? ", fp32 matmuls in bf16x3 (AMX)" : "");
}
