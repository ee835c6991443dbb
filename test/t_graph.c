/* The graph-building helper the model tests share (test/t_graph.h). */
#include "test/t_graph.h"

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
