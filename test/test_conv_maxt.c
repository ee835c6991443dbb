/* The sparse backward through max over time (kernels/cpu/k_conv_maxt.c, nn/plan.c):
 * conv -> relu -> max_time differentiated from the argmax alone must give the dense
 * chain's gradients to float tolerance (only the summation order differs), the same
 * bits on 1 and 2 threads, and must be chosen by the planner exactly where the
 * pattern holds. */
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_graph.h"
#include "kernels/k.h"
#include "nn/graph.h"
#include "nn/models/models.h"
#include "rt/arena.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 12345;
static unsigned rnd(unsigned n)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(rs >> 33) % n;
}
/* Small integers / 4: many exact ties in the conv outputs. */
static float qv(void) { return ((float)rnd(9) - 4.0f) * 0.25f; }

static float *fa(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static int close_to(const float *a, const float *b, size_t n, float tol, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= tol * (1.0f + fabsf(b[i])))) {
            *at = i;
            return 0;
        }
    return 1;
}

/* One random shape: the kernel against relu/max_time/conv dense backward, 1 and 2 threads. */
static void kernel_case(int n, int c, int h, int w, int k, int r, int s, int st, int pad)
{
    k_conv_shape sh = {.n = n, .c = c, .h = h, .w = w, .k = k, .r = r, .s = s, .stride = st, .pad = pad};
    k_conv_shape_init(&sh);
    CHECKF(sh.p == 1, "shape: p %d", sh.p);
    size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * r * s, ny = (size_t)n * k * sh.q, nm = (size_t)n * k;
    size_t wsb = k_conv2d_workspace(&sh), wm = k_conv2d_maxt_workspace(&sh), wf = k_conv2d_fwd_maxt_workspace(&sh);
    if (wf > wsb) wsb = wf;
    float *x = fa(nx), *wt = fa(nw), *b = fa(k), *y = fa(ny), *yr = fa(ny), *ym = fa(nm), *gy = fa(nm);
    float *dyr = fa(ny), *dyc = fa(ny), *dx0 = fa(nx), *dw0 = fa(nw), *db0 = fa(k);
    float *dx1 = fa(nx), *dw1 = fa(nw), *db1 = fa(k), *dx2 = fa(nx), *dw2 = fa(nw), *db2 = fa(k);
    int32_t *idx = calloc(nm, sizeof(int32_t));
    void *ws = malloc(wsb > wm ? wsb : wm);
    for (size_t i = 0; i < nx; i++) x[i] = qv();
    for (size_t i = 0; i < nw; i++) wt[i] = qv();
    for (int f = 0; f < k; f++) {
        b[f] = qv();
        if (f % 4 == 1) b[f] = -100.0f; /* every output < 0: relu zeroes the max */
        if (f % 5 == 2) memset(wt + (size_t)f * c * r * s, 0, sizeof(float) * (size_t)c * r * s); /* all tie */
    }
    for (size_t i = 0; i < nm; i++) gy[i] = (float)rnd(1000) / 500.0f - 1.0f;
    k_set_threads(1);
    k_conv2d_fwd(&sh, x, wt, b, y, ws);
    k_relu_fwd(ny, y, yr);
    k_max_time_fwd(n, k, sh.q, yr, ym, idx);
    /* the fused forward: the same bits, on 1 and 2 threads */
    for (int th = 1; th <= 2; th++) {
        float *ymf = fa(nm);
        int32_t *idf = calloc(nm, sizeof(int32_t));
        k_set_threads(th);
        k_conv2d_fwd_maxt(&sh, x, wt, b, ymf, idf, ws);
        k_set_threads(1);
        CHECKF(memcmp(ymf, ym, nm * sizeof(float)) == 0 && memcmp(idf, idx, nm * sizeof(int32_t)) == 0,
               "n%d c%d %dx%d k%d %dx%d st%d pad%d: fused forward differs (%d threads)", n, c, h, w, k, r, s, st, pad, th);
        free(ymf);
        free(idf);
    }
    /* dense: max_time's dx, relu's mask, the conv's full backward */
    k_max_time_bwd(n, k, sh.q, gy, idx, dyr);
    k_relu_bwd(ny, yr, dyr, dyc);
    k_conv2d_bwd(&sh, x, wt, dyc, dx0, dw0, db0, ws);
    k_conv2d_bwd_maxt(&sh, x, wt, gy, ym, idx, dx1, dw1, db1, ws);
    k_set_threads(2);
    memset(ws, 0x7f, wm); /* stale workspace must not matter */
    k_conv2d_bwd_maxt(&sh, x, wt, gy, ym, idx, dx2, dw2, db2, ws);
    k_set_threads(1);
    size_t at = 0;
    CHECKF(close_to(dw1, dw0, nw, 1e-5f, &at), "n%d c%d %dx%d k%d %dx%d st%d pad%d: dw[%zu] %g vs dense %g", n, c, h,
           w, k, r, s, st, pad, at, dw1[at], dw0[at]);
    CHECKF(close_to(db1, db0, (size_t)k, 1e-5f, &at), "db[%zu] %g vs dense %g", at, db1[at], db0[at]);
    CHECKF(close_to(dx1, dx0, nx, 1e-5f, &at), "n%d c%d %dx%d k%d %dx%d st%d pad%d: dx[%zu] %g vs dense %g", n, c, h,
           w, k, r, s, st, pad, at, dx1[at], dx0[at]);
    CHECK(memcmp(dw1, dw2, nw * sizeof(float)) == 0);
    CHECK(memcmp(db1, db2, (size_t)k * sizeof(float)) == 0);
    CHECK(memcmp(dx1, dx2, nx * sizeof(float)) == 0);
    /* no bias, no dx */
    memset(dw2, 0, nw * sizeof(float));
    k_conv2d_bwd_maxt(&sh, x, wt, gy, ym, idx, NULL, dw2, NULL, ws);
    CHECK(memcmp(dw1, dw2, nw * sizeof(float)) == 0);
    float *all[] = {x, wt, b, y, yr, ym, gy, dyr, dyc, dx0, dw0, db0, dx1, dw1, db1, dx2, dw2, db2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    free(idx);
    free(ws);
}

TEST(conv_maxt_kernel_matches_dense_backward)
{
    /* conv1d (h = 1, r = 1) of several widths, and 2-D kernels whose output is one
     * row high (padding on both axes, stride), channel counts around the SIMD widths. */
    kernel_case(3, 5, 1, 9, 7, 1, 3, 1, 0);
    kernel_case(4, 16, 1, 12, 10, 1, 4, 1, 0);
    kernel_case(2, 33, 1, 6, 5, 1, 6, 1, 0); /* width = length: one column */
    kernel_case(5, 70, 1, 20, 9, 1, 5, 1, 0);
    kernel_case(3, 8, 1, 10, 6, 3, 3, 1, 1);  /* padded 3x3 on a 1-row input */
    kernel_case(2, 17, 1, 11, 4, 5, 5, 2, 2); /* stride 2, pad 2 */
    kernel_case(2, 6, 3, 8, 5, 3, 2, 1, 0);   /* 3-row input, 3-row kernel */
    kernel_case(70, 4, 1, 5, 3, 1, 2, 1, 0);  /* more samples than one gather chunk */
    for (int t = 0; t < 6; t++)
        kernel_case(1 + (int)rnd(6), 1 + (int)rnd(40), 1, 4 + (int)rnd(12), 1 + (int)rnd(12), 1, 1 + (int)rnd(4), 1, 0);
}

/* ---- graphs: the planner's choice and whole-model gradients, sparse vs dense ---- */

static int build(mg *m, const nn_model_cfg *c, int batch, int no_sparse, char *err, size_t errlen)
{
    rt_arena plan;
    rt_arena_plan(&plan, "plan");
    for (int pass = 0; pass < 2; pass++) {
        if (nn_model_build(&m->g, m->nodes, m->p, m->b, c, err, errlen)) return -1;
        m->g.no_sparse = no_sparse;
        if (nn_graph_finish(&m->g, pass ? &m->a : &plan, batch, err, errlen)) return -1;
        if (!pass && rt_arena_init(&m->a, "model", plan.high)) return -1;
    }
    return 0;
}

static int nsparse(const nn_graph *g)
{
    int k = 0;
    for (int i = 1; i < g->nn; i++) {
        const nn_node *n = &g->nodes[i];
        if (!n->maxt_from) continue;
        const nn_node *m = &g->nodes[n->maxt_from], *r = &g->nodes[m->in[0]];
        /* neither the conv's nor the relu's output or gradient is made */
        CHECK(n->dy == NULL && r->dy == NULL && r->y == NULL && n->y == NULL && m->dy != NULL && m->y != NULL);
        CHECK(m->folded == NN_FOLD_MAXT && r->folded == NN_FOLD_RELU && r->in[0] == i);
        k++;
    }
    return k;
}

/* Trains 3 steps on the sparse and the dense graph; gradients agree to tolerance and
 * the sparse graph gives the same bits on 1 and 2 threads. */
static void graph_case(const nn_model_cfg *c, int B, int want_sparse)
{
    static mg s, d, s2;
    char err[256];
    if (build(&s, c, B, 0, err, sizeof err) != 0) {
        t_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    if (build(&s2, c, B, 0, err, sizeof err) != 0) {
        t_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    if (build(&d, c, B, 1, err, sizeof err) != 0) {
        t_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    CHECKF(nsparse(&s.g) == want_sparse, "%s: %d sparse convs, want %d", s.g.model, nsparse(&s.g), want_sparse);
    CHECK(nsparse(&d.g) == 0);
    CHECKF(s.g.act_bytes < d.g.act_bytes, "planned %zu sparse vs %zu dense", s.g.act_bytes, d.g.act_bytes);
    int len = c->in.w;
    int32_t *x = malloc(sizeof(int32_t) * (size_t)B * len), y[64];
    for (int i = 0; i < B * len; i++) x[i] = (i % 7 == 3) ? 1 : (int32_t)rnd((unsigned)c->vocab); /* repeats: ties */
    for (int i = 0; i < B; i++) y[i] = i % c->num_classes;
    nn_graph_init(&s.g, 7);
    nn_graph_init(&s2.g, 7);
    nn_graph_init(&d.g, 7);
    /* a conv bias far below zero: that branch's relu zeroes every max */
    const nn_param *bias = NULL;
    for (int i = 0; i < s.g.np && !bias; i++)
        if (strstr(s.g.p[i].name, ".bias") && s.g.p[i].numel >= 3) bias = &s.g.p[i];
    if (bias) {
        s.g.params[bias->offset + 1] = s2.g.params[bias->offset + 1] = d.g.params[bias->offset + 1] = -50.0f;
    }
    /* a conv1d filter of zeros with a positive bias: every position ties, the first wins */
    for (int i = 0; i + 1 < s.g.np; i++)
        if (s.g.p[i].ndim == 3) {
            const nn_param *w = &s.g.p[i], *b = &s.g.p[i + 1];
            size_t per = w->numel / (size_t)w->shape[0];
            for (size_t k = 0; k < per; k++) s.g.params[w->offset + k] = 0.0f;
            s.g.params[b->offset] = 0.5f;
            memcpy(s2.g.params, s.g.params, s.g.nparams * sizeof(float));
            memcpy(d.g.params, s.g.params, s.g.nparams * sizeof(float));
            break;
        }
    for (int step = 0; step < 3; step++) {
        k_set_threads(1);
        nn_forward(&s.g, x, B, 1, 3, (uint64_t)step);
        nn_forward(&d.g, x, B, 1, 3, (uint64_t)step);
        double ls = nn_loss(&s.g, y, B, NULL), ld = nn_loss(&d.g, y, B, NULL);
        CHECKF(fabs(ls - ld) <= 1e-4 * (1 + fabs(ld)), "%s step %d: loss %g vs dense %g", s.g.model, step, ls, ld);
        nn_backward(&s.g, y, B, B);
        nn_backward(&d.g, y, B, B);
        k_set_threads(2);
        nn_forward(&s2.g, x, B, 1, 3, (uint64_t)step);
        nn_loss(&s2.g, y, B, NULL);
        nn_backward(&s2.g, y, B, B);
        k_set_threads(1);
        for (int i = 0; i < s.g.np; i++) {
            const nn_param *p = &s.g.p[i];
            size_t at = 0;
            CHECKF(close_to(s.g.grads + p->offset, d.g.grads + p->offset, p->numel, 1e-4f, &at),
                   "%s step %d: %s[%zu] sparse %g vs dense %g", s.g.model, step, p->name, at,
                   s.g.grads[p->offset + at], d.g.grads[p->offset + at]);
            CHECKF(memcmp(s.g.grads + p->offset, s2.g.grads + p->offset, p->numel * sizeof(float)) == 0,
                   "%s step %d: %s differs between 1 and 2 threads", s.g.model, step, p->name);
        }
        /* one update for all three: the forwards stay the same bits (same argmax) */
        for (size_t k = 0; k < s.g.nparams; k++) {
            s.g.params[k] -= 0.1f * s.g.grads[k];
            s2.g.params[k] = d.g.params[k] = s.g.params[k];
        }
    }
    free(x);
    rt_arena_free(&s.a);
    rt_arena_free(&s2.a);
    rt_arena_free(&d.a);
}

TEST(conv_maxt_textcnn_sparse_matches_dense)
{
    nn_model_cfg tc = {.name = "textcnn", .in = {1, 1, 12, 1}, .num_classes = 3, .vocab = 30, .embed_dim = 20};
    graph_case(&tc, 6, 3);
    nn_model_cfg wide = {.name = "textcnn", .in = {1, 1, 40, 1}, .num_classes = 5, .vocab = 200, .embed_dim = 37};
    graph_case(&wide, 9, 3);
}

TEST(conv_maxt_cfg_pattern_only_where_it_holds)
{
    /* Folded: conv1d, and a padded 2-D conv whose output is one row high. Dense: a
     * relu read twice, a conv read twice, max_time without relu. */
    const char *dir = t_tmpdir("maxt");
    static const char net[] =
        "[embedding]\nname=emb\ndim=12\nid=e\n"
        "[conv1d]\nname=a\nfilters=5\nsize=3\n[relu]\n[max_time]\nid=pa\n"
        "[conv2d]\nname=b\nfilters=4\nsize=3\npad=1\nfrom=e\n[relu]\n[max_time]\nid=pb\n"
        "[conv1d]\nname=c\nfilters=3\nsize=2\nfrom=e\n[relu]\nid=rc\n[max_time]\nid=pc\n[avgpool]\nfrom=rc\nid=qc\n"
        "[conv1d]\nname=d\nfilters=3\nsize=4\nfrom=e\nid=cd\n[relu]\n[max_time]\nid=pd\n[avgpool]\nfrom=cd\nid=qd\n"
        "[conv1d]\nname=f\nfilters=2\nsize=2\nfrom=e\n[max_time]\nid=pf\n"
        "[concat]\nfrom=pa,pb,pc,qc\nid=k1\n[concat]\nfrom=pd,qd,pf\n[concat]\nfrom=k1,-1\n"
        "[flatten]\n[linear]\nname=fc\nout=classes\n";
    nn_model_cfg c = {.file = t_write_text(dir, "maxt.cfg", net), .in = {1, 1, 10, 1}, .num_classes = 4, .vocab = 25};
    graph_case(&c, 5, 2);
}

/* max_time's vector path (all finite) against the scalar definition on every ISA:
 * ties, -0 before +0, an infinity and a NaN (the scalar fallback), lengths around the
 * vector widths. */
TEST(conv_maxt_max_time_forward_every_isa)
{
    static const char *const isas[] = {"generic", "avx2", "avx512"};
    enum { C = 9 };
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (k_set_isa(isas[k]) != 0) continue;
        for (int len = 1; len <= 70; len += (len < 20 ? 1 : 7)) {
            float *x = fa((size_t)C * len), y[C];
            int32_t idx[C];
            for (int i = 0; i < C * len; i++) x[i] = qv();
            x[len - 1] = 5.0f; /* row 0: the max last */
            for (int t = 0; t < len; t++) x[len + t] = t % 2 ? 0.0f : -0.0f; /* row 1: -0 first */
            for (int t = 0; t < len; t++) x[2 * len + t] = 1.5f; /* row 2: all tie */
            x[3 * len + len / 2] = INFINITY;
            x[4 * len + len / 3] = -INFINITY;
            x[5 * len + len / 2] = NAN;
            k_max_time_fwd(1, C, len, x, y, idx);
            for (int r = 0; r < C; r++) {
                const float *v = x + r * len;
                float m = v[0];
                int a = 0;
                for (int t = 1; t < len && !isnan(m); t++)
                    if (v[t] > m || isnan(v[t])) { m = v[t]; a = t; }
                CHECKF(idx[r] == a && memcmp(&y[r], &m, sizeof m) == 0, "%s len %d row %d: %g at %d, want %g at %d",
                       isas[k], len, r, y[r], idx[r], m, a);
            }
            /* the relu folded in: the same as max_time over k_relu_fwd's output */
            for (int t = 0; t < len; t++) x[6 * len + t] = -1.0f - (float)t; /* all negative */
            x[7 * len] = -0.0f;
            for (int t = 1; t < len; t++) x[7 * len + t] = -2.0f; /* -0 then negatives */
            float *xr = fa((size_t)C * len), yr[C], yf[C];
            int32_t ir[C], ifu[C];
            k_relu_fwd((size_t)C * len, x, xr);
            k_max_time_fwd(1, C, len, xr, yr, ir);
            k_max_time_relu_fwd(1, C, len, x, yf, ifu);
            for (int r = 0; r < C; r++)
                CHECKF(ir[r] == ifu[r] && memcmp(&yr[r], &yf[r], sizeof(float)) == 0,
                       "%s len %d row %d: relu folded %g at %d, want %g at %d", isas[k], len, r, yf[r], ifu[r], yr[r],
                       ir[r]);
            free(xr);
            free(x);
        }
    }
    k_set_isa(NULL);
}

/* The embedding's register-transpose path (AVX2) is the scalar loop's bits: the same
 * adds in token order, rows repeated inside one 8-token block, ragged edges. */
TEST(conv_maxt_embedding_vector_path_same_bits)
{
    static const int shapes[][3] = {{3, 37, 21}, {2, 64, 128}, {8, 64, 130}, {4, 16, 8}, {1, 7, 5}}; /* n, len, dim */
    const int vocab = 11;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int n = shapes[s][0], len = shapes[s][1], dim = shapes[s][2];
        size_t ny = (size_t)n * dim * len, nt = (size_t)vocab * dim;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * len);
        for (int i = 0; i < n * len; i++) ids[i] = (int32_t)rnd((unsigned)vocab); /* many repeats per block */
        float *tab = fa(nt), *g = fa(ny), *y[2] = {fa(ny), fa(ny)}, *dt[3] = {fa(nt), fa(nt), fa(nt)};
        for (size_t i = 0; i < nt; i++) tab[i] = (float)rnd(1000) / 300.0f - 1.5f;
        for (size_t i = 0; i < ny; i++) g[i] = (float)rnd(1000) / 700.0f - 0.6f;
        CHECK(k_set_isa("generic") == 0);
        k_embedding_fwd(n, len, dim, ids, tab, y[0]);
        k_embedding_bwd(n, len, dim, vocab, ids, g, dt[0]);
        if (k_set_isa("avx2") == 0) {
            k_embedding_fwd(n, len, dim, ids, tab, y[1]);
            k_embedding_bwd(n, len, dim, vocab, ids, g, dt[1]);
            k_set_threads(2);
            k_embedding_bwd(n, len, dim, vocab, ids, g, dt[2]);
            k_set_threads(1);
            CHECKF(memcmp(y[0], y[1], ny * sizeof(float)) == 0, "shape %zu: forward differs", s);
            CHECKF(memcmp(dt[0], dt[1], nt * sizeof(float)) == 0, "shape %zu: backward differs", s);
            CHECKF(memcmp(dt[0], dt[2], nt * sizeof(float)) == 0, "shape %zu: backward on 2 threads differs", s);
        }
        k_set_isa(NULL);
        free(ids); free(tab); free(g); free(y[0]); free(y[1]); free(dt[0]); free(dt[1]); free(dt[2]);
    }
}
