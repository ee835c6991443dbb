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

int nn_fold_push(nn_fold *f, int i, const void *src, size_t off, size_t cnt, void *out)
{
    size_t es = rt_dtype_size(f->dt);
    const unsigned char *val = (const unsigned char *)src + off * es;
    int whole = off == 0 && cnt == f->n, from = -1; /* from: the level whose buffer val is */
    for (int l = 0, stride = 1; l < f->nlev; stride *= f->radix[l], l++) {
        int d = (i / stride) % f->radix[l];
        unsigned char *a = (unsigned char *)f->acc[l] + off * es;
        if (d == 0) { /* the first operand of this level's group: moved if it is a whole buffer */
            if (from >= 0 && whole) {
                void *t = f->acc[l];
                f->acc[l] = f->acc[from], f->acc[from] = t;
            } else {
                memcpy(a, val, cnt * es);
            }
            return 0;
        }
        /* (... + y_{d-1}) + y_d; the rank's value goes straight to out */
        int top = l == f->nlev - 1 && d == f->radix[l] - 1;
        tp_reduce(top ? (unsigned char *)out + off * es : a, a, val, cnt, f->dt, TP_SUM);
        if (d < f->radix[l] - 1) return 0;
        if (top) return 1;
        val = a, from = l; /* the group is complete: its value is the next level's operand */
    }
    unsigned char *o = (unsigned char *)out + off * es;
    if (o != val) memcpy(o, val, cnt * es);
    return 1;
}
