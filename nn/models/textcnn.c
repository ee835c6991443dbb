/* TextCNN (Kim 2014), as the usual PyTorch module (seed 004): embedding, Conv1d of
 * widths 3, 4, 5 with 100 filters each, ReLU, max over time, concat, dropout 0.5,
 * linear. Names: embedding.weight, convs.{0,1,2}.{weight,bias}, fc.{weight,bias}. */
#include "nn/models/models.h"
#include <stdio.h>

int nn_build_textcnn(nn_graph *g, const nn_model_cfg *c)
{
    int e = nn_embedding(g, "embedding", 0, c->vocab, c->embed_dim > 0 ? c->embed_dim : 128), parts[3];
    for (int i = 0; i < 3; i++) {
        char name[NN_NAME];
        snprintf(name, sizeof name, "convs.%d", i);
        parts[i] = nn_max_time(g, nn_relu(g, nn_conv1d(g, name, e, 100, 3 + i)));
    }
    int x = nn_dropout(g, nn_concat(g, parts, 3), 0.5f, 0);
    nn_linear(g, "fc", x, c->num_classes);
    return 0;
}
