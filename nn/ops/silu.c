/* silu (nn.SiLU, "swish"): y = x sigmoid(x), elementwise; backward reads the input, so
 * the planner keeps x; cheap enough to re-run (NN_RECOMPUTE), and dx may overwrite dy.
 * Its math is kernels/k_math.h's k_silu, on the CPU and the device (the same bits). */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"

NN_UNARY(silu, silu, NN_X0, ())

const nn_op nn_op_silu = {.kind = "silu", .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE, NN_UNARY_FNS(silu)};
