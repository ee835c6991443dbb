/* attention: causal multi-head self-attention on GPT-2's packed projection [T, 3C]
 * (q, k, v side by side, heads at columns j * C/heads of each) -> [T, C]. The default
 * (attention=flash) streams key tiles through an online softmax and keeps only the
 * log-sum-exp of each score row (aux: heads x T floats per sample), recomputing the
 * probabilities in backward: O(T C) memory, not O(heads T^2); under --amp bf16 its
 * products run on bf16 operands (AMX tiles where the CPU has them). attention=stored keeps
 * the probabilities (heads x T x T per sample, fp32): the comparison point. */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"

enum { ATTN_FLASH, ATTN_STORED };
typedef struct attn_attr { int heads, mode; } attn_attr;
NN_ATTR_ACCESS(attn_attr)
static const nn_attr attn_attrs[] = {NN_INT(attn_attr, heads, "heads", NN_ATTR_REQUIRED),
                                     NN_CHOICE(attn_attr, mode, "attention", ATTN_FLASH, "flash|stored"), {NULL}};

static int attn_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    attn_attr a = attn_attr_of(n);
    if (x.h != 1) NN_BAD("needs [T, 1, 3C] rows, got %dx%dx%d", x.c, x.h, x.w);
    if (a.heads <= 0 || x.w % (3 * a.heads)) NN_BAD("input width %d is not 3 x heads (%d) x head size", x.w, a.heads);
    if (x.w / (3 * a.heads) > K_ATTN_MAX_HD) NN_BAD("head size %d above %d", x.w / (3 * a.heads), K_ATTN_MAX_HD);
    if (a.mode == ATTN_STORED && x.c > K_ATTN_STORED_MAX_T) NN_BAD("stored attention takes T <= %d", K_ATTN_STORED_MAX_T);
    n->out = (nn_shape){x.c, 1, x.w / 3, 0};
    n->aux_per_sample = (size_t)a.heads * x.c * (a.mode == ATTN_STORED ? (size_t)x.c : 1) * sizeof(float);
    return 0;
}

static void attn_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    attn_attr a = attn_attr_of(n);
    int hd = n->out.w / a.heads;
    if (a.mode == ATTN_STORED) k_attention_stored_fwd(r->n, n->out.c, a.heads, hd, nn_x(g, n, 0), n->y, n->aux);
    else if (g->amp == NN_AMP_BF16) k_attention_fwd_bf16(r->n, n->out.c, a.heads, hd, nn_x(g, n, 0), n->y, n->aux);
    else k_attention_fwd(r->n, n->out.c, a.heads, hd, nn_x(g, n, 0), n->y, n->aux);
}

static void attn_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    attn_attr a = attn_attr_of(n);
    int hd = n->out.w / a.heads;
    float *dx = nn_dx(g, n, 0);
    if (!dx) return;
    if (a.mode == ATTN_STORED) k_attention_stored_bwd(r->n, n->out.c, a.heads, hd, nn_x(g, n, 0), n->aux, n->dy, dx);
    else if (g->amp == NN_AMP_BF16)
        k_attention_bwd_bf16(r->n, n->out.c, a.heads, hd, nn_x(g, n, 0), n->y, n->aux, n->dy, dx);
    else k_attention_bwd(r->n, n->out.c, a.heads, hd, nn_x(g, n, 0), n->y, n->aux, n->dy, dx);
}

#if DDPRT_CUDA
/* The device has the online-softmax version only: attention=stored (the CPU's
 * comparison point) is refused by name. --amp bf16 / fp16 run it on the tensor cores
 * (k_cuda_attn_tc.cu, heads up to K_CUDA_ATTN_TC_MAX_HD); --amp none and TF32 in fp32. */
static int attn_stored_cuda(nn_graph *g, nn_node *n)
{
    port_cuda_fail("model %s: node %d (attention): attention=stored has no device version (use flash)", g->model,
                   (int)(n - g->nodes));
    return -1;
}

static int attn_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    attn_attr a = attn_attr_of(n);
    if (a.mode == ATTN_STORED) return attn_stored_cuda(g, n);
    return k_cuda_attention_fwd_mm(nn_cuda_mm_io(g, n), r->n, n->out.c, a.heads, n->out.w / a.heads, nn_x(g, n, 0), n->y,
                                   n->aux, r->stream);
}

static int attn_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    attn_attr a = attn_attr_of(n);
    float *dx = nn_dx(g, n, 0);
    if (a.mode == ATTN_STORED) return attn_stored_cuda(g, n);
    return dx ? k_cuda_attention_bwd_mm(nn_cuda_mm_io(g, n), r->n, n->out.c, a.heads, n->out.w / a.heads, nn_x(g, n, 0),
                                        n->y, n->aux, n->dy, dx, r->ws, r->stream)
              : 0;
}

/* 16-bit qkv and output where the tensor-core kernel runs (the planner asks: nn/plan.c). */
static int attn_half_ok(const nn_graph *g, const nn_node *n)
{
    (void)g;
    return attn_attr_of(n).mode == ATTN_FLASH && n->out.w / attn_attr_of(n).heads <= K_CUDA_ATTN_TC_MAX_HD;
}

static size_t attn_ws_cuda(const nn_graph *g, const nn_node *n, int max_batch)
{
    (void)g;
    return k_cuda_attention_workspace(max_batch, n->out.c, attn_attr_of(n).heads, n->out.w / attn_attr_of(n).heads);
}
#endif

/* Backward reads q, k, v and (flash) its own output. */
const nn_op nn_op_attention = {
    .kind = "attention", .flags = NN_BWD_INPUT | NN_BWD_OUTPUT | NN_IN16 | NN_OUT16, .attrs = attn_attrs,
    .attr_size = sizeof(attn_attr), .infer = attn_infer, .fwd = attn_fwd, .bwd = attn_bwd,
    NN_CUDA_ONLY(.fwd_cuda = attn_fwd_cuda, .bwd_cuda = attn_bwd_cuda, .workspace_cuda = attn_ws_cuda,
                 .half_ok = attn_half_ok)};

int nn_attention(nn_graph *g, int x, int heads, int stored)
{
    attn_attr a = {heads, stored ? ATTN_STORED : ATTN_FLASH};
    return nn_add(g, &nn_op_attention, NULL, &x, 1, &a, sizeof a);
}
