/* silu (nn/ops/silu.c): forward against its definition, backward against finite
 * differences (t_op's harness), and the description a cfg model prints. */
#include "test/t.h"
#include "test/t_op.h"
#include <math.h>
#include <string.h>

TEST(op_silu)
{
    t_op h;
    t_op_begin(&h, 2);
    int x = t_op_source(&h, (nn_shape){3, 4, 5, 0});
    int y = nn_node_add(&h.g, "silu", NULL, &x, 1, NULL, 0);
    t_op_finish(&h, y);
    t_op_objective(&h);
    const float *xv = h.g.nodes[x].y, *yv = h.g.nodes[y].y;
    for (int k = 0; k < 2 * 60; k++) {
        double v = xv[k], want = v / (1 + exp(-v));
        CHECKF(fabs(yv[k] - want) <= 1e-6 * fabs(want) + 1e-30, "silu(%g) = %.9g want %.9g", v, yv[k], want);
    }
    t_op_check_grads(&h, 1e-2);
    char d[128];
    nn_node_describe(&h.g, y, d, sizeof d);
    CHECKF(!strcmp(d, "silu <- 1 -> 3x4x5"), "%s", d);
    t_op_done(&h);
}
