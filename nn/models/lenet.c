/* The seed script's Net (mnsit.py):
 *   conv1 1->10 k5, max_pool 2, relu; conv2 10->20 k5, dropout2d, max_pool 2, relu;
 *   view; fc1 -> 50, relu, dropout; fc2 -> classes; log_softmax. */
#include "nn/models/models.h"

int nn_build_lenet(nn_graph *g, const nn_model_cfg *c)
{
    int x = nn_relu(g, nn_maxpool(g, nn_conv2d(g, "conv1", 0, 10, 5, 1, 0, 1), 2, 2, 0));
    x = nn_dropout(g, nn_conv2d(g, "conv2", x, 20, 5, 1, 0, 1), 0.5f, 1);
    x = nn_flatten(g, nn_relu(g, nn_maxpool(g, x, 2, 2, 0)));
    x = nn_dropout(g, nn_relu(g, nn_linear(g, "fc1", x, 50)), 0.5f, 0);
    nn_log_softmax(g, nn_linear(g, "fc2", x, c->num_classes));
    return 0;
}
