/* ResNets with torchvision's layouts and state_dict names:
 *   resnet20: the CIFAR network of He et al. (3 stages x 3 basic blocks, 16/32/64
 *             channels, 3x3 stem), projection shortcuts as 1x1 conv + BN named
 *             downsample.0 / downsample.1 as torchvision does;
 *   resnet18/34: basic blocks, resnet50: bottlenecks (stride on the 3x3, v1.5), with
 *             the 7x7 stride-2 stem and 3x3 max pool.
 * Convolutions keep PyTorch Conv2d's default initialisation (kaiming uniform, fan_in;
 * torchvision uses kaiming normal, fan_out: this builder once asked for it, but too late
 * for it to take effect, and checkpoints rest on the uniform one), BN to 1/0. */
#include "nn/models/models.h"
#include <stdio.h>

static int conv(nn_graph *g, const char *name, int x, int out, int k, int stride, int pad)
{
    return nn_conv2d(g, name, x, out, k, stride, pad, 0);
}

static int conv_bn(nn_graph *g, const char *pre, const char *cn, const char *bn, int x, int out, int k, int st,
                   int pad)
{
    char a[NN_NAME], b[NN_NAME];
    snprintf(a, sizeof a, "%s.%s", pre, cn);
    snprintf(b, sizeof b, "%s.%s", pre, bn);
    return nn_batchnorm(g, b, conv(g, a, x, out, k, st, pad));
}

/* in -> out channels, the stride on the first conv (basic) or the 3x3 (bottleneck). */
int nn_resnet_block(nn_graph *g, const char *pre, int x, int in, int out, int stride, int bottleneck)
{
    int y, width = bottleneck ? out / 4 : out;
    if (bottleneck) {
        y = nn_relu(g, conv_bn(g, pre, "conv1", "bn1", x, width, 1, 1, 0));
        y = nn_relu(g, conv_bn(g, pre, "conv2", "bn2", y, width, 3, stride, 1));
        y = conv_bn(g, pre, "conv3", "bn3", y, out, 1, 1, 0);
    } else {
        y = nn_relu(g, conv_bn(g, pre, "conv1", "bn1", x, out, 3, stride, 1));
        y = conv_bn(g, pre, "conv2", "bn2", y, out, 3, 1, 1);
    }
    int sc = x;
    if (stride != 1 || in != out) sc = conv_bn(g, pre, "downsample.0", "downsample.1", x, out, 1, stride, 0);
    return nn_relu(g, nn_add2(g, y, sc));
}

int nn_build_resnet(nn_graph *g, const nn_model_cfg *c, int depth)
{
    static const int l18[] = {2, 2, 2, 2}, l34[] = {3, 4, 6, 3};
    const int *layers = depth == 18 ? l18 : l34;
    int cifar = depth == 20, bottleneck = depth == 50, stages = cifar ? 3 : 4;
    int base = cifar ? 16 : 64, x, in;
    if (cifar) {
        x = nn_relu(g, nn_batchnorm(g, "bn1", conv(g, "conv1", 0, 16, 3, 1, 1)));
    } else {
        x = nn_relu(g, nn_batchnorm(g, "bn1", conv(g, "conv1", 0, 64, 7, 2, 3)));
        x = nn_maxpool(g, x, 3, 2, 1);
    }
    in = base;
    for (int s = 0; s < stages; s++) {
        int out = (base << s) * (bottleneck ? 4 : 1), nblocks = cifar ? 3 : layers[s];
        for (int b = 0; b < nblocks; b++) {
            char pre[NN_NAME];
            snprintf(pre, sizeof pre, "layer%d.%d", s + 1, b);
            x = nn_resnet_block(g, pre, x, in, out, b == 0 && s > 0 ? 2 : 1, bottleneck);
            in = out;
        }
    }
    x = nn_flatten(g, nn_avgpool_1x1(g, x));
    nn_linear(g, "fc", x, c->num_classes);
    return 0;
}
