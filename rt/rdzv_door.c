/* Rank 0 keeps the rendezvous port after the meeting and answers whoever comes late:
 * a second copy of a rank (or any process of a job that already runs) gets one clear
 * line at once instead of "connection refused" retries until its timeout, and the
 * port stays this job's until it ends, so another job cannot meet there by mistake. */
#include "rt/rdzv_int.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/log.h"
#include <stdio.h>
#include <string.h>

static void answer(rt_rdzv *r, int fd, const char *peer)
{
    uint8_t b[RT_RDZV_HDR + 4 + RT_RDZV_MAX_TEXT];
    rt_rdzv_hdr h;
    rt_rdzv_hello hello;
    const char *why = NULL;
    int64_t dl = port_now_ns() + rt_rdzv_hello_timeout_ns(r);
    if (port_sock_read_full(fd, b, RT_RDZV_HDR, dl) || rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &h, &why) ||
        h.type != RZ_HELLO || port_sock_read_full(fd, b, h.len, dl) || rt_rdzv_parse_hello(b, h.len, &hello, &why)) {
        rt_debug("rank 0: dropped a late connection from %s (%s)", peer, why ? why : "no hello");
        return;
    }
    char msg[RT_RDZV_MAX_TEXT];
    if (hello.token_hash != r->token_hash)
        snprintf(msg, sizeof msg, "wrong job token: this is another job's rendezvous (check DDPRT_JOB_TOKEN and "
                 "MASTER_PORT)");
    else if (hello.rank > 0 && hello.rank < r->world)
        snprintf(msg, sizeof msg, "rank %d is already taken by %s: the job's %d ranks all joined and it is running "
                 "(a second copy of rank %d?)", hello.rank, r->peer[hello.rank], r->world, hello.rank);
    else
        snprintf(msg, sizeof msg, "the job's %d ranks all joined and it is running; rank %d does not belong to it",
                 r->world, hello.rank);
    rt_warn("rank 0: refused a late connection from %s (host %s, pid %u, claims rank %d of %d): %s", peer,
            hello.host, hello.pid, hello.rank, hello.world, msg);
    size_t n = rt_rdzv_put_text(b + RT_RDZV_HDR, sizeof b - RT_RDZV_HDR, RZ_REJ_FATAL, msg);
    rt_rdzv_put_hdr(b, RZ_REJECT, (uint32_t)n, 0);
    port_sock_write_full(fd, b, RT_RDZV_HDR + n, port_now_ns() + 1000000000LL);
}

static void *door(void *arg)
{
    rt_rdzv *r = arg;
    while (!__atomic_load_n(&r->door_stop, __ATOMIC_ACQUIRE)) {
        /* Short waits: close() sets door_stop and joins within one period. */
        if (port_sock_wait_readable(r->lfd, port_now_ns() + 100000000LL) != 1) continue;
        char peer[64] = "?";
        int fd = port_sock_accept(r->lfd, port_now_ns() + 10000000, peer, sizeof peer);
        if (fd < 0) continue;
        answer(r, fd, peer);
        port_sock_close(fd);
    }
    return NULL;
}

int rt_rdzv_door_open(rt_rdzv *r)
{
    if (r->lfd < 0 || port_thread_start(&r->door, door, r)) return -1;
    r->door_on = 1;
    return 0;
}

void rt_rdzv_door_close(rt_rdzv *r)
{
    if (!r->door_on) return;
    __atomic_store_n(&r->door_stop, 1, __ATOMIC_RELEASE);
    port_thread_join(r->door);
    r->door_on = 0;
}
