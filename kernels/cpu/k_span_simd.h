/* k_span.c's elementwise spans, SGD and the layer graph's spans, one template per ISA
 * level (rt/isa_each.h; vector ops: k_kv.h). */
#include "kernels/cpu/k_kv.h"

/* ---------------------------------------------------------------- elementwise */
ISA_TARGET static void ISA_FN(relu_span)(size_t n, const float *x, float *y)
{
    size_t i = 0;
    kv z = kv_zero();
    /* max(0, x) keeps NaN (the second operand is returned when unordered), like PyTorch. */
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_max(z, kv_load(x + i)));
    for (; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

ISA_TARGET static void ISA_FN(relu_bwd_span)(size_t n, const float *y, const float *dy, float *dx)
{
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(dx + i, kv_gtz_select(kv_load(y + i), kv_load(dy + i)));
    for (; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* relu_bwd_span of dy + a (add_span's sum): a gradient accumulated and masked at once. */
ISA_TARGET static void ISA_FN(relu_bwd_add_span)(size_t n, const float *y, const float *dy, const float *a,
                                            float *dx)
{
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W)
        kv_store(dx + i, kv_gtz_select(kv_load(y + i), kv_add(kv_load(dy + i), kv_load(a + i))));
    for (; i < n; i++) {
        float s = dy[i] + a[i];
        dx[i] = y[i] > 0.0f ? s : 0.0f;
    }
}

ISA_TARGET static void ISA_FN(scale_mask_span)(size_t n, float scale, const uint8_t *mask,
                                          const float *x, float *y)
{
    size_t i = 0;
    kv sc = kv_set1(scale);
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_mul(kv_mask_u8(mask + i, sc), kv_load(x + i)));
    for (; i < n; i++) y[i] = x[i] * (mask[i] ? scale : 0.0f);
}

ISA_TARGET static void ISA_FN(scale_span)(size_t n, float scale, const float *x, float *y)
{
    size_t i = 0;
    kv sc = kv_set1(scale);
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_mul(kv_load(x + i), sc));
    for (; i < n; i++) y[i] = x[i] * scale;
}

/* Sum with KV_W (x4) independent lanes: far faster than one scalar chain, and the
 * order is fixed for a given ISA and n. */
ISA_TARGET static float ISA_FN(sum_span)(size_t n, const float *x)
{
    kv s0 = kv_zero(), s1 = kv_zero(), s2 = kv_zero(), s3 = kv_zero();
    size_t i = 0;
    for (; i + 4 * KV_W <= n; i += 4 * KV_W) {
        s0 = kv_add(s0, kv_load(x + i));
        s1 = kv_add(s1, kv_load(x + i + KV_W));
        s2 = kv_add(s2, kv_load(x + i + 2 * KV_W));
        s3 = kv_add(s3, kv_load(x + i + 3 * KV_W));
    }
    for (; i + KV_W <= n; i += KV_W) s0 = kv_add(s0, kv_load(x + i));
    float t = kv_hsum(kv_add(kv_add(s0, s1), kv_add(s2, s3)));
    for (; i < n; i++) t += x[i];
    return t;
}


/* SGD (torch.optim.SGD): d = g + wd*p; v = first ? d : m*v + (1-damp)*d;
 * p -= lr * (nesterov ? d + m*v : v). m == 0: no buffer, p -= lr*d. Every product and
 * sum rounded on its own, no fused multiply-add: the same bits on every ISA, in the
 * scalar tail, and on the GPU (k_cuda_sgd_step's __fmul_rn/__fadd_rn). */
ISA_TARGET static void ISA_FN(sgd_span)(size_t n, float lr, float m, float damp, float wd, int nesterov,
                                   int first, float *p, const float *g, float *v)
{
    kv nlr = kv_set1(-lr), vm = kv_set1(m), vd = kv_set1(1.0f - damp), vwd = kv_set1(wd);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) {
        kv pi = kv_load(p + i), d = kv_add(kv_mul(vwd, pi), kv_load(g + i)), step = d;
        if (m != 0.0f) {
            kv b = first ? d : kv_add(kv_mul(vm, kv_load(v + i)), kv_mul(vd, d));
            kv_store(v + i, b);
            step = nesterov ? kv_add(kv_mul(vm, b), d) : b;
        }
        kv_store(p + i, kv_add(kv_mul(nlr, step), pi));
    }
    for (; i < n; i++) {
        float d = g[i] + wd * p[i], step = d;
        if (m != 0.0f) {
            float b = first ? d : m * v[i] + (1.0f - damp) * d;
            v[i] = b;
            step = nesterov ? d + m * b : b;
        }
        p[i] -= lr * step;
    }
}

/* ---------------------------------------------------------------- layer-graph spans */
/* y = (x - m)*a + b: BatchNorm forward with its per-channel factors folded (the
 * subtraction first keeps precision when |mean| >> std). */
ISA_TARGET static void ISA_FN(affine_span)(size_t n, float m, float a, float b, const float *x, float *y)
{
    kv vm = kv_set1(m), va = kv_set1(a), vb = kv_set1(b);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_fma(kv_add(kv_load(x + i), vm), va, vb));
    /* The tail through the same vector op, so an element's bits never depend on
     * where a span was cut. */
    if (i < n) kv_storen(y + i, kv_fma(kv_add(kv_loadn(x + i, (int)(n - i)), vm), va, vb), (int)(n - i));
}

/* z = a*x + b*(y + ym) + c: BatchNorm's dx with its per-channel coefficients folded. */
ISA_TARGET static void ISA_FN(affine2_span)(size_t n, float a, const float *x, float b, const float *y,
                                       float ym, float c, float *z)
{
    kv va = kv_set1(a), vb = kv_set1(b), vc = kv_set1(c), vm = kv_set1(ym);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W)
        kv_store(z + i, kv_fma(va, kv_load(x + i), kv_fma(vb, kv_add(kv_load(y + i), vm), vc)));
    if (i < n) {
        int t = (int)(n - i);
        kv_storen(z + i, kv_fma(va, kv_loadn(x + i, t), kv_fma(vb, kv_add(kv_loadn(y + i, t), vm), vc)), t);
    }
}

/* y = max(0, (x - m)*a + b): affine_span then relu_span in one pass, each element the
 * very operations of the two (a BatchNorm followed by a ReLU, nn/plan.c's fusion). */
ISA_TARGET static void ISA_FN(affine_relu_span)(size_t n, float m, float a, float b, const float *x, float *y)
{
    kv vm = kv_set1(m), va = kv_set1(a), vb = kv_set1(b), z = kv_zero();
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_max(z, kv_fma(kv_add(kv_load(x + i), vm), va, vb)));
    if (i < n) {
        int t = (int)(n - i);
        kv_storen(y + i, kv_max(z, kv_fma(kv_add(kv_loadn(x + i, t), vm), va, vb)), t);
    }
}

/* affine2_span with x (BatchNorm's dy) masked by ReLU's backward first: x counts where
 * (y + ym)*ra + rb (affine_span's BN output, re-made from y) is > 0, else 0. */
ISA_TARGET static void ISA_FN(affine2_relu_span)(size_t n, float a, const float *x, float b, const float *y,
                                            float ym, float c, float ra, float rb, float *z)
{
    kv va = kv_set1(a), vb = kv_set1(b), vc = kv_set1(c), vm = kv_set1(ym), vra = kv_set1(ra), vrb = kv_set1(rb);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) {
        kv u = kv_add(kv_load(y + i), vm), d = kv_gtz_select(kv_fma(u, vra, vrb), kv_load(x + i));
        kv_store(z + i, kv_fma(va, d, kv_fma(vb, u, vc)));
    }
    if (i < n) {
        int t = (int)(n - i);
        kv u = kv_add(kv_loadn(y + i, t), vm), d = kv_gtz_select(kv_fma(u, vra, vrb), kv_loadn(x + i, t));
        kv_storen(z + i, kv_fma(va, d, kv_fma(vb, u, vc)), t);
    }
}

/* y = max(0, ((x + m)*a + b) + s): affine_span, add_span (BN output first) and
 * relu_span in one pass (a BatchNorm, the residual add, then ReLU). */
ISA_TARGET static void ISA_FN(affine_add_relu_span)(size_t n, float m, float a, float b, const float *x,
                                               const float *s, float *y)
{
    kv vm = kv_set1(m), va = kv_set1(a), vb = kv_set1(b), z = kv_zero();
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W)
        kv_store(y + i, kv_max(z, kv_add(kv_fma(kv_add(kv_load(x + i), vm), va, vb), kv_load(s + i))));
    if (i < n) {
        int t = (int)(n - i);
        kv_storen(y + i, kv_max(z, kv_add(kv_fma(kv_add(kv_loadn(x + i, t), vm), va, vb), kv_loadn(s + i, t))), t);
    }
}

/* y = max(0, a + b): add_span then relu_span in one pass (a residual add, then ReLU). */
ISA_TARGET static void ISA_FN(add_relu_span)(size_t n, const float *a, const float *b, float *y)
{
    size_t i = 0;
    kv z = kv_zero();
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_max(z, kv_add(kv_load(a + i), kv_load(b + i))));
    for (; i < n; i++) {
        float s = a[i] + b[i];
        y[i] = s < 0.0f ? 0.0f : s;
    }
}

/* y = a + b */
ISA_TARGET static void ISA_FN(add_span)(size_t n, const float *a, const float *b, float *y)
{
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, kv_add(kv_load(a + i), kv_load(b + i)));
    for (; i < n; i++) y[i] = a[i] + b[i];
}

/* y[0..n) += sum_j a[j] * x[j][0..n), j in order: y stays in registers over the j
 * loop (the sparse conv backward's gathered rows). Every element sees the same
 * sequence of operations whichever block handles it. */
ISA_TARGET static void ISA_FN(axpy_rows)(int cnt, const float *a, const float *const *x, size_t n, float *y)
{
    size_t i = 0;
    for (; i + 4 * KV_W <= n; i += 4 * KV_W) {
        kv s0 = kv_load(y + i), s1 = kv_load(y + i + KV_W), s2 = kv_load(y + i + 2 * KV_W),
           s3 = kv_load(y + i + 3 * KV_W);
        for (int j = 0; j < cnt; j++) {
            kv aj = kv_set1(a[j]);
            const float *xj = x[j] + i;
            s0 = kv_fma(aj, kv_load(xj), s0);
            s1 = kv_fma(aj, kv_load(xj + KV_W), s1);
            s2 = kv_fma(aj, kv_load(xj + 2 * KV_W), s2);
            s3 = kv_fma(aj, kv_load(xj + 3 * KV_W), s3);
        }
        kv_store(y + i, s0);
        kv_store(y + i + KV_W, s1);
        kv_store(y + i + 2 * KV_W, s2);
        kv_store(y + i + 3 * KV_W, s3);
    }
    for (; i + KV_W <= n; i += KV_W) {
        kv s0 = kv_load(y + i);
        for (int j = 0; j < cnt; j++) s0 = kv_fma(kv_set1(a[j]), kv_load(x[j] + i), s0);
        kv_store(y + i, s0);
    }
    if (i < n) {
        int t = (int)(n - i);
        kv s0 = kv_loadn(y + i, t);
        for (int j = 0; j < cnt; j++) s0 = kv_fma(kv_set1(a[j]), kv_loadn(x[j] + i, t), s0);
        kv_storen(y + i, s0, t);
    }
}

/* y[0..n) = v */
ISA_TARGET static void ISA_FN(fill_span)(size_t n, float v, float *y)
{
    kv vv = kv_set1(v);
    size_t i = 0;
    for (; i + KV_W <= n; i += KV_W) kv_store(y + i, vv);
    for (; i < n; i++) y[i] = v;
}


#include "kernels/cpu/k_kv_undef.h"
