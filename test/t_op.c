/* The per-op harness (test/t_op.h). */
#include "test/t_op.h"
#include "test/t.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x243F6A8885A308D3ULL;
static double urand(void) /* [0, 1) */
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (double)(rs >> 11) * 0x1p-53;
}
float t_op_rand(void) { return (float)(urand() * 2 - 1); }

int t_op_source(t_op *h, nn_shape s)
{
    int id = nn_add(&h->g, &nn_op_input, "", NULL, 0, NULL, 0);
    h->g.nodes[id].out = s;
    h->g.nodes[id].grad_source = !s.tokens;
    h->src[h->nsrc++] = id;
    return id;
}

void t_op_begin(t_op *h, int batch)
{
    memset(h, 0, sizeof *h);
    nn_graph_begin(&h->g, h->nodes, h->p, h->b, "harness", (nn_shape){1, 1, 1, 0}, -1);
    h->batch = batch;
}

void t_op_finish(t_op *h, int op)
{
    char err[256] = "";
    h->op = op;
    rt_arena plan;
    rt_arena_plan(&plan, "plan");
    int rc = nn_graph_finish(&h->g, &plan, h->batch, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc) exit(1);
    CHECK(rt_arena_init(&h->a, "harness", plan.high) == 0);
    CHECK(nn_graph_finish(&h->g, &h->a, h->batch, err, sizeof err) == 0);
    nn_graph_init(&h->g, 7);
    for (int i = 0; i < h->g.np; i++) /* perturb BN's 1/0 init so gamma/beta matter */
        for (size_t k = 0; k < h->g.p[i].numel; k++) h->g.params[h->g.p[i].offset + k] += 0.3f * t_op_rand();
    for (int s = 0; s < h->nsrc; s++) {
        nn_node *n = &h->g.nodes[h->src[s]];
        size_t m = nn_shape_numel(n->out) * (size_t)h->batch;
        for (size_t k = 0; k < m; k++) {
            if (n->out.tokens) ((int32_t *)n->y)[k] = (int32_t)(urand() * 7);
            else n->y[k] = t_op_rand();
        }
    }
    size_t m = nn_shape_numel(h->g.nodes[op].out) * (size_t)h->batch;
    h->ry = malloc(m * sizeof(float));
    for (size_t k = 0; k < m; k++) h->ry[k] = t_op_rand();
}

double t_op_objective(t_op *h)
{
    nn_forward(&h->g, h->g.nodes[0].y, h->batch, 1, 5, 3);
    const nn_node *o = &h->g.nodes[h->op];
    double L = 0;
    for (size_t k = 0; k < nn_shape_numel(o->out) * (size_t)h->batch; k++) L += (double)h->ry[k] * o->y[k];
    return L;
}

void t_op_check_grads_eps(t_op *h, double tol, float eps)
{
    nn_node *o = &h->g.nodes[h->op];
    t_op_objective(h);
    memcpy(o->dy, h->ry, nn_shape_numel(o->out) * (size_t)h->batch * sizeof(float));
    nn_backward_from(&h->g, h->op, h->batch);
    /* The planner may reuse a gradient's bytes during the next forward (the op's output
     * is dead once its backward ran): keep a copy of every one before any. */
    float *dys[NN_MAX_IN] = {0};
    for (int s = 0; s < h->nsrc; s++) {
        nn_node *src = &h->g.nodes[h->src[s]];
        if (src->out.tokens) continue;
        size_t m = nn_shape_numel(src->out) * (size_t)h->batch;
        dys[s] = malloc(m * sizeof(float));
        memcpy(dys[s], src->dy, m * sizeof(float));
    }
    for (int s = 0; s < h->nsrc; s++) {
        nn_node *src = &h->g.nodes[h->src[s]];
        if (src->out.tokens) continue;
        size_t m = nn_shape_numel(src->out) * (size_t)h->batch;
        float *dy = dys[s];
        CHECK(dy != NULL);
        if (!dy) continue;
        for (int t = 0; t < 12; t++) {
            size_t k = (size_t)(urand() * (double)m);
            float keep = src->y[k];
            src->y[k] = keep + eps;
            double lp = t_op_objective(h);
            src->y[k] = keep - eps;
            double lm = t_op_objective(h);
            src->y[k] = keep;
            CHECK_NEAR((lp - lm) / (2 * eps), dy[k], tol);
        }
        free(dy);
    }
    for (int i = 0; i < h->g.np; i++) {
        nn_param *p = &h->g.p[i];
        for (int t = 0; t < 8; t++) {
            size_t k = p->offset + (size_t)(urand() * (double)p->numel);
            float keep = h->g.params[k];
            h->g.params[k] = keep + eps;
            double lp = t_op_objective(h);
            h->g.params[k] = keep - eps;
            double lm = t_op_objective(h);
            h->g.params[k] = keep;
            CHECKF(fabs((lp - lm) / (2 * eps) - h->g.grads[k]) <= tol * fmax(1, fabs(h->g.grads[k])),
                   "%s[%zu]: %g vs %g", p->name, k - p->offset, (lp - lm) / (2 * eps), h->g.grads[k]);
        }
    }
}

void t_op_check_grads(t_op *h, double tol) { t_op_check_grads_eps(h, tol, 1e-2f); }

void t_op_done(t_op *h)
{
    rt_arena_free(&h->a);
    free(h->ry);
}

float t_op_at(const nn_node *n, int s, int c, int y, int x)
{
    return n->y[(((size_t)s * n->out.c + c) * n->out.h + y) * n->out.w + x];
}

int t_op_begin1(t_op *h, int batch, nn_shape s)
{
    t_op_begin(h, batch);
    return t_op_source(h, s);
}

int t_op_run(t_op *h, int op)
{
    t_op_finish(h, op);
    t_op_objective(h);
    return op;
}

void t_op_end(t_op *h, double tol)
{
    t_op_check_grads(h, tol);
    t_op_done(h);
}
