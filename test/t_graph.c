/* The graph-building helper the model tests share (test/t_graph.h). */
#include "test/t_graph.h"
#include "kernels/k.h"
#include "test/t.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int t_graph_build(mg *m, const nn_model_cfg *c, int batch, int macs, int no_fuse, char *err, size_t errlen)
{
    rt_arena plan;
    rt_arena_plan(&plan, "plan");
    for (int pass = 0; pass < 2; pass++) {
        if (nn_model_build(&m->g, m->nodes, m->p, m->b, c, err, errlen)) return -1;
        m->g.no_recompute = macs < 0;
        m->g.recompute_macs = macs;
        m->g.no_fuse = no_fuse;
        if (nn_graph_finish(&m->g, pass ? &m->a : &plan, batch, err, errlen)) return -1;
        if (!pass && rt_arena_init(&m->a, "model", plan.high)) return -1;
    }
    return 0;
}

void t_graph_same_training(mg *m, int th_m, mg *r, int th_r, const nn_model_cfg *c, int batch, const char *what)
{
    size_t per = nn_shape_numel(c->in);
    float *x = malloc(per * (size_t)batch * sizeof(float));
    int32_t y[64];
    if (!x || batch > 64) {
        free(x);
        CHECKF(0, "%s: batch %d", what, batch);
        return;
    }
    for (size_t i = 0; i < per * (size_t)batch; i++) x[i] = sinf((float)i * 0.37f) + 0.1f;
    for (int i = 0; i < batch; i++) y[i] = i % c->num_classes;
    nn_graph_init(&m->g, 5);
    nn_graph_init(&r->g, 5);
    for (int step = 0; step < 3; step++) {
        k_set_threads(th_m);
        nn_forward(&m->g, x, batch, 1, 3, (uint64_t)step);
        double la = nn_loss(&m->g, y, batch, NULL);
        nn_backward(&m->g, y, batch, batch);
        k_set_threads(th_r);
        nn_forward(&r->g, x, batch, 1, 3, (uint64_t)step);
        double lb = nn_loss(&r->g, y, batch, NULL);
        nn_backward(&r->g, y, batch, batch);
        CHECKF(la == lb, "%s step %d: loss %.17g vs %.17g", what, step, la, lb);
        for (int i = 0; i < m->g.np; i++)
            CHECKF(memcmp(m->g.grads + m->g.p[i].offset, r->g.grads + r->g.p[i].offset,
                          m->g.p[i].numel * sizeof(float)) == 0,
                   "%s step %d: gradient of %s differs", what, step, m->g.p[i].name);
        /* Running statistics: updated by the forward only (num_batches_tracked = steps). */
        CHECKF(memcmp(m->g.bufs, r->g.bufs, m->g.buf_bytes) == 0, "%s step %d: buffers differ", what, step);
        for (int i = 0; i < m->g.nb; i++)
            if (m->g.b[i].dtype == RT_I64) CHECK_EQ(*(int64_t *)nn_buf_data(&m->g, i), (int64_t)step + 1);
        for (size_t k = 0; k < m->g.nparams; k++) m->g.params[k] -= 0.05f * m->g.grads[k];
        for (size_t k = 0; k < r->g.nparams; k++) r->g.params[k] -= 0.05f * r->g.grads[k];
    }
    /* An evaluation forward after a backward reads the forward buffers again. */
    k_set_threads(th_m);
    const float *a = nn_forward(&m->g, x, batch, 0, 3, 9);
    k_set_threads(th_r);
    const float *b = nn_forward(&r->g, x, batch, 0, 3, 9);
    CHECKF(memcmp(a, b, sizeof(float) * (size_t)batch * (size_t)c->num_classes) == 0, "%s: evaluation differs", what);
    k_set_threads(1);
    free(x);
}
