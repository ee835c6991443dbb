/* The zoo as graphs: torchvision's names and parameter counts, the graph-built LeNet
 * against the hand-written one (bit for bit), whole-model gradients against finite
 * differences, and the planner's memory reuse leaving every result unchanged. */
#include "test/t.h"
#include "test/t_graph.h"
#include "test/t_data.h"
#include "nn/graph.h"
#include "test/t_lenet.h"
#include "nn/models/models.h"
#include "rt/arena.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int build(mg *m, const nn_model_cfg *c, int batch, int no_reuse, int real, char *err, size_t errlen)
{
    rt_arena plan;
    rt_arena_plan(&plan, "plan");
    if (nn_model_build(&m->g, m->nodes, m->p, m->b, c, err, errlen)) return -1;
    m->g.no_reuse = no_reuse;
    if (nn_graph_finish(&m->g, &plan, batch, err, errlen)) return -1;
    if (!real) return 0;
    if (rt_arena_init(&m->a, "model", plan.high)) return -1;
    nn_model_build(&m->g, m->nodes, m->p, m->b, c, err, errlen);
    m->g.no_reuse = no_reuse;
    return nn_graph_finish(&m->g, &m->a, batch, err, errlen);
}

static size_t count_params(const nn_graph *g)
{
    size_t n = 0;
    for (int i = 0; i < g->np; i++) n += g->p[i].numel;
    return n;
}

static const nn_param *find(const nn_graph *g, const char *name, int d0, int d1, int d2, int d3)
{
    const nn_param *p = nn_param_find(g, name);
    CHECKF(p != NULL, "no parameter %s", name);
    if (!p) return NULL;
    int want[4] = {d0, d1, d2, d3};
    for (int i = 0; i < p->ndim; i++) CHECKF(p->shape[i] == want[i], "%s dim %d: %d vs %d", name, i, p->shape[i], want[i]);
    return p;
}

TEST(graph_zoo_matches_torchvision_names_and_sizes)
{
    static mg m;
    char err[256];
    static const struct { const char *name; size_t params; int bn; } want[] = {
        {"resnet18", 11689512, 20}, {"resnet34", 21797672, 36}, {"resnet50", 25557032, 53}};
    for (int i = 0; i < 3; i++) {
        nn_model_cfg c = {.name = want[i].name, .in = {3, 224, 224, 0}, .num_classes = 1000};
        CHECKF(build(&m, &c, 2, 0, 0, err, sizeof err) == 0, "%s", err);
        CHECK_EQ(count_params(&m.g), want[i].params); /* torchvision's figures */
        CHECK_EQ(m.g.nb, 3 * want[i].bn);
        /* reuse saves >= 30 % (BN/add -> ReLU fusion leaves fewer short-lived outputs to reuse) */
        CHECKF(m.g.act_bytes < m.g.act_bytes_noreuse * 7 / 10, "%s: %zu planned, %zu without reuse", want[i].name,
               m.g.act_bytes, m.g.act_bytes_noreuse);
    }
    nn_model_cfg c = {.name = "resnet18", .in = {3, 224, 224, 0}, .num_classes = 1000};
    build(&m, &c, 2, 0, 0, err, sizeof err);
    find(&m.g, "conv1.weight", 64, 3, 7, 7);
    find(&m.g, "layer2.0.downsample.0.weight", 128, 64, 1, 1);
    find(&m.g, "layer2.0.downsample.1.bias", 128, 0, 0, 0);
    find(&m.g, "layer4.1.conv2.weight", 512, 512, 3, 3);
    find(&m.g, "fc.weight", 1000, 512, 0, 0);
    CHECK(strcmp(m.g.b[m.g.nb - 1].name, "layer4.1.bn2.num_batches_tracked") == 0);
    CHECK(m.g.b[m.g.nb - 1].dtype == RT_I64);
    /* resnet20 for Fashion-MNIST: 1 input channel, 10 classes; 0.27 M parameters */
    nn_model_cfg r20 = {.name = "resnet20", .in = {1, 28, 28, 0}, .num_classes = 10};
    CHECKF(build(&m, &r20, 2, 0, 0, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(count_params(&m.g), 272186);
    find(&m.g, "layer3.2.bn2.weight", 64, 0, 0, 0);
    find(&m.g, "layer2.0.downsample.0.weight", 32, 16, 1, 1);
    nn_model_cfg tc = {.name = "textcnn", .in = {1, 1, 32, 1}, .num_classes = 4, .vocab = 500, .embed_dim = 16};
    CHECKF(build(&m, &tc, 2, 0, 0, err, sizeof err) == 0, "%s", err);
    find(&m.g, "embedding.weight", 500, 16, 0, 0);
    find(&m.g, "convs.2.weight", 100, 16, 5, 0);
    find(&m.g, "fc.weight", 4, 300, 0, 0);
    /* Wrong data for the model: one line. */
    nn_model_cfg bad = {.name = "textcnn", .in = {1, 28, 28, 0}, .num_classes = 10};
    CHECK(build(&m, &bad, 2, 0, 0, err, sizeof err) == -1);
    CHECKF(strstr(err, "--model textcnn needs text data"), "%s", err);
    bad = (nn_model_cfg){.name = "resnet19", .in = {1, 28, 28, 0}, .num_classes = 10};
    CHECK(build(&m, &bad, 2, 0, 0, err, sizeof err) == -1);
    CHECKF(strstr(err, "unknown model (available: lenet, resnet20"), "%s", err);
}

TEST(graph_lenet_equals_the_hand_written_lenet_bit_for_bit)
{
    static mg m;
    char err[256];
    const int B = 16;
    nn_model_cfg c = {.name = "lenet", .in = {1, 28, 28, 0}, .num_classes = 10};
    CHECKF(build(&m, &c, B, 0, 1, err, sizeof err) == 0, "%s", err);
    rt_arena la;
    CHECK(rt_arena_init(&la, "lenet", 64 << 20) == 0);
    nn_lenet ref;
    CHECK(nn_lenet_build(&ref, &la, B) == 0);
    CHECK_EQ(ref.nparams, m.g.nparams);
    nn_lenet_init(&ref, 42);
    nn_graph_init(&m.g, 42);
    CHECK(memcmp(ref.params, m.g.params, ref.nparams * sizeof(float)) == 0);
    float *x = malloc(sizeof(float) * B * 784);
    int32_t y[16];
    for (int i = 0; i < B * 784; i++) x[i] = (float)((i * 7919) % 255) / 255.0f - 0.4f;
    for (int i = 0; i < B; i++) y[i] = (i * 3) % 10;
    for (int step = 0; step < 3; step++) {
        const float *a = nn_lenet_forward(&ref, x, B, 1, 9, (uint64_t)step);
        const float *b = nn_forward(&m.g, x, B, 1, 9, (uint64_t)step);
        CHECK(memcmp(a, b, sizeof(float) * B * 10) == 0);
        nn_lenet_backward(&ref, x, y, B, B);
        nn_backward(&m.g, y, B, B);
        CHECK(memcmp(ref.grads, m.g.grads, ref.nparams * sizeof(float)) == 0);
        for (size_t k = 0; k < ref.nparams; k++) ref.params[k] -= 0.1f * ref.grads[k];
        for (size_t k = 0; k < ref.nparams; k++) m.g.params[k] -= 0.1f * m.g.grads[k];
    }
    free(x);
    rt_arena_free(&la);
    rt_arena_free(&m.a);
}

/* Loss of the whole model on a fixed batch (training mode). */
static double loss_of(nn_graph *g, const void *x, const int32_t *y, int B)
{
    nn_forward(g, x, B, 1, 3, 1);
    return nn_loss(g, y, B, NULL);
}

static void model_checks(const nn_model_cfg *c, int B, int smooth, double tol)
{
    static mg m, r;
    char err[256];
    CHECKF(build(&m, c, B, 0, 1, err, sizeof err) == 0, "%s: %s", c->name ? c->name : c->file, err);
    CHECKF(build(&r, c, B, 1, 1, err, sizeof err) == 0, "%s", err);
    CHECK(m.g.act_bytes < r.g.act_bytes);
    size_t per = nn_shape_numel(c->in);
    void *x = malloc(per * (size_t)B * 4);
    int32_t y[8];
    for (size_t i = 0; i < per * (size_t)B; i++) {
        if (c->in.tokens) ((int32_t *)x)[i] = (int32_t)((i * 31) % (size_t)c->vocab);
        else ((float *)x)[i] = sinf((float)i * 0.37f);
    }
    for (int i = 0; i < B; i++) y[i] = i % c->num_classes;
    nn_graph_init(&m.g, 5);
    nn_graph_init(&r.g, 5);
    /* Memory reuse changes nothing: the same bits with and without it. */
    for (int step = 0; step < 2; step++) {
        double la = loss_of(&m.g, x, y, B), lb = loss_of(&r.g, x, y, B);
        CHECK(la == lb);
        nn_backward(&m.g, y, B, B);
        nn_backward(&r.g, y, B, B);
        for (int i = 0; i < m.g.np; i++)
            CHECKF(memcmp(m.g.grads + m.g.p[i].offset, r.g.grads + r.g.p[i].offset, m.g.p[i].numel * sizeof(float)) == 0,
                   "%s: step %d: gradient of %s differs with memory reuse (%g vs %g)", m.g.model, step, m.g.p[i].name, m.g.grads[m.g.p[i].offset], r.g.grads[m.g.p[i].offset]);
        CHECK(!m.g.buf_bytes || memcmp(m.g.bufs, r.g.bufs, m.g.buf_bytes) == 0); /* no buffers: NULL */
    }
    /* Gradients of the mean loss against central differences. Per element where the
     * network is smooth (no relu/max: kinks make single-element differences noisy),
     * else along the gradient direction: (L(w + e g) - L(w - e g)) / 2e = |g|^2. */
    loss_of(&m.g, x, y, B);
    nn_backward(&m.g, y, B, B);
    float *grads = malloc(m.g.nparams * sizeof(float)), *w0 = malloc(m.g.nparams * sizeof(float));
    memcpy(grads, m.g.grads, m.g.nparams * sizeof(float));
    memcpy(w0, m.g.params, m.g.nparams * sizeof(float));
    if (smooth) {
        uint64_t rs = 99;
        int bad = 0;
        for (int i = 0; i < m.g.np; i++) {
            nn_param *p = &m.g.p[i];
            for (int t = 0; t < 3; t++) {
                rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
                size_t k = p->offset + (size_t)((rs >> 33) % p->numel);
                float keep = m.g.params[k], eps = 1e-2f;
                m.g.params[k] = keep + eps;
                double lp = loss_of(&m.g, x, y, B) / B;
                m.g.params[k] = keep - eps;
                double lm = loss_of(&m.g, x, y, B) / B;
                m.g.params[k] = keep;
                double fd = (lp - lm) / (2 * eps);
                if (fabs(fd - grads[k]) > tol * fmax(0.05, fabs(grads[k])) && bad++ < 5)
                    t_fail(__FILE__, __LINE__, "%s: %s[%zu]: finite difference %g, backward %g", m.g.model,
                           p->name, k - p->offset, fd, grads[k]);
            }
        }
    } else {
        double g2 = 0;
        for (size_t k = 0; k < m.g.nparams; k++) g2 += (double)grads[k] * grads[k];
        float e = (float)(1e-5 / sqrt(g2)); /* small: ResNets on 8x8 inputs are very curved */
        for (size_t k = 0; k < m.g.nparams; k++) m.g.params[k] = w0[k] + e * grads[k];
        double lp = loss_of(&m.g, x, y, B) / B;
        for (size_t k = 0; k < m.g.nparams; k++) m.g.params[k] = w0[k] - e * grads[k];
        double lm = loss_of(&m.g, x, y, B) / B;
        CHECKF(fabs((lp - lm) / (2 * e) - g2) <= tol * g2, "%s: directional derivative %g, |g|^2 %g", m.g.model,
               (lp - lm) / (2 * e), g2);
    }
    free(w0);
    free(grads);
    free(x);
    rt_arena_free(&m.a);
    rt_arena_free(&r.a);
}

TEST(graph_resnet20_textcnn_and_cfg_gradients_and_planning)
{
    nn_model_cfg r20 = {.name = "resnet20", .in = {2, 8, 8, 0}, .num_classes = 3};
    model_checks(&r20, 4, 0, 0.03);
    nn_model_cfg tc = {.name = "textcnn", .in = {1, 1, 9, 1}, .num_classes = 3, .vocab = 20, .embed_dim = 6};
    model_checks(&tc, 4, 0, 0.03);
    nn_model_cfg cf = {.file = "nn/models/resnet8.cfg", .in = {1, 8, 8, 0}, .num_classes = 4};
    model_checks(&cf, 4, 0, 0.03);
    /* A smooth graph with the executor's hard cases: a value read by three nodes
     * (accumulated gradients), a residual add, concat, a flatten view, batchnorm. */
    const char *dir = t_tmpdir("smooth");
    static const char net[] = "[conv2d]\nname=a\nfilters=4\nsize=3\npad=1\nid=x\n"
                              "[batchnorm]\nname=bn\n[conv2d]\nname=b\nfilters=4\nsize=3\npad=1\n"
                              "[add]\nfrom=-1,x\nid=s\n[avgpool]\nfrom=x\nid=p1\n[avgpool]\nfrom=s\nid=p2\n"
                              "[conv2d]\nname=c\nfilters=2\nsize=1\nfrom=x\n[avgpool]\n[concat]\nfrom=p1,p2,-1\n"
                              "[flatten]\n[linear]\nname=fc\nout=classes\n";
    nn_model_cfg sm = {.file = t_write_text(dir, "smooth.cfg", net), .in = {2, 5, 5, 0}, .num_classes = 3};
    model_checks(&sm, 3, 1, 0.03);
}

TEST(graph_cfg_lenet_is_the_zoo_lenet_and_cfg_errors_name_the_line)
{
    static mg a, b;
    char err[256];
    nn_model_cfg z = {.name = "lenet", .in = {1, 28, 28, 0}, .num_classes = 10};
    nn_model_cfg f = {.file = "nn/models/lenet.cfg", .in = {1, 28, 28, 0}, .num_classes = 10};
    CHECK(build(&a, &z, 4, 0, 0, err, sizeof err) == 0);
    CHECKF(build(&b, &f, 4, 0, 0, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(a.g.nn, b.g.nn);
    CHECK_EQ(a.g.np, b.g.np);
    for (int i = 0; i < a.g.np && i < b.g.np; i++) {
        CHECK(strcmp(a.g.p[i].name, b.g.p[i].name) == 0);
        CHECK_EQ(a.g.p[i].numel, b.g.p[i].numel);
        CHECK_EQ(a.g.p[i].offset, b.g.p[i].offset);
    }
    const char *dir = t_tmpdir("cfg");
    static const struct { const char *text, *want; } cases[] = {
        {"[conv2d]\nname=c\nfliters=3\nsize=3\n", "net.cfg:1: [conv2d] has no key 'fliters'"},
        {"[relu]\n\n[add]\nfrom=-1,nosuch\n", "net.cfg:3: [add] from=nosuch: no such node"},
        {"[conv2d]\nname=c\nfilters=x\n", "net.cfg:1: [conv2d] filters=x is not an integer"},
        {"[pool]\n", "net.cfg:1: unknown section [pool]"},
        {"size=3\n", "net.cfg:1: expected key=value inside a [section]"},
        {"[flatten]\n[linear]\nname=fc\nout=5\n", "the output has 5 classes, the data has 10"},
        {"[conv2d]\nname=c\nfilters=4\nsize=40\n", "net.cfg:1: model"},
        /* #26: each a clear error at load, not 0, not the first key, not the first save */
        {"[conv2d]\nname=c\nfilters=4\nsize=3\n[dropout]\np=0.2\np=0.3\n",
         "net.cfg:7: [dropout] p= is given twice (lines 6 and 7)"},
        {"[conv2d]\nname=c\nfilters=4\nsize=3\n[dropout]\np=abc\n", "net.cfg:5: [dropout] p=abc is not a number"},
        {"[conv2d]\nname=c\nfilters=4\nsize=3\nid=a\n[relu]\nid=b\n[relu]\nfrom=a,b\n",
         "net.cfg:8: [relu] takes 1 input, from= names 2"},
        {"[conv2d]\nfilters=4\nsize=3\n[conv2d]\nfilters=4\nsize=3\n",
         "net.cfg:4: model %s: node 2 (conv2d) has parameters but no name, as node 1 (conv2d) before it: both would "
         "save a tensor 'weight'"},
        {"[conv2d]\nname=c\nfilters=4\nsize=3\n[relu]\n[conv2d]\nname=c\nfilters=4\nsize=3\n",
         "net.cfg:6: [conv2d] name=c is already line 1's"},
        {"[basic_block]\nname=b\nfilters=4\n[basic_block]\nname=b\nfilters=4\n",
         "net.cfg:4: [basic_block] name=b is already line 1's"},
        {"[conv2d]\nname=c\nsize=3\n", "net.cfg:1: [conv2d] needs filters="},
        {"[conv2d]\nname=c\nfilters=4\nsize=3\ninit=normal\n",
         "net.cfg:1: [conv2d] init=normal is not one of uniform|kaiming"},
        {"[conv2d]\nname=c\nfilters=4\nsize=3\nbias=2\n", "net.cfg:1: [conv2d] bias=2 is not 0 or 1"},
        {"[embedding]\nname=e\nvocab=5\n", "net.cfg:1: [embedding] vocab comes from the data set"},
        {"[input]\n", "net.cfg:1: unknown section [input]"},
        /* keys on the header line are the section's (they were once ignored) */
        {"[conv2d] name=c filters=x\n", "net.cfg:1: [conv2d] filters=x is not an integer"},
        {"[conv2d] name=c filters=4\nfilters=5\n", "net.cfg:2: [conv2d] filters= is given twice (lines 1 and 2)"},
        {"[gpt] attention=sparse\n", "net.cfg:1: [gpt] attention=sparse is not one of flash|stored"},
        {"[gpt] layers=2\n", "net.cfg:1: [gpt] needs token windows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = t_write_text(dir, "net.cfg", cases[i].text);
        nn_model_cfg c = {.file = path, .in = {1, 28, 28, 0}, .num_classes = 10};
        CHECK(build(&a, &c, 4, 0, 0, err, sizeof err) == -1);
        char want[300];
        snprintf(want, sizeof want, cases[i].want, path);
        CHECKF(strstr(err, want), "case %zu: '%s' lacks '%s'", i, err, want);
    }
    /* Attributes are set before the shape rule runs: init=kaiming takes effect. */
    static const char kaiming[] = "[conv2d] name=c filters=6\nsize=3\ninit=kaiming\n[flatten]\n[linear] name=fc out=10\n";
    nn_model_cfg k = {.file = t_write_text(dir, "net.cfg", kaiming), .in = {1, 28, 28, 0}, .num_classes = 10};
    CHECKF(build(&a, &k, 4, 0, 0, err, sizeof err) == 0, "%s", err);
    CHECK(a.g.p[0].init == NN_INIT_KAIMING_NORMAL_OUT && a.g.p[0].fan == 6 * 9);
}
