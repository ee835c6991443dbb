/* gelu (nn.GELU(approximate="tanh"), GPT-2's gelu_new): elementwise; backward reads
 * the input, so the planner keeps x; cheap enough to re-run (NN_RECOMPUTE), and dx may
 * overwrite dy. Its math is kernels/k_math.h's, on the CPU and the device. */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"

NN_UNARY(gelu, gelu, NN_X0, ())

const nn_op nn_op_gelu = {.kind = "gelu", .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE, NN_UNARY_FNS(gelu)};

int nn_gelu(nn_graph *g, int x) { return nn_add(g, &nn_op_gelu, NULL, &x, 1, NULL, 0); }
