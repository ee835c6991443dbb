/* The op table: every op kind the graph knows (the per-op test harness walks it). */
#include "nn/ops/ops.h"
#include <string.h>

static int input_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    (void)g; (void)n; (void)err; (void)errlen;
    return 0;
}
static void input_nop(nn_graph *g, nn_node *n, const nn_run *r) { (void)g; (void)n; (void)r; }
const nn_op nn_op_input = {"input", 0, input_infer, NULL, input_nop, input_nop, NN_CUDA(nn_cu_nop, nn_cu_nop, NULL)};

const nn_op *const nn_ops[] = {&nn_op_input, &nn_op_conv2d, &nn_op_linear, &nn_op_batchnorm2d, &nn_op_relu,
                               &nn_op_maxpool2d, &nn_op_avgpool1x1, &nn_op_add, &nn_op_flatten, &nn_op_dropout,
                               &nn_op_embedding, &nn_op_max_time, &nn_op_concat, &nn_op_log_softmax,
                               &nn_op_tok_pos_embed, &nn_op_layernorm, &nn_op_conv1d_hf, &nn_op_gelu,
                               &nn_op_attention, &nn_op_lm_loss, NULL};

const nn_op *nn_op_find(const char *kind)
{
    for (int i = 0; nn_ops[i]; i++)
        if (!strcmp(nn_ops[i]->kind, kind)) return nn_ops[i];
    return NULL;
}
