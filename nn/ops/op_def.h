/* What an op file (nn/ops/X.c) includes to define its op: the attribute-table rows,
 * typed access to the node's attributes, error helpers for the shape rule, and the
 * device half's headers in CUDA builds. docs/adding-an-op.md walks through one. */
#ifndef NN_OP_DEF_H
#define NN_OP_DEF_H
#include "kernels/k.h"
#include "nn/ops/ops.h"
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The device half: nn_op.fwd_cuda / bwd_cuda / workspace_cuda are set inside
 * NN_CUDA_ONLY(...) and defined under #if DDPRT_CUDA, so a CPU build has NULLs there
 * (a device graph then refuses the op by name, nn/plan.c). */
/* --channels-last (nn/plan.c's pass_nhwc): an op that follows its inputs' layout (BN,
 * ReLU, add, max pool) reads them NHWC when its own output is (nn_node.nhwc) and can
 * write NHWC when every input is. */
static inline int nn_nhwc_follow_in(const nn_graph *g, const nn_node *n)
{
    (void)g;
    return n->nhwc;
}
static inline int nn_nhwc_follow_out(const nn_graph *g, const nn_node *n)
{
    for (int k = 0; k < n->nin; k++)
        if (!g->nodes[n->in[k]].nhwc) return 0;
    return n->nin > 0;
}
#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"
#include "kernels/cuda/k_cuda_nhwc.h"
#define NN_CUDA_ONLY(...) __VA_ARGS__
/* The device products' precision for the graph's --amp (K_CUDA_MM_*: the tensor cores
 * under bf16 / fp16, the same operands the CPU's --amp rounds) and --matmul-precision
 * (high: TF32 tensor cores for what --amp leaves in fp32, as PyTorch's allow_tf32). */
static inline int nn_cuda_mm(const nn_graph *g)
{
    return g->amp == NN_AMP_BF16 ? K_CUDA_MM_BF16 : g->amp == NN_AMP_FP16 ? K_CUDA_MM_F16
           : g->tf32 ? K_CUDA_MM_TF32 : K_CUDA_MM_FP32;
}
/* The device element type of node k's output (K_CUDA_ACT_F32, or --amp's 16-bit type
 * where the plan stored it so: nn_node.y16), of node n's input i, and conv's / linear's
 * precision with the X16 / Y16 flags of its input 0 and output. */
static inline int nn_cuda_yt(const nn_graph *g, const nn_node *k) { return k->y16 ? nn_cuda_mm(g) : K_CUDA_ACT_F32; }
static inline int nn_cuda_xt(const nn_graph *g, const nn_node *n, int i) { return nn_cuda_yt(g, &g->nodes[n->in[i]]); }
static inline int nn_cuda_mm_io(const nn_graph *g, const nn_node *n)
{
    return nn_cuda_mm(g) | (g->nodes[n->in[0]].y16 ? K_CUDA_MM_X16 : 0) | (n->y16 ? K_CUDA_MM_Y16 : 0);
}
/* Node n's parameter k rounded to --amp's 16-bit type (the device graph's copy, refreshed
 * whenever the fp32 weights change: nn/graph_cuda.c), or NULL: the products read the fp32. */
static inline const uint16_t *nn_pw16(const nn_graph *g, const nn_node *n, int k)
{
    return g->params16 ? g->params16 + g->p[n->p0 + k].offset : NULL;
}
#else
#define NN_CUDA_ONLY(...)
#endif

/* Attribute-table rows: field f of the op's struct T under the cfg key `key`. */
#define NN_INT(T, f, key, def) {key, NN_ATTR_INT, offsetof(T, f), def, NULL, 0}
#define NN_FLOAT(T, f, key, def) {key, NN_ATTR_FLOAT, offsetof(T, f), def, NULL, 0}
#define NN_BOOL(T, f, key, def) {key, NN_ATTR_BOOL, offsetof(T, f), def, NULL, 0}
#define NN_CHOICE(T, f, key, def, choices) {key, NN_ATTR_CHOICE, offsetof(T, f), def, choices, 0}
/* An integer the cfg reader takes from the data set (embedding's vocab), not the file. */
#define NN_DATA_INT(T, f, key) {key, NN_ATTR_INT, offsetof(T, f), NN_ATTR_REQUIRED, NULL, 1}

/* T T_of(n) and T_set(n, &a): the node's attributes as the op's struct T (copied, so
 * the byte array is never read through another type). */
#define NN_ATTR_ACCESS(T)                                                                   \
    _Static_assert(sizeof(T) <= NN_ATTR_BYTES, #T " is larger than NN_ATTR_BYTES");        \
    static inline T T##_of(const nn_node *n) { T a_; memcpy(&a_, n->attr, sizeof a_); return a_; } \
    static inline void T##_set(nn_node *n, const T *a) { memcpy(n->attr, a, sizeof *a); }

/* "node 12 (conv2d layer1.0.conv1)" for error messages. */
static inline const char *nn_node_desc(const nn_graph *g, const nn_node *n, char *buf, size_t len)
{
    snprintf(buf, len, "node %d (%s%s%s)", (int)(n - g->nodes), n->op->kind, n->name[0] ? " " : "", n->name);
    return buf;
}
/* In an infer: fails with "model M: node N (kind name): <message>". */
#define NN_BAD(...) do { char d_[96]; int k_ = snprintf(err, errlen, "model %s: %s: ", g->model, \
    nn_node_desc(g, n, d_, sizeof d_)); if (k_ > 0 && (size_t)k_ < errlen) snprintf(err + k_, errlen - (size_t)k_, __VA_ARGS__); \
    return -1; } while (0)
/* An elementwise op's entry points, NAME_fwd and NAME_bwd (and on CUDA builds
 * NAME_fwd_cuda, NAME_bwd_cuda), from its kernels k_K_fwd(n, ARGS x, y) and
 * k_K_bwd(n, ARGS src, dy, dx) and their k_cuda_K twins (a stream last). SRC is what
 * backward reads: NN_X0 (the input) or NN_Y (the output); ARGS, in parentheses, the
 * kernel's leading arguments from the node, each with a comma after it: () or
 * (leaky_attr_of(n).slope,). NN_UNARY_FNS(NAME) fills the descriptor's entries. */
#define NN_X0 nn_x(g, n, 0)
#define NN_Y n->y
#define NN_ARGS_(...) __VA_ARGS__
#define NN_UNARY(NAME, K, SRC, ARGS)                                                                             static void NAME##_fwd(nn_graph *g, nn_node *n, const nn_run *r)                                          {                                                                                                             k_##K##_fwd(nn_out_numel(n, r), NN_ARGS_ ARGS nn_x(g, n, 0), n->y);                                   }                                                                                                         static void NAME##_bwd(nn_graph *g, nn_node *n, const nn_run *r)                                          {                                                                                                             float *dx_ = nn_dx(g, n, 0);                                                                              if (dx_) k_##K##_bwd(nn_out_numel(n, r), NN_ARGS_ ARGS SRC, n->dy, dx_);                              }                                                                                                         NN_UNARY_CUDA(NAME, K, SRC, ARGS)
#if DDPRT_CUDA
#define NN_UNARY_CUDA(NAME, K, SRC, ARGS)                                                                        static int NAME##_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)                                      {                                                                                                             return k_cuda_##K##_fwd(nn_out_numel(n, r), NN_ARGS_ ARGS nn_x(g, n, 0), n->y, r->stream);            }                                                                                                         static int NAME##_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)                                      {                                                                                                             float *dx_ = nn_dx(g, n, 0);                                                                              return dx_ ? k_cuda_##K##_bwd(nn_out_numel(n, r), NN_ARGS_ ARGS SRC, n->dy, dx_, r->stream) : 0;      }
#else
#define NN_UNARY_CUDA(NAME, K, SRC, ARGS)
#endif
#define NN_UNARY_FNS(NAME)                                                                                       .infer = nn_infer_same, .fwd = NAME##_fwd, .bwd = NAME##_bwd,                                             NN_CUDA_ONLY(.fwd_cuda = NAME##_fwd_cuda, .bwd_cuda = NAME##_bwd_cuda)

/* Inputs must be float activations (not token ids) for most ops. */
#define NN_NEED_FLOAT(i) do { if (nn_in(g, n, i)->out.tokens) NN_BAD("needs float input, got token ids (add an embedding)"); } while (0)
static inline size_t nn_numel_in(const nn_graph *g, const nn_node *n, int i) { return nn_shape_numel(nn_in(g, n, i)->out); }
/* Values of the node's output for a batch of r->n samples. */
static inline size_t nn_out_numel(const nn_node *n, const nn_run *r) { return (size_t)r->n * nn_shape_numel(n->out); }
/* The output shape is input 0's (elementwise ops). */
int nn_infer_same(nn_graph *g, nn_node *n, char *err, size_t errlen);
#endif
