/* Language-model evaluation and sampling, and the language-model mode (nn/lm.h). */
#include "nn/lm.h"
#include "nn/train_epoch.h"
#include "nn/graph_cuda.h"
#include "ports/cuda/port_cuda.h"
#include "nn/ops/ops.h"
#include "nn/metrics.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

void nn_lm_plan(nn_lm *l, rt_arena *a, const nn_trainer *t)
{
    size_t w = (size_t)t->train.w, chunk = (size_t)(t->eval_chunk > 0 ? t->eval_chunk : 1);
    int32_t *win = rt_arena_alloc(a, chunk * w * sizeof(int32_t), RT_MEM_DATA, "validation / sampling windows");
    float *lg = rt_arena_alloc(a, (size_t)t->train.vocab * sizeof(float), RT_MEM_DATA, "sampling logits");
    if (!a->planning) l->win = win, l->logits = lg;
}

void nn_lm_open_tokenizer(nn_lm *l, const nn_trainer *t)
{
    char p[700], err[512];
    const char *dir = t->o.tokenizer ? t->o.tokenizer : t->data_dir;
    snprintf(p, sizeof p, "%.600s/encoder.json", dir);
    FILE *f = fopen(p, "r");
    if (!f) {
        if (t->o.tokenizer) rt_warn("--tokenizer %s: no encoder.json there: samples print as token ids", dir);
        return;
    }
    fclose(f);
    if (!(l->bpe = nn_bpe_load(dir, err, sizeof err))) rt_warn("%s: samples print as token ids", err);
}

/* Validation and sampling run the host graph: with --device cuda it takes the device's
 * parameters first. */
static void host_params(nn_trainer *t)
{
    if (t->cuda && nn_cuda_download(t->cuda, NULL)) rt_fatal("cuda: %s", port_cuda_errmsg());
}

double nn_lm_eval(nn_trainer *t, nn_lm *l)
{
    host_params(t);
    int chunk = t->eval_chunk, limit = t->o.eval_batches > 0 ? t->o.eval_batches * chunk : t->test.n;
    int first = (int)((long)(limit < t->test.n ? limit : t->test.n) * t->rank / t->world);
    int last = (int)((long)(limit < t->test.n ? limit : t->test.n) * (t->rank + 1) / t->world);
    double sums[2] = {0, 0};
    size_t w = (size_t)t->test.w;
    char err[512];
    for (int i = first; i < last; i += chunk) {
        int n = last - i < chunk ? last - i : chunk;
        for (int k = 0; k < n; k++) {
            int32_t y;
            if (nn_data_sample(&t->test, i + k, 0, 0, l->win + k * w, &y, NULL, err, sizeof err))
                rt_fatal("validation: %s", err);
        }
        nn_forward(&t->g, l->win, n, 0, 0, 0);
        sums[0] += nn_loss(&t->g, NULL, n, NULL);
        sums[1] += n;
    }
    if (t->ddp && nn_ddp_sum_f64(t->ddp, sums, 2)) rt_fatal("%s", nn_ddp_errmsg(t->ddp));
    return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

/* Bytes as they are (control characters but newline and tab as '?'); BPE through
 * its decoder; otherwise ids. */
static void put_token(const nn_lm *l, int v, int vocab)
{
    size_t len;
    const char *s = l->bpe ? nn_bpe_decode(l->bpe, v, &len) : NULL;
    if (s) fwrite(s, 1, len, stdout);
    else if (vocab <= 256) putchar(v >= 32 || v == '\n' || v == '\t' ? v : '?');
    else printf("<%d>", v);
}

int nn_lm_vocab(const nn_graph *g)
{
    return nn_tok_pos_embed_vocab(&g->nodes[nn_lm_loss_embedding(&g->nodes[g->out])]);
}

void nn_lm_sample(nn_trainer *t, nn_lm *l, int n, const char *label)
{
    host_params(t);
    nn_graph *g = &t->g;
    /* the data's tokens (set-up checked that they are rows of the model's embedding) */
    int mv = nn_lm_vocab(g), T = t->train.w - 1, V = t->train.vocab < mv ? t->train.vocab : mv, C;
    int eot = l->bpe && nn_bpe_eot(l->bpe) >= 0 ? nn_bpe_eot(l->bpe) : V <= 256 ? '\n' : V == 50257 ? 50256 : 0;
    const nn_node *ln = &g->nodes[g->nodes[g->out].in[0]], *e = &g->nodes[nn_lm_loss_embedding(&g->nodes[g->out])];
    const float *wte = g->params + g->p[e->p0].offset;
    C = ln->out.w;
    memset(l->win, 0, sizeof(int32_t) * (size_t)(T + 1));
    l->win[0] = eot;
    printf("%s", label);
    uint64_t seed = (uint64_t)t->o.seed * 0x9E3779B97F4A7C15ull + 17;
    for (int i = 0, len = 1; i < n; i++) {
        /* the window slides once full: the last T tokens */
        if (len > T) {
            memmove(l->win, l->win + 1, sizeof(int32_t) * (size_t)(T - 1));
            len = T;
        }
        nn_forward_to(g, l->win, 1, g->out - 1);
        k_linear_fwd(1, C, V, ln->y + (size_t)(len - 1) * C, wte, NULL, l->logits);
        /* temperature, top-k (the k-th largest logit as a floor), softmax, one draw */
        float temp = (float)t->o.temperature, floor = -INFINITY, mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = l->logits[v] > mx ? l->logits[v] : mx;
        if (t->o.top_k > 0 && t->o.top_k < V) {
            float lo = -INFINITY, hi = mx; /* bisect for the k-th largest */
            for (int it = 0; it < 40; it++) {
                float mid = isinf(lo) ? hi - 64.0f : 0.5f * (lo + hi);
                int cnt = 0;
                for (int v = 0; v < V; v++) cnt += l->logits[v] >= mid;
                if (cnt >= t->o.top_k) lo = mid;
                else hi = mid;
            }
            floor = lo;
        }
        double s = 0;
        for (int v = 0; v < V; v++) s += l->logits[v] >= floor ? exp((double)(l->logits[v] - mx) / temp) : 0.0;
        double u = k_rand_uniform(seed, l->draws++) * s, c = 0;
        int pick = 0;
        for (int v = 0; v < V; v++) {
            if (l->logits[v] < floor) continue;
            c += exp((double)(l->logits[v] - mx) / temp);
            pick = v;
            if (c > u) break;
        }
        l->win[len++] = pick;
        put_token(l, pick, V);
    }
    printf("\n");
    fflush(stdout);
}

/* ---- the language-model mode (nn/train_mode.h) */
static int lm_start(nn_trainer *t)
{
    if (t->rank == 0) nn_lm_open_tokenizer(&t->lm, t);
    if (t->o.generate <= 0) return 0;
    /* sampling from a checkpoint, no training */
    if (t->rank == 0) nn_lm_sample(t, &t->lm, t->o.generate, "");
    return 1;
}

static void lm_begin(nn_trainer *t)
{
    if (t->rank == 0) nn_lm_sample(t, &t->lm, t->o.sample_len, "sample before training: ");
}

static void lm_end(nn_trainer *t)
{
    if (t->rank == 0) nn_lm_sample(t, &t->lm, t->o.sample_len, "sample after training: ");
}

/* --eval-every's validation loss and --sample-every's text between steps. */
static double lm_after_step(nn_trainer *t, int epoch, nn_metrics *mx)
{
    const nn_opts *o = &t->o;
    double e0 = port_now_s();
    if (o->eval_every > 0 && t->step % (uint64_t)o->eval_every == 0 && !o->no_eval) {
        double vl = nn_lm_eval(t, &t->lm);
        if (t->rank == 0) printf("step %llu: val loss %.4f\n", (unsigned long long)t->step, vl);
        nn_metrics_row(mx, "val", t->step, epoch, vl, -1, 0, 0, 0, 0);
    }
    if (o->sample_every > 0 && t->step % (uint64_t)o->sample_every == 0 && t->rank == 0) {
        char label[64];
        snprintf(label, sizeof label, "step %llu sample: ", (unsigned long long)t->step);
        nn_lm_sample(t, &t->lm, o->sample_len, label);
    }
    return port_now_s() - e0;
}

static int lm_evaluate(nn_trainer *t, nn_eval_result *r)
{
    r->loss = nn_lm_eval(t, &t->lm), r->correct = 0, r->count = 1;
    if (t->rank == 0) printf("\nTest set: Average loss: %.4f (perplexity %.2f)\n\n", r->loss, exp(r->loss));
    return 0;
}

const nn_train_mode nn_mode_lm = {.name = "language model", .start = lm_start, .begin = lm_begin, .end = lm_end,
                                  .train_epoch = nn_trainer_epoch, .after_step = lm_after_step,
                                  .evaluate = lm_evaluate};
