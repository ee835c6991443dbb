/* TCP backend, connection setup: every rank listens on an ephemeral port, publishes
 * (ip, port) through the bootstrap's allgather, then the full mesh is built: rank i
 * connects nsocks sockets to every j > i and accepts those of every j < i (the hello
 * says which lane a socket is, and how many the connector uses: they must agree). One poll loop drives the outgoing
 * connects and the incoming handshakes together, so the order in which ranks arrive
 * does not matter and a silent stranger on the port cannot stall the job. Every
 * connection starts with a hello (magic, version, ranks, world, job token hash); a
 * wrong one is answered with a refusal, logged, and closed. */
#include "transport/tp_tcp_int.h"
#include "rt/env.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/log.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stddef.h>
#include <sys/un.h>
#include <unistd.h>

enum { C_CONNECTING, C_RETRY, C_HELLO_OUT, C_REPLY_IN, C_HELLO_IN, C_FREE };

typedef struct tcp_conn {
    int fd, peer, lane, state; /* lane: which of the peer's nsocks sockets */
    size_t done;
    unsigned char buf[sizeof(tcp_hello)];
    int64_t until;          /* retry time (C_RETRY) or handshake deadline (incoming) */
    int64_t refused_since;  /* outgoing: first refusal of the current streak */
    int no_unix;            /* outgoing: the unix path failed, use TCP */
    int via_unix;
    char from[64];
} tcp_conn;

#define TCP_MAX_INCOMING 64
#define TCP_HANDSHAKE_NS (10LL * 1000000000LL)

/* Same-machine peers talk over an abstract AF_UNIX stream socket unless
 * DDPRT_TCP_LOCAL=tcp: same framing and failure semantics, half the latency of TCP
 * over 127.0.0.1 (3 vs 6 us per exchange here) and no TCP stack per byte. */
static int local_unix(void)
{
    return rt_env_choice(RT_ENV_TCP_LOCAL, 1) != 0; /* tcp|unix */
}

static socklen_t uds_addr(struct sockaddr_un *su, const char *name)
{
    memset(su, 0, sizeof *su);
    su->sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(su->sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Listens on the abstract name; -1 (and no unix path) when it cannot. */
static int uds_listen(tcp_addr *me, int backlog)
{
    struct sockaddr_un su;
    snprintf(me->uds, sizeof me->uds, "ddprt-tcp.%d.%d", (int)getpid(), me->port);
    socklen_t sl = uds_addr(&su, me->uds);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&su, sl) && !listen(fd, backlog)) return fd;
    if (fd >= 0) close(fd);
    me->uds[0] = 0;
    return -1;
}

/* Fixed buffer size for TCP to a peer on this machine (127.0.0.1; the kernel doubles
 * it). With Linux's autotuning, loopback sockets grow to several MiB, and with 4 ranks
 * on 2 cores the megabytes in flight per socket thrash the caches: 0.66 GB/s busbw
 * at 1 MiB allreduce; pinned at 512 KiB..2 MiB, 1.6 GB/s every run. 2 ranks: no
 * change (4.8 GB/s). Remote peers keep autotuning: a fixed buffer would cap the
 * window on a long fat link. */
#define TCP_LOOPBACK_BUF (1 << 20)

/* DDPRT_TCP_BUFSIZE=N pins every TCP socket to N (0: autotuning everywhere). */
static int sockbuf_env(int *bytes)
{
    if (!rt_env_str(RT_ENV_TCP_BUFSIZE)) return 0;
    *bytes = (int)rt_env_num(RT_ENV_TCP_BUFSIZE, 0);
    return 1;
}

/* loopback: the peer is on this machine. 0 keeps Linux's autotuning. */
static int sockbuf_bytes(int loopback)
{
    int b;
    if (sockbuf_env(&b)) return b;
    return loopback ? TCP_LOOPBACK_BUF : 0;
}

/* TCP: NODELAY (+ fixed buffers, see above). Unix: only the send buffer matters (a
 * unix stream queues on the receiver up to the sender's sndbuf); the default 208 KiB
 * would cut every large write into small pieces. */
static void tune(int fd, int is_unix, int loopback)
{
    if (!is_unix) { port_sock_tune(fd, sockbuf_bytes(loopback)); return; }
    int b = sockbuf_bytes(0) > 0 ? sockbuf_bytes(0) : 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
}

/* The address the others should dial: DDPRT_SOCKET_IFNAME's, else the source address
 * of the route to the rendezvous (the bootstrap's self_ip: what this rank's connection
 * to the meeting point used), else that of the route to MASTER_ADDR (a UDP connect
 * sends nothing), else the hostname's or an interface's (non-loopback), else loopback. */
static int choose_addr(const tp_bootstrap *bs, tcp_addr *me, char *listen_ip, size_t llen, char *err,
                       size_t errlen)
{
    const char *ifn = rt_env_str(RT_ENV_SOCKET_IFNAME);
    listen_ip[0] = 0;
    if (ifn && *ifn) {
        if (port_sock_iface_addr(ifn, me->ip, sizeof me->ip)) {
            snprintf(err, errlen, "DDPRT_SOCKET_IFNAME=%s: no interface with an IPv4 address matches", ifn);
            return -1;
        }
        snprintf(listen_ip, llen, "%s", me->ip);
        me->pinned = 1;
        return 0;
    }
    snprintf(me->ip, sizeof me->ip, "127.0.0.1");
    if (bs->self_ip[0]) {
        snprintf(me->ip, sizeof me->ip, "%s", bs->self_ip);
        return 0;
    }
    port_sock_host_ip(NULL, getenv("MASTER_ADDR"), me->ip, sizeof me->ip);
    return 0;
}

static const char *refusal_text(uint32_t st)
{
    switch (st) {
    case TCP_REFUSE_MAGIC: return "not a ddprt peer (bad magic)";
    case TCP_REFUSE_VERSION: return "protocol version mismatch";
    case TCP_REFUSE_TOKEN: return "wrong job token (a rank of another job?)";
    case TCP_REFUSE_RANK: return "unexpected or duplicate rank";
    case TCP_REFUSE_WORLD: return "world size mismatch";
    case TCP_REFUSE_NSOCKS: return "DDPRT_TCP_NSOCKS differs between the ranks";
    default: return "refused";
    }
}

static int same_machine(const tcp_addr *a, const tcp_addr *b)
{
    return !a->pinned && !b->pinned && a->host_id == b->host_id;
}

/* A connect attempt failed. The peer listened before the address exchange, so a
 * refusal means it is gone (or never got that far): retry for a few seconds, then
 * say so instead of waiting out the whole timeout. A unix path that fails (another
 * network namespace with the same hostname?) falls back to TCP at once. */
#define TCP_REFUSED_NS (5LL * 1000000000LL)
static int connect_failed(tcp_conn *c, int e, char *err, size_t errlen)
{
    int64_t now = port_now_ns();
    rt_debug("tcp: connect to rank %d at %s failed: %s", c->peer, c->from, strerror(e));
    close(c->fd);
    c->fd = -1;
    c->state = C_RETRY;
    c->until = now + 100000000LL;
    if (c->via_unix && e != EAGAIN) { /* EAGAIN: a full unix backlog, just retry */
        c->no_unix = 1;
        c->until = now;
        return 0;
    }
    if (e == EAGAIN) return 0;
    if (!c->refused_since) c->refused_since = now;
    if (now - c->refused_since > TCP_REFUSED_NS) {
        snprintf(err, errlen, "rank %d at %s refused the connection for %lld s: %s (did it exit?)", c->peer,
                 c->from, TCP_REFUSED_NS / 1000000000LL, strerror(e));
        return -1;
    }
    return 0;
}

static int start_connect(tcp_conn *c, const tcp_addr *a, int same_host, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int unix_path = same_host && a->uds[0] && local_unix() && !c->no_unix;
    c->via_unix = unix_path;
    if (unix_path) {
        sl = uds_addr((struct sockaddr_un *)&ss, a->uds);
        snprintf(c->from, sizeof c->from, "unix:%s", a->uds);
    } else {
        struct sockaddr_in *sa = (struct sockaddr_in *)&ss;
        memset(sa, 0, sizeof *sa);
        sa->sin_family = AF_INET;
        sa->sin_port = htons((uint16_t)a->port);
        sl = sizeof *sa;
        const char *ip = same_host ? "127.0.0.1" : a->ip;
        snprintf(c->from, sizeof c->from, "%s:%d", ip, a->port);
        if (inet_pton(AF_INET, ip, &sa->sin_addr) != 1) {
            snprintf(err, errlen, "rank %d published a bad address '%s'", c->peer, a->ip);
            return -1;
        }
    }
    c->fd = socket(unix_path ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) { snprintf(err, errlen, "socket: %s", strerror(errno)); return -1; }
    /* Buffer sizes must be set before connect: the window scale is fixed by the SYN. */
    tune(c->fd, unix_path, same_host);
    c->done = 0;
    c->state = C_CONNECTING;
    if (connect(c->fd, (struct sockaddr *)&ss, sl) && errno != EINPROGRESS)
        return connect_failed(c, errno, err, errlen);
    return 0;
}

/* Non-blocking partial I/O on a handshake buffer: 1 complete, 0 more to do, -1 error. */
static int step_io(tcp_conn *c, int out, size_t total)
{
    ssize_t r = out ? send(c->fd, c->buf + c->done, total - c->done, MSG_NOSIGNAL | MSG_DONTWAIT)
                    : recv(c->fd, c->buf + c->done, total - c->done, MSG_DONTWAIT);
    if (r > 0) c->done += (size_t)r;
    else if (r == 0 || (errno != EAGAIN && errno != EINTR)) return -1;
    return c->done == total;
}

static uint32_t check_hello(const tcp_hello *h, const tcp_backend *t, uint64_t token)
{
    if (h->magic != TCP_MAGIC) return TCP_REFUSE_MAGIC;
    if (h->version != TCP_VERSION) return TCP_REFUSE_VERSION;
    if (h->token_hash != token) return TCP_REFUSE_TOKEN;
    if (h->world != t->b.world) return TCP_REFUSE_WORLD;
    if (h->to != t->b.rank || h->from < 0 || h->from >= t->b.world || h->from == t->b.rank)
        return TCP_REFUSE_RANK;
    if (h->flags & TCP_HELLO_ABORT) return TCP_OK;
    if (TCP_HELLO_NSOCKS(h->flags) != t->nsocks) return TCP_REFUSE_NSOCKS;
    if (h->from >= t->b.rank || TCP_HELLO_LANE(h->flags) >= t->nsocks ||
        t->peers[h->from].lane[TCP_HELLO_LANE(h->flags)].fd >= 0)
        return TCP_REFUSE_RANK;
    return TCP_OK;
}

/* -1 with err when a genuine peer says it gave up (the mesh cannot form). */
static int answer_hello(tcp_backend *t, tcp_conn *c, uint64_t token, char *err, size_t errlen)
{
    tcp_hello h;
    memcpy(&h, c->buf, sizeof h);
    if ((h.flags & TCP_HELLO_ABORT) && check_hello(&h, t, token) == TCP_OK) {
        char why[201] = "";
        size_t n = (size_t)(h.flags & 0xff) < 200 ? (size_t)(h.flags & 0xff) : 200;
        if (port_sock_read_full(c->fd, why, n, port_now_ns() + 500000000LL)) n = 0;
        why[n] = 0;
        snprintf(err, errlen, "rank %d could not connect the mesh: %s", h.from, n ? why : "(no reason)");
        close(c->fd);
        c->fd = -1;
        c->state = C_FREE;
        return -1;
    }
    tcp_reply rep = {TCP_MAGIC, check_hello(&h, t, token)};
    int ok = port_sock_write_full(c->fd, &rep, sizeof rep, port_now_ns() + 1000000000LL) == 0;
    if (rep.status == TCP_OK && ok) {
        t->peers[h.from].lane[TCP_HELLO_LANE(h.flags)].fd = c->fd;
        rt_debug("tcp: rank %d connected from %s (socket %d)", h.from, c->from, TCP_HELLO_LANE(h.flags));
    } else {
        if (rep.status != TCP_OK)
            rt_warn("tcp: refused a connection from %s: %s", c->from, refusal_text(rep.status));
        close(c->fd);
    }
    c->fd = -1;
    c->state = C_FREE;
    return 0;
}

static void drop_incoming(tcp_conn *c, const char *why)
{
    rt_warn("tcp: dropped a connection from %s: %s", c->from, why);
    close(c->fd);
    c->fd = -1;
    c->state = C_FREE;
}

/* Accepts everything queued on the listening socket into free incoming slots. */
static void accept_all(int lfd, tcp_conn *in, int nin)
{
    for (;;) {
        struct sockaddr_storage ss;
        struct sockaddr_in *sa = (struct sockaddr_in *)&ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (ss.ss_family == AF_UNIX) tune(fd, 1, 1);
        /* From 127.0.0.0/8: a peer on this machine (it connects to 127.0.0.1). The
         * listener's sizes (inherited) are for remote peers; the window scale was
         * set from the listener's autotuning maximum, so shrinking is safe. */
        else if (ss.ss_family == AF_INET && (ntohl(sa->sin_addr.s_addr) >> 24) == 127)
            tune(fd, 0, 1);
        int k = 0;
        while (k < nin && in[k].state != C_FREE) k++;
        if (k == nin) { close(fd); continue; } /* a flood of strangers: shed them */
        tcp_conn *c = &in[k];
        char ip[INET_ADDRSTRLEN] = "?";
        if (ss.ss_family == AF_INET) {
            inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof ip);
            snprintf(c->from, sizeof c->from, "%s:%d", ip, ntohs(sa->sin_port));
        } else {
            snprintf(c->from, sizeof c->from, "a local process (unix socket)");
        }
        c->fd = fd;
        c->state = C_HELLO_IN;
        c->done = 0;
        c->until = port_now_ns() + TCP_HANDSHAKE_NS;
    }
}

static int missing_list(const tcp_backend *t, char *s, size_t n)
{
    int cnt = 0;
    size_t o = 0;
    s[0] = 0;
    for (int j = 0; j < t->b.world; j++)
        if (j != t->b.rank && !tcp_peer_connected(t, j)) {
            if (cnt < 8 && o < n) o += (size_t)snprintf(s + o, n - o, "%s%d", cnt ? ", " : "", j);
            cnt++;
        }
    if (cnt > 8 && o < n) snprintf(s + o, n - o, ", ...");
    return cnt;
}

/* Advances one outgoing connection; -1 with err on a fatal answer. */
static int step_out(tcp_backend *t, tcp_conn *c, short rev, const tcp_addr *all, int same,
                    uint64_t token, char *err, size_t errlen)
{
    int64_t now = port_now_ns();
    if (c->state == C_RETRY) {
        if (now >= c->until) return start_connect(c, &all[c->peer], same, err, errlen);
        return 0;
    }
    if (c->state == C_CONNECTING) {
        if (!rev) return 0;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) return connect_failed(c, soerr, err, errlen);
        tcp_hello h = {TCP_MAGIC, TCP_VERSION, t->b.rank, c->peer, t->b.world, c->lane | t->nsocks << 8, token};
        memcpy(c->buf, &h, sizeof h);
        c->state = C_HELLO_OUT;
        c->done = 0;
    }
    int r;
    if (c->state == C_HELLO_OUT) {
        if ((r = step_io(c, 1, sizeof(tcp_hello))) < 0) goto io_fail;
        if (!r) return 0;
        c->state = C_REPLY_IN;
        c->done = 0;
    }
    if ((r = step_io(c, 0, sizeof(tcp_reply))) < 0) goto io_fail;
    if (!r) return 0;
    tcp_reply rep;
    memcpy(&rep, c->buf, sizeof rep);
    if (rep.magic != TCP_MAGIC) {
        snprintf(err, errlen, "%s (published by rank %d) is not a ddprt peer", c->from, c->peer);
        return -1;
    }
    if (rep.status != TCP_OK) {
        snprintf(err, errlen, "rank %d at %s refused our connection: %s", c->peer, c->from,
                 refusal_text(rep.status));
        return -1;
    }
    t->peers[c->peer].lane[c->lane].fd = c->fd;
    c->fd = -1;
    c->state = C_FREE;
    return 0;
io_fail:
    snprintf(err, errlen, "rank %d at %s closed the connection during the handshake", c->peer, c->from);
    return -1;
}

/* Setup failed here: best effort, within ~1 s, tell every rank we are not connected
 * to yet (it may be waiting for us as an acceptor) why, with an abort hello. */
static void tell_unconnected(tcp_backend *t, const tcp_addr *all, const tcp_addr *me, uint64_t token,
                             const char *why)
{
    int world = t->b.world, n = 0;
    tcp_conn *cs = calloc((size_t)world, sizeof *cs);
    struct pollfd *pf = calloc((size_t)world, sizeof *pf);
    char scratch[160];
    if (!cs || !pf) goto out;
    for (int j = 0; j < world; j++) {
        if (j == t->b.rank || tcp_peer_connected(t, j)) continue;
        cs[n].peer = j;
        cs[n].fd = -1;
        if (start_connect(&cs[n], &all[j], same_machine(&all[j], me), scratch, sizeof scratch) == 0 &&
            cs[n].fd >= 0)
            n++;
    }
    size_t wl = strlen(why) < 200 ? strlen(why) : 200;
    struct { tcp_hello h; char why[200]; } m;
    m.h = (tcp_hello){TCP_MAGIC, TCP_VERSION, t->b.rank, 0, world, TCP_HELLO_ABORT | (int32_t)wl, token};
    memcpy(m.why, why, wl);
    int64_t until = port_now_ns() + 1000000000LL;
    for (int left = n; left > 0 && port_now_ns() < until;) {
        for (int k = 0; k < n; k++) pf[k] = (struct pollfd){cs[k].fd, POLLOUT, 0};
        if (poll(pf, (nfds_t)n, 50) <= 0) continue;
        for (int k = 0; k < n; k++) {
            if (cs[k].fd < 0 || !pf[k].revents) continue;
            m.h.to = cs[k].peer;
            if (pf[k].revents & POLLOUT)
                if (send(cs[k].fd, &m, sizeof m.h + wl, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {}
            close(cs[k].fd);
            cs[k].fd = -1;
            left--;
        }
    }
out:
    for (int k = 0; cs && k < n; k++)
        if (cs[k].fd >= 0) close(cs[k].fd);
    free(cs);
    free(pf);
}

static int mesh_loop(tcp_backend *t, int lfd, int ufd, const tcp_addr *all, const tcp_addr *me,
                     uint64_t token, int64_t deadline, char *err, size_t errlen)
{
    int world = t->b.world, rank = t->b.rank, ns = t->nsocks, nout = (world - rank - 1) * ns;
    tcp_conn *out = calloc((size_t)(nout > 0 ? nout : 1), sizeof *out);
    tcp_conn in[TCP_MAX_INCOMING];
    struct pollfd *pf = calloc((size_t)(nout + TCP_MAX_INCOMING + 2 + world * ns), sizeof *pf);
    int rc = -1;
    if (!out || !pf) { snprintf(err, errlen, "out of memory"); goto done; }
    for (int k = 0; k < TCP_MAX_INCOMING; k++) in[k].fd = -1, in[k].state = C_FREE;
    for (int k = 0; k < nout; k++) {
        int j = rank + 1 + k / ns;
        out[k].peer = j;
        out[k].lane = k % ns;
        out[k].fd = -1;
        if (start_connect(&out[k], &all[j], same_machine(&all[j], me), err, errlen)) goto done;
    }
    char miss[128];
    while (missing_list(t, miss, sizeof miss)) {
        int64_t now = port_now_ns();
        if (now >= deadline) {
            snprintf(err, errlen, "timed out after %.0f s connecting to rank(s) %s", t->timeout_s, miss);
            goto done;
        }
        int np = 0;
        pf[np++] = (struct pollfd){lfd, POLLIN, 0};
        pf[np++] = (struct pollfd){ufd, POLLIN, 0}; /* fd -1 is ignored by poll */
        for (int k = 0; k < nout; k++)
            if (out[k].fd >= 0)
                pf[np++] = (struct pollfd){out[k].fd, out[k].state == C_REPLY_IN ? POLLIN : POLLOUT, 0};
        for (int k = 0; k < TCP_MAX_INCOMING; k++)
            if (in[k].state == C_HELLO_IN) pf[np++] = (struct pollfd){in[k].fd, POLLIN, 0};
        /* Peers already connected: a hang-up means that rank gave up (or died)
         * while the mesh forms; fail now rather than at the deadline. */
        int est = np;
        for (int j = 0; j < world; j++)
            for (int l = 0; l < t->peers[j].nl; l++)
                if (t->peers[j].lane[l].fd >= 0) pf[np++] = (struct pollfd){t->peers[j].lane[l].fd, POLLRDHUP, 0};
        int ms = (int)((deadline - now) / 1000000) + 1;
        if (poll(pf, (nfds_t)np, ms > 50 ? 50 : ms) < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            goto done;
        }
        for (int q = est; q < np; q++)
            if (pf[q].revents & (POLLRDHUP | POLLHUP | POLLERR))
                for (int j = 0; j < world * ns; j++)
                    if (t->peers[j / ns].lane[j % ns].fd == pf[q].fd) {
                        j /= ns;
                        snprintf(err, errlen, "rank %d closed the connection while the mesh was forming", j);
                        goto done;
                    }
        if (pf[0].revents) accept_all(lfd, in, TCP_MAX_INCOMING);
        if (pf[1].revents) accept_all(ufd, in, TCP_MAX_INCOMING);
        now = port_now_ns();
        for (int k = 0; k < TCP_MAX_INCOMING; k++) {
            tcp_conn *c = &in[k];
            if (c->state != C_HELLO_IN) continue;
            int r = step_io(c, 0, sizeof(tcp_hello));
            if (r < 0) drop_incoming(c, "closed before its hello");
            else if (r && answer_hello(t, c, token, err, errlen)) goto done;
            else if (now >= c->until) drop_incoming(c, "no hello within 10 s");
        }
        /* Outgoing: revents looked up by fd (the poll set is rebuilt every turn). */
        for (int k = 0; k < nout; k++) {
            if (out[k].state == C_FREE) continue;
            short rev = 0;
            for (int q = 2; q < est; q++)
                if (pf[q].fd == out[k].fd) rev = pf[q].revents;
            if (step_out(t, &out[k], rev, all, same_machine(&all[out[k].peer], me), token, err, errlen))
                goto done;
        }
    }
    rc = 0;
done:
    if (rc) tell_unconnected(t, all, me, token, err);
    for (int k = 0; out && k < nout; k++)
        if (out[k].fd >= 0) close(out[k].fd);
    for (int k = 0; k < TCP_MAX_INCOMING; k++)
        if (in[k].fd >= 0) close(in[k].fd);
    free(out);
    free(pf);
    return rc;
}

int tcp_peer_connected(const tcp_backend *t, int j)
{
    for (int l = 0; l < t->peers[j].nl; l++)
        if (t->peers[j].lane[l].fd < 0) return 0;
    return 1;
}

/* A full mesh holds (world - 1) * nsocks sockets; lift the soft fd limit (often 1024)
 * toward the hard one when a big job needs it. */
static void raise_fd_limit(int world)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)world * TCP_MAX_NSOCKS + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

int tcp_mesh_connect(tcp_backend *t, const tp_bootstrap *bs, char *err, size_t errlen)
{
    raise_fd_limit(t->b.world);
    tcp_addr me, *all = NULL;
    char lip[48];
    memset(&me, 0, sizeof me);
    me.host_id = port_host_id();
    if (choose_addr(bs, &me, lip, sizeof lip, err, errlen)) return -1;
    int lfd = port_sock_listen(lip, 0, t->b.world * t->nsocks + 16, err, errlen);
    if (lfd < 0) return -1;
    /* Accepted sockets inherit the listener's buffer sizes (set before the SYN). */
    port_sock_tune(lfd, sockbuf_bytes(0));
    port_sock_set_nonblock(lfd, 1);
    me.port = port_sock_local_port(lfd);
    int ufd = local_unix() && !me.pinned ? uds_listen(&me, t->b.world * t->nsocks + 16) : -1;
    rt_debug("tcp: rank %d listening on %s:%d", t->b.rank, lip[0] ? lip : "0.0.0.0", me.port);
    int rc = -1;
    all = calloc((size_t)t->b.world, sizeof *all);
    if (!all) { snprintf(err, errlen, "out of memory"); goto done; }
    char aerr[200] = "";
    if (bs->allgather(bs->ctx, &me, sizeof me, all, aerr, sizeof aerr)) {
        snprintf(err, errlen, "tcp: address exchange failed: %s", aerr);
        goto done;
    }
    int64_t deadline = port_now_ns() + (int64_t)(t->timeout_s * 1e9);
    rc = mesh_loop(t, lfd, ufd, all, &me, bs->token_hash, deadline, err, errlen);
done:
    /* The mesh is complete (or failed): nobody may join later, so stop listening. */
    close(lfd);
    if (ufd >= 0) close(ufd);
    free(all);
    return rc;
}
