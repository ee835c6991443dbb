/* ddprt-launch's control channel between nodes; protocol in apps/launch/launch_ctl.h.
 * Messages (one line each; K = round):
 *   worker -> node 0: HELLO node nnodes min_nodes nproc max_restarts has_resume |
 *                     FAIL K node rank code | EXIT K code rank | PING
 *   node 0 -> worker: GO K resume fail_node fail_rank fail_code nmembers group_rank token |
 *                     STOP K | GROW K | END code | ERR text | PING */
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

static void say(lc *c, lc_peer *p, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
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

/* To every connected peer (members: only those in the round). */
static void say_all(lc *c, int members, const char *line)
{
    for (int i = 0; i < c->npeers; i++)
        if (c->p[i].fd >= 0 && (!members || c->p[i].member || !c->master)) say(c, &c->p[i], "%s", line);
}

static int elastic(const lc *c) { return c->min_nodes < c->nnodes; }

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
    /* Prefer a rank killed by a signal: the others usually fail on its closed connections.
     * Not over a restart point: every rank was past its checkpoint then. */
    if (first || (code >= 128 && c->fail_code < 128 && c->fail_code != LC_EXIT_RESTART_POINT))
        c->fail_node = node, c->fail_rank = rank, c->fail_code = code;
    if (first)
        for (int i = 0; i < c->npeers; i++)
            if (c->p[i].fd >= 0 && c->p[i].member && !c->p[i].exited) say(c, &c->p[i], "STOP %d", c->round);
}

static int lost(lc *c, lc_peer *p, const char *why)
{
    if (c->master && elastic(c)) {
        /* The job goes on without it (lc_round_end decides whether enough are left). */
        fprintf(stderr, "ddprt-launch: node 0: node %d (%s) is lost (%s)%s\n", p->node, p->addr, why,
                p->member ? "; stopping the round, the next one runs on the nodes left" : " before it joined");
        port_sock_close(p->fd);
        p->fd = -1;
        if (!p->member) return LC_NONE;
        p->member = 0;
        c->changed = 1;
        record(c, p->node, -1, 1);
        return LC_STOP;
    }
    if (c->master) {
        fprintf(stderr, "ddprt-launch: node 0: the launcher of node %d (%s) is gone (%s); stopping the job\n", p->node,
                p->addr, why);
        port_sock_close(p->fd);
        p->fd = -1;
        say_all(c, 0, "END 1");
    } else {
        fprintf(stderr, "ddprt-launch: node %d: lost the node-0 launcher at %s (%s); stopping the local ranks\n",
                c->node, c->where, why);
    }
    c->lost = 1;
    return LC_LOST;
}

/* Handles one line; may fill d (worker: GO / END). Returns LC_NONE, LC_STOP, LC_GROW or LC_LOST. */
static int handle(lc *c, lc_peer *p, const char *l, lc_decision *d, int *decided)
{
    int k, a, b, e, f, m, g;
    if (!strcmp(l, "PING")) return LC_NONE;
    if (c->master) {
        if (sscanf(l, "FAIL %d %d %d %d", &k, &a, &b, &e) == 4 && k == c->round && p->member) {
            record(c, a, b, e);
            return LC_STOP;
        }
        if (sscanf(l, "EXIT %d %d %d", &k, &e, &b) == 3 && k == c->round && p->member) {
            p->exited = 1;
            if (e) record(c, p->node, b, e);
            return e ? LC_STOP : LC_NONE;
        }
        return LC_NONE;
    }
    if (sscanf(l, "STOP %d", &k) == 1) return k == c->round ? LC_STOP : LC_NONE;
    if (sscanf(l, "GROW %d", &k) == 1) return k == c->round ? LC_GROW : LC_NONE;
    if (sscanf(l, "END %d", &e) == 1) {
        if (d) d->end = 1, d->code = e, *decided = 1;
        c->ended = 1, c->end_code = e;
        return LC_STOP;
    }
    int tok = 0;
    if (sscanf(l, "GO %d %d %d %d %d %d %d %n", &k, &a, &b, &e, &f, &m, &g, &tok) == 7 && tok && d) {
        *d = (lc_decision){.round = k, .resume = a, .node = b, .rank = e, .status = f, .nmembers = m, .group_rank = g};
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

/* A HELLO's flags against this launcher's. "" when they agree, else why not. */
static void hello_check(const lc *c, const char *l, int *node, char *why, size_t n)
{
    int nn, mn, np, mr, hr, dup = 0;
    why[0] = 0;
    if (sscanf(l, "HELLO %d %d %d %d %d %d", node, &nn, &mn, &np, &mr, &hr) != 6) {
        snprintf(why, n, "no HELLO");
        return;
    }
    if (*node >= 1 && *node < c->nnodes) dup = c->p[*node - 1].fd >= 0;
    if (*node < 1 || *node >= c->nnodes || dup)
        snprintf(why, n, "node rank %d is %s", *node, dup ? "taken by another launcher" : "out of range");
    else if (nn != c->nnodes || mn != c->min_nodes || np != c->nproc || mr != c->max_restarts || hr != c->has_resume) {
        char a[32] = "", b[32] = "";
        if (mn != nn) snprintf(a, sizeof a, "%d:", mn);
        if (c->min_nodes != c->nnodes) snprintf(b, sizeof b, "%d:", c->min_nodes);
        snprintf(why, n, "flags differ: node %d has --nnodes %s%d --nproc-per-node %d --max-restarts %d%s, "
                 "node 0 --nnodes %s%d --nproc-per-node %d --max-restarts %d%s", *node, a, nn, np, mr,
                 hr ? " --resume-arg" : "", b, c->nnodes, c->nproc, c->max_restarts, c->has_resume ? " --resume-arg" : "");
    }
}

/* Master: one connection on the control port; its HELLO within 5 s (a stranger that
 * says nothing is dropped, the job keeps going). Returns the node's slot, -1 dropped or
 * refused (refused: *fatal when the whole job must stop, i.e. before it started). */
static int take_hello(lc *c, int lfd, int64_t deadline, int *fatal)
{
    char peer[64] = "?", l[512], why[300];
    int fd = port_sock_accept(lfd, deadline, peer, sizeof peer), node = -1;
    if (fd < 0) return fd == PORT_TIMEOUT ? -2 : -1;
    port_sock_set_nonblock(fd, 1);
    lc_peer p = {.fd = fd, .node = -1, .last_rx = port_now_ns()};
    snprintf(p.addr, sizeof p.addr, "%s", peer);
    int64_t dl = port_now_ns() + 5 * SEC;
    int r;
    while ((r = next_line(&p, l, sizeof l)) == 0 && port_now_ns() < dl) {
        int rd[1] = {0};
        port_sock_poll_readable(&fd, 1, rd, dl);
    }
    hello_check(c, r == 1 ? l : "", &node, why, sizeof why);
    if (!strcmp(why, "no HELLO")) {
        fprintf(stderr, "ddprt-launch: node 0: ignored a connection to the control port from %s (no HELLO)\n", peer);
        port_sock_close(fd);
        return -1;
    }
    if (*why) {
        fprintf(stderr, "ddprt-launch: node 0: launcher at %s refused: %s\n", peer, why);
        say(c, &p, "ERR %s", why);
        port_sock_close(fd);
        *fatal = !c->started;
        if (*fatal) {
            char line[400];
            snprintf(line, sizeof line, "ERR %.390s", why);
            say_all(c, 0, line);
        }
        return -1;
    }
    p.node = node;
    c->p[node - 1] = p;
    return node - 1;
}

/* Master, elastic: a node connects while the job runs. It waits for the next restart
 * point: every member's ranks are asked to stop at their next checkpoint. */
static int join(lc *c)
{
    int fatal = 0, s = take_hello(c, c->lfd, port_now_ns() + SEC / 10, &fatal);
    if (s < 0) return LC_NONE;
    fprintf(stderr, "ddprt-launch: node 0: node %d (%s) joined; the job grows at its next restart point "
            "(the ranks stop after their next checkpoint)\n", c->p[s].node, c->p[s].addr);
    char line[32];
    snprintf(line, sizeof line, "GROW %d", c->round);
    say_all(c, 1, line);
    return LC_GROW;
}

static int service(lc *c, const int *ready, int lready, lc_decision *d, int *decided)
{
    int ev = LC_NONE;
    int64_t now = port_now_ns();
    if (lready && c->lfd >= 0) ev = join(c);
    for (int i = 0; i < c->npeers; i++) {
        lc_peer *p = &c->p[i];
        if (p->fd < 0) continue;
        char l[512];
        int r;
        while (ready[i] && (r = next_line(p, l, sizeof l)) != 0) {
            if (r < 0) {
                int e = lost(c, p, "control connection closed");
                if (e == LC_LOST) return e;
                if (e != LC_NONE) ev = e;
                break;
            }
            int e = handle(c, p, l, d, decided);
            if (e == LC_LOST) return e;
            if (e != LC_NONE) ev = e;
            if (*decided) return ev; /* node 0 may close right after its decision */
        }
        if (p->fd >= 0 && c->started && now - p->last_rx > (int64_t)(c->silence_s * SEC)) {
            char why[96];
            snprintf(why, sizeof why, "silent for %.0f s", c->silence_s);
            int e = lost(c, p, why);
            if (e == LC_LOST) return e;
            if (e != LC_NONE) ev = e;
        }
    }
    if (now - c->last_tx > SEC) say_all(c, 0, "PING");
    return ev;
}

int lc_nfds(const lc *c) { return c->npeers + 1; }

int lc_fill(lc *c, struct pollfd *pf)
{
    int n = 0;
    for (int i = 0; i < c->npeers; i++) pf[n++] = (struct pollfd){c->p[i].fd, POLLIN, 0}; /* fd -1: ignored */
    if (c->lfd >= 0) pf[n++] = (struct pollfd){c->lfd, POLLIN, 0};
    return n;
}

int lc_service(lc *c, const struct pollfd *pf, int n)
{
    int ready[c->npeers > 0 ? c->npeers : 1];
    /* Lines already read (behind a GO that ended a wait) count as ready too. */
    for (int i = 0; i < c->npeers; i++)
        ready[i] = (i < n && pf[i].revents != 0) || (c->p[i].fd >= 0 && memchr(c->p[i].in, '\n', c->p[i].n));
    int lready = c->lfd >= 0 && c->npeers < n && pf[c->npeers].revents != 0;
    int decided = 0;
    lc_decision d;
    return service(c, ready, lready, &d, &decided);
}

void lc_local_fail(lc *c, int rank, int code)
{
    if (c->master) record(c, 0, rank, code);
    else say(c, &c->p[0], "FAIL %d %d %d %d", c->round, c->node, rank, code);
}

/* Polls the peers until *done or the deadline; 0, or -1 when a launcher is lost. */
static int wait_peers(lc *c, int64_t deadline, lc_decision *d, int *decided, const char *what)
{
    int fds[c->npeers + 1], ready[c->npeers + 1];
    for (;;) {
        int all = 1;
        for (int i = 0; i < c->npeers; i++) all &= c->p[i].fd < 0 || !c->p[i].member || c->p[i].exited;
        if (c->master ? all : *decided) return 0;
        if (port_now_ns() > deadline) {
            fprintf(stderr, "ddprt-launch: node %d: %s within %.0f s; stopping the job\n", c->node, what, c->wait_s);
            if (c->master) say_all(c, 0, "END 1");
            c->lost = 1;
            return -1;
        }
        int n = 0;
        for (int i = 0; i < c->npeers; i++) fds[n++] = c->p[i].fd;
        if (c->lfd >= 0) fds[n++] = c->lfd;
        memset(ready, 0, sizeof ready);
        if (port_sock_poll_readable(fds, n, ready, port_now_ns() + SEC / 5) < 0) return -1;
        if (service(c, ready, c->lfd >= 0 && ready[c->npeers], d, decided) == LC_LOST) return -1;
    }
}

/* Master: GO for round c->round to every connected node, now all members, in node
 * order (GROUP_RANK); d gets node 0's own. */
static void go(lc *c, int resume, lc_decision *d)
{
    char tok[200];
    if (c->round) snprintf(tok, sizeof tok, "%s-r%d", c->base, c->round);
    else snprintf(tok, sizeof tok, "%s", c->base);
    int m = 1;
    for (int i = 0; i < c->npeers; i++) m += c->p[i].member = c->p[i].fd >= 0;
    c->nmembers = m;
    *d = (lc_decision){.round = c->round, .resume = resume, .node = c->fail_node, .rank = c->fail_rank,
                       .status = c->fail_code, .nmembers = m, .group_rank = 0};
    snprintf(d->token, sizeof d->token, "%s", tok);
    for (int i = 0, g = 1; i < c->npeers; i++)
        if (c->p[i].member) {
            c->p[i].exited = 0;
            say(c, &c->p[i], "GO %d %d %d %d %d %d %d %s", c->round, resume, c->fail_node, c->fail_rank, c->fail_code,
                m, g++, tok);
        }
}

/* Nodes 1.. in the next round: those connected (members and joiners). */
static int next_nodes(const lc *c, char *list, size_t n)
{
    int k = 1;
    size_t o = (size_t)snprintf(list, n, "0");
    for (int i = 0; i < c->npeers; i++)
        if (c->p[i].fd >= 0) {
            k++;
            if (o < n) o += (size_t)snprintf(list + o, n - o, ", %d", c->p[i].node);
        }
    return k;
}

int lc_round_end(lc *c, int rank, int code, const char *resume_path, lc_decision *d)
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
        if (c->p[i].fd >= 0 && c->p[i].member && !c->p[i].exited && k++ < 8)
            snprintf(what + strlen(what), sizeof what - strlen(what), "%s node %d", k == 1 ? "" : ",", c->p[i].node);
    snprintf(what + strlen(what), sizeof what - strlen(what), ")");
    if (wait_peers(c, deadline, d, &decided, what)) return -1;
    char nodes[200];
    int count = next_nodes(c, nodes, sizeof nodes), joined = 0;
    for (int i = 0; i < c->npeers; i++) joined += c->p[i].fd >= 0 && !c->p[i].member;
    /* A planned stop (every rank at its restart point for a joining node) and a lost
     * node change the membership; only other failures count against --max-restarts. */
    int planned = c->fail_node >= 0 && c->fail_code == LC_EXIT_RESTART_POINT && !c->changed;
    int end = c->fail_node < 0 || (!planned && !c->changed && c->restarts >= c->max_restarts);
    if (!end && count < c->min_nodes) {
        fprintf(stderr, "ddprt-launch: node 0: only %d node(s) left (%s), --nnodes %d:%d needs %d; stopping the job\n",
                count, nodes, c->min_nodes, c->nnodes, c->min_nodes);
        for (int i = 0; i < c->npeers; i++) say(c, &c->p[i], "END 1");
        *d = (lc_decision){.end = 1, .code = 1};
        return 0;
    }
    if (end) {
        int st = c->fail_node < 0 ? 0 : c->fail_code;
        for (int i = 0; i < c->npeers; i++) say(c, &c->p[i], "END %d", st);
        *d = (lc_decision){.end = 1, .code = st};
        return 0;
    }
    if (!planned && !c->changed) c->restarts++;
    if (elastic(c) && count != c->nmembers)
        fprintf(stderr, "ddprt-launch: node 0: the next round runs on nodes %s: %d -> %d rank(s)\n", nodes,
                c->nmembers * c->nproc, count * c->nproc);
    c->round++;
    go(c, c->has_resume && !access(resume_path, R_OK), d);
    snprintf(d->why, sizeof d->why, "%s", planned ? "restart point" : c->changed ? "node lost" : "rank failed");
    c->fail_node = c->fail_rank = -1, c->fail_code = 0, c->changed = 0;
    return 0;
}

void lc_random_token(char *out)
{
    unsigned char r[16] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, r, sizeof r) != (ssize_t)sizeof r) {
        uint64_t x = (uint64_t)port_now_ns() ^ (uint64_t)getpid() << 40;
        memcpy(r, &x, sizeof x);
    }
    if (fd >= 0) close(fd);
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* Node 0: the launchers arrive. All of them, or (elastic) at least MIN and then
 * DDPRT_ELASTIC_WAIT more seconds for the rest, whom it names. 0, or -1 (printed). */
static int gather(lc *c, int64_t deadline)
{
    double grace = rt_env_number(RT_ENV_ELASTIC_WAIT);
    int got = 0, fatal = 0;
    int64_t join_by = elastic(c) && c->min_nodes <= 1 ? port_now_ns() + (int64_t)(grace * SEC) : 0;
    while (got < c->npeers) {
        int64_t dl = join_by && join_by < deadline ? join_by : deadline;
        int s = take_hello(c, c->lfd, dl, &fatal);
        if (fatal) return -1;
        if (s >= 0) {
            if (++got + 1 >= c->min_nodes && elastic(c) && !join_by) join_by = port_now_ns() + (int64_t)(grace * SEC);
            continue;
        }
        if (s == -2 && join_by && port_now_ns() >= join_by) break;
        if (s == -2 && port_now_ns() >= deadline) break;
    }
    char miss[160] = "";
    for (int i = 0, k = 0; i < c->npeers; i++)
        if (c->p[i].fd < 0 && k++ < 8)
            snprintf(miss + strlen(miss), sizeof miss - strlen(miss), "%s%d", k > 1 ? "," : "", c->p[i].node);
    if (got == c->npeers) return 0;
    if (!elastic(c) || got + 1 < c->min_nodes) {
        fprintf(stderr, "ddprt-launch: node 0: only %d of %d launchers connected to the control port %s within "
                "%.0f s (missing: node %s); stopping\n", got + 1, c->nnodes, c->where, c->wait_s, miss);
        say_all(c, 0, "END 1");
        return -1;
    }
    fprintf(stderr, "ddprt-launch: node 0: node %s did not join within %g s; starting with %d of %d nodes (--nnodes "
            "%d:%d), the others may join later\n", miss, grace, got + 1, c->nnodes, c->min_nodes, c->nnodes);
    return 0;
}

int lc_start(lc *c, const lc_cfg *g, lc_decision *d)
{
    memset(c, 0, sizeof *c);
    c->master = g->node == 0, c->node = g->node, c->nnodes = g->nnodes;
    c->min_nodes = g->min_nodes > 0 && g->min_nodes < g->nnodes ? g->min_nodes : g->nnodes;
    c->nproc = g->nproc, c->max_restarts = g->max_restarts, c->has_resume = g->has_resume;
    c->fail_node = c->fail_rank = -1, c->lfd = -1;
    c->wait_s = rt_env_timeout_s();
    c->silence_s = c->wait_s < 30 ? c->wait_s : 30;
    snprintf(c->where, sizeof c->where, "%s:%d", g->addr, g->port);
    c->npeers = c->master ? g->nnodes - 1 : 1;
    c->p = calloc((size_t)c->npeers, sizeof *c->p);
    if (!c->p) return fprintf(stderr, "ddprt-launch: out of memory\n"), -1;
    for (int i = 0; i < c->npeers; i++) c->p[i].fd = -1, c->p[i].node = c->master ? i + 1 : 0;
    int64_t deadline = port_now_ns() + (int64_t)(c->wait_s * SEC);
    char err[256];
    if (c->master) {
        if (g->base_token && *g->base_token) snprintf(c->base, sizeof c->base, "%s", g->base_token);
        else lc_random_token(c->base); /* one random token for every node's ranks */
        if ((c->lfd = port_sock_listen(NULL, g->port, 64, err, sizeof err)) < 0)
            return fprintf(stderr, "ddprt-launch: node 0: control channel: %s\n", err), -1;
        int rc = gather(c, deadline);
        if (rc || !elastic(c)) { /* elastic: the port stays open for nodes that join later */
            port_sock_close(c->lfd);
            c->lfd = -1;
        }
        if (rc) return -1;
        go(c, 0, d);
        c->started = 1;
        for (int i = 0; i < c->npeers; i++) c->p[i].last_rx = port_now_ns();
        return 0;
    }
    lc_peer *p = &c->p[0];
    snprintf(p->addr, sizeof p->addr, "%s", g->addr);
    for (;;) { /* node 0 may start later: retry until the deadline */
        p->fd = port_sock_connect(g->addr, g->port, port_now_ns() + 2 * SEC < deadline ? port_now_ns() + 2 * SEC : deadline,
                                  err, sizeof err);
        if (p->fd >= 0) break;
        if (port_now_ns() > deadline) {
            fprintf(stderr, "ddprt-launch: node %d: no control channel with node 0 at %s after %.0f s: %s\n", g->node,
                    c->where, c->wait_s, err);
            return -1;
        }
        usleep(100000);
    }
    port_sock_set_nonblock(p->fd, 1);
    p->last_rx = port_now_ns();
    say(c, p, "HELLO %d %d %d %d %d %d", g->node, g->nnodes, c->min_nodes, g->nproc, g->max_restarts, g->has_resume);
    int decided = 0;
    /* Elastic: a node that joins a running job waits for the next restart point, as
     * long as node 0 keeps talking (its heartbeats; the silence check applies). */
    if (elastic(c)) c->started = 1, deadline = INT64_MAX / 2;
    if (wait_peers(c, deadline, d, &decided, "no GO from node 0")) return -1;
    if (d->end) {
        fprintf(stderr, "ddprt-launch: node %d: node 0 ended the job %s\n", g->node,
                c->started && elastic(c) ? "before this node could join" : "before it started");
        return -1;
    }
    c->started = 1;
    return 0;
}

void lc_close(lc *c, int code)
{
    for (int i = 0; c->master && i < c->npeers; i++) say(c, &c->p[i], "END %d", code); /* e.g. interrupted */
    for (int i = 0; i < c->npeers; i++)
        if (c->p[i].fd >= 0) port_sock_close(c->p[i].fd);
    if (c->lfd >= 0) port_sock_close(c->lfd);
    free(c->p);
    c->p = NULL, c->npeers = 0, c->lfd = -1;
}
