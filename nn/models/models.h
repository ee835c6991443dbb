/* The model zoo (--model) and the cfg-file reader (--model-file): builders that
 * describe a network as graph nodes. No kernels here. */
#ifndef NN_MODELS_H
#define NN_MODELS_H
#include "nn/ops/ops.h"
#include <stdio.h>

typedef struct nn_model_cfg {
    const char *name;       /* zoo name, or NULL with file */
    const char *file;       /* --model-file net.cfg */
    nn_shape in;            /* one input sample (from the data) */
    int num_classes;        /* from the data or --num-classes */
    int vocab, embed_dim;   /* token inputs */
    int lm;                 /* language-model windows (T + 1 tokens per sample) */
} nn_model_cfg;

/* A GPT-2 shape: layers, width, heads, context (wpe rows), vocabulary (0: the data's),
 * the attention kind, dropout. */
typedef struct nn_gpt_cfg {
    int layers, dim, heads, ctx, vocab, stored_attn;
    float dropout; /* GPT-2's embd_pdrop and resid_pdrop (0: none, llm.c's setting) */
} nn_gpt_cfg;

/* Builds the nodes (nn_graph_begin + the builder); nn_graph_finish plans them.
 * 0, or -1 with a one-line error (unknown model, input it cannot take). */
int nn_model_build(nn_graph *g, nn_node *nodes, nn_param *p, nn_buf *b, const nn_model_cfg *c, char *err,
                   size_t errlen);
/* The input a zoo model expects when the data does not say (--data synthetic). */
int nn_model_default_input(const char *name, nn_shape *in, int *num_classes);
/* "lenet, resnet20, ..." for messages. */
const char *nn_model_names(void);

int nn_build_lenet(nn_graph *g, const nn_model_cfg *c);
int nn_build_resnet(nn_graph *g, const nn_model_cfg *c, int depth);
int nn_build_textcnn(nn_graph *g, const nn_model_cfg *c);
int nn_build_gpt(nn_graph *g, const nn_model_cfg *c, const nn_gpt_cfg *m);
/* The zoo's language models: 0 and the shape for gpt2 (124M), -1 for others. */
int nn_model_gpt(const char *name, nn_gpt_cfg *m);
/* A torchvision BasicBlock (or Bottleneck, out = 4 x width) named pre ("layer1.0"),
 * with a downsample projection when the stride or the width changes. */
int nn_resnet_block(nn_graph *g, const char *pre, int x, int in, int out, int stride, int bottleneck);
int nn_build_cfg(nn_graph *g, const nn_model_cfg *c, char *err, size_t errlen);
int nn_cfg_lm_shape(const char *file, int *vocab, int *ctx);
/* The same from an open stream (c->file names it in messages; the fuzz target). */
int nn_build_cfg_stream(nn_graph *g, const nn_model_cfg *c, FILE *f, char *err, size_t errlen);
#endif
