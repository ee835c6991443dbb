#include "nn/shard.h"
#include "kernels/k_optim.h"

int nn_buckets(const nn_graph *g, double bucket_mb, nn_bucket_span *bk)
{
    size_t cap = (size_t)(bucket_mb * 1048576.0), bytes = 0;
    int n = 0;
    for (int p = g->np - 1; p >= 0; p--) {
        if (!n || bytes >= cap) {
            bk[n++].last_param = p;
            bytes = 0;
        }
        bk[n - 1].first_param = p;
        bytes += g->p[p].numel * sizeof(float);
    }
    for (int i = 0; i < n; i++) {
        int e = bk[i].last_param + 1;
        bk[i].f.lo = g->p[bk[i].first_param].offset;
        bk[i].f.hi = e < g->np ? g->p[e].offset : g->nparams;
    }
    return n;
}

size_t nn_shard_block(size_t nparams)
{
    size_t b = 64;
    while (b < 8192 && b * 8192 < nparams) b *= 2;
    return b;
}

size_t nn_shard_q(size_t count, int world, size_t blk)
{
    return world > 1 ? count / ((size_t)world * blk) * blk : 0;
}

int nn_shard_segments(const nn_bucket_span *bk, int nbk, int rank, int world, size_t blk, nn_span *seg)
{
    int n = 0;
    for (int i = nbk - 1; i >= 0; i--) { /* launch order is descending: walk it back */
        size_t lo = bk[i].f.lo, cnt = bk[i].f.hi - lo, q = nn_shard_q(cnt, world, blk);
        if (q) seg[n++] = (nn_span){lo + (size_t)rank * q, lo + (size_t)(rank + 1) * q};
        if (cnt > (size_t)world * q) seg[n++] = (nn_span){lo + (size_t)world * q, lo + cnt};
    }
    return n;
}

size_t nn_norm_nblocks(const nn_bucket_span *bk, int nbk, size_t blk)
{
    size_t n = 0;
    for (int i = 0; i < nbk; i++) n += (bk[i].f.hi - bk[i].f.lo + blk - 1) / blk;
    return n;
}

double nn_grad_sumsq(const nn_graph *g, size_t lo, size_t hi)
{
    int a = 0, b = g->np; /* the first parameter ending after lo */
    while (a < b) {
        int m = (a + b) / 2;
        if (g->p[m].offset + g->p[m].numel <= lo) a = m + 1;
        else b = m;
    }
    double ss = 0;
    for (int i = a; i < g->np && g->p[i].offset < hi; i++) {
        size_t s = g->p[i].offset > lo ? g->p[i].offset : lo, e = g->p[i].offset + g->p[i].numel;
        if (e > hi) e = hi;
        if (e > s) ss += k_sumsq(e - s, g->grads + s);
    }
    return ss;
}
