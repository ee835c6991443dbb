/* The run's settings object (nn/settings.h): built from the options alone, applied as a
 * whole to the kernels, and the device path's refusals. */
#include "kernels/k.h"
#include "nn/settings.h"
#include "ports/posix/port.h"
#include "rt/isa.h"
#include "test/t.h"
#include <string.h>

TEST(settings_are_built_from_the_options)
{
    nn_opts o;
    nn_settings s;
    char err[256] = "";
    nn_opts_default(&o);
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0, "%s", err);
    int ncpu = port_ncpus();
    CHECK_EQ(s.k.threads, ncpu > 0 ? ncpu : 1);
    CHECK_EQ(s.device, NN_DEVICE_CPU);
    CHECK_EQ(s.k.matmul_high, 0);
    CHECK_EQ(s.amp, NN_SET_AMP_NONE);
    CHECK(s.k.isa >= 0 && s.k.isa <= rt_isa_best());
    /* the host's CPUs are shared by its local ranks, at least one thread each */
    CHECK(nn_settings_build(&s, &o, 1000, err, sizeof err) == 0);
    CHECK_EQ(s.k.threads, 1);
    o.threads = 3, o.conv_algo = "winograd4", o.matmul_precision = "high", o.amp = "bf16";
    CHECKF(nn_settings_build(&s, &o, 2, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(s.k.threads, 3);
    CHECK_EQ(s.k.conv_algo, k_conv_algo_parse("winograd4"));
    CHECK_EQ(s.k.matmul_high, 1);
    CHECK_EQ(s.amp, NN_SET_AMP_BF16);
}

/* Applied, the kernels run with exactly these settings; another object applied after
 * it replaces every field (nothing left over from the first). */
TEST(settings_applied_are_the_kernels_settings)
{
    k_settings a, b, now;
    char err[256] = "";
    k_settings_default(&a);
    a.threads = 2, a.conv_algo = k_conv_algo_parse("direct"), a.matmul_high = 1, a.bf16_gemm = k_bf16_gemm_parse("fma");
    CHECKF(k_settings_apply(&a, err, sizeof err) == 0, "%s", err);
    now = k_settings_now();
    CHECK(!memcmp(&now, &a, sizeof a));
    CHECK_EQ(k_threads(), 2);
    k_settings_default(&b);
    b.isa = RT_ISA_GENERIC, b.conv_algo = k_conv_algo_parse("winograd");
    CHECKF(k_settings_apply(&b, err, sizeof err) == 0, "%s", err);
    now = k_settings_now();
    CHECK(!memcmp(&now, &b, sizeof b));
    CHECK(!strcmp(k_isa(), "generic"));
    /* refused whole: nothing changes */
    k_settings bad = b;
    bad.isa = RT_NISA, bad.threads = 4;
    CHECK(k_settings_apply(&bad, err, sizeof err) != 0);
    CHECKF(strstr(err, "not supported by this CPU") != NULL, "%s", err);
    bad = b, bad.conv_algo = 9;
    CHECK(k_settings_apply(&bad, err, sizeof err) != 0);
    now = k_settings_now();
    CHECK(!memcmp(&now, &b, sizeof b));
    CHECK_EQ(k_conv_algo_parse("nope"), -1);
    CHECK_EQ(k_matmul_precision_parse(NULL), 0);
    CHECK_EQ(k_matmul_precision_parse("high"), 1);
    CHECK_EQ(k_matmul_precision_parse("medium"), -1);
}

/* --device cuda honours the host-side settings and refuses, in one line naming the flag,
 * the ones it has no device meaning for (before: silently ignored). */
TEST(settings_the_device_refuses_what_it_cannot_honour)
{
    nn_opts o;
    nn_settings s;
    char err[256] = "";
    nn_opts_default(&o);
    o.device = "cuda";
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(s.device, NN_DEVICE_CUDA);
    o.matmul_precision = "high"; /* TF32 tensor cores */
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0 && s.k.matmul_high, "%s", err);
    o.matmul_precision = "highest", o.conv_algo = "winograd";
    CHECK(nn_settings_build(&s, &o, 1, err, sizeof err) != 0);
    CHECKF(strstr(err, "--conv-algo winograd: the CPU convs' algorithm") != NULL, "%s", err);
    o.conv_algo = "auto", o.amp = "bf16"; /* the tensor cores */
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0 && s.amp == NN_SET_AMP_BF16, "%s", err);
    o.amp = "fp16"; /* the tensor cores with the loss scaler */
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0 && s.amp == NN_SET_AMP_FP16, "%s", err);
    CHECK_EQ(s.act16, 1); /* 16-bit activations by default under the device's --amp */
    o.amp_act = "32";
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0 && s.act16 == 0, "%s", err);
    o.amp_act = "16", o.amp = NULL; /* without --amp: refused, not ignored */
    CHECK(nn_settings_build(&s, &o, 1, err, sizeof err) != 0);
    CHECKF(strstr(err, "--amp-activations 16: the device's --amp bf16 / fp16 only") != NULL, "%s", err);
    o.amp_act = NULL, o.amp = "fp16";
    CHECK_EQ(s.channels_last, 0);
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0 && s.channels_last == 1, "%s", err); /* auto: on */
    o.channels_last = "off";
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0 && s.channels_last == 0, "%s", err);
    o.channels_last = "nhwc"; /* a wrong value: one line naming the flag */
    CHECK(nn_settings_build(&s, &o, 1, err, sizeof err) != 0);
    CHECKF(!strcmp(err, "--channels-last nhwc: auto, on or off"), "%s", err);
    o.channels_last = "on", o.amp = NULL; /* without --amp: refused, not ignored */
    CHECK(nn_settings_build(&s, &o, 1, err, sizeof err) != 0);
    CHECKF(strstr(err, "--channels-last on: the device's --amp") != NULL, "%s", err);
    o.channels_last = "auto"; /* auto without --amp: off */
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0 && s.channels_last == 0, "%s", err);
    o.channels_last = NULL, o.amp = "fp16";
    o.loss_scale = 1e39;
    CHECK(nn_settings_build(&s, &o, 1, err, sizeof err) != 0);
    CHECKF(strstr(err, "--loss-scale 1e+39: at most 3.4e38") != NULL, "%s", err);
    o.loss_scale = 65536;
    /* --no-cuda wins, as in the seed script: the CPU takes every setting */
    o.no_cuda = 1, o.conv_algo = "winograd", o.matmul_precision = "high", o.amp = "bf16";
    CHECKF(nn_settings_build(&s, &o, 1, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(s.device, NN_DEVICE_CPU);
    o.no_cuda = 0, o.device = NULL, o.amp = "fp16";
    CHECK(nn_settings_build(&s, &o, 1, err, sizeof err) != 0);
    CHECKF(strstr(err, "--amp fp16 needs the CUDA build and a GPU") != NULL, "%s", err);
    o.amp = "bf16", o.amp_act = "16"; /* the CPU keeps its activations in fp32 */
    CHECK(nn_settings_build(&s, &o, 1, err, sizeof err) != 0);
    CHECKF(strstr(err, "--amp-activations 16: the device's") != NULL, "%s", err);
}
