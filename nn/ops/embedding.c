/* embedding (nn.Embedding): token ids [len] -> [dim, 1, len] (channels first, as the
 * conv1d that follows reads it). ia: vocab, dim. Weight ~ N(0, 1) as PyTorch. */
#include "nn/ops/ops.h"
#include <stdint.h>

static int emb_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    nn_shape x = nn_in(g, n, 0)->out;
    if (!x.tokens || x.c != 1 || x.h != 1) NN_BAD("needs token ids as input (a text data set)");
    int vocab = n->ia[0], dim = n->ia[1];
    if (vocab <= 1 || dim <= 0) NN_BAD("bad vocabulary %d / dimension %d", vocab, dim);
    n->out = (nn_shape){dim, 1, x.w, 0};
    int ws[2] = {vocab, dim};
    nn_param_add(g, n, "weight", 2, ws, NN_INIT_NORMAL, 0, 0);
    return 0;
}

static void emb_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_embedding_fwd(r->n, n->out.w, n->out.c, (const int32_t *)nn_x(g, n, 0), nn_pw(g, n, 0), n->y);
}

static void emb_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_embedding_bwd(r->n, n->out.w, n->out.c, n->ia[0], (const int32_t *)nn_x(g, n, 0), n->dy, nn_pg(g, n, 0));
}

const nn_op nn_op_embedding = {"embedding", NN_BWD_INPUT, emb_infer, NULL, emb_fwd, emb_bwd,
                                 NN_CUDA(nn_cu_emb_fwd, nn_cu_emb_bwd, NULL)};
