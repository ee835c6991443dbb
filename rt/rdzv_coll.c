/* Small collectives over the rendezvous star: every rank sends its piece to rank 0,
 * rank 0 answers each with the whole. Rank 0 polls all ranks at once, so a rank that
 * dies is noticed as soon as its socket closes, and rank 0 then tells every other rank
 * which one it was (ABORT) instead of leaving them to time out. Failures are sticky. */
#include "rt/rdzv_int.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/log.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(rt_rdzv *r, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(rt_rdzv *r, char *err, size_t errlen, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(r->err, sizeof r->err, "rank %d: %s", r->rank, what);
    r->failed = 1;
    if (r->rank == 0 && r->fds) {
        /* Tell every survivor why, then hang up: their calls fail with our reason. */
        uint8_t b[RT_RDZV_HDR + 4 + RT_RDZV_MAX_TEXT];
        size_t n = rt_rdzv_put_text(b + RT_RDZV_HDR, sizeof b - RT_RDZV_HDR, RZ_REJ_FATAL, what);
        rt_rdzv_put_hdr(b, RZ_ABORT, (uint32_t)n, r->seq);
        for (int q = 1; q < r->world; q++) {
            if (r->fds[q] < 0) continue;
            port_sock_write_full(r->fds[q], b, RT_RDZV_HDR + n, port_now_ns() + 1000000000LL);
            port_sock_close(r->fds[q]);
            r->fds[q] = -1;
        }
    }
    if (r->rank > 0) { port_sock_close(r->master); r->master = -1; }
    snprintf(err, errlen, "%s", r->err);
    return -1;
}

static int gather_at_root(rt_rdzv *r, const void *mine, size_t len, void *all, char *err, size_t errlen)
{
    int W = r->world, left = W - 1, rc = 0;
    int64_t deadline = port_now_ns() + (int64_t)(r->timeout_s * 1e9);
    int *fds = malloc(sizeof *fds * (size_t)W), *ready = malloc(sizeof *ready * (size_t)W);
    size_t *got = calloc((size_t)W, sizeof *got);
    uint8_t(*hb)[RT_RDZV_HDR] = calloc((size_t)W, RT_RDZV_HDR);
    if (!fds || !ready || !got || !hb) { rc = fail(r, err, errlen, "out of memory in allgather"); goto out; }
    memcpy(all, mine, len);
    for (int q = 0; q < W; q++) fds[q] = q ? r->fds[q] : -1;
    /* got[q] counts header + payload bytes received from rank q this round. */
    while (left > 0) {
        int k = port_sock_poll_readable(fds, W, ready, deadline);
        if (k < 0) { rc = fail(r, err, errlen, "poll failed in allgather: %s", strerror(errno)); goto out; }
        if (k == 0) {
            char missing[200] = "";
            size_t n = 0;
            for (int q = 1; q < W && n < sizeof missing - 16; q++)
                if (fds[q] >= 0) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? "," : "", q);
            rc = fail(r, err, errlen, "allgather round %u timed out after %g s waiting for rank%s %s", r->seq,
                      r->timeout_s, strchr(missing, ',') ? "s" : "", missing);
            goto out;
        }
        for (int q = 1; q < W; q++) {
            if (!ready[q] || fds[q] < 0) continue;
            int hdr = got[q] < RT_RDZV_HDR;
            uint8_t *dst = hdr ? hb[q] + got[q] : (uint8_t *)all + (size_t)q * len + (got[q] - RT_RDZV_HDR);
            long n = port_sock_read_some(fds[q], dst, hdr ? RT_RDZV_HDR - got[q] : len + RT_RDZV_HDR - got[q]);
            if (n == 0) continue;
            if (n < 0) {
                rc = fail(r, err, errlen, "rank %d (%s) closed the connection in allgather round %u (did it exit or crash?)",
                          q, r->peer[q], r->seq);
                goto out;
            }
            got[q] += (size_t)n;
            if (hdr && got[q] == RT_RDZV_HDR) {
                rt_rdzv_hdr h;
                const char *why;
                if (rt_rdzv_parse_hdr(hb[q], RT_RDZV_HDR, &h, &why) || h.type != RZ_GATHER) {
                    rc = fail(r, err, errlen, "rank %d sent a bad message in allgather round %u: %s", q, r->seq,
                              h.type != RZ_GATHER ? "not a gather" : why);
                    goto out;
                }
                if (h.seq != r->seq || h.len != len) {
                    rc = fail(r, err, errlen, "allgather round %u: rank %d is at round %u with %u bytes, rank 0 gave "
                              "%zu bytes (every rank must call the same collectives with the same length)",
                              r->seq, q, h.seq, h.len, len);
                    goto out;
                }
            }
            if (got[q] == RT_RDZV_HDR + len) { fds[q] = -1; left--; }
        }
    }
    uint8_t b[RT_RDZV_HDR];
    rt_rdzv_put_hdr(b, RZ_RESULT, (uint32_t)(len * (size_t)W), r->seq);
    for (int q = 1; q < W; q++)
        if (port_sock_write_full(r->fds[q], b, sizeof b, deadline) ||
            port_sock_write_full(r->fds[q], all, len * (size_t)W, deadline)) {
            rc = fail(r, err, errlen, "rank %d (%s) closed the connection in allgather round %u (did it exit or crash?)",
                      q, r->peer[q], r->seq);
            goto out;
        }
out:
    free(fds);
    free(ready);
    free(got);
    free(hb);
    return rc;
}

/* Reads one message from rank 0: header, then a text payload or the result into all. */
static int read_answer(rt_rdzv *r, size_t want, void *all, int64_t deadline, char *err, size_t errlen)
{
    uint8_t b[RT_RDZV_HDR + 4 + RT_RDZV_MAX_TEXT];
    rt_rdzv_hdr h;
    const char *why = "unexpected message";
    int rc = port_sock_read_full(r->master, b, RT_RDZV_HDR, deadline);
    if (rc == PORT_TIMEOUT)
        return fail(r, err, errlen, "allgather round %u: no answer from rank 0 after %g s (a rank is missing or slow?)",
                    r->seq, r->timeout_s);
    if (rc) return fail(r, err, errlen, "rank 0 (%s) closed the connection in allgather round %u (did it exit or crash?)",
                        r->where, r->seq);
    if (rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &h, &why) || (h.type != RZ_ABORT && h.type != RZ_RESULT))
        return fail(r, err, errlen, "bad message from rank 0 in allgather round %u: %s", r->seq, why);
    if (h.type == RZ_ABORT) {
        uint32_t code;
        char text[RT_RDZV_MAX_TEXT + 1];
        if (port_sock_read_full(r->master, b, h.len, deadline) ||
            rt_rdzv_parse_text(b, h.len, &code, text, sizeof text, &why))
            snprintf(text, sizeof text, "rank 0 aborted");
        return fail(r, err, errlen, "allgather round %u failed: %s (reported by rank 0)", r->seq, text);
    }
    if (h.seq != r->seq || h.len != want)
        return fail(r, err, errlen, "allgather round %u: rank 0 answered round %u with %u bytes, expected %zu "
                    "(every rank must call the same collectives with the same length)", r->seq, h.seq, h.len, want);
    if (port_sock_read_full(r->master, all, want, deadline))
        return fail(r, err, errlen, "rank 0 (%s) closed the connection in allgather round %u", r->where, r->seq);
    return 0;
}

static int gather_at_leaf(rt_rdzv *r, const void *mine, size_t len, void *all, char *err, size_t errlen)
{
    int64_t deadline = port_now_ns() + (int64_t)(r->timeout_s * 1e9);
    int ready;
    /* An ABORT may already be waiting (rank 0 failed while we computed): read it first so
     * the error names the real culprit rather than "connection closed". */
    if (port_sock_poll_readable(&r->master, 1, &ready, port_now_ns()) > 0)
        return read_answer(r, len * (size_t)r->world, all, deadline, err, errlen);
    uint8_t b[RT_RDZV_HDR];
    rt_rdzv_put_hdr(b, RZ_GATHER, (uint32_t)len, r->seq);
    if (port_sock_write_full(r->master, b, sizeof b, deadline) || port_sock_write_full(r->master, mine, len, deadline)) {
        /* Rank 0 hung up; its reason may still be readable. */
        return read_answer(r, len * (size_t)r->world, all, port_now_ns() + 1000000000LL, err, errlen);
    }
    return read_answer(r, len * (size_t)r->world, all, deadline, err, errlen);
}

int rt_rdzv_allgather(rt_rdzv *r, const void *mine, size_t len, void *all, char *err, size_t errlen)
{
    if (r->failed) { snprintf(err, errlen, "%s", r->err); return -1; }
    if (len > RT_RDZV_MAX_MSG / (size_t)r->world) {
        snprintf(err, errlen, "rank %d: allgather of %zu bytes x %d ranks is over the rendezvous limit of %u bytes",
                 r->rank, len, r->world, RT_RDZV_MAX_MSG);
        return -1;
    }
    r->seq++;
    if (r->world == 1) { memcpy(all, mine, len); return 0; }
    return r->rank == 0 ? gather_at_root(r, mine, len, all, err, errlen)
                        : gather_at_leaf(r, mine, len, all, err, errlen);
}

int rt_rdzv_barrier(rt_rdzv *r, char *err, size_t errlen)
{
    char none = 0;
    return rt_rdzv_allgather(r, &none, 0, &none, err, errlen);
}
