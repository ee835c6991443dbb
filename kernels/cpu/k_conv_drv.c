/* The conv driver shared by k_conv.c and k_conv_bf16.c (k_conv_drv.h). */
#include "kernels/cpu/k_conv_drv.h"
#include "kernels/cpu/k_int.h"
#include <string.h>

k_conv_geo k_conv_geo_of(const k_conv_shape *sh)
{
    k_conv_geo d;
    d.crs = (long)sh->c * sh->r * sh->s;
    d.pq = (long)sh->p * sh->q;
    d.xsz = (long)sh->c * sh->h * sh->w;
    d.ysz = (long)sh->k * d.pq;
    d.s1 = sh->stride == 1 && sh->s <= 32; /* col2im_s1 handles up to 32 tap columns */
    d.rpn = sh->r < sh->stride ? sh->r : sh->stride;
    d.hp = sh->p + (sh->r - 1) / sh->stride; /* = h + 2*pad at stride 1 */
    d.xssz = (long)sh->c * sh->s * d.rpn * d.hp * sh->q;
    d.dxc = sh->stride == 1 && sh->r == sh->s && 2 * sh->pad == sh->r - 1 && sh->c >= 16;
    d.dhp = sh->p + 2L * (sh->r - 1 - sh->pad);
    d.dxssz = d.dxc ? (long)sh->k * sh->s * d.dhp * sh->w : 0;
    d.slots = sh->n < K_CONV_SLOTS ? (sh->n > 0 ? sh->n : 1) : K_CONV_SLOTS;
    return d;
}

k_im2col_geo k_conv_im2col(const k_conv_shape *sh)
{
    k_im2col_geo g = {sh->c, sh->h, sh->w, sh->r, sh->s, sh->stride, sh->pad, sh->p, sh->q};
    return g;
}

k_im2col_geo k_conv_dx_im2col(const k_conv_shape *sh)
{
    k_im2col_geo g = {sh->k, sh->p, sh->q, sh->r, sh->s, 1, sh->r - 1 - sh->pad, sh->h, sh->w};
    return g;
}

void k_conv_rows(const k_im2col_geo *g, const k_conv_geo *d, const float *x, float *xs)
{
    if (g->stride == 1) k_shift_rows(g, d->hp, x, xs);
    else k_shift_rows_st(g, d->hp, d->rpn, x, xs);
}

void k_conv_tap_offsets(const k_conv_shape *sh, const k_conv_geo *d, long *off)
{
    long t = 0;
    for (int c = 0; c < sh->c; c++)
        for (int r = 0; r < sh->r; r++)
            for (int s = 0; s < sh->s; s++)
                off[t++] = ((((long)c * sh->s + s) * d->rpn + r % sh->stride) * d->hp + r / sh->stride) * sh->q;
}

void k_conv_dx_offsets(const k_conv_shape *sh, const k_conv_geo *d, long *off)
{
    long t = 0;
    for (int k = 0; k < sh->k; k++)
        for (int r = 0; r < sh->r; r++)
            for (int s = 0; s < sh->s; s++) off[t++] = ((long)k * sh->s + s) * d->dhp * sh->w + (long)r * sh->w;
}

void k_conv_flip_weights(const k_conv_shape *sh, const float *w, float *wt)
{
    const int C = sh->c, K = sh->k, RS = sh->r * sh->s;
    for (int c = 0; c < C; c++)
        for (int k = 0; k < K; k++)
            for (int t = 0; t < RS; t++) wt[((long)c * K + k) * RS + t] = w[((long)k * C + c) * RS + RS - 1 - t];
}

static void fwd_slot(void *ctx, int slot)
{
    const k_conv_slots *s = ctx;
    char *base = s->ws + (size_t)slot * s->slot_bytes;
    long lo, hi;
    k_split(s->sh->n, s->slots, slot, &lo, &hi);
    if (s->fwd_n)
        for (long i = lo; i < hi; i += s->ng_fwd) s->fwd_n(s->job, slot, base, i, hi - i < s->ng_fwd ? (int)(hi - i) : s->ng_fwd);
    else
        for (long i = lo; i < hi; i++) s->fwd(s->job, slot, base, i);
}

void k_conv_slots_fwd(const k_conv_slots *s) { k_parallel_for(s->slots, fwd_slot, (void *)s); }

static void bwd_slot(void *ctx, int slot)
{
    const k_conv_slots *s = ctx;
    const int K = s->sh->k;
    char *base = s->ws + (size_t)slot * s->slot_bytes;
    float *dwp = slot == 0 ? s->dw : (float *)(base + s->r_dw);
    float *dbp = slot == 0 ? s->db : (float *)(base + s->r_db);
    long crs = (long)s->sh->c * s->sh->r * s->sh->s, lo, hi;
    k_split(s->sh->n, s->slots, slot, &lo, &hi);
    if (lo == hi) { /* an empty slot still owns a partial: make it zero */
        if (s->dw) memset(dwp, 0, sizeof(float) * K * crs);
        if (s->db) memset(dbp, 0, sizeof(float) * K);
    }
    if (s->dw_pass)
        for (long i = lo; i < hi; i += s->group) {
            int ng = hi - i < s->group ? (int)(hi - i) : s->group;
            s->dw_pass(s->job, base, i, ng, dwp, i > lo);
        }
    int gx = s->dx_n ? s->ng_dx : 1;
    for (long i0 = lo; i0 < hi; i0 += gx) {
        int ng = hi - i0 < gx ? (int)(hi - i0) : gx;
        for (long i = i0; i < i0 + ng; i++) {
            const float *dyi = s->dy + i * s->ysz;
            int acc = i > lo;
            if (s->db)
                for (int k = 0; k < K; k++) {
                    float v = k_sum_span((size_t)s->pq, dyi + k * s->pq);
                    dbp[k] = acc ? dbp[k] + v : v;
                }
            if (s->dx && !s->dx_n) s->dx(s->job, base, i);
        }
        if (s->dx_n) s->dx_n(s->job, base, i0, ng);
    }
}

void k_conv_slots_bwd(const k_conv_slots *s)
{
    k_parallel_for(s->slots, bwd_slot, (void *)s);
    /* Reduce the slot partials in slot order (the thread-count-independent part). */
    long n = (long)s->sh->k * s->sh->c * s->sh->r * s->sh->s;
    for (int t = 1; t < s->slots; t++) {
        const char *base = s->ws + (size_t)t * s->slot_bytes;
        const float *dwp = (const float *)(base + s->r_dw), *dbp = (const float *)(base + s->r_db);
        if (s->dw) for (long e = 0; e < n; e++) s->dw[e] += dwp[e];
        if (s->db) for (int e = 0; e < s->sh->k; e++) s->db[e] += dbp[e];
    }
}
