/* --model-file net.cfg: a network described in plain text, as Darknet's .cfg files
 * are, so users train their own CNN without recompiling. One [section] per node,
 * `key=value` lines under it, '#' or ';' starts a comment:
 *
 *   [conv2d]  name=conv1 filters=10 size=5 stride=1 pad=0 bias=1 init=uniform|kaiming
 *   [conv1d]  name=convs.0 filters=100 size=3
 *   [linear]  name=fc out=classes          (classes: the data's class count)
 *   [batchnorm] name=bn1 eps=1e-5 momentum=0.1    [relu]  [flatten]  [avgpool]
 *   [maxpool] size=2 stride=2 pad=0        [dropout] p=0.5 2d=1
 *   [embedding] name=embedding dim=128     (vocabulary: the data's)
 *   [add] from=-1,-4          [concat] from=a,b,c        [max_time]  [log_softmax]
 *   [basic_block] name=layer1.0 filters=64 stride=1     [bottleneck] ... (filters = 4 x width)
 *   [gpt] layers=6 dim=384 heads=6 ctx=256 vocab=0 attention=flash|stored dropout=0
 *         a whole GPT-2-style language model (Hugging Face's names; vocab 0: the data's;
 *         stored: attention keeps its probabilities, the comparison point); token windows
 *
 * Keys may also follow the header on its line: `[maxpool] size=3 stride=2`. A
 * language model of separate sections ([tok_pos_embed] dim=, [layernorm], [conv1d_hf]
 * out=, [attention] heads=, [gelu], [add]) ends with [lm_loss] from=-1,input: the
 * classifier tied to the embedding before it (docs/gpt.md).
 * A section is an op's kind (or its alias: batchnorm, maxpool, avgpool) and its keys
 * are the op's named attributes (nn/ops/X.c), so a new op is usable here without
 * touching this file; basic_block and bottleneck are the two blocks of nn/models/
 * resnet.c, gpt the whole model of nn/models/gpt.c. A node reads the previous node unless `from=` names others: -N counts back
 * from this node (-1 = the previous), a word is the `id=` another section gave itself,
 * and `input` is the data. Every layer's name= is its own (its tensors are named after
 * it), and two layers with parameters cannot both go unnamed. */
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
    int kline[MAXK];
} sect;

typedef struct ctx {
    nn_graph *g;
    const nn_model_cfg *c;
    char *err;
    size_t errlen;
    char ids[MAXID][32];
    int id_node[MAXID], nids, last;
    char names[NN_MAX_NODES][NN_NAME]; /* the name= of each section so far, and its line */
    int name_line[NN_MAX_NODES], nnames;
} ctx;

#define CFG_ERR(x, s, ...) do { int k_ = snprintf((x)->err, (x)->errlen, "%s:%d: [%s] ", (x)->c->file, (s)->line, \
    (s)->kind); if (k_ > 0 && (size_t)k_ < (x)->errlen) snprintf((x)->err + k_, (x)->errlen - (size_t)k_, __VA_ARGS__); \
    return -1; } while (0)

static const char *get(const sect *s, const char *k)
{
    for (int i = 0; i < s->nk; i++)
        if (!strcmp(s->key[i], k)) return s->val[i];
    return NULL;
}

/* Resolves from= into node indices (default: the previous node). */
static int inputs(ctx *x, const sect *s, int *in, int max)
{
    const char *v = get(s, "from");
    if (!v) { in[0] = x->last; return 1; }
    char buf[96];
    snprintf(buf, sizeof buf, "%s", v);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        int node = -1;
        if (n == max) CFG_ERR(x, s, "takes at most %d inputs", max);
        char *end;
        if (t[0] == '-' && isdigit((unsigned char)t[1])) {
            long back = strtol(t, &end, 10);
            if (!*end && back >= -x->g->nn) node = x->g->nn + (int)back;
        } else if (!strcmp(t, "input")) {
            node = 0;
        } else {
            for (int i = 0; i < x->nids; i++)
                if (!strcmp(x->ids[i], t)) node = x->id_node[i];
        }
        if (node < 0 || node >= x->g->nn) CFG_ERR(x, s, "from=%s: no such node", t);
        in[n++] = node;
    }
    return n;
}

/* The section's attribute keys (all but name, id, from) as named values, plus the
 * values an op takes from the data set. */
static int attr_kv(ctx *x, const sect *s, const nn_op *op, nn_kv *kv)
{
    int n = 0;
    for (int i = 0; i < s->nk; i++)
        if (strcmp(s->key[i], "name") && strcmp(s->key[i], "id") && strcmp(s->key[i], "from"))
            kv[n++] = (nn_kv){.key = s->key[i], .s = s->val[i]};
    for (const nn_attr *a = op->attrs; a && a->key; a++)
        if (a->from_data) {
            if (strcmp(a->key, "vocab")) CFG_ERR(x, s, "attribute %s: no value from the data for it", a->key);
            kv[n++] = (nn_kv){.key = a->key, .v = x->c->vocab};
        }
    return n;
}

/* The two ResNet blocks: keys parsed like an op's. */
typedef struct block_attr { int filters, stride; } block_attr;
static const nn_attr block_attrs[] = {{"filters", NN_ATTR_INT, offsetof(block_attr, filters), NN_ATTR_REQUIRED, NULL, 0},
                                      {"stride", NN_ATTR_INT, offsetof(block_attr, stride), 1, NULL, 0}, {NULL}};
static const nn_op basic_block = {.kind = "basic_block", .attrs = block_attrs, .attr_size = sizeof(block_attr)};
static const nn_op bottleneck = {.kind = "bottleneck", .attrs = block_attrs, .attr_size = sizeof(block_attr)};
/* The GPT-2 model as one section (its blocks are not separate sections yet). */
static const nn_attr gpt_attrs[] = {{"layers", NN_ATTR_INT, offsetof(nn_gpt_cfg, layers), 12, NULL, 0},
                                    {"dim", NN_ATTR_INT, offsetof(nn_gpt_cfg, dim), 768, NULL, 0},
                                    {"heads", NN_ATTR_INT, offsetof(nn_gpt_cfg, heads), 12, NULL, 0},
                                    {"ctx", NN_ATTR_INT, offsetof(nn_gpt_cfg, ctx), 1024, NULL, 0},
                                    {"vocab", NN_ATTR_INT, offsetof(nn_gpt_cfg, vocab), 0, NULL, 0},
                                    {"attention", NN_ATTR_CHOICE, offsetof(nn_gpt_cfg, stored_attn), 0, "flash|stored", 0},
                                    {"dropout", NN_ATTR_FLOAT, offsetof(nn_gpt_cfg, dropout), 0, NULL, 0},
                                    {NULL}};
static const nn_op gpt_model = {.kind = "gpt", .attrs = gpt_attrs, .attr_size = sizeof(nn_gpt_cfg)};

static int build(ctx *x, const sect *s)
{
    nn_graph *g = x->g;
    const char *name = get(s, "name"), *id = get(s, "id"), *k = s->kind;
    int in[NN_MAX_IN], nin = inputs(x, s, in, NN_MAX_IN), node;
    if (nin < 0) return -1;
    const nn_op *op = nn_op_find(k);
    int block = !strcmp(k, basic_block.kind) || !strcmp(k, bottleneck.kind), gpt = !strcmp(k, gpt_model.kind);
    if (block) op = k[1] == 'o' ? &bottleneck : &basic_block;
    if (gpt) op = &gpt_model;
    if (!op || op->flags & NN_SOURCE) {
        snprintf(x->err, x->errlen, "%s:%d: unknown section [%s]", x->c->file, s->line, k);
        return -1;
    }
    if (g->nn + 16 > NN_MAX_NODES) CFG_ERR(x, s, "the model has more than %d nodes", NN_MAX_NODES - 16);
    nn_kv kv[MAXK + 4];
    int nkv = attr_kv(x, s, op, kv);
    if (nkv < 0) return -1;
    unsigned char attr[NN_ATTR_BYTES];
    char why[160];
    if (nn_attrs_parse(g, op, kv, nkv, attr, why, sizeof why)) CFG_ERR(x, s, "%s", why);
    if (name && *name) {
        for (int i = 0; i < x->nnames; i++)
            if (!strcmp(x->names[i], name)) CFG_ERR(x, s, "name=%s is already line %d's", name, x->name_line[i]);
        if (strlen(name) >= NN_NAME) CFG_ERR(x, s, "name=%s is longer than %d characters", name, NN_NAME - 1);
        if (x->nnames < NN_MAX_NODES) {
            memcpy(x->names[x->nnames], name, strlen(name) + 1);
            x->name_line[x->nnames++] = s->line;
        }
    }
    if (block) {
        block_attr b;
        memcpy(&b, attr, sizeof b);
        if (!name) CFG_ERR(x, s, "needs name=");
        if (nin != 1) CFG_ERR(x, s, "takes 1 input, from= names %d", nin);
        node = nn_resnet_block(g, name, in[0], g->nodes[in[0]].out.c, b.filters, b.stride, op == &bottleneck);
    } else if (gpt) {
        nn_gpt_cfg m;
        memcpy(&m, attr, sizeof m);
        if (!x->c->lm) CFG_ERR(x, s, "needs token windows (token shards, or --data synthetic)");
        if (g->nn != 1) CFG_ERR(x, s, "must be the only section");
        if (m.layers < 1 || m.dim < 1 || m.heads < 1 || m.dim % m.heads)
            CFG_ERR(x, s, "needs layers, dim, heads >= 1 and dim a multiple of heads");
        if (!(m.dropout >= 0 && m.dropout < 1)) CFG_ERR(x, s, "dropout=%g is not in [0, 1)", (double)m.dropout);
        if (m.vocab < 0 || m.vocab == 1) CFG_ERR(x, s, "vocab=%d: 0 (the data's) or at least 2", m.vocab);
        nn_build_gpt(g, x->c, &m);
        node = g->nn - 1;
    } else {
        int lo = op->min_in, hi = op->max_in;
        if (!lo && !hi) lo = hi = 1;
        if (nin < lo || nin > hi) {
            if (lo == hi) CFG_ERR(x, s, "takes %d input%s, from= names %d", lo, lo == 1 ? "" : "s", nin);
            CFG_ERR(x, s, "takes %d to %d inputs, from= names %d", lo, hi, nin);
        }
        node = nn_add(g, op, name, in, nin, attr, op->attr_size);
    }
    if (g->err[0]) {
        snprintf(x->err, x->errlen, "%s:%d: %s", x->c->file, s->line, g->err);
        return -1;
    }
    if (id) {
        if (x->nids == MAXID) CFG_ERR(x, s, "more than %d ids", MAXID);
        if (strlen(id) >= sizeof x->ids[0]) CFG_ERR(x, s, "id=%s is longer than %zu characters", id, sizeof x->ids[0] - 1);
        for (int i = 0; i < x->nids; i++)
            if (!strcmp(x->ids[i], id)) CFG_ERR(x, s, "id=%s is given twice", id);
        memcpy(x->ids[x->nids], id, strlen(id) + 1);
        x->id_node[x->nids++] = node;
    }
    x->last = node;
    return 0;
}

/* One key=value line into the section; -1 with err. */
static int add_key(const nn_model_cfg *c, sect *s, char *p, int ln, char *err, size_t errlen)
{
    char *eq = strchr(p, '='), *e;
    if (!s->kind[0] || !eq || s->nk == MAXK) {
        snprintf(err, errlen, "%s:%d: expected key=value inside a [section]%s, got '%s'", c->file, ln,
                 s->nk == MAXK ? " (at most 12 keys)" : "", p);
        return -1;
    }
    *eq = 0;
    for (e = eq; e > p && isspace((unsigned char)e[-1]);) *--e = 0;
    char *v = eq + 1;
    while (isspace((unsigned char)*v)) v++;
    if (strlen(p) >= sizeof s->key[0] || strlen(v) >= sizeof s->val[0]) {
        snprintf(err, errlen, "%s:%d: key or value too long", c->file, ln);
        return -1;
    }
    for (int i = 0; i < s->nk; i++)
        if (!strcmp(s->key[i], p)) {
            snprintf(err, errlen, "%s:%d: [%s] %s= is given twice (lines %d and %d)", c->file, ln, s->kind, p,
                     s->kline[i], ln);
            return -1;
        }
    memcpy(s->key[s->nk], p, strlen(p) + 1);
    memcpy(s->val[s->nk], v, strlen(v) + 1);
    s->kline[s->nk++] = ln;
    return 0;
}

int nn_build_cfg(nn_graph *g, const nn_model_cfg *c, char *err, size_t errlen)
{
    FILE *f = fopen(c->file, "r");
    if (!f) {
        snprintf(err, errlen, "--model-file %s: cannot open", c->file);
        return -1;
    }
    int rc = nn_build_cfg_stream(g, c, f, err, errlen);
    fclose(f);
    return rc;
}

int nn_build_cfg_stream(nn_graph *g, const nn_model_cfg *c, FILE *f, char *err, size_t errlen)
{
    static ctx x; /* names[] is large; building is single-threaded start-up */
    memset(&x, 0, sizeof x);
    x.g = g, x.c = c, x.err = err, x.errlen = errlen;
    g->lm = c->lm; /* token windows: the ops read T + 1 ids (a [gpt] or [lm_loss] model) */
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
            if (rc) break;
            memset(&s, 0, sizeof s);
            int end = 0;
            if (sscanf(p, "[%31[a-z0-9_]]%n", s.kind, &end) != 1 || !end) {
                snprintf(err, errlen, "%s:%d: bad section header '%s'", c->file, ln, p);
                rc = -1;
                break;
            }
            s.line = ln;
            /* key=value words after the header belong to the section */
            for (char *save = NULL, *t = strtok_r(p + end, " \t", &save); t && !rc; t = strtok_r(NULL, " \t", &save))
                rc = add_key(c, &s, t, ln, err, errlen);
            continue;
        }
        rc = add_key(c, &s, p, ln, err, errlen);
    }
    if (!rc && ferror(f)) {
        snprintf(err, errlen, "--model-file %s: read error", c->file);
        rc = -1;
    }
    if (!rc && s.kind[0]) rc = build(&x, &s);
    if (!rc && g->nn < 2) {
        snprintf(err, errlen, "--model-file %s: no layers", c->file);
        rc = -1;
    }
    if (!rc && g->lm && strcmp(g->nodes[g->nn - 1].op->kind, "lm_loss")) {
        snprintf(err, errlen, "--model-file %s: a language model (token windows) ends with [lm_loss] (or is one [gpt])",
                 c->file);
        rc = -1;
    }
    if (!rc && g->lm) g->num_classes = 1; /* the output is the loss */
    return rc;
}

/* A [gpt] file's vocab= and ctx= (the data needs them before the model is built:
 * --data synthetic windows). 1 when the file describes a language model (a [gpt] or an
 * [lm_loss] section). Keys on the header line count too. */
static void lm_key(char *p, int *vocab, int *ctx)
{
    char *eq = strchr(p, '=');
    if (!eq) return;
    size_t k = (size_t)(eq - p);
    while (k && isspace((unsigned char)p[k - 1])) k--;
    if (k == 5 && !strncmp(p, "vocab", 5)) *vocab = atoi(eq + 1);
    if (k == 3 && !strncmp(p, "ctx", 3)) *ctx = atoi(eq + 1);
}

int nn_cfg_lm_shape(const char *file, int *vocab, int *ctx)
{
    FILE *f = fopen(file, "r");
    char line[512];
    int in = 0, lm = 0;
    if (!f) return 0;
    *vocab = 0, *ctx = 1024;
    while (fgets(line, sizeof line, f)) {
        char *p = line, *e;
        if ((e = strpbrk(p, "#;\r\n"))) *e = 0;
        while (isspace((unsigned char)*p)) p++;
        if (*p != '[') {
            if (in) lm_key(p, vocab, ctx);
            continue;
        }
        in = !strncmp(p, "[gpt]", 5);
        lm |= in || !strncmp(p, "[lm_loss]", 9);
        if (in)
            for (char *save = NULL, *t = strtok_r(p + 5, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
                lm_key(t, vocab, ctx);
    }
    fclose(f);
    return lm;
}
