/* libFuzzer target: the --model-file reader (nn/models/cfg.c) on arbitrary bytes, then
 * the planner on whatever graph it accepts (a planning arena: sizes only). Every
 * refusal must name the file; nothing may crash or exit. Build and run: make fuzz. */
#include "nn/models/models.h"
#include "rt/arena.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nn_node nodes[NN_MAX_NODES];
static nn_param params[NN_MAX_PARAMS];
static nn_buf bufs[NN_MAX_BUFS];

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!n) return 0;
    FILE *f = fmemopen((void *)d, n, "r");
    if (!f) abort();
    /* Images for even first bytes, token ids otherwise (the embedding path). */
    int text = d[0] & 1;
    nn_model_cfg c = {.file = "fuzz.cfg", .in = text ? (nn_shape){1, 1, 12, 1} : (nn_shape){3, 12, 12, 0},
                      .num_classes = 5, .vocab = 50};
    nn_graph g;
    nn_graph_begin(&g, nodes, params, bufs, c.file, c.in, c.num_classes);
    char err[512] = "";
    int rc = nn_build_cfg_stream(&g, &c, f, err, sizeof err);
    fclose(f);
    if (!rc) {
        rt_arena plan;
        rt_arena_plan(&plan, "fuzz");
        rc = nn_graph_finish(&g, &plan, 3, err, sizeof err);
    }
    if (rc && !strstr(err, "fuzz.cfg")) abort(); /* every refusal names the file */
    return 0;
}
