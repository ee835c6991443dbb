/* leaky_relu (nn/ops/leaky_relu.c): forward against its definition, backward against
 * finite differences, the cfg key, and the planner's savers (re-run, dx over dy)
 * leaving a model's gradients the same bits as keeping every activation. */
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_graph.h"
#include "test/t_op.h"
#include "nn/models/models.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(op_leaky_relu)
{
    static const float slopes[] = {0.2f, -0.5f, 0.0f};
    for (int t = 0; t < 3; t++) {
        t_op h;
        t_op_begin(&h, 2);
        int x = t_op_source(&h, (nn_shape){3, 4, 5, 0});
        nn_kv kv = {"negative_slope", NULL, slopes[t]};
        int y = nn_node_add(&h.g, "leaky_relu", NULL, &x, 1, &kv, 1);
        t_op_finish(&h, y);
        float *xs = h.g.nodes[x].y;
        for (int k = 0; k < 2 * 60; k++) /* finite differences step 0.01: stay off the kink */
            if (fabsf(xs[k]) < 0.02f) xs[k] = xs[k] < 0 ? -0.02f - xs[k] : 0.02f + xs[k];
        t_op_objective(&h);
        const float *xv = h.g.nodes[x].y, *yv = h.g.nodes[y].y;
        for (int k = 0; k < 2 * 60; k++) CHECK(yv[k] == (xv[k] > 0 ? xv[k] : xv[k] * slopes[t]));
        t_op_check_grads(&h, 1e-2);
        t_op_done(&h);
    }
    /* The default slope is PyTorch's 0.01; the description names the attribute. */
    t_op h;
    t_op_begin(&h, 1);
    int x = t_op_source(&h, (nn_shape){2, 1, 1, 0});
    int y = nn_node_add(&h.g, "leaky_relu", NULL, &x, 1, NULL, 0);
    char d[128];
    nn_node_describe(&h.g, y, d, sizeof d);
    CHECKF(!strcmp(d, "leaky_relu <- 1 negative_slope=0.01 -> 2x1x1"), "%s", d);
}

static int build_cfg(mg *m, const char *path, int no_recompute, char *err, size_t errlen)
{
    nn_model_cfg c = {.file = path, .in = {2, 6, 6, 0}, .num_classes = 3};
    rt_arena plan;
    rt_arena_plan(&plan, "plan");
    for (int pass = 0; pass < 2; pass++) {
        if (nn_model_build(&m->g, m->nodes, m->p, m->b, &c, err, errlen)) return -1;
        m->g.no_recompute = no_recompute;
        if (nn_graph_finish(&m->g, pass ? &m->a : &plan, 4, err, errlen)) return -1;
        if (!pass && rt_arena_init(&m->a, "model", plan.high)) return -1;
    }
    return 0;
}

TEST(op_leaky_relu_cfg_key_and_planner_savers)
{
    const char *dir = t_tmpdir("leaky");
    static const char net[] = "[conv2d]\nname=a\nfilters=4\nsize=3\npad=1\n[batchnorm]\nname=bn\n"
                              "[leaky_relu]\nnegative_slope=0.1\n[conv2d]\nname=b\nfilters=3\nsize=3\n"
                              "[leaky_relu]\n[avgpool]\n[flatten]\n[linear]\nname=fc\nout=classes\n";
    char path[600], err[256];
    t_write_file(dir, "net.cfg", net, sizeof net - 1, 0);
    snprintf(path, sizeof path, "%s/net.cfg", dir);
    static mg m, r;
    CHECKF(build_cfg(&m, path, 0, err, sizeof err) == 0, "%s", err);
    CHECKF(build_cfg(&r, path, 1, err, sizeof err) == 0, "%s", err);
    const nn_node *lk = &m.g.nodes[3];
    CHECK(!strcmp(lk->op->kind, "leaky_relu") && lk->recompute && !r.g.nodes[3].recompute);
    CHECK(m.g.nodes[2].dy == lk->dy); /* BN's gradient written over the leaky relu's */
    char d[128];
    nn_node_describe(&m.g, 3, d, sizeof d);
    CHECKF(strstr(d, "negative_slope=0.1 "), "%s", d);
    float x[4 * 72];
    int32_t lab[4] = {0, 1, 2, 1};
    for (int i = 0; i < 4 * 72; i++) x[i] = sinf((float)i * 0.37f);
    nn_graph_init(&m.g, 3);
    nn_graph_init(&r.g, 3);
    for (int step = 0; step < 2; step++) {
        nn_forward(&m.g, x, 4, 1, 1, (uint64_t)step);
        nn_forward(&r.g, x, 4, 1, 1, (uint64_t)step);
        CHECK(nn_loss(&m.g, lab, 4, NULL) == nn_loss(&r.g, lab, 4, NULL));
        nn_backward(&m.g, lab, 4, 4);
        nn_backward(&r.g, lab, 4, 4);
        for (int i = 0; i < m.g.np; i++) {
            const nn_param *p = &m.g.p[i];
            size_t k = 0;
            while (k < p->numel && !memcmp(&m.g.grads[p->offset + k], &r.g.grads[p->offset + k], sizeof(float))) k++;
            CHECKF(k == p->numel, "step %d: %s[%zu]: %.9g with the savers, %.9g without", step, p->name, k,
                   m.g.grads[p->offset + k], r.g.grads[p->offset + k]);
        }
    }
    rt_arena_free(&m.a);
    rt_arena_free(&r.a);
    static const struct { const char *text, *want; } bad[] = {
        {"[leaky_relu]\nnegative_slope=abc\n", "net.cfg:1: [leaky_relu] negative_slope=abc is not a number"},
        {"[leaky_relu]\nslope=0.1\n", "net.cfg:1: [leaky_relu] has no key 'slope'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t_write_file(dir, "net.cfg", bad[i].text, strlen(bad[i].text), 0);
        CHECK(build_cfg(&m, path, 0, err, sizeof err) == -1);
        CHECKF(strstr(err, bad[i].want), "'%s' lacks '%s'", err, bad[i].want);
    }
}
