/* ddprt-launch's control channel between nodes; protocol in apps/launch/launch_ctl.h.
 * Messages (one line each; K = round):
 *   worker -> node 0: HELLO node nnodes nproc max_restarts has_resume | FAIL K node rank code |
 *                     EXIT K code rank | PING
 *   node 0 -> worker: GO K resume fail_node fail_rank fail_code token | STOP K | END code |
 *                     ERR text | PING */
#include "apps/launch/launch_ctl.h"
#include "rt/env.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000LL

static void say(lc *c, lc_peer *p, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || p->fd < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    /* A failed write shows up as a closed connection on the read side. */
    (void)port_sock_write_full(p->fd, line, (size_t)n, port_now_ns() + 5 * SEC);
    c->last_tx = port_now_ns();
}

static void say_all(lc *c, const char *fmt, const char *arg, int a, int b)
{
    for (int i = 0; i < c->npeers; i++) say(c, &c->p[i], fmt, arg ? arg : "", a, b);
}

/* Next complete line of p (without the newline) into out: 1, 0 none yet, -1 closed. */
static int next_line(lc_peer *p, char *out, size_t outlen)
{
    for (;;) {
        char *nl = memchr(p->in, '\n', p->n);
        if (nl) {
            size_t len = (size_t)(nl - p->in);
            snprintf(out, outlen, "%.*s", (int)len, p->in);
            memmove(p->in, nl + 1, p->n - len - 1);
            p->n -= len + 1;
            return 1;
        }
        if (p->n == sizeof p->in) return -1; /* no line this long is ever sent */
        long r = port_sock_read_some(p->fd, p->in + p->n, sizeof p->in - p->n);
        if (r == 0) return 0;
        if (r < 0) return -1;
        p->n += (size_t)r;
        p->last_rx = port_now_ns();
    }
}

static void record(lc *c, int node, int rank, int code)
{
    int first = c->fail_node < 0;
    /* Prefer a rank killed by a signal: the others usually fail on its closed connections. */
    if (first || (code >= 128 && c->fail_code < 128)) c->fail_node = node, c->fail_rank = rank, c->fail_code = code;
    if (first)
        for (int i = 0; i < c->npeers; i++)
            if (!c->p[i].exited) say(c, &c->p[i], "STOP %d", c->round);
}

static int lost(lc *c, lc_peer *p, const char *why)
{
    if (c->master) {
        fprintf(stderr, "ddprt-launch: node 0: the launcher of node %d (%s) is gone (%s); stopping the job\n", p->node,
                p->addr, why);
        port_sock_close(p->fd);
        p->fd = -1;
        say_all(c, "END 1%s", NULL, 0, 0);
    } else {
        fprintf(stderr, "ddprt-launch: node %d: lost the node-0 launcher at %s (%s); stopping the local ranks\n",
                c->node, c->where, why);
    }
    c->lost = 1;
    return LC_LOST;
}

/* Handles one line; may fill d (worker: GO / END). Returns LC_NONE, LC_STOP or LC_LOST. */
static int handle(lc *c, lc_peer *p, const char *l, lc_decision *d, int *decided)
{
    int k, a, b, e, f;
    if (!strcmp(l, "PING")) return LC_NONE;
    if (c->master) {
        if (sscanf(l, "FAIL %d %d %d %d", &k, &a, &b, &e) == 4 && k == c->round) {
            record(c, a, b, e);
            return LC_STOP;
        }
        if (sscanf(l, "EXIT %d %d %d", &k, &e, &b) == 3 && k == c->round) {
            p->exited = 1;
            if (e) record(c, p->node, b, e);
            return e ? LC_STOP : LC_NONE;
        }
        return LC_NONE;
    }
    if (sscanf(l, "STOP %d", &k) == 1) return k == c->round ? LC_STOP : LC_NONE;
    if (sscanf(l, "END %d", &e) == 1) {
        if (d) d->end = 1, d->code = e, *decided = 1;
        c->ended = 1, c->end_code = e;
        return LC_STOP;
    }
    int tok = 0;
    if (sscanf(l, "GO %d %d %d %d %d %n", &k, &a, &b, &e, &f, &tok) == 5 && tok && d) {
        *d = (lc_decision){0, 0, k, a, b, e, f, ""};
        snprintf(d->token, sizeof d->token, "%s", l + tok);
        c->round = k;
        *decided = 1;
        return LC_NONE;
    }
    if (!strncmp(l, "ERR ", 4)) {
        fprintf(stderr, "ddprt-launch: node %d: node 0 refused this launcher: %s\n", c->node, l + 4);
        c->lost = 1;
        return LC_LOST;
    }
    return LC_NONE;
}

static int service(lc *c, const int *ready, lc_decision *d, int *decided)
{
    int ev = LC_NONE;
    int64_t now = port_now_ns();
    for (int i = 0; i < c->npeers; i++) {
        lc_peer *p = &c->p[i];
        if (p->fd < 0) continue;
        char l[512];
        int r;
        while (ready[i] && (r = next_line(p, l, sizeof l)) != 0) {
            if (r < 0) return lost(c, p, "control connection closed");
            int e = handle(c, p, l, d, decided);
            if (e == LC_LOST) return e;
            if (e == LC_STOP) ev = LC_STOP;
            if (*decided) return ev; /* node 0 may close right after its decision */
        }
        if (c->started && now - p->last_rx > (int64_t)(c->silence_s * SEC)) {
            char why[96];
            snprintf(why, sizeof why, "silent for %.0f s", c->silence_s);
            return lost(c, p, why);
        }
    }
    if (now - c->last_tx > SEC) say_all(c, "PING%s", NULL, 0, 0);
    return ev;
}

int lc_fill(lc *c, struct pollfd *pf)
{
    for (int i = 0; i < c->npeers; i++) pf[i] = (struct pollfd){c->p[i].fd, POLLIN, 0};
    return c->npeers;
}

int lc_service(lc *c, const struct pollfd *pf, int n)
{
    int ready[c->npeers > 0 ? c->npeers : 1];
    for (int i = 0; i < c->npeers; i++) ready[i] = i < n && pf[i].revents != 0;
    int decided = 0;
    lc_decision d;
    return service(c, ready, &d, &decided);
}

void lc_local_fail(lc *c, int rank, int code)
{
    if (c->master) record(c, 0, rank, code);
    else say(c, &c->p[0], "FAIL %d %d %d %d", c->round, c->node, rank, code);
}

/* Polls the peers until *done or the deadline; 0, or -1 when a launcher is lost. */
static int wait_peers(lc *c, int64_t deadline, lc_decision *d, int *decided, const char *what)
{
    int fds[c->npeers > 0 ? c->npeers : 1], ready[c->npeers > 0 ? c->npeers : 1];
    for (;;) {
        int all = 1;
        for (int i = 0; i < c->npeers; i++) all &= c->p[i].exited;
        if (c->master ? all : *decided) return 0;
        if (port_now_ns() > deadline) {
            fprintf(stderr, "ddprt-launch: node %d: %s within %.0f s; stopping the job\n", c->node, what, c->wait_s);
            if (c->master) say_all(c, "END 1%s", NULL, 0, 0);
            c->lost = 1;
            return -1;
        }
        for (int i = 0; i < c->npeers; i++) fds[i] = c->p[i].fd;
        memset(ready, 0, sizeof ready);
        if (port_sock_poll_readable(fds, c->npeers, ready, port_now_ns() + SEC / 5) < 0) return -1;
        if (service(c, ready, d, decided) == LC_LOST) return -1;
    }
}

static void go(lc *c, int resume, lc_decision *d)
{
    char tok[200];
    if (c->round) snprintf(tok, sizeof tok, "%s-r%d", c->base, c->round);
    else snprintf(tok, sizeof tok, "%s", c->base);
    *d = (lc_decision){0, 0, c->round, resume, c->fail_node, c->fail_rank, c->fail_code, ""};
    snprintf(d->token, sizeof d->token, "%s", tok);
    for (int i = 0; i < c->npeers; i++)
        say(c, &c->p[i], "GO %d %d %d %d %d %s", c->round, resume, c->fail_node, c->fail_rank, c->fail_code, tok);
}

int lc_round_end(lc *c, int rank, int code, int max_restarts, int has_resume, const char *resume_path,
                 lc_decision *d)
{
    int decided = 0;
    int64_t deadline = port_now_ns() + (int64_t)(c->wait_s * SEC);
    if (!c->master && c->ended) { /* node 0 has already ended the job */
        fprintf(stderr, "ddprt-launch: node %d: node 0 ended the job (status %d); local ranks stopped\n", c->node,
                c->end_code);
        *d = (lc_decision){.end = 1, .code = c->end_code};
        return 0;
    }
    if (!c->master) {
        say(c, &c->p[0], "EXIT %d %d %d", c->round, code, rank);
        /* node 0 waits up to wait_s for the others: give it that and a margin */
        return wait_peers(c, deadline + 30 * SEC, d, &decided, "no word from node 0 on the next round");
    }
    if (code) record(c, 0, rank, code);
    char what[160] = "not every launcher reported the end of its ranks (still running:";
    for (int i = 0, k = 0; i < c->npeers; i++)
        if (!c->p[i].exited && k++ < 8)
            snprintf(what + strlen(what), sizeof what - strlen(what), "%s node %d", k == 1 ? "" : ",", c->p[i].node);
    snprintf(what + strlen(what), sizeof what - strlen(what), ")");
    if (wait_peers(c, deadline, d, &decided, what)) return -1;
    for (int i = 0; i < c->npeers; i++) c->p[i].exited = 0;
    if (c->fail_node < 0 || c->round >= max_restarts) {
        int st = c->fail_node < 0 ? 0 : c->fail_code;
        for (int i = 0; i < c->npeers; i++) say(c, &c->p[i], "END %d", st);
        *d = (lc_decision){.end = 1, .code = st};
        return 0;
    }
    c->round++;
    go(c, has_resume && !access(resume_path, R_OK), d);
    c->fail_node = c->fail_rank = -1, c->fail_code = 0;
    return 0;
}

static int hello_master(lc *c, int lfd, int nproc, int max_restarts, int has_resume, int64_t deadline)
{
    int got = 0;
    while (got < c->npeers) {
        char peer[64] = "?", l[512];
        int fd = port_sock_accept(lfd, deadline, peer, sizeof peer);
        if (fd == PORT_TIMEOUT) {
            char miss[160] = "";
            for (int n = 1, k = 0; n < c->nnodes; n++) {
                int seen = 0;
                for (int i = 0; i < got; i++) seen |= c->p[i].node == n;
                if (!seen && k++ < 8) snprintf(miss + strlen(miss), sizeof miss - strlen(miss), "%s%d", k > 1 ? "," : "", n);
            }
            fprintf(stderr, "ddprt-launch: node 0: only %d of %d launchers connected to the control port %s within "
                    "%.0f s (missing: node %s); stopping\n", got + 1, c->nnodes, c->where, c->wait_s, miss);
            return -1;
        }
        if (fd < 0) continue;
        port_sock_set_nonblock(fd, 1);
        lc_peer p = {.fd = fd, .node = -1, .last_rx = port_now_ns()};
        snprintf(p.addr, sizeof p.addr, "%s", peer);
        int r, node, nn, np, mr, hr;
        /* A stranger that says nothing is dropped after 5 s; the job keeps waiting. */
        int64_t dl = port_now_ns() + 5 * SEC < deadline ? port_now_ns() + 5 * SEC : deadline;
        while ((r = next_line(&p, l, sizeof l)) == 0 && port_now_ns() < dl) {
            int rd[1] = {0};
            port_sock_poll_readable(&fd, 1, rd, dl);
        }
        if (r != 1 || sscanf(l, "HELLO %d %d %d %d %d", &node, &nn, &np, &mr, &hr) != 5) {
            fprintf(stderr, "ddprt-launch: node 0: ignored a connection to the control port from %s (no HELLO)\n", peer);
            port_sock_close(fd);
            continue;
        }
        int dup = 0;
        for (int i = 0; i < got; i++) dup |= c->p[i].node == node;
        char why[200] = "";
        if (node < 1 || node >= c->nnodes || dup)
            snprintf(why, sizeof why, "node rank %d is %s", node, dup ? "taken by another launcher" : "out of range");
        else if (nn != c->nnodes || np != nproc || mr != max_restarts || hr != has_resume)
            snprintf(why, sizeof why, "flags differ: node %d has --nnodes %d --nproc-per-node %d --max-restarts %d%s, "
                     "node 0 --nnodes %d --nproc-per-node %d --max-restarts %d%s", node, nn, np, mr,
                     hr ? " --resume-arg" : "", c->nnodes, nproc, max_restarts, has_resume ? " --resume-arg" : "");
        if (*why) {
            fprintf(stderr, "ddprt-launch: node 0: launcher at %s refused: %s\n", peer, why);
            say(c, &p, "ERR %s", why);
            port_sock_close(fd);
            c->npeers = got;
            say_all(c, "ERR %s", why, 0, 0);
            return -1;
        }
        p.node = node;
        c->p[got++] = p;
    }
    return 0;
}

int lc_start(lc *c, const char *addr, int port, int node, int nnodes, int nproc, int max_restarts, int has_resume,
             const char *base_token, lc_decision *d)
{
    memset(c, 0, sizeof *c);
    c->master = node == 0, c->node = node, c->nnodes = nnodes;
    c->fail_node = c->fail_rank = -1;
    c->wait_s = rt_env_timeout_s();
    c->silence_s = c->wait_s < 30 ? c->wait_s : 30;
    snprintf(c->where, sizeof c->where, "%s:%d", addr, port);
    c->npeers = c->master ? nnodes - 1 : 1;
    c->p = calloc((size_t)c->npeers, sizeof *c->p);
    if (!c->p) return fprintf(stderr, "ddprt-launch: out of memory\n"), -1;
    int64_t deadline = port_now_ns() + (int64_t)(c->wait_s * SEC);
    char err[256];
    if (c->master) {
        if (base_token && *base_token) snprintf(c->base, sizeof c->base, "%s", base_token);
        else { /* one random token for every node's ranks */
            unsigned char r[16] = {0};
            int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
            if (fd < 0 || read(fd, r, sizeof r) != (ssize_t)sizeof r) {
                uint64_t x = (uint64_t)port_now_ns() ^ (uint64_t)getpid() << 40;
                memcpy(r, &x, sizeof x);
            }
            if (fd >= 0) close(fd);
            for (int i = 0; i < 16; i++) snprintf(c->base + 2 * i, 3, "%02x", r[i]);
        }
        int lfd = port_sock_listen(NULL, port, 64, err, sizeof err);
        if (lfd < 0) return fprintf(stderr, "ddprt-launch: node 0: control channel: %s\n", err), -1;
        int rc = hello_master(c, lfd, nproc, max_restarts, has_resume, deadline);
        port_sock_close(lfd);
        if (rc) return -1;
        go(c, 0, d);
        c->started = 1;
        for (int i = 0; i < c->npeers; i++) c->p[i].last_rx = port_now_ns();
        return 0;
    }
    lc_peer *p = &c->p[0];
    p->node = 0;
    snprintf(p->addr, sizeof p->addr, "%s", addr);
    for (;;) { /* node 0 may start later: retry until the deadline */
        p->fd = port_sock_connect(addr, port, port_now_ns() + 2 * SEC < deadline ? port_now_ns() + 2 * SEC : deadline,
                                  err, sizeof err);
        if (p->fd >= 0) break;
        if (port_now_ns() > deadline) {
            fprintf(stderr, "ddprt-launch: node %d: no control channel with node 0 at %s after %.0f s: %s\n", node,
                    c->where, c->wait_s, err);
            return -1;
        }
        usleep(100000);
    }
    port_sock_set_nonblock(p->fd, 1);
    p->last_rx = port_now_ns();
    say(c, p, "HELLO %d %d %d %d %d", node, nnodes, nproc, max_restarts, has_resume);
    int decided = 0;
    if (wait_peers(c, deadline, d, &decided, "no GO from node 0")) return -1;
    if (d->end) {
        fprintf(stderr, "ddprt-launch: node %d: node 0 ended the job before it started\n", node);
        return -1;
    }
    c->started = 1;
    return 0;
}

void lc_close(lc *c, int code)
{
    for (int i = 0; c->master && i < c->npeers; i++) say(c, &c->p[i], "END %d", code); /* e.g. interrupted */
    for (int i = 0; i < c->npeers; i++) port_sock_close(c->p[i].fd);
    free(c->p);
    c->p = NULL, c->npeers = 0;
}
