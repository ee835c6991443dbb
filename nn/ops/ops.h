/* Shared by the op files in nn/ops: the op tables and small helpers. */
#ifndef NN_OPS_H
#define NN_OPS_H
#include "nn/graph.h"
#include <stdio.h>

extern const nn_op nn_op_input, nn_op_conv2d, nn_op_linear, nn_op_batchnorm2d, nn_op_relu, nn_op_maxpool2d,
    nn_op_avgpool1x1, nn_op_add, nn_op_flatten, nn_op_dropout, nn_op_embedding, nn_op_max_time, nn_op_concat,
    nn_op_log_softmax, nn_op_tok_pos_embed, nn_op_layernorm, nn_op_conv1d_hf, nn_op_gelu, nn_op_attention,
    nn_op_lm_loss;

#if DDPRT_CUDA /* the device halves (nn/ops/cuda.c) */
typedef int nn_cu_fn(nn_graph *g, nn_node *n, const nn_run *r);
typedef size_t nn_cu_ws_fn(const nn_graph *g, const nn_node *n, int max_batch);
nn_cu_fn nn_cu_nop, nn_cu_conv_fwd, nn_cu_conv_bwd, nn_cu_linear_fwd, nn_cu_linear_bwd, nn_cu_bn_fwd, nn_cu_bn_bwd,
    nn_cu_relu_fwd, nn_cu_relu_bwd, nn_cu_maxpool_fwd, nn_cu_maxpool_bwd, nn_cu_avg_fwd, nn_cu_avg_bwd,
    nn_cu_maxt_fwd, nn_cu_maxt_bwd, nn_cu_add_fwd, nn_cu_add_bwd, nn_cu_copy_fwd, nn_cu_copy_bwd,
    nn_cu_dropout_fwd, nn_cu_dropout_bwd, nn_cu_concat_fwd, nn_cu_concat_bwd, nn_cu_emb_fwd, nn_cu_emb_bwd,
    nn_cu_lsm_fwd, nn_cu_lsm_bwd;
nn_cu_ws_fn nn_cu_conv_ws, nn_cu_linear_ws;
#endif

/* "node 12 (conv2d layer1.0.conv1)" for error messages. */
static inline const char *nn_node_desc(const nn_graph *g, const nn_node *n, char *buf, size_t len)
{
    snprintf(buf, len, "node %d (%s%s%s)", (int)(n - g->nodes), n->op->kind, n->name[0] ? " " : "", n->name);
    return buf;
}
#define NN_BAD(...) do { char d_[96]; int k_ = snprintf(err, errlen, "model %s: %s: ", g->model, \
    nn_node_desc(g, n, d_, sizeof d_)); if (k_ > 0 && (size_t)k_ < errlen) snprintf(err + k_, errlen - (size_t)k_, __VA_ARGS__); \
    return -1; } while (0)
/* Inputs must be float activations (not token ids) for most ops. */
#define NN_NEED_FLOAT(i) do { if (nn_in(g, n, i)->out.tokens) NN_BAD("needs float input, got token ids (add an embedding)"); } while (0)
static inline size_t nn_numel_in(const nn_graph *g, const nn_node *n, int i) { return nn_shape_numel(nn_in(g, n, i)->out); }
#endif
