/* Conv2d forward/backward by im2col + the SIMD GEMMs in k_gemm.c.
 *
 * Work is cut into up to K_CONV_SLOTS "slots" of consecutive images. Each slot owns a
 * column buffer and (for backward) a partial dW/db in the workspace; slot partials
 * are added in slot order at the end. The slot count depends only on the batch size,
 * so the result is bitwise the same for any thread count.
 *
 *   forward:  col = im2col(x_i) [CRS x PQ];  y_i = W [K x CRS] col + b
 *   dW:       NN form  dW += dy_i [K x PQ] colT [PQ x CRS]   (CRS wide: conv2)
 *             NT form  dW += dy_i . col^T, dot products along PQ (PQ long: conv1)
 *   dX:       dcol = W^T dy_i [CRS x PQ];  dx_i = col2im(dcol)  (skipped if dx NULL) */
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"

#define K_CONV_SLOTS 8

void k_conv_shape_init(k_conv_shape *sh)
{
    if (sh->stride < 1) sh->stride = 1;
    if (sh->pad < 0) sh->pad = 0;
    sh->p = (sh->h + 2 * sh->pad - sh->r) / sh->stride + 1;
    sh->q = (sh->w + 2 * sh->pad - sh->s) / sh->stride + 1;
}

static int conv_slots(const k_conv_shape *sh) { return sh->n < K_CONV_SLOTS ? (sh->n > 0 ? sh->n : 1) : K_CONV_SLOTS; }
static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }
static long conv_crs(const k_conv_shape *sh) { return (long)sh->c * sh->r * sh->s; }
static long conv_pq(const k_conv_shape *sh) { return (long)sh->p * sh->q; }
/* 1x1, stride 1, no padding: the image itself is its column matrix. */
static int conv_is_pointwise(const k_conv_shape *sh)
{
    return sh->r == 1 && sh->s == 1 && sh->stride == 1 && sh->pad == 0;
}

/* Per-slot workspace: one column buffer (col, colT and dcol take turns in it), then a
 * partial dW and db. */
static size_t slot_bytes(const k_conv_shape *sh)
{
    return round64(sizeof(float) * conv_crs(sh) * conv_pq(sh)) +
           round64(sizeof(float) * sh->k * conv_crs(sh)) + round64(sizeof(float) * sh->k);
}

/* Then, shared by all slots: the weights packed for the GEMM (W for forward, W^T for
 * dX), packed once per call by the calling thread. */
static size_t pack_bytes(const k_conv_shape *sh)
{
    size_t a = k_gemm_pack_floats(sh->k, (int)conv_crs(sh));
    size_t b = k_gemm_pack_floats((int)conv_crs(sh), sh->k);
    return round64(sizeof(float) * (a > b ? a : b));
}

size_t k_conv2d_workspace(const k_conv_shape *sh)
{
    return (size_t)conv_slots(sh) * slot_bytes(sh) + pack_bytes(sh);
}

typedef struct conv_job {
    const k_conv_shape *sh;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    char *ws;
    float *wpack;
    int slots;
} conv_job;

static k_im2col_geo conv_geo(const k_conv_shape *sh)
{
    k_im2col_geo g = {sh->c, sh->h, sh->w, sh->r, sh->s, sh->stride, sh->pad, sh->p, sh->q};
    return g;
}

static void conv_fwd_slot(void *ctx, int slot)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const long crs = conv_crs(sh), pq = conv_pq(sh), xsz = (long)sh->c * sh->h * sh->w;
    float *col = (float *)(j->ws + (size_t)slot * slot_bytes(sh));
    k_im2col_geo g = conv_geo(sh);
    long lo, hi;
    k_split(sh->n, j->slots, slot, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        const float *xi = j->x + i * xsz;
        const float *bm = xi;
        if (!conv_is_pointwise(sh)) {
            k_im2col(&g, xi, col);
            bm = col;
        }
        k_gemm_nn_packed(sh->k, (int)pq, (int)crs, j->wpack, bm, pq, j->y + i * sh->k * pq, pq, j->b, 0);
    }
}

void k_conv2d_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b,
                  float *y, void *ws)
{
    conv_job j = {.sh = sh, .x = x, .w = w, .b = b, .y = y, .ws = ws, .slots = conv_slots(sh)};
    j.wpack = (float *)((char *)ws + (size_t)j.slots * slot_bytes(sh));
    k_gemm_pack_a(sh->k, (int)conv_crs(sh), w, conv_crs(sh), 1, j.wpack);
    k_parallel_for(j.slots, conv_fwd_slot, &j);
}

/* dW by the NN form needs the transposed columns; the NT form reads im2col rows.
 * NT pays one horizontal sum per dot product, so it wins only for long PQ. */
static int conv_dw_use_nt(const k_conv_shape *sh)
{
    return conv_pq(sh) >= 256 || conv_crs(sh) < 32;
}

static void conv_bwd_slot(void *ctx, int slot)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const int K = sh->k;
    const long crs = conv_crs(sh), pq = conv_pq(sh), xsz = (long)sh->c * sh->h * sh->w;
    char *base = j->ws + (size_t)slot * slot_bytes(sh);
    float *buf = (float *)base;
    float *dwp = slot == 0 ? j->dw : (float *)(base + round64(sizeof(float) * crs * pq));
    float *dbp = slot == 0 ? j->db
                           : (float *)(base + round64(sizeof(float) * crs * pq) +
                                       round64(sizeof(float) * K * crs));
    k_im2col_geo g = conv_geo(sh);
    int pointwise = conv_is_pointwise(sh), nt = conv_dw_use_nt(sh);
    long lo, hi;
    k_split(sh->n, j->slots, slot, &lo, &hi);
    if (lo == hi) { /* an empty slot still owns a partial: make it zero */
        if (j->dw) for (long t = 0; t < K * crs; t++) dwp[t] = 0.0f;
        if (j->db) for (int t = 0; t < K; t++) dbp[t] = 0.0f;
    }
    for (long i = lo; i < hi; i++) {
        const float *xi = j->x + i * xsz, *dyi = j->dy + i * K * pq;
        int acc = i > lo;
        if (j->dw) {
            if (pointwise) {
                k_gemm_nt(K, (int)crs, (int)pq, dyi, pq, xi, pq, dwp, crs, NULL, acc);
            } else if (nt) {
                k_im2col(&g, xi, buf);
                k_gemm_nt(K, (int)crs, (int)pq, dyi, pq, buf, pq, dwp, crs, NULL, acc);
            } else {
                k_im2row(&g, xi, buf);
                k_gemm_nn(K, (int)crs, (int)pq, dyi, pq, 1, buf, crs, dwp, crs, NULL, acc);
            }
        }
        if (j->db)
            for (int k = 0; k < K; k++) {
                float s = k_sum_span((size_t)pq, dyi + k * pq);
                dbp[k] = acc ? dbp[k] + s : s;
            }
        if (j->dx) {
            float *dxi = j->dx + i * xsz;
            if (pointwise) {
                k_gemm_nn_packed((int)crs, (int)pq, K, j->wpack, dyi, pq, dxi, pq, NULL, 0);
            } else {
                k_gemm_nn_packed((int)crs, (int)pq, K, j->wpack, dyi, pq, buf, pq, NULL, 0);
                k_col2im(&g, buf, dxi);
            }
        }
    }
}

void k_conv2d_bwd(const k_conv_shape *sh, const float *x, const float *w, const float *dy,
                  float *dx, float *dw, float *db, void *ws)
{
    conv_job j = {.sh = sh, .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw, .db = db,
                  .ws = ws, .slots = conv_slots(sh)};
    j.wpack = (float *)((char *)ws + (size_t)j.slots * slot_bytes(sh));
    if (dx) k_gemm_pack_a((int)conv_crs(sh), sh->k, w, 1, conv_crs(sh), j.wpack); /* W^T */
    k_parallel_for(j.slots, conv_bwd_slot, &j);
    /* Reduce the slot partials in slot order (the thread-count-independent part). */
    const long crs = conv_crs(sh);
    for (int s = 1; s < j.slots; s++) {
        char *base = (char *)ws + (size_t)s * slot_bytes(sh);
        const float *dwp = (const float *)(base + round64(sizeof(float) * crs * conv_pq(sh)));
        const float *dbp = (const float *)((const char *)dwp + round64(sizeof(float) * sh->k * crs));
        if (dw) for (long t = 0; t < sh->k * crs; t++) dw[t] += dwp[t];
        if (db) for (int t = 0; t < sh->k; t++) db[t] += dbp[t];
    }
}
