/* Models as layer graphs. A model is a list of nodes in topological order, built by
 * a short builder (nn/models/); each node applies one op (nn/ops/) to the
 * outputs of earlier nodes and owns the parameters and buffers it registers under
 * PyTorch state_dict names ("layer1.0.bn1.running_mean"). Node 0 is the input.
 *
 * Memory: parameters, gradients and buffers each live in one flat block (parameters
 * in registration order, each 16-float aligned: DDP buckets are slices of the
 * gradient block). Activations, activation gradients and per-node saved state get
 * offsets from a lifetime planner (nn/plan.c) inside one region of the arena; the
 * shapes are per sample and the plan is for batches up to max_batch.
 *
 * The trainer, DDP and checkpoints see only this interface: no model name or shape
 * appears outside nn/models/. */
#ifndef NN_GRAPH_H
#define NN_GRAPH_H
#include "rt/arena.h"
#include "rt/tensor.h"
#include <stddef.h>
#include <stdint.h>

/* Device graphs name their stream (ports/cuda/port_cuda.h's type, C11 allows the
 * repeat): the graph needs no CUDA and no kernel header, so an edit to kernels/k.h
 * rebuilds only the files that call kernels. */
typedef struct CUstream_st *port_stream;

#define NN_MAX_NODES 512
#define NN_MAX_PARAMS 400
#define NN_MAX_BUFS 400
#define NN_MAX_IN 4
#define NN_NAME 64

/* One sample's shape; values are [batch, c, h, w] (a vector is c x 1 x 1). Token
 * inputs (text) are int32 ids of shape 1 x 1 x len. */
typedef struct nn_shape { int c, h, w; int tokens; } nn_shape;
static inline size_t nn_shape_numel(nn_shape s) { return (size_t)s.c * s.h * s.w; }

/* Parameter initialisations (PyTorch's). */
enum { NN_INIT_KAIMING_UNIFORM, /* U(+-1/sqrt(fan_in)): Conv/Linear default weights and biases */
       NN_INIT_KAIMING_NORMAL_OUT, /* N(0, sqrt(2/fan_out)): torchvision ResNet convs */
       NN_INIT_NORMAL,          /* N(0, 1): nn.Embedding */
       NN_INIT_ONES, NN_INIT_ZEROS };

typedef struct nn_param {
    char name[NN_NAME];
    int ndim, shape[4];
    size_t offset, numel;  /* floats into the parameter / gradient blocks */
    int init, fan;         /* fan_in (uniform) or fan_out (normal) */
    int no_decay;          /* a bias or normalisation weight (--no-decay-bn-bias) */
    float init_std;        /* NN_INIT_NORMAL: the standard deviation (0: 1, nn.Embedding's) */
    int node;
    /* Row-sparse gradients (an embedding's table: rows of shape[1] floats): when rows_nz
     * is set (by --invariant's fold, nn/ddp_tree.c), the op marks there every row its
     * gradient may hold a nonzero in (the other rows are +0); cleared by a backward that
     * sets the gradient, added to by one that accumulates (--accum-steps). */
    int sparse_rows;
    unsigned char *rows_nz;
    /* The gradient's nonzero rows are among rows_nz's (set by the op's backward; cleared
     * by whoever else writes the gradient: the reduction): the next backward then clears
     * those rows instead of the whole table. */
    int rows_known;
} nn_param;

/* Buffers: state that is saved and kept in sync but has no gradient (BatchNorm's
 * running statistics as f32, num_batches_tracked as i64). */
typedef struct nn_buf {
    char name[NN_NAME];
    rt_dtype dtype;
    int ndim, shape[4];
    size_t offset, numel;  /* bytes into the buffer block; elements */
    int init;              /* NN_INIT_ONES or NN_INIT_ZEROS */
} nn_buf;

struct nn_graph;
struct nn_node;

/* nn_graph.recompute_macs: recompute convs only when the activations would not fit. */
#define NN_RECOMPUTE_FIT (-2)

/* What an op's fwd/bwd get besides the node. */
typedef struct nn_run {
    int n;                 /* batch size of this call */
    int train;             /* training forward (dropout on, batch statistics) */
    uint64_t seed, step;   /* RNG stream of this step (dropout) */
    void *ws;              /* the shared workspace (nn_op.workspace bytes at least) */
    int recompute;         /* backward re-running a forward: batch statistics are the saved ones */
    port_stream stream;    /* device graphs: the stream the op's kernels go on */
} nn_run;

/* Op flags. Backward needs: which of the node's values must still be alive at its backward. */
enum { NN_BWD_INPUT = 1, NN_BWD_OUTPUT = 2, NN_ALIAS = 4 /* output is a view of input 0 */,
       /* Memory savers (nn/plan.c): */
       NN_RECOMPUTE = 8,   /* cheap (memory-bound): backward re-runs fwd instead of keeping y */
       NN_FWD_INPLACE = 16, /* fwd may write y over input 0 (elementwise) */
       NN_BWD_INPLACE = 32, /* bwd may write dx of input 0 over dy (elementwise) */
       /* What the planner's passes match on (nn/plan.c), instead of op names: */
       NN_SOURCE = 64,     /* a graph input: no fwd/bwd work, alive throughout */
       NN_LOG_PROBS = 128, /* the output is log-probabilities: the loss fuses NLL into its backward */
       NN_RECTIFIER = 256, /* y = max(x, 0) elementwise, nothing else */
       NN_MAX_OVER_LEN = 512, /* y[c] = max over len of x[c, 1, len], int32 argmax [c] in aux */
       /* fwd/bwd can take over a following rectifier -> max over len when the output has
        * one row (k_conv2d_fwd_maxt / bwd_maxt): the sparse path of nn_node.maxt_from */
       NN_FUSES_RECT_MAX = 1024,
       /* a rectifier reading this (recomputed) node can take its mask from this node's
        * input (k_bn_relu_bwd: aux = mean, invstd; parameters gamma, beta) */
       NN_RECT_MASK_SOURCE = 2048,
       /* a rectifier reading only this node may compute relu(this node's fwd) itself
        * in one pass (nn_node.fuse_from): BN's affine, add's sum (CPU fp32 graphs) */
       NN_FUSES_RELU = 4096,
       NN_BWD_IDENTITY = 8192, /* every input's gradient is dy itself (the add): planned in place */
       /* 16-bit activations on the device (nn_node.y16, --amp-activations 16): the op's device
        * kernels read every input of --amp's 16-bit type (IN16) / write their output in it and
        * read it back so in backward (OUT16) */
       NN_IN16 = 16384, NN_OUT16 = 32768,
       /* with NN_OUT16: only when every input is 16-bit too (the add: autocast's type
        * promotion keeps GPT's residual stream, fed by the fp32 embedding, in fp32) */
       NN_OUT16_ALL_IN = 65536 };

/* Named attributes: an op keeps its attributes in a struct of its own (nn/ops/X.c),
 * stored in nn_node.attr; the table maps each cfg key to a field. Values are set by
 * name (nn_node_add: cfg files and C builders), defaults come from the table, and the
 * graph's description (nn_node_describe, compared across ranks) prints them by name. */
enum { NN_ATTR_INT, NN_ATTR_FLOAT, NN_ATTR_BOOL, NN_ATTR_CHOICE };
#define NN_ATTR_REQUIRED (-1e300) /* .def of an attribute that must be given */
#define NN_ATTR_BYTES 128
typedef struct nn_attr {
    const char *key;       /* the cfg key ("negative_slope") */
    int type;              /* NN_ATTR_*: int, float, 0/1 (int), index into choices (int) */
    size_t off;            /* offsetof in the op's attribute struct */
    double def;            /* when not given (NN_ATTR_REQUIRED: must be) */
    const char *choices;   /* NN_ATTR_CHOICE: "uniform|kaiming" */
    int from_data;         /* set from the data set by the cfg reader ("vocab"), not a cfg key */
} nn_attr;

typedef struct nn_op {
    const char *kind;      /* its name in graphs and summaries, and its cfg section */
    const char *alias;     /* another cfg section name ("batchnorm"), or NULL */
    unsigned flags;        /* NN_BWD_INPUT ... above */
    int min_in, max_in;    /* inputs it takes; 0, 0: exactly one */
    const nn_attr *attrs;  /* its named attributes, ending with {NULL}; NULL: none */
    size_t attr_size;      /* sizeof its attribute struct (<= NN_ATTR_BYTES) */
    /* Multiply-adds per output element (NULL: memory-bound); the planner recomputes the
     * ops at or under g->recompute_macs. */
    long (*macs)(const struct nn_node *n);
    /* Shape inference from the inputs; registers parameters and buffers and sets the
     * node's aux bytes per sample (saved state between forward and backward). 0, or -1
     * with err naming the node. */
    int (*infer)(struct nn_graph *g, struct nn_node *n, char *err, size_t errlen);
    /* Workspace bytes for batches up to max_batch (NULL: none). */
    size_t (*workspace)(const struct nn_graph *g, const struct nn_node *n, int max_batch);
    void (*fwd)(struct nn_graph *g, struct nn_node *n, const nn_run *r);
    /* Writes the gradients of the node's parameters and dx of each input i into
     * nn_dx(g, n, i) (NULL when that input needs none), overwriting. */
    void (*bwd)(struct nn_graph *g, struct nn_node *n, const nn_run *r);
    /* The same on a device graph (CUDA builds; NULL otherwise): every pointer of the
     * graph and node is device memory, kernels go on r->stream. 0, or -1 after
     * port_cuda_fail recorded the kernel and shapes. */
    int (*fwd_cuda)(struct nn_graph *g, struct nn_node *n, const nn_run *r);
    int (*bwd_cuda)(struct nn_graph *g, struct nn_node *n, const nn_run *r);
    /* Device workspace bytes for every batch size up to max_batch (NULL: none). */
    size_t (*workspace_cuda)(const struct nn_graph *g, const struct nn_node *n, int max_batch);
    /* With NN_IN16 / NN_OUT16: whether this node's device kernels take 16-bit activations
     * (NULL: always; attention: heads its tensor-core kernel covers). */
    int (*half_ok)(const struct nn_graph *g, const struct nn_node *n);
    /* --amp on a device graph: the 16-bit elements of the op's own weight block (its
     * weights in the layouts its products read; NULL or 0: nn_pw16's plain copy serves),
     * and its refresh from the fp32 weights, on stream, after every change of them
     * (nn/graph_cuda.c: with the plain copy's cast). */
    size_t (*w16_elems_cuda)(const struct nn_graph *g, const struct nn_node *n);
    int (*w16_prep_cuda)(struct nn_graph *g, struct nn_node *n, port_stream stream);
    /* Channels-last activations on a device graph (--channels-last, nn/plan.c's pass_nhwc):
     * whether the op's device kernels read its inputs as the planner laid them out when
     * one is NHWC (nhwc_in), and whether it can write its output NHWC given its inputs'
     * planned layouts (nhwc_out: conv where K allows; BN, ReLU, add, max pool when their
     * inputs are). NULL: NCHW only. */
    int (*nhwc_in)(const struct nn_graph *g, const struct nn_node *n);
    int (*nhwc_out)(const struct nn_graph *g, const struct nn_node *n);
} nn_op;

typedef struct nn_node {
    const nn_op *op;
    char name[NN_NAME];    /* module path: "layer1.0.conv1" ("" for unnamed) */
    int in[NN_MAX_IN], nin;
    /* The op's attribute struct, then what its infer derives (a conv's planned shape);
     * read and written with memcpy (nn/ops/op_def.h's NN_ATTR_ACCESS). */
    _Alignas(8) unsigned char attr[NN_ATTR_BYTES];
    nn_shape out;
    int p0, np;            /* parameters [p0, p0+np) */
    int b0, nb;            /* buffers [b0, b0+nb) */
    size_t aux_per_sample; /* bytes of saved state per sample */
    size_t aux_fixed;      /* bytes of saved state independent of the batch */
    int rng_per_sample;    /* dropout counters per sample (keeps streams disjoint) */
    uint64_t rng_offset;   /* set by the builder: sum of the earlier nodes' counters */
    /* Filled by the planner: */
    float *y, *dy;         /* output and its gradient ([max_batch, out]) */
    /* Recomputation: a node with `recompute` keeps y only through the forward (y_fwd);
     * backward re-runs its fwd into y_bwd just before the first backward that reads it
     * (the nodes listed from rc_head of that node, in order, linked by rc_next). */
    float *y_fwd, *y_bwd;
    int recompute, rc_head, rc_next;
    int mask_from_bn;      /* a recomputed rectifier after a recomputed NN_RECT_MASK_SOURCE
                            * (BN): backward takes its mask from the BN's input (no
                            * rectifier output re-made) */
    void *ws_fwd, *ws_bwd, *ws_rc; /* its workspace in forward, backward, recompute */
    float *acc;            /* where this node writes an input's gradient that another
                            * node wrote first (added into that input's dy after) */
    void *aux;
    int storage;           /* the node whose buffer y is (itself unless NN_ALIAS) */
    int needs_grad;        /* some parameter upstream: dy is needed */
    int grad_source;       /* set by the builder: this value's gradient is wanted */
    int dy_first;          /* the consumer that writes dy first in backward */
    /* Sparse backward through max over time (nn/plan.c): a node whose op has
     * NN_FUSES_RECT_MAX (conv) and whose output reaches an NN_MAX_OVER_LEN node only
     * through an NN_RECTIFIER (one reader each) has maxt_from = that max's index and
     * does the three backwards at once from its gradient and argmax; the rectifier and
     * the max have `folded` set (no backward of their own, no dy for the conv or the
     * rectifier). Forward too: the conv writes the max's output and argmax, the other
     * two do nothing and neither the conv nor the rectifier has an output (y NULL).
     * NN_FOLD_*; 0 / 0 on the dense path. */
    int maxt_from, folded;
    /* BN or add -> ReLU (nn/plan.c): the NN_RECTIFIER has fuse_from = the NN_FUSES_RELU
     * node it alone reads, whose output is then never made (y NULL): the rectifier's
     * fwd computes relu(BN(x)) or relu(a + b) from that node's inputs in one pass, the
     * node's own fwd does the rest (BN: statistics only; add: nothing) and has
     * fused_into = the rectifier. After a BN the backward is fused too: the rectifier's
     * does nothing and BN's reads the rectifier's dy, masked where BN(x) <= 0 (no dy of
     * the BN's own). 0 / 0 when not fused. */
    int fuse_from, fused_into;
    /* A residual's gradient added inside the ReLU's backward (nn/plan.c): the node
     * right after a rectifier whose output it reads without being its first gradient
     * writer leaves its dx in acc (acc_defer) and the rectifier's backward adds it to
     * its dy on the way (acc_from = that node): one pass instead of two. */
    int acc_defer, acc_from;
    /* The output is stored in --amp's 16-bit type (nn/plan.c's pass_half: device graphs
     * with g->act16, where the producer and every reader take it): half the bytes. */
    int y16;
    uint16_t *w16; /* device --amp: the op's weight block (nn_op.w16_elems_cuda), or NULL */
    /* The output (and its gradient) channels last, [n, h, w, c] (nn/plan.c's pass_nhwc:
     * device graphs with g->channels_last, where the producer and every reader take it). */
    int nhwc;
} nn_node;

/* Mixed precision: conv and linear run with bf16 operands and fp32 accumulation;
 * parameters, gradients, optimizer state and other ops stay fp32. */
enum { NN_AMP_NONE = 0, NN_AMP_BF16 = 1, NN_AMP_FP16 = 2 }; /* = NN_SET_AMP_* */
enum { NN_FOLD_MAXT = 1, NN_FOLD_RELU = 2 }; /* nn_node.folded */

/* A rectifier fused after a BN (NN_RECT_MASK_SOURCE): its backward is the BN's. */
static inline int nn_relu_bwd_fused(const nn_node *nodes, const nn_node *n)
{
    return n->fuse_from && (nodes[n->fuse_from].op->flags & NN_RECT_MASK_SOURCE);
}

typedef void (*nn_grad_ready_fn)(void *ctx, int first_param);
enum { NN_GRAD_SET, NN_GRAD_STASH_FIRST, NN_GRAD_STASH, NN_GRAD_FINAL };

typedef struct nn_graph {
    const char *model;     /* zoo name or the cfg path */
    int max_batch, num_classes;
    nn_node *nodes;        /* NN_MAX_NODES, from the arena */
    int nn;
    nn_param *p;
    int np;
    nn_buf *b;
    int nb;
    size_t nparams, buf_bytes;
    float *params, *grads;
    unsigned char *bufs;
    int out;               /* the output node (logits, or log-probabilities) */
    int out_is_logp;       /* the output node is a log_softmax */
    int lm;                /* a language model: the input is a window of T + 1 tokens and the
                            * output node (lm_loss) gives each sample's mean token loss */
    float lm_scale;        /* lm: 1 / the samples the loss is averaged over (set by nn_backward) */
    int lm_fuse;           /* lm: a training forward is followed by its backward with this
                            * lm_scale (the trainer's step): the loss head makes its
                            * gradients in the forward */
    /* Second names of shared parameters, written by checkpoints beside the first (a
     * tied classifier: "lm_head.weight" is "transformer.wte.weight"), not read back. */
    struct { char name[NN_NAME]; int param; } alias[2];
    int nalias;
    float *logp;           /* log-probabilities of the last loss (for logits outputs) */
    float *acc;            /* accumulation scratch for values with several consumers */
    void *ws;
    size_t ws_bytes, act_bytes, act_bytes_noreuse;
    uint64_t rng_stride;   /* dropout counters per sample per step */
    uint64_t rng_total;    /* while building: counters of the nodes so far */
    char err[256];         /* the first build error */
    int no_reuse;          /* plan without sharing memory (tests compare the two) */
    int no_recompute;      /* keep every activation and gradient apart (tests compare) */
    int no_sparse;         /* dense backward through max over time everywhere (tests compare) */
    int no_fuse;           /* no BN/add -> ReLU fusion (tests compare; the same bits) */
    size_t act_bytes_keep; /* the planned activations without recomputation / in-place */
    int recompute_macs;    /* convs with at most this many multiply-adds per output element
                            * are recomputed in backward too (0: none; -1: the smallest
                            * bound that halves the planned activations, set by the plan;
                            * NN_RECOMPUTE_FIT: 0 when they fit in mem_budget, else as -1) */
    size_t mem_budget;     /* bytes the activations may take without conv recompute (0: unknown) */
    nn_grad_ready_fn on_grad_ready;
    void *on_grad_ctx;
    /* Forward, before a node with parameters runs (ZeRO-1 waits there for the
     * parameters' allgather): it reads parameters below end_param (by index). */
    void (*on_param_need)(void *ctx, int end_param);
    void *on_param_ctx;
    /* Gradients from outside the arena (set between building and nn_graph_finish; DDP:
     * memory the ranks of a host read in place); NULL: the arena. Called once per
     * real carve with the bytes; NULL back is an error. */
    void *(*grads_alloc)(void *ctx, size_t bytes);
    void *grads_ctx;
    /* Gradient accumulation (--accum-steps, DDP's no_sync): ops always overwrite
     * grads; in the STASH modes each node's parameter gradients are then copied /
     * added into grad_sum and on_grad_ready is not fired (no bucket is launched); in
     * FINAL, grad_sum is added into grads before on_grad_ready fires. */
    int grad_mode;         /* NN_GRAD_SET (default), _STASH_FIRST, _STASH, _FINAL */
    float *grad_sum;       /* [nparams], planned by the trainer when it accumulates */
    /* SyncBatchNorm (--sync-bn): sums v[0..n) over all ranks in place (set by DDP;
     * NULL: batch statistics are this rank's). Keeps nn/ops free of the transport. */
    void (*sync_sum)(void *ctx, double *v, int n);
    void *sync_ctx;
    /* The device graph's SyncBatchNorm (nn/graph_cuda.c): pinned host scratch for the
     * sums that go round the ranks ((4 C + 2) doubles, C the widest node's channels). */
    double *sync_host;
    /* Ghost BatchNorm (--invariant, nn/vshard.h): when set, a training forward leaves
     * the running statistics alone and appends each BatchNorm's batch mean and
     * unbiased variance (2 * channels doubles, in node order) at bn_stats[bn_pos..];
     * nn_bn_update applies them once they are reduced. */
    double *bn_stats;
    int bn_pos;
    /* bf16 / device hooks live beside this in later issues */
    int amp;               /* NN_AMP_*: set between building and nn_graph_finish (workspace) */
    int act16;             /* device --amp: activations in 16 bits where every reader takes them
                            * (--amp-activations 16, the default; nn/plan.c) */
    int channels_last;     /* device --amp: NHWC activations where the ops allow (--channels-last) */
    float loss_scale;      /* --amp fp16: the loss gradient's factor (nn/loss_scale.h); 0 or 1: none */
    int tf32;              /* --matmul-precision high on the device: fp32 products on TF32 tensor cores */
    uint16_t *params16;    /* device --amp: params rounded to its 16-bit type (nn/graph_cuda.c), the
                            * tensor cores' weight operand; NULL: none */
    int on_device;         /* a device graph: planned with the ops' workspace_cuda */
} nn_graph;

/* ---- building (nn/graph.c) ---- */
/* Starts a graph whose input has shape `in`. */
void nn_graph_begin(nn_graph *g, nn_node *nodes, nn_param *p, nn_buf *b, const char *model, nn_shape in,
                    int num_classes);
/* Appends a node applying `op` to the nodes in[0..nin) with its attribute struct
 * (attr_bytes of it; NULL for none) and infers its shape; returns its index (the value
 * it produces). name may be NULL/"". Errors (an input not built yet, a wrong input
 * count, a shape the op refuses) keep the first in g->err for nn_graph_finish; more
 * than NN_MAX_NODES nodes is fatal. Builders by name and typed builders: nn/ops/ops.h. */
int nn_add(nn_graph *g, const nn_op *op, const char *name, const int *in, int nin, const void *attr,
           size_t attr_bytes);
extern const nn_op nn_op_input; /* node 0 (and the op tests' extra inputs) */
/* Registration (ops' infer): the index, or -1 with g->err set (a name too long or
 * already taken, the table full). */
int nn_param_add(nn_graph *g, nn_node *n, const char *suffix, int ndim, const int *shape, int init, int fan,
                 int no_decay);
int nn_buf_add(nn_graph *g, nn_node *n, const char *suffix, rt_dtype dt, int ndim, const int *shape, int init);
/* Node i in one canonical line: kind, name, inputs, every named attribute, the output
 * shape ("relu <- 3 -> 10x12x12"); what the ranks compare at start-up. Returns the
 * length snprintf would write. */
int nn_node_describe(const nn_graph *g, int i, char *buf, size_t len);

/* ---- planning (nn/plan.c) ---- */
/* Ends building: reports the first build error, lays out parameters/buffers, plans
 * activations for max_batch and carves everything from `a` (planning arenas size
 * only). 0, or -1 with err. */
int nn_graph_finish(nn_graph *g, rt_arena *a, int max_batch, char *err, size_t errlen);
/* The allocation half of nn_graph_finish for a graph whose layout is done: parameters,
 * gradients, buffers and the planned activations from `a`. A device graph is a copy
 * of the host graph (its own nodes array, on_device set) carved from a device arena. */
int nn_graph_carve(nn_graph *g, rt_arena *a, char *err, size_t errlen);

/* ---- running (nn/exec.c) ---- */
/* PyTorch's default initialisation, seeded; buffers to their initial values. */
void nn_graph_init(nn_graph *g, uint64_t seed);
/* Forward of n <= max_batch samples (x: floats, or int32 ids for token inputs);
 * returns the output node's values [n, classes]. */
const float *nn_forward(nn_graph *g, const void *x, int n, int train, uint64_t seed, uint64_t step);
/* An evaluation forward through node `last` only (a language model's hidden states
 * without its loss head). */
void nn_forward_to(nn_graph *g, const void *x, int n, int last);
/* Loss sum over the n samples of the last forward (NLL of the log-probabilities);
 * *correct counts rows whose argmax is the label (NULL: not needed). */
double nn_loss(nn_graph *g, const int32_t *labels, int n, long *correct);
/* Backward of the mean loss over n_total samples; fires on_grad_ready as gradients
 * become final (params [first, np) in reverse node order). */
void nn_backward(nn_graph *g, const int32_t *labels, int n, int n_total);
/* Backward from node `last` down, its dy filled by the caller (tests, custom losses). */
void nn_backward_from(nn_graph *g, int last, int n);
/* Ghost BatchNorm (bn_stats): doubles one training forward appends; and the running
 * statistics updated from stats (that layout) scaled by `scale` (1/K: the average
 * over the shards), as one forward with those batch statistics would (nn/ops/bn.c). */
int nn_bn_stats_len(const nn_graph *g);
void nn_bn_update(nn_graph *g, const double *stats, double scale);
/* The same three on a device graph (nn/exec_cuda.c, CUDA builds): x and labels are
 * device pointers, kernels go on `s`, nothing waits for the device. The loss sum and
 * correct count land in sums[0..1] (device doubles). 0, or -1 (port_cuda_errmsg). */
int nn_forward_cuda(nn_graph *g, const void *x, int n, int train, uint64_t seed, uint64_t step, port_stream s);
int nn_loss_cuda(nn_graph *g, const int32_t *labels, int n, double *sums, port_stream s);
int nn_backward_cuda(nn_graph *g, const int32_t *labels, int n, int n_total, port_stream s);
const nn_param *nn_param_find(const nn_graph *g, const char *name);
static inline void *nn_buf_data(const nn_graph *g, int i) { return g->bufs + g->b[i].offset; }
static inline const nn_node *nn_in(const nn_graph *g, const nn_node *n, int i) { return &g->nodes[n->in[i]]; }
static inline float *nn_x(const nn_graph *g, const nn_node *n, int i) { return g->nodes[n->in[i]].y; }
/* The floats of node n's parameters (n->np > 0): back to back from the returned offset. */
static inline size_t nn_node_params(const nn_graph *g, const nn_node *n, size_t *len)
{
    const nn_param *a = &g->p[n->p0], *b = &g->p[n->p0 + n->np - 1];
    *len = b->offset + b->numel - a->offset;
    return a->offset;
}
/* Where input i's gradient goes (NULL: not needed); see nn/exec.c for accumulation. */
float *nn_dx(nn_graph *g, const nn_node *n, int i);
static inline float *nn_pw(const nn_graph *g, const nn_node *n, int k) { return g->params + g->p[n->p0 + k].offset; }
static inline float *nn_pg(const nn_graph *g, const nn_node *n, int k) { return g->grads + g->p[n->p0 + k].offset; }
void nn_graph_summary(const nn_graph *g, int verbose);
#endif
