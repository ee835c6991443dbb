/* --model NAME: the zoo's table. */
#include "nn/models/models.h"
#include <stdio.h>
#include <string.h>

static const struct zoo {
    const char *name;
    int depth;             /* resnets */
    nn_shape in;           /* default input (--data synthetic) */
    int classes;
} zoo[] = {
    {"lenet", 0, {1, 28, 28, 0}, 10},      {"resnet20", 20, {1, 28, 28, 0}, 10},
    {"resnet18", 18, {3, 224, 224, 0}, 1000}, {"resnet34", 34, {3, 224, 224, 0}, 1000},
    {"resnet50", 50, {3, 224, 224, 0}, 1000}, {"textcnn", 0, {1, 1, 64, 1}, 2},
    /* language models: the input is T + 1 tokens (T = the context), classes = vocab */
    {"gpt2", 0, {1, 1, 1025, 1}, 50257},
};
static const struct { const char *name; nn_gpt_cfg m; } gpts[] = {{"gpt2", {12, 768, 12, 1024, 50257, 0, 0.0f}}};

int nn_model_gpt(const char *name, nn_gpt_cfg *m)
{
    for (size_t i = 0; i < sizeof gpts / sizeof gpts[0]; i++)
        if (name && !strcmp(name, gpts[i].name)) {
            *m = gpts[i].m;
            return 0;
        }
    return -1;
}
#define NZOO (int)(sizeof zoo / sizeof zoo[0])

const char *nn_model_names(void) { return "lenet, resnet20, resnet18, resnet34, resnet50, textcnn, gpt2"; }

int nn_model_default_input(const char *name, nn_shape *in, int *num_classes)
{
    for (int i = 0; i < NZOO; i++)
        if (name && !strcmp(zoo[i].name, name)) {
            *in = zoo[i].in;
            *num_classes = zoo[i].classes;
            return 0;
        }
    return -1;
}

int nn_model_build(nn_graph *g, nn_node *nodes, nn_param *p, nn_buf *b, const nn_model_cfg *c, char *err,
                   size_t errlen)
{
    nn_graph_begin(g, nodes, p, b, c->file ? c->file : c->name, c->in, c->num_classes);
    if (c->file) return nn_build_cfg(g, c, err, errlen);
    for (int i = 0; i < NZOO; i++) {
        if (!c->name || strcmp(zoo[i].name, c->name)) continue;
        nn_gpt_cfg gm;
        if (!nn_model_gpt(c->name, &gm)) {
            if (!c->lm) {
                snprintf(err, errlen, "--model %s needs token windows (token shards, or --data synthetic), but the "
                         "data set gives %s", c->name, c->in.tokens ? "text classification samples" : "images");
                return -1;
            }
            return nn_build_gpt(g, c, &gm);
        }
        int text = !strcmp(c->name, "textcnn");
        if (text != c->in.tokens) {
            snprintf(err, errlen, "--model %s needs %s data, but the data set gives %s", c->name,
                     text ? "text" : "image", c->in.tokens ? "text" : "images");
            return -1;
        }
        if (!strcmp(c->name, "lenet")) return nn_build_lenet(g, c);
        if (text) return nn_build_textcnn(g, c);
        return nn_build_resnet(g, c, zoo[i].depth);
    }
    snprintf(err, errlen, "--model %s: unknown model (available: %s)", c->name ? c->name : "(none)",
             nn_model_names());
    return -1;
}
