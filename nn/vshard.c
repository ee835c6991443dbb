/* Virtual shards: the tree's description and the fold inside a rank (see vshard.h). */
#include "nn/vshard.h"
#include "transport/tp_reduce.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void describe(nn_vtree *t)
{
    size_t o = (size_t)snprintf(t->spec, sizeof t->spec, "%d (", t->K);
    for (int l = 0; l < t->nlev && o < sizeof t->spec; l++)
        o += (size_t)snprintf(t->spec + o, sizeof t->spec - o, "%s%d", l ? "x" : "", t->radix[l]);
    if (o < sizeof t->spec) snprintf(t->spec + o, sizeof t->spec - o, "%s)", t->nlev ? "" : "one shard");
}

int nn_vtree_parse(const char *s, nn_vtree *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    char *end;
    long K = strtol(s, &end, 10);
    if (end == s || K < 1 || K > 4096 || (*end && *end != ':')) {
        snprintf(err, errlen, "--invariant %s: expected K (virtual shards, 1 to 4096) or K:r0xr1x... (the tree's "
                 "radices, level 0 first, e.g. 12:2x2x3)", s);
        return -1;
    }
    t->K = (int)K;
    if (*end == ':') {
        long prod = 1;
        for (const char *p = end + 1;;) {
            long r = strtol(p, &end, 10);
            if (end == p || r < 2 || r > 8 || t->nlev == TP_TREE_MAX_LEVELS) {
                snprintf(err, errlen, "--invariant %s: radices are 2 to 8, at most %d of them, separated by x", s,
                         TP_TREE_MAX_LEVELS);
                return -1;
            }
            t->radix[t->nlev++] = (int)r;
            prod *= r;
            if (!*end) break;
            if (*end != 'x') {
                snprintf(err, errlen, "--invariant %s: radices are separated by x (e.g. 12:2x2x3)", s);
                return -1;
            }
            p = end + 1;
        }
        if (prod != K) {
            snprintf(err, errlen, "--invariant %s: the radices multiply to %ld, not %ld", s, prod, K);
            return -1;
        }
    } else {
        /* Prime factors, largest first: the low levels (inside a rank) take the odd
         * factors, so W can be any power of two dividing K. */
        long k = K;
        int f[32], n = 0;
        for (long p = 2; k > 1 && p <= k; p++)
            while (k % p == 0) {
                if (p > 8) {
                    snprintf(err, errlen, "--invariant %ld: its prime factor %ld is above 8, the largest radix the "
                             "tree takes", K, p);
                    return -1;
                }
                f[n++] = (int)p, k /= p;
            }
        for (int i = 0; i < n; i++) t->radix[i] = f[n - 1 - i];
        t->nlev = n;
    }
    describe(t);
    return 0;
}

int nn_vtree_split(const nn_vtree *t, int W, char *err, size_t errlen)
{
    long m = 1;
    char ok[200] = "";
    size_t o = 0;
    for (int l = t->nlev; l >= 0; l--) { /* W = K / (r0 ... r_{l-1}) */
        m = 1;
        for (int i = 0; i < l; i++) m *= t->radix[i];
        if (t->K / m == W) return l;
        o += (size_t)snprintf(ok + o, sizeof ok - o, "%s%ld", l == t->nlev ? "" : ", ", t->K / m);
        if (o >= sizeof ok) break;
    }
    snprintf(err, errlen, "--invariant %s: %d ranks cannot share its tree (each rank must hold a whole subtree); "
             "world sizes it takes: %s%s", t->spec, W, ok,
             t->nlev > 1 ? "; K:r0xr1x... orders the tree's levels differently" : "");
    return -1;
}

int nn_fold_shards(const nn_fold *f)
{
    int m = 1;
    for (int l = 0; l < f->nlev; l++) m *= f->radix[l];
    return m;
}

/* x + 0 or 0 + x over n elements, the zero read from a small constant block: the bits of
 * an add with an unmarked (+0) row, without reading that row from a cold 10 MB buffer. */
static void add_zero(void *dst, const void *x, size_t n, rt_dtype dt, int zero_first)
{
    static const double zero[512]; /* 4 KiB: 1024 floats, 512 doubles, 2048 halves */
    size_t es = rt_dtype_size(dt), per = sizeof zero / es;
    for (size_t i = 0; i < n; i += per) {
        size_t k = n - i < per ? n - i : per;
        const unsigned char *v = (const unsigned char *)x + i * es;
        unsigned char *d = (unsigned char *)dst + i * es;
        if (zero_first) tp_reduce(d, zero, v, k, dt, TP_SUM);
        else tp_reduce(d, v, zero, k, dt, TP_SUM);
    }
}

/* One fold step over elements [lo, hi): dst = val (add 0: a copy into level l's buffer)
 * or dst = a + val (a: level l's buffer; dst: it, or out when to_out). val is the shard's
 * (from = -1) or level from's buffer. In row-sparse stretches (sparse: out is src, so its
 * unmarked rows are +0 already; else dense) only rows marked on either side are copied or added
 * (a row marked on one side only as a + 0 or 0 + val: add_zero); a copy zeroes the rows
 * the level's buffer had marked and the shard's has not, and the marks follow the values. */
static void fold_step(const nn_fold *f, int add, int l, int from, int to_out, int sparse, unsigned char *dst,
                      const unsigned char *a, const unsigned char *val, size_t lo, size_t hi)
{
    size_t es = rt_dtype_size(f->dt);
#define FOLD_SPAN(x, y) /* elements [x, y): the dense step */                                             \
    do {                                                                                                   \
        if ((y) <= (x)) break;                                                                             \
        if (add) tp_reduce(dst + (x) * es, a + (x) * es, val + (x) * es, (y) - (x), f->dt, TP_SUM);         \
        else memcpy(dst + (x) * es, val + (x) * es, ((y) - (x)) * es);                                     \
    } while (0)
    for (int k = 0; k < f->nsp && lo < hi; k++) {
        const nn_fold_rows *sp = &f->sp[k];
        size_t s0 = sp->off, s1 = sp->off + sp->rows * sp->len;
        if (s1 <= lo || s0 >= hi) continue;
        if (s0 > lo) FOLD_SPAN(lo, s0);
        size_t x0 = lo > s0 ? lo : s0, x1 = hi < s1 ? hi : s1, len = sp->len;
        size_t r0 = (x0 - s0) / len, r1 = (x1 - s0 + len - 1) / len;
        unsigned char *ma = sp->acc_nz[l];
        const unsigned char *mv = from < 0 ? sp->nz : sp->acc_nz[from];
        if (!sparse || (!add && (x0 > s0 || x1 < s1))) {
            /* dense (out is not src), or part of a stretch copied (its marks cannot follow): all rows marked */
            FOLD_SPAN(x0, x1);
            if (!to_out) memset(ma + r0, 1, r1 - r0);
        } else {
            /* runs of rows of one kind: 0 skip; add: 1 a + 0, 2 0 + val, 3 a + val; copy: 3 val,
             * 4 zero (a stale row of the level's buffer) */
#define ROW_KIND(r) (add ? (ma[r] != 0) | (mv[r] != 0) << 1 : mv[r] ? 3 : ma[r] ? 4 : 0)
            for (size_t r = r0; r < r1;) {
                int kind = ROW_KIND(r);
                size_t e = r + 1;
                while (e < r1 && ROW_KIND(e) == kind) e++;
                size_t y0 = s0 + r * len > x0 ? s0 + r * len : x0, y1 = s0 + e * len < x1 ? s0 + e * len : x1;
                if (kind == 3) FOLD_SPAN(y0, y1);
                if (kind == 1) add_zero(dst + y0 * es, a + y0 * es, y1 - y0, f->dt, 0);
                if (kind == 2) add_zero(dst + y0 * es, val + y0 * es, y1 - y0, f->dt, 1);
                if (kind == 4) memset(dst + y0 * es, 0, (y1 - y0) * es);
                r = e;
            }
#undef ROW_KIND
            if (!to_out)
                for (size_t r = r0; r < r1; r++) ma[r] = add ? (unsigned char)(ma[r] | mv[r]) : mv[r];
        }
        lo = x1;
    }
    FOLD_SPAN(lo, hi);
#undef FOLD_SPAN
}

int nn_fold_push(nn_fold *f, int i, const void *src, size_t off, size_t cnt, void *out)
{
    size_t es = rt_dtype_size(f->dt);
    const unsigned char *val = src;
    int whole = off == 0 && cnt == f->n, from = -1, sparse = f->nsp > 0 && out == src;
    for (int l = 0, stride = 1; l < f->nlev; stride *= f->radix[l], l++) {
        int d = (i / stride) % f->radix[l];
        unsigned char *a = f->acc[l];
        if (d == 0) { /* the first operand of this level's group: moved if it is a whole buffer */
            if (from >= 0 && whole) {
                void *t = f->acc[l];
                f->acc[l] = f->acc[from], f->acc[from] = t;
                for (int k = 0; k < f->nsp; k++) {
                    unsigned char *m = f->sp[k].acc_nz[l];
                    f->sp[k].acc_nz[l] = f->sp[k].acc_nz[from], f->sp[k].acc_nz[from] = m;
                }
            } else {
                fold_step(f, 0, l, from, 0, sparse, a, NULL, val, off, off + cnt);
            }
            return 0;
        }
        /* (... + y_{d-1}) + y_d; the rank's value goes straight to out */
        int top = l == f->nlev - 1 && d == f->radix[l] - 1;
        fold_step(f, 1, l, from, top, sparse, top ? (unsigned char *)out : a, a, val, off, off + cnt);
        if (d < f->radix[l] - 1) return 0;
        if (top) return 1;
        val = a, from = l; /* the group is complete: its value is the next level's operand */
    }
    unsigned char *o = (unsigned char *)out + off * es;
    if (o != val + off * es) memcpy(o, val + off * es, cnt * es);
    return 1;
}
