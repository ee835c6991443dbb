/* Optimizers, schedules, clipping, top-k (nn/optim.c, kernels/cpu/k_optim.c), and the
 * graph-level equivalences of --accum-steps and --sync-bn: micro-batches summed equal
 * one large batch; SyncBatchNorm over 2 ranks x B (loopback transport, one thread per
 * rank) equals BatchNorm over 1 rank x 2B. */
#include "test/t.h"
#include "test/t_graph.h"
#include "test/t_data.h"
#include "test/tp_harness.h"
#include "kernels/k.h"
#include "kernels/k_optim.h"
#include "nn/models/models.h"
#include "nn/optim.h"
#include "rt/arena.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static float frand(void)
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((double)(rs >> 11) * 0x1p-53 * 2 - 1);
}

TEST(optim_adam_kernel_matches_reference_and_pytorch_formula)
{
    enum { N = 1000 + 37 };
    static float p[N], g[N], m[N], v[N], p2[N], m2[N], v2[N];
    static double pd[N], md[N], vd[N];
    for (int dec = 0; dec < 2; dec++)
        for (int threads = 1; threads <= 2; threads++) {
            k_set_threads(threads);
            for (int i = 0; i < N; i++) {
                p[i] = p2[i] = frand();
                pd[i] = p[i];
                m[i] = m2[i] = 0;
                v[i] = v2[i] = 0;
                md[i] = vd[i] = 0;
            }
            double lr = 1e-3, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
            for (int t = 1; t <= 5; t++) {
                for (int i = 0; i < N; i++) g[i] = frand() * (i % 7 ? 1.0f : 1e-3f);
                k_adam_cfg c = {.beta1 = (float)b1, .beta2 = (float)b2, .eps = (float)eps, .weight_decay = (float)wd,
                                .decoupled = dec, .step_size = (float)(lr / (1 - pow(b1, t))),
                                .bc2_sqrt = (float)sqrt(1 - pow(b2, t)), .decay_mul = dec ? (float)(1 - lr * wd) : 1.0f};
                /* Odd sizes: the vector body and the scalar tail. */
                k_adam_step(N, &c, p, g, m, v);
                k_adam_step_ref(N, &c, p2, g, m2, v2);
                CHECK(!memcmp(p, p2, sizeof p) && !memcmp(m, m2, sizeof m) && !memcmp(v, v2, sizeof v));
                /* torch.optim.Adam / AdamW's update written out in double. */
                for (int i = 0; i < N; i++) {
                    double gi = g[i];
                    if (dec) pd[i] *= 1 - lr * wd;
                    else gi += wd * pd[i];
                    md[i] = b1 * md[i] + (1 - b1) * gi;
                    vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
                    double den = sqrt(vd[i]) / sqrt(1 - pow(b2, t)) + eps;
                    pd[i] -= lr / (1 - pow(b1, t)) * md[i] / den;
                }
            }
            double worst = 0;
            for (int i = 0; i < N; i++) worst = fmax(worst, fabs(p[i] - pd[i]));
            CHECKF(worst < 2e-6, "decoupled %d: max |p - p_ref| = %g", dec, worst);
        }
    k_set_threads(1);
}

static nn_optim mk(const char *const *argv, int argc, int world, long spe)
{
    nn_opts o;
    nn_opts_default(&o);
    nn_optim op = {0};
    char *a[32] = {"x"};
    for (int i = 0; i < argc; i++) a[i + 1] = (char *)argv[i];
    CHECK(nn_opts_parse(&o, argc + 1, a) == 0);
    char err[256];
    CHECK(nn_optim_parse(&o, &op.c, err, sizeof err) == 0);
    nn_optim_reset(&op, world, spe);
    return op;
}

TEST(optim_schedules_warmup_and_scaling)
{
    const char *st[] = {"--lr", "0.1", "--lr-schedule", "step", "--lr-step", "2", "--lr-gamma", "0.5"};
    nn_optim o = mk(st, 8, 1, 10);
    CHECK_NEAR(nn_optim_lr(&o, 1, 0), 0.1, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 2, 15), 0.1, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 3, 25), 0.05, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 5, 45), 0.025, 1e-12);
    const char *ms[] = {"--lr", "0.1", "--lr-schedule", "multistep", "--lr-milestones", "2,4"};
    o = mk(ms, 6, 1, 10);
    CHECK_NEAR(nn_optim_lr(&o, 2, 0), 0.1, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 3, 0), 0.01, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 5, 0), 0.001, 1e-12);
    const char *cs[] = {"--lr", "0.1", "--lr-schedule", "cosine", "--epochs", "4", "--warmup-epochs", "0.5",
                        "--lr-scale", "world"};
    o = mk(cs, 10, 4, 10); /* world 4: base 0.4; 5 warmup steps */
    CHECK_NEAR(nn_optim_lr(&o, 1, 0), 0.4 / 5, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 1, 4), 0.4, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 1, 7), 0.4, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 3, 25), 0.4 * (1 + cos(M_PI * 2 / 4)) / 2, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 4, 35), 0.4 * (1 + cos(M_PI * 3 / 4)) / 2, 1e-12);
    /* cosine-step: 4 epochs of 10 steps, the curve over steps 0..40; the epoch does not matter. */
    const char *cst[] = {"--lr", "0.1", "--lr-schedule", "cosine-step", "--epochs", "4"};
    o = mk(cst, 6, 1, 10);
    CHECK_NEAR(nn_optim_lr(&o, 1, 0), 0.1, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 1, 7), 0.1 * (1 + cos(M_PI * 7 / 40)) / 2, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 3, 7), 0.1 * (1 + cos(M_PI * 7 / 40)) / 2, 1e-12);
    CHECK_NEAR(nn_optim_lr(&o, 4, 39), 0.1 * (1 + cos(M_PI * 39 / 40)) / 2, 1e-12);
    CHECK(nn_optim_lr(&o, 4, 39) < 0.0002 && nn_optim_lr(&o, 4, 39) > 0);
}

TEST(optim_bad_values_name_the_flag)
{
    static const char *const bad[][3] = {
        {"--optimizer", "lamb", "--optimizer"}, {"--lr-schedule", "poly", "--lr-schedule"},
        {"--lr-gamma", "0", "--lr-gamma"}, {"--lr-step", "0", "--lr-step"}, {"--lr-milestones", "3,2", "--lr-milestones"},
        {"--warmup-epochs", "-1", "--warmup-epochs"}, {"--lr-scale", "node", "--lr-scale"},
        {"--accum-steps", "0", "--accum-steps"}, {"--clip-grad-norm", "-2", "--clip-grad-norm"},
        {"--grad-compress", "int8", "--grad-compress"}, {"--topk", "1,x", "--topk"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[512], out[1024];
        snprintf(cmd, sizeof cmd, "%s %s %s 2>&1", t_prog("ddprt-train"), bad[i][0], bad[i][1]);
        FILE *f = popen(cmd, "r");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        out[n] = 0;
        int st = f ? pclose(f) : -1;
        CHECKF(st != 0 && strstr(out, bad[i][2]) && strchr(out, '\n') == out + n - 1, "%s %s: %s", bad[i][0],
               bad[i][1], out);
    }
}

TEST(optim_clip_no_decay_and_topk)
{
    static nn_param p[2];
    float params[32] = {0}, grads[32] = {0};
    nn_graph g = {.p = p, .np = 2, .nparams = 32, .params = params, .grads = grads};
    p[0] = (nn_param){.offset = 0, .numel = 3};
    p[1] = (nn_param){.offset = 16, .numel = 2, .no_decay = 1};
    grads[0] = 3; grads[1] = 4; grads[16] = 12; /* norm 13 */
    const char *a[] = {"--clip-grad-norm", "6.5", "--weight-decay", "0.5", "--no-decay-bn-bias", "--momentum", "0",
                       "--lr", "1"};
    nn_optim o = mk(a, 9, 1, 1);
    float mem[32];
    o.m = mem;
    o.n = 32;
    grads[5] = 100; /* padding between the parameters: not part of the norm */
    double norm = sqrt(nn_grad_sumsq(&g, 0, 32));
    CHECK_NEAR(norm, 13.0, 1e-9);
    nn_optim_clip(&o, &g, norm, o.c.clip);
    CHECK_NEAR(grads[0], 1.5, 1e-5);
    CHECK_NEAR(grads[16], 6.0, 1e-5);
    for (int i = 0; i < 32; i++) { params[i] = 1; grads[i] = 0; }
    nn_optim_step(&o, &g, 1.0);
    CHECK_NEAR(params[0], 0.5, 1e-7);  /* decayed */
    CHECK_NEAR(params[16], 1.0, 1e-7); /* no_decay: untouched */
    float out[2 * 6] = {0.1f, 0.5f, 0.2f, 0.9f, 0.3f, 0.0f, /* label 4: 3rd largest */
                        5, 1, 1, 1, 1, 1};                  /* label 0: top-1 */
    int32_t lab[2] = {4, 0};
    int ks[2] = {1, 3};
    long cnt[2] = {0, 0};
    nn_topk_count(out, lab, 2, 6, ks, 2, cnt);
    CHECK_EQ(cnt[0], 1);
    CHECK_EQ(cnt[1], 2);
}

/* ---- graph-level equivalences */
static void build(mg *m, const char *cfg, int batch)
{
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/net.cfg", t_tmpdir("optim"));
    FILE *f = fopen(path, "w");
    fputs(cfg, f);
    fclose(f);
    nn_model_cfg c = {.file = path, .in = {1, 8, 8, 0}, .num_classes = 5};
    rt_arena plan;
    rt_arena_plan(&plan, "plan");
    CHECKF(nn_model_build(&m->g, m->nodes, m->p, m->b, &c, err, sizeof err) == 0, "%s", err);
    CHECKF(nn_graph_finish(&m->g, &plan, batch, err, sizeof err) == 0, "%s", err);
    CHECK(rt_arena_init(&m->a, "model", plan.high) == 0);
    nn_model_build(&m->g, m->nodes, m->p, m->b, &c, err, sizeof err);
    CHECK(nn_graph_finish(&m->g, &m->a, batch, err, sizeof err) == 0);
    nn_graph_init(&m->g, 7);
}

static const char *const plain_cfg = "[conv2d]\nname=conv1\nfilters=4\nsize=3\npad=1\n[relu]\n[conv2d]\nname=conv2\n"
                                     "filters=4\nsize=3\n[relu]\n[flatten]\n[linear]\nname=fc\nout=classes\n";
static const char *const bn_cfg = "[conv2d]\nname=conv1\nfilters=4\nsize=3\npad=1\nbias=0\n[batchnorm]\nname=bn1\n[relu]\n"
                                  "[conv2d]\nname=conv2\nfilters=6\nsize=3\nbias=0\n[batchnorm]\nname=bn2\n[relu]\n"
                                  "[avgpool]\n[flatten]\n[linear]\nname=fc\nout=classes\n";

enum { B = 6, S = 64 }; /* micro-batch; floats per sample (1x8x8) */
static float X[4 * B * S];
static int32_t Y[4 * B];
static int fired;
static void count_ready(void *ctx, int first) { (void)ctx; (void)first; fired++; }

TEST(optim_accumulated_micro_batches_equal_one_large_batch)
{
    static mg big, acc;
    k_set_threads(1);
    for (int i = 0; i < 3 * B * S; i++) X[i] = frand();
    for (int i = 0; i < 3 * B; i++) Y[i] = (int32_t)(i * 7 % 5);
    build(&big, plain_cfg, 3 * B);
    build(&acc, plain_cfg, B);
    nn_forward(&big.g, X, 3 * B, 1, 1, 0);
    nn_loss(&big.g, Y, 3 * B, NULL);
    nn_backward(&big.g, Y, 3 * B, 3 * B);
    float *sum = calloc(acc.g.nparams, sizeof(float));
    acc.g.grad_sum = sum;
    acc.g.on_grad_ready = count_ready;
    static const int modes[3] = {NN_GRAD_STASH_FIRST, NN_GRAD_STASH, NN_GRAD_FINAL};
    for (int k = 0; k < 3; k++) {
        fired = 0;
        acc.g.grad_mode = modes[k];
        nn_forward(&acc.g, X + k * B * S, B, 1, 1, 0);
        nn_loss(&acc.g, Y + k * B, B, NULL);
        nn_backward(&acc.g, Y + k * B, B, 3 * B);
        /* DDP's no_sync: the hook (bucket launch) fires only on the last micro-batch. */
        CHECKF(k < 2 ? fired == 0 : fired == acc.g.np / 2, "micro-batch %d: hook fired %d times", k, fired);
    }
    double worst = 0, scale = 0;
    size_t wi = 0;
    for (int p = 0; p < big.g.np; p++) /* parameters only: padding between them is no one's */
        for (size_t i = big.g.p[p].offset; i < big.g.p[p].offset + big.g.p[p].numel; i++) {
            if (fabs(big.g.grads[i] - acc.g.grads[i]) > worst) wi = i;
            worst = fmax(worst, fabs(big.g.grads[i] - acc.g.grads[i]));
            scale = fmax(scale, fabs(big.g.grads[i]));
        }
    CHECKF(scale > 0 && worst <= 1e-5 * scale, "max |grad diff| %g of %g at %zu (%g vs %g)", worst, scale, wi,
           acc.g.grads[wi], big.g.grads[wi]);
    free(sum);
}

/* SyncBatchNorm: two ranks as threads over the loopback transport. */
static mg rk[2];
static void hook(void *ctx, double *v, int n) { CHECK(tp_allreduce(ctx, v, v, (size_t)n, RT_F64, TP_SUM) == 0); }
static void rank_step(tp_comm *c, void *arg)
{
    (void)arg;
    int r = tp_rank(c);
    nn_graph *g = &rk[r].g;
    g->sync_sum = hook;
    g->sync_ctx = c;
    nn_forward(g, X + r * B * S, B, 1, 1, 0);
    nn_loss(g, Y + r * B, B, NULL);
    nn_backward(g, Y + r * B, B, B);
    CHECK(tp_allreduce(c, g->grads, g->grads, g->nparams, RT_F32, TP_AVG) == 0); /* DDP's average */
}

TEST(optim_sync_bn_two_ranks_equal_one_rank_with_twice_the_batch)
{
    static mg one;
    k_set_threads(1);
    for (int i = 0; i < 2 * B * S; i++) X[i] = frand() * 2 + (i % S) * 0.01f;
    for (int i = 0; i < 2 * B; i++) Y[i] = (int32_t)(i * 3 % 5);
    build(&one, bn_cfg, 2 * B);
    build(&rk[0], bn_cfg, B);
    build(&rk[1], bn_cfg, B);
    nn_forward(&one.g, X, 2 * B, 1, 1, 0);
    nn_loss(&one.g, Y, 2 * B, NULL);
    nn_backward(&one.g, Y, 2 * B, 2 * B);
    tpt_world w;
    CHECK(tpt_open(&w, 2, NULL) == 0);
    tpt_run(&w, rank_step, NULL);
    tpt_close(&w);
    for (int r = 0; r < 2; r++) {
        double worst = 0, scale = 0;
        for (size_t i = 0; i < one.g.nparams; i++) {
            worst = fmax(worst, fabs(one.g.grads[i] - rk[r].g.grads[i]));
            scale = fmax(scale, fabs(one.g.grads[i]));
        }
        CHECKF(scale > 0 && worst <= 1e-4 * scale, "rank %d: max |grad diff| %g of %g", r, worst, scale);
        /* The batch statistics, seen through the running statistics they updated. */
        for (int b = 0; b < one.g.nb; b++) {
            if (one.g.b[b].dtype != RT_F32) continue;
            const float *u = nn_buf_data(&one.g, b), *v = nn_buf_data(&rk[r].g, b);
            for (size_t i = 0; i < one.g.b[b].numel; i++)
                CHECKF(fabsf(u[i] - v[i]) <= 1e-5f * (1 + fabsf(u[i])), "rank %d %s[%zu]: %g vs %g", r, one.g.b[b].name, i,
                       v[i], u[i]);
        }
    }
    /* Without the hook each rank's statistics are its own: the test can tell. */
    static mg lone;
    build(&lone, bn_cfg, B);
    nn_forward(&lone.g, X, B, 1, 1, 0);
    const float *u = nn_buf_data(&one.g, 0), *v = nn_buf_data(&lone.g, 0);
    CHECK(fabsf(u[0] - v[0]) > 1e-4f);
}
