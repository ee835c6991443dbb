/* The graph executor's device path: two training steps and an evaluation of lenet,
 * resnet20 and textcnn on the device against the CPU executor (gpu_models.c), DDP over 2
 * ranks on one device (gpu_ddp.c), then the trainer end to end: resnet20 and textcnn
 * for a few steps on the device against the CPU, and 2 ranks sharing the device
 * (processes through ddprt-launch, --check-sync). */
#include "test/gpu/gpu_models.h"
#include "test/gpu/g.h"
#include <math.h>
#include "test/t_data.h"

TEST(gpu_graph_steps_match_cpu_lenet_resnet20_textcnn_gpt)
{
    g_init();
    gm_slack = 10;
    int cases = 0;
    CHECK(gm_graph_train(&cases) == 0);
}

TEST(gpu_graph_ddp_2_ranks_one_gpu_match_cpu)
{
    g_init();
    gm_slack = 10;
    int cases = 0;
    CHECK(gm_graph_ddp(&cases) == 0);
}

#define G_STEPS G_BIG(6, 2)

/* model: "--model NAME" or "--model-file F ..."; lm: a language model, whose validation
 * (the host graph, 2 batches) runs on the executor too and must agree (a large step
 * size and no --check-sync, which downloads the parameters every step: validating the
 * device's initial parameters would show). */
static void model_vs_cpu_opt(const char *model, const char *launch, int lm, const char *extra)
{
    char cmd[1400], out_g[32768], out_c[32768], why[128] = "";
    char args[400];
    /* The executor runs the losses only: the synthetic test set is 10000 samples. */
    snprintf(args, sizeof args, "--data synthetic --epochs 1 --max-steps %d --log-interval 1 --batch-size %d%s %s",
             G_STEPS, G_BIG(16, 4),
             lm ? " --eval-batches 2 --lr 3" : G_SIMT ? " --check-sync 1 --no-eval" : " --check-sync 1", extra);
    snprintf(cmd, sizeof cmd, "%s %s --device cuda %s %s 2>&1", launch, g_train(), model, args);
    CHECKF(g_run(cmd, out_g, sizeof out_g) == 0, "%s", out_g);
    snprintf(cmd, sizeof cmd, "%s %s --device cpu --conv-algo direct %s %s 2>&1", launch, t_prog("ddprt-train"), model, args);
    CHECKF(g_run(cmd, out_c, sizeof out_c) == 0, "%s", out_c);
    int n = g_same_losses(out_g, out_c, 2e-3, why, sizeof why);
    CHECKF(n == G_STEPS, "%s (%s): %d loss lines agree; %s\n%s", model, launch, n, why, out_g);
    if (lm) {
        const char *vg = strstr(out_g, "Average loss: "), *vc = strstr(out_c, "Average loss: ");
        CHECKF(vg && vc && fabs(atof(vg + 14) - atof(vc + 14)) <= 2e-3 * (1 + fabs(atof(vc + 14))),
               "validation: %.20s vs %.20s\n%s", vg ? vg : "none", vc ? vc : "none", out_g);
    }
}

static void model_vs_cpu(const char *model, const char *launch, int lm) { model_vs_cpu_opt(model, launch, lm, ""); }

TEST(gpu_train_resnet20_textcnn_match_cpu)
{
    model_vs_cpu("--model resnet20", "", 0);
    model_vs_cpu("--model textcnn", "", 0);
}

/* A 2-layer GPT's cfg file (width dim, `heads` heads, ctx positions) in a fresh folder,
 * and the flags that train it on sequences of len. */
static const char *gpt_cfg(char *model, size_t len, int dim, int heads, int ctx, int seq)
{
    char gpt[128];
    int n = snprintf(gpt, sizeof gpt, "[gpt] layers=2 dim=%d heads=%d ctx=%d\n", dim, heads, ctx);
    const char *dir = t_tmpdir("gpugpt");
    t_write_file(dir, "gpt.cfg", gpt, (size_t)n, 0);
    snprintf(model, len, "--model-file %s/gpt.cfg --seq-len %d", dir, seq);
    return model;
}
static const char *tiny_gpt(char *model, size_t len) { return gpt_cfg(model, len, 16, 2, 8, 8); }

/* GPT-2's ops on the device in the trainer: losses, then the validation loss, which the
 * host graph computes from the parameters it takes back from the device. */
TEST(gpu_train_gpt_matches_cpu)
{
    char model[700];
    model_vs_cpu(tiny_gpt(model, sizeof model), "", 1);
}

/* AdamW on the device (k_cuda_adam_step over the weight-decay runs), with a per-step
 * cosine schedule (GPT-2's recipe, less the warm-up, whose first steps barely move);
 * and Adam on a conv net. */
TEST(gpu_train_gpt_adamw_and_resnet20_adam_match_cpu)
{
    char model[700];
    model_vs_cpu_opt(tiny_gpt(model, sizeof model), "", 1, "--optimizer adamw --lr 1e-2 --weight-decay 0.1 --no-decay-bn-bias "
                                   "--lr-schedule cosine-step");
    model_vs_cpu_opt("--model resnet20", "", 0, "--optimizer adam --lr 1e-3 --weight-decay 1e-4");
}

/* --amp bf16 on the device: conv, linear and GPT's Conv1D on the tensor cores with the
 * operands the CPU's --amp bf16 rounds; 2 processes (the gradients allreduced as on the
 * CPU), LeNet's and ResNet-20's convs, TextCNN's, and a GPT (its attention on the tensor
 * cores too: k_cuda_attn_tc.cu, heads of 8 padded to 32). */
TEST(gpu_amp_bf16_2_processes_match_cpu)
{
    char launch[512], model[700];
    snprintf(launch, sizeof launch, "%s --nproc-per-node 2 --", t_prog("ddprt-launch"));
    model_vs_cpu_opt("--model resnet20", launch, 0, "--amp bf16");
    model_vs_cpu_opt("--model lenet", launch, 0, "--amp bf16");
    model_vs_cpu_opt("--model textcnn", "", 0, "--amp bf16");
    model_vs_cpu_opt(tiny_gpt(model, sizeof model), "", 1, "--amp bf16");
}

/* 16-bit activations (the default under the device's --amp): ResNet-20 keeps its convs',
 * BNs', ReLUs' and adds' outputs in bf16, about half the planned bytes (--mem-report), and
 * its losses track the same run with every activation in fp32 (the BNs' statistics come
 * from rounded values: within 5e-3 over these steps). */
TEST(gpu_amp_act16_halves_the_activations_and_tracks_fp32_ones)
{
    char cmd[1400], out16[32768], out32[32768], why[128] = "";
    /* --lr 0.002: at the default 0.01 with 4 samples a step the third loss moves by 1-3e-2
     * with any change of summation order (the CPU's fp32 and bf16 runs are 2e-2 apart after
     * one step), as much as the bound; at 0.002 every variant lies within 1e-3. */
    const char *args = "--model resnet20 --device cuda --amp bf16 --data synthetic --epochs 1 --max-steps 3 "
                       "--log-interval 1 --batch-size 4 --no-eval --mem-report --lr 0.002";
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", g_train(), args);
    CHECKF(g_run(cmd, out16, sizeof out16) == 0, "%s", out16);
    snprintf(cmd, sizeof cmd, "%s %s --amp-activations 32 2>&1", g_train(), args);
    CHECKF(g_run(cmd, out32, sizeof out32) == 0, "%s", out32);
    const char *d = strstr(out16, "device activations: planned ");
    double a16 = 0, a32 = 0;
    int n16 = 0, nout = 0;
    CHECKF(d && sscanf(d, "device activations: planned %lf MiB with %d of %d outputs in 16 bits (--amp-activations "
                          "16), %lf MiB", &a16, &n16, &nout, &a32) == 4, "%s", out16);
    CHECKF(n16 >= nout / 2 && a16 < 0.65 * a32, "%d of %d outputs in 16 bits: %.2f MiB against %.2f", n16, nout, a16,
           a32);
    CHECKF(!strstr(out32, "device activations:"), "%s", out32);
    /* the 16-bit weights (nn/graph_cuda.c) in the device plan: ResNet-20's 0.27 M parameters,
     * and the convs' KRSC + CRSK blocks: twice the conv weights, nearly all of them; the
     * plain copy leaves those conv weights uncast (their blocks are all the convs read) */
    d = strstr(out16, "device 16-bit weights: ");
    double w16 = 0, lay = 0;
    size_t np = 0, skip = 0;
    CHECKF(d && sscanf(d, "device 16-bit weights: %lf MiB for %zu parameters (%zu of them, convs' with a block, left "
                          "uncast there), %lf MiB in the convs' NHWC layouts", &w16, &np, &skip, &lay) == 4 &&
           np > 200000 && np < 400000 && fabs(w16 - np * 2 / 1048576.0) < 0.01 && lay > 1.9 * w16 && lay <= 2 * w16 &&
           fabs(lay - skip * 2 * sizeof(uint16_t) / 1048576.0) < 0.01 && skip > np * 9 / 10 && skip < np, "%s", out16);
    int n = g_same_losses(out16, out32, 5e-3, why, sizeof why);
    CHECKF(n == 3, "%d loss lines agree; %s\n%s\n%s", n, why, out16, out32);
    /* GPT: the LayerNorms' outputs, the Conv1Ds' and GELU's in bf16; the residual stream
     * (the adds fed by the fp32 embedding) stays fp32 */
    char model[700];
    snprintf(cmd, sizeof cmd, "%s --device cuda %s --amp bf16 --data synthetic --epochs 1 --max-steps 3 --log-interval 1 "
             "--batch-size 4 --no-eval --lr 3 --mem-report 2>&1", g_train(), tiny_gpt(model, sizeof model));
    CHECKF(g_run(cmd, out16, sizeof out16) == 0, "%s", out16);
    snprintf(cmd + strlen(cmd) - 5, sizeof cmd - strlen(cmd) + 5, " --amp-activations 32 2>&1");
    CHECKF(g_run(cmd, out32, sizeof out32) == 0, "%s", out32);
    d = strstr(out16, "device activations: planned ");
    CHECKF(d && sscanf(d, "device activations: planned %lf MiB with %d of %d outputs", &a16, &n16, &nout) == 3 &&
           n16 > 0 && n16 < nout, "%s", out16);
    n = g_same_losses(out16, out32, 5e-3, why, sizeof why);
    CHECKF(n == 3, "GPT: %d loss lines agree; %s\n%s\n%s", n, why, out16, out32);
}

/* GPT's attention on the tensor cores in training, 2 processes: heads of 32 over 70
 * positions (two query tiles, the second's causal mask inside its tile), against the
 * CPU's --amp bf16 steps and validation loss. */
TEST(gpu_amp_bf16_2_processes_gpt_attention_match_cpu)
{
    char launch[512], model[700];
    snprintf(launch, sizeof launch, "%s --nproc-per-node 2 --", t_prog("ddprt-launch"));
    model_vs_cpu_opt(gpt_cfg(model, sizeof model, 64, 2, 80, 70), launch, 1, "--amp bf16");
}

/* model (LeNet where NULL) on 2 processes with `dev` on the device against the CPU's
 * fp32 steps, within tol; the device's log holds `says`. */
static void model_vs_fp32(const char *model, const char *dev, const char *says, double tol)
{
    char launch[512], cmd[2400], out_g[32768], out_c[32768], why[128] = "", args[900];
    snprintf(launch, sizeof launch, "%s --nproc-per-node 2 --", t_prog("ddprt-launch"));
    snprintf(args, sizeof args, "%s --data synthetic --epochs 1 --max-steps 3 --log-interval 1 --batch-size 4 "
             "--no-eval --check-sync 1", model ? model : "--model lenet");
    snprintf(cmd, sizeof cmd, "%s %s --device cuda %s %s 2>&1", launch, g_train(), dev, args);
    CHECKF(g_run(cmd, out_g, sizeof out_g) == 0, "%s", out_g);
    CHECKF(strstr(out_g, says) && !strstr(out_g, "step skipped"), "%s", out_g);
    snprintf(cmd, sizeof cmd, "%s %s --device cpu %s 2>&1", launch, t_prog("ddprt-train"), args);
    CHECKF(g_run(cmd, out_c, sizeof out_c) == 0, "%s", out_c);
    int n = g_same_losses(out_g, out_c, tol, why, sizeof why);
    CHECKF(n == 3, "%s: %d loss lines agree; %s\n%s\n%s", dev, n, why, out_g, out_c);
}
static void dev_vs_fp32(const char *dev, const char *says, double tol) { model_vs_fp32(NULL, dev, says, tol); }

/* --amp fp16 on the device: f16 operands with the loss scale (2^16) against the CPU's fp32
 * steps (f16 keeps 11 bits: within 1e-2 over these steps), on 2 processes. */
TEST(gpu_amp_fp16_2_processes_track_fp32)
{
    dev_vs_fp32("--amp fp16", "amp fp16 (tensor cores, dynamic loss scaling)", 1e-2);
}

/* The GPT of gpu_amp_bf16_2_processes_gpt_attention_match_cpu at --amp fp16: its attention
 * on the tensor cores with f16 operands (and the loss scale in dO and dS). */
TEST(gpu_amp_fp16_2_processes_gpt_attention_tracks_fp32)
{
    char model[700];
    model_vs_fp32(gpt_cfg(model, sizeof model, 64, 2, 80, 70), "--amp fp16", "amp fp16 (tensor cores, dynamic loss "
                  "scaling)", 1e-2);
}

/* --matmul-precision high on the device: TF32 tensor cores (10-bit mantissas). */
TEST(gpu_tf32_2_processes_track_fp32)
{
    dev_vs_fp32("--matmul-precision high", "fp32 matmuls in TF32 (tensor cores)", 1e-2);
}

/* A forced overflow: a loss scale of 3e38 makes every f16 gradient operand inf, so each
 * step is skipped and the scale halves (rank 0 says so; --check-sync shows that rank 1
 * holds the same parameters, so it skipped too); the checkpoint keeps the scale and a
 * resumed run goes on from it. */
TEST(gpu_amp_fp16_overflow_skips_the_step_on_every_rank)
{
    char launch[512], cmd[1600], out[32768];
    const char *dir = t_tmpdir("fp16scale");
    snprintf(launch, sizeof launch, "%s --nproc-per-node 2 --", t_prog("ddprt-launch"));
    const char *args = "--model lenet --data synthetic --log-interval 1 --batch-size 4 --no-eval --check-sync 1 "
                       "--device cuda --amp fp16 --loss-scale 3e38";
    snprintf(cmd, sizeof cmd, "%s %s %s --epochs 1 --max-steps 2 --save %s/ck.st 2>&1", launch, g_train(), args, dir);
    CHECKF(g_run(cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(strstr(out, "rank 0: step 1: gradients not finite at loss scale 3e+38: step skipped, loss scale now 1.5e+38") &&
           strstr(out, "rank 0: step 2: gradients not finite at loss scale 1.5e+38: step skipped, loss scale now "
                       "7.5e+37"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s %s %s --epochs 2 --max-steps 3 --resume %s/ck.st 2>&1", launch, g_train(), args, dir);
    CHECKF(g_run(cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(strstr(out, "rank 0: step 3: gradients not finite at loss scale 7.5e+37: step skipped, loss scale now "
                       "3.75e+37"), "%s", out);
}

TEST(gpu_ddp_resnet20_2_processes_share_gpu)
{
    char launch[512];
    snprintf(launch, sizeof launch, "%s --nproc-per-node 2 --", t_prog("ddprt-launch"));
    model_vs_cpu("--model resnet20", launch, 0);
}

/* --channels-last (auto: on under the device's --amp): ResNet-20's convs, BNs, ReLUs and
 * adds on NHWC tensors (every stored output but the head's: the pool's [n, c], the
 * linear's), no conv permuting x or dy into its copies in the steps (NCHW: every conv but
 * the stem, every step), and the losses of the NCHW run within act16's bound (the same
 * products, BN's sums in another order). */
TEST(gpu_amp_channels_last_resnet20_tracks_nchw)
{
    char cmd[1400], on[32768], off[32768], why[128] = "";
    const char *args = "--model resnet20 --device cuda --amp bf16 --data synthetic --epochs 1 --max-steps 3 "
                       "--log-interval 1 --batch-size 4 --no-eval --mem-report --lr 0.002";
    snprintf(cmd, sizeof cmd, "%s %s --channels-last on 2>&1", g_train(), args);
    CHECKF(g_run(cmd, on, sizeof on) == 0, "%s", on);
    snprintf(cmd, sizeof cmd, "%s %s --channels-last off 2>&1", g_train(), args);
    CHECKF(g_run(cmd, off, sizeof off) == 0, "%s", off);
    int k = -1, all = 0;
    const char *d = strstr(on, "--channels-last on: ");
    CHECKF(d && sscanf(d, "--channels-last on: %d of %d device activations", &k, &all) == 2 && k > 0 && k >= all - 2,
           "%d of %d outputs channels last\n%s", k, all, on);
    d = strstr(off, "--channels-last off: ");
    CHECKF(d && sscanf(d, "--channels-last off: %d of", &k) == 1 && k == 0, "%s", off);
    unsigned long pon = 1, poff = 0;
    d = strstr(on, "device convs: ");
    CHECKF(d && sscanf(d, "device convs: %lu permutes", &pon) == 1 && pon == 0, "%s", on);
    d = strstr(off, "device convs: "); /* 3 steps of 21 convs less the stem: x, dy; x again for dw */
    CHECKF(d && sscanf(d, "device convs: %lu permutes", &poff) == 1 && poff >= 3 * 20 * 2, "%s", off);
    int n = g_same_losses(on, off, 5e-3, why, sizeof why);
    CHECKF(n == 3, "%d loss lines agree; %s\n%s\n%s", n, why, on, off);
}
