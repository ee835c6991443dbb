/* --model-file net.cfg: a network described in plain text, as Darknet's .cfg files
 * are, so users train their own CNN without recompiling. One [section] per node,
 * `key=value` lines under it, '#' or ';' starts a comment:
 *
 *   [conv2d]  name=conv1 filters=10 size=5 stride=1 pad=0 bias=1 init=uniform|kaiming
 *   [conv1d]  name=convs.0 filters=100 size=3
 *   [linear]  name=fc out=classes          (classes: the data's class count)
 *   [batchnorm] name=bn1      [relu]  [flatten]  [avgpool]  [max_time]  [log_softmax]
 *   [maxpool] size=2 stride=2 pad=0        [dropout] p=0.5 2d=1
 *   [embedding] name=embedding dim=128     (vocabulary: the data's)
 *   [add] from=-1,-4          [concat] from=a,b,c
 *   [basic_block] name=layer1.0 filters=64 stride=1     [bottleneck] ... (filters = 4 x width)
 *   [gpt] layers=6 dim=384 heads=6 ctx=256 vocab=0 attention=flash|stored
 *         a whole GPT-2-style language model (Hugging Face's names; vocab 0: the data's;
 *         stored: attention keeps its probabilities, the comparison point); token windows
 *
 * A node reads the previous node unless `from=` names others: -N counts back from
 * this node (-1 = the previous), a word is the `id=` another section gave itself, and
 * `input` is the data. */
#include "nn/models/models.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXK 12
#define MAXID 128

typedef struct sect {
    char kind[32];
    int line, nk;
    char key[MAXK][32], val[MAXK][96];
    int used[MAXK];
} sect;

typedef struct ctx {
    nn_graph *g;
    const nn_model_cfg *c;
    char *err;
    size_t errlen;
    char ids[MAXID][32];
    int id_node[MAXID], nids, last;
} ctx;

static const char *get(sect *s, const char *k)
{
    for (int i = 0; i < s->nk; i++)
        if (!strcmp(s->key[i], k)) {
            s->used[i] = 1;
            return s->val[i];
        }
    return NULL;
}

static int geti(ctx *x, sect *s, const char *k, int def, int *out)
{
    const char *v = get(s, k);
    if (!v) { *out = def; return 0; }
    if (!strcmp(v, "classes")) { *out = x->c->num_classes; return 0; }
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < -1000000 || n > 1000000) {
        snprintf(x->err, x->errlen, "%s:%d: [%s] %s=%s is not an integer", x->c->file, s->line, s->kind, k, v);
        return -1;
    }
    *out = (int)n;
    return 0;
}

/* Resolves from= into node indices (default: the previous node). */
static int inputs(ctx *x, sect *s, int *in, int max)
{
    const char *v = get(s, "from");
    if (!v) { in[0] = x->last; return 1; }
    char buf[96];
    snprintf(buf, sizeof buf, "%s", v);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        int node = -1;
        if (n == max) {
            snprintf(x->err, x->errlen, "%s:%d: [%s] takes at most %d inputs", x->c->file, s->line, s->kind, max);
            return -1;
        }
        if (t[0] == '-' && isdigit((unsigned char)t[1])) node = x->g->nn + atoi(t);
        else if (!strcmp(t, "input")) node = 0;
        else
            for (int i = 0; i < x->nids; i++)
                if (!strcmp(x->ids[i], t)) node = x->id_node[i];
        if (node < 0 || node >= x->g->nn) {
            snprintf(x->err, x->errlen, "%s:%d: [%s] from=%s: no such node", x->c->file, s->line, s->kind, t);
            return -1;
        }
        in[n++] = node;
    }
    return n;
}

static int build(ctx *x, sect *s)
{
    nn_graph *g = x->g;
    const char *name = get(s, "name"), *id = get(s, "id"), *k = s->kind;
    int in[NN_MAX_IN], nin = inputs(x, s, in, NN_MAX_IN), node = -1, a = 0, b = 0, c = 0, d = 0;
    if (nin < 0) return -1;
    if (!strcmp(k, "conv2d") || !strcmp(k, "conv1d")) {
        if (geti(x, s, "filters", 0, &a) || geti(x, s, "size", 0, &b) || geti(x, s, "stride", 1, &c) ||
            geti(x, s, "pad", 0, &d))
            return -1;
        int bias;
        const char *init = get(s, "init");
        if (geti(x, s, "bias", 1, &bias)) return -1;
        node = !strcmp(k, "conv1d") ? nn_conv1d(g, name, in[0], a, b) : nn_conv2d(g, name, in[0], a, b, c, d, bias);
        if (init && !strcmp(init, "kaiming")) g->nodes[node].ia[7] = NN_INIT_KAIMING_NORMAL_OUT;
    } else if (!strcmp(k, "linear")) {
        if (geti(x, s, "out", 0, &a)) return -1;
        node = nn_linear(g, name, in[0], a);
    } else if (!strcmp(k, "batchnorm")) node = nn_batchnorm(g, name, in[0]);
    else if (!strcmp(k, "relu")) node = nn_relu(g, in[0]);
    else if (!strcmp(k, "flatten")) node = nn_flatten(g, in[0]);
    else if (!strcmp(k, "avgpool")) node = nn_avgpool_1x1(g, in[0]);
    else if (!strcmp(k, "max_time")) node = nn_max_time(g, in[0]);
    else if (!strcmp(k, "log_softmax")) node = nn_log_softmax(g, in[0]);
    else if (!strcmp(k, "maxpool")) {
        if (geti(x, s, "size", 2, &a) || geti(x, s, "stride", 0, &b) || geti(x, s, "pad", 0, &c)) return -1;
        node = nn_maxpool(g, in[0], a, b ? b : a, c);
    } else if (!strcmp(k, "dropout")) {
        const char *p = get(s, "p");
        if (geti(x, s, "2d", 0, &a)) return -1;
        node = nn_dropout(g, in[0], p ? (float)atof(p) : 0.5f, a);
    } else if (!strcmp(k, "embedding")) {
        if (geti(x, s, "dim", 128, &a)) return -1;
        node = nn_embedding(g, name, in[0], x->c->vocab, a);
    } else if (!strcmp(k, "gpt")) {
        nn_gpt_cfg m;
        if (geti(x, s, "layers", 12, &m.layers) || geti(x, s, "dim", 768, &m.dim) || geti(x, s, "heads", 12, &m.heads) ||
            geti(x, s, "ctx", 1024, &m.ctx) || geti(x, s, "vocab", 0, &m.vocab))
            return -1;
        const char *at = get(s, "attention");
        m.stored_attn = at && !strcmp(at, "stored");
        if (at && !m.stored_attn && strcmp(at, "flash")) {
            snprintf(x->err, x->errlen, "%s:%d: [gpt] attention=%s: expected flash or stored", x->c->file, s->line, at);
            return -1;
        }
        if (!x->c->lm || g->nn != 1 || m.layers < 1 || m.dim < 1 || m.heads < 1 || m.dim % m.heads) {
            snprintf(x->err, x->errlen, "%s:%d: [gpt] %s", x->c->file, s->line,
                     !x->c->lm ? "needs token windows (token shards, or --data synthetic)"
                     : g->nn != 1 ? "must be the only section" : "needs layers, dim, heads >= 1 and dim a multiple of heads");
            return -1;
        }
        nn_build_gpt(g, x->c, &m);
        node = g->nn - 1;
    } else if (!strcmp(k, "add")) {
        if (nin != 2) { snprintf(x->err, x->errlen, "%s:%d: [add] needs from= with 2 nodes", x->c->file, s->line); return -1; }
        node = nn_add2(g, in[0], in[1]);
    } else if (!strcmp(k, "concat")) node = nn_concat(g, in, nin);
    else if (!strcmp(k, "basic_block") || !strcmp(k, "bottleneck")) {
        if (!name) { snprintf(x->err, x->errlen, "%s:%d: [%s] needs name=", x->c->file, s->line, k); return -1; }
        if (geti(x, s, "filters", 0, &a) || geti(x, s, "stride", 1, &b)) return -1;
        node = nn_resnet_block(g, name, in[0], g->nodes[in[0]].out.c, a, b, k[1] == 'o');
    } else {
        snprintf(x->err, x->errlen, "%s:%d: unknown section [%s]", x->c->file, s->line, k);
        return -1;
    }
    for (int i = 0; i < s->nk; i++)
        if (!s->used[i]) {
            snprintf(x->err, x->errlen, "%s:%d: [%s] has no key '%s'", x->c->file, s->line, k, s->key[i]);
            return -1;
        }
    if (g->err[0]) {
        snprintf(x->err, x->errlen, "%s:%d: %s", x->c->file, s->line, g->err);
        return -1;
    }
    if (id) {
        if (x->nids == MAXID) { snprintf(x->err, x->errlen, "%s:%d: too many ids", x->c->file, s->line); return -1; }
        if (strlen(id) >= sizeof x->ids[0]) {
            snprintf(x->err, x->errlen, "%s:%d: id too long", x->c->file, s->line);
            return -1;
        }
        memcpy(x->ids[x->nids], id, strlen(id) + 1);
        x->id_node[x->nids++] = node;
    }
    x->last = node;
    return 0;
}

/* A [gpt] file's vocab= and ctx= (the data needs them before the model is built:
 * --data synthetic windows). 1 when the file describes a language model. */
int nn_cfg_lm_shape(const char *file, int *vocab, int *ctx)
{
    FILE *f = fopen(file, "r");
    char line[512];
    int in = 0, lm = 0;
    if (!f) return 0;
    *vocab = 0, *ctx = 1024;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '[') lm |= in = !strncmp(p, "[gpt]", 5);
        else if (in && !strncmp(p, "vocab", 5) && strchr(p, '=')) *vocab = atoi(strchr(p, '=') + 1);
        else if (in && !strncmp(p, "ctx", 3) && strchr(p, '=')) *ctx = atoi(strchr(p, '=') + 1);
    }
    fclose(f);
    return lm;
}

int nn_build_cfg(nn_graph *g, const nn_model_cfg *c, char *err, size_t errlen)
{
    FILE *f = fopen(c->file, "r");
    if (!f) {
        snprintf(err, errlen, "--model-file %s: cannot open", c->file);
        return -1;
    }
    ctx x = {.g = g, .c = c, .err = err, .errlen = errlen};
    sect s = {.kind = ""};
    char line[512];
    int ln = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        ln++;
        char *p = line, *e;
        if ((e = strpbrk(p, "#;\r\n"))) *e = 0;
        while (isspace((unsigned char)*p)) p++;
        for (e = p + strlen(p); e > p && isspace((unsigned char)e[-1]);) *--e = 0;
        if (!*p) continue;
        if (*p == '[') {
            if (s.kind[0]) rc = build(&x, &s);
            memset(&s, 0, sizeof s);
            if (sscanf(p, "[%31[a-z0-9_]]", s.kind) != 1) {
                snprintf(err, errlen, "%s:%d: bad section header '%s'", c->file, ln, p);
                rc = -1;
            }
            s.line = ln;
            continue;
        }
        char *eq = strchr(p, '=');
        if (!s.kind[0] || !eq || s.nk == MAXK) {
            snprintf(err, errlen, "%s:%d: expected key=value inside a [section], got '%s'", c->file, ln, p);
            rc = -1;
            break;
        }
        *eq = 0;
        for (e = eq; e > p && isspace((unsigned char)e[-1]);) *--e = 0;
        char *v = eq + 1;
        while (isspace((unsigned char)*v)) v++;
        if (strlen(p) >= sizeof s.key[0] || strlen(v) >= sizeof s.val[0]) {
            snprintf(err, errlen, "%s:%d: key or value too long", c->file, ln);
            rc = -1;
            break;
        }
        memcpy(s.key[s.nk], p, strlen(p) + 1);
        memcpy(s.val[s.nk], v, strlen(v) + 1);
        s.nk++;
    }
    fclose(f);
    if (!rc && s.kind[0]) rc = build(&x, &s);
    if (!rc && g->nn < 2) {
        snprintf(err, errlen, "--model-file %s: no layers", c->file);
        rc = -1;
    }
    return rc;
}
