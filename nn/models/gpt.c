/* GPT-2 (Radford et al. 2019) as Hugging Face's GPT2LMHeadModel names it, so its
 * state_dict loads the checkpoint: transformer.wte/wpe, transformer.h.N.{ln_1,
 * attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f; Conv1D
 * weights [in, out]; the classifier is wte itself (tied, no lm_head parameter of its
 * own). Pre-LayerNorm blocks, GELU (tanh); dropout (m->dropout > 0) where GPT-2's
 * embd_pdrop and resid_pdrop are (after the embedding and each residual branch), not on
 * the attention probabilities (attn_pdrop: the online softmax never holds them); none
 * by default (llm.c's training setting).
 * Initialisation as GPT-2's: N(0, 0.02), the residual projections N(0, 0.02 /
 * sqrt(2 layers)), wpe N(0, 0.01), LayerNorm 1 / 0, biases 0. */
#include "nn/models/models.h"
#include <math.h>
#include <stdio.h>

int nn_build_gpt(nn_graph *g, const nn_model_cfg *c, const nn_gpt_cfg *m)
{
    char name[NN_NAME];
    int C = m->dim, L = m->layers;
    float proj_std = 0.02f / sqrtf(2.0f * (float)L);
    g->lm = 1;
    g->num_classes = 1; /* the output is the loss */
    int e = nn_tok_pos_embed(g, "transformer", 0, m->vocab > 0 ? m->vocab : c->vocab, C, m->ctx), x = e;
    if (m->dropout > 0) x = nn_dropout(g, x, m->dropout, 0); /* embd_pdrop */
    for (int l = 0; l < L; l++) {
#define NM(fmt) (snprintf(name, sizeof name, "transformer.h.%d." fmt, l), name)
        int a = nn_layernorm(g, NM("ln_1"), x);
        a = nn_conv1d_hf(g, NM("attn.c_attn"), a, 3 * C, 0.02f);
        a = nn_attention(g, a, m->heads, m->stored_attn);
        a = nn_conv1d_hf(g, NM("attn.c_proj"), a, C, proj_std);
        if (m->dropout > 0) a = nn_dropout(g, a, m->dropout, 0); /* resid_pdrop */
        x = nn_add2(g, x, a);
        int f = nn_layernorm(g, NM("ln_2"), x);
        f = nn_gelu(g, nn_conv1d_hf(g, NM("mlp.c_fc"), f, 4 * C, 0.02f));
        f = nn_conv1d_hf(g, NM("mlp.c_proj"), f, C, proj_std);
        if (m->dropout > 0) f = nn_dropout(g, f, m->dropout, 0); /* resid_pdrop */
        x = nn_add2(g, x, f);
#undef NM
    }
    x = nn_layernorm(g, "transformer.ln_f", x);
    nn_lm_loss(g, "lm_head", x, e);
    /* GPT2LMHeadModel's state_dict has the tied classifier as lm_head.weight too */
    snprintf(g->alias[0].name, sizeof g->alias[0].name, "lm_head.weight");
    g->alias[0].param = g->nodes[e].p0;
    g->nalias = 1;
    return 0;
}
