/* Stall watch: heartbeats over UDP, attribution, warnings (design: tp_watch.h).
 * Part of the communicator module with tp_comm.c and tp_staged.c (they call each other). */
#include "transport/tp_comm_int.h"
#include "transport/tp_watch.h"
#include "ports/posix/port_sock.h"
#include "rt/env.h"
#include "rt/log.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BEAT_MAGIC 0x42484444u /* "DDHB" */
#define RECENT 8               /* op descriptors per beat, for the mismatch check */
#define TEXT 200
#define BEAT_BYTES (64 + RECENT * 24 + TEXT)

typedef struct { uint64_t seq, bytes; uint8_t kind, dt, op; int32_t root; } desc;
typedef struct beat {
    uint32_t flags; /* 1: this rank's comm failed (text says why); 2: it used send/recv */
    uint32_t rank, world;
    uint64_t token, issued, cur, done;
    int32_t wait_peer;
    uint32_t cur_ms, idle_ms, nrecent;
    desc recent[RECENT];
    char text[TEXT];
} beat;

typedef struct { int heard; int64_t at; beat b; } peer_state;

struct tp_watch {
    int rank, world, fd;
    uint64_t token;
    struct sockaddr_in *addr;
    tp_comm *c;
    port_thread th;
    int started, stop;
    double warn_s, timeout_s, interval_s, silent_s;
    int64_t t0, last_warn;
    int heard_checked;
    int ended; /* this rank was ended (exit policy 0: its comm failed): watch no more */
    port_mutex mu; /* ps, failed_text: the watch thread vs. tp_watch_on_fail */
    peer_state *ps;
    char failed_text[TEXT];
    int *lines; /* scratch for the report (2 * world ranks), sized at creation */
};

/* Truncating copy (snprintf("%s") would warn about the truncation it is asked for). */
static void scopy(char *d, size_t n, const char *s)
{
    size_t k = strlen(s);
    if (k >= n) k = n - 1;
    memcpy(d, s, k);
    d[k] = 0;
}

/* What ends a rank that cannot go on (a mismatched op; a rank the others gave up on):
 * _exit (the programs: nothing they could do) or, for the C API, the comm fails and the
 * caller gets the line from its next or current call. */
static int exit_on_fatal = 1;
void tp_watch_set_exit(int on) { __atomic_store_n(&exit_on_fatal, on, __ATOMIC_RELAXED); }

static void end_rank(tp_watch *w, const char *why)
{
    if (__atomic_load_n(&exit_on_fatal, __ATOMIC_RELAXED)) {
        fflush(stdout);
        _exit(1);
    }
    w->ended = 1;
    /* The one call back into the comm the watch observes (tp_comm.c starts, asks and
     * stops the watch): failing the comm is what a watch that gave up on a rank is for. */
    tp_abort(w->c, why);
}

static volatile sig_atomic_t usr1;
static void on_usr1(int sig) { (void)sig; usr1 = 1; }

/* ---- wire (little-endian) ---- */
static void p32(uint8_t *b, uint32_t v) { for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> 8 * i); }
static void p64(uint8_t *b, uint64_t v) { for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> 8 * i); }
static uint32_t g32(const uint8_t *b) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | b[i]; return v; }
static uint64_t g64(const uint8_t *b) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | b[i]; return v; }

static size_t encode(const beat *x, uint8_t *b)
{
    memset(b, 0, BEAT_BYTES);
    p32(b, BEAT_MAGIC), p32(b + 4, x->flags), p32(b + 8, x->rank), p32(b + 12, x->world);
    p64(b + 16, x->token), p64(b + 24, x->issued), p64(b + 32, x->cur), p64(b + 40, x->done);
    p32(b + 48, (uint32_t)x->wait_peer), p32(b + 52, x->cur_ms), p32(b + 56, x->idle_ms), p32(b + 60, x->nrecent);
    for (uint32_t i = 0; i < x->nrecent && i < RECENT; i++) {
        uint8_t *d = b + 64 + 24 * i;
        p64(d, x->recent[i].seq), p64(d + 8, x->recent[i].bytes);
        d[16] = x->recent[i].kind, d[17] = x->recent[i].dt, d[18] = x->recent[i].op;
        p32(d + 20, (uint32_t)x->recent[i].root);
    }
    memcpy(b + 64 + RECENT * 24, x->text, TEXT - 1);
    return BEAT_BYTES;
}

static int decode(const uint8_t *b, size_t n, beat *x)
{
    if (n != BEAT_BYTES || g32(b) != BEAT_MAGIC) return -1;
    x->flags = g32(b + 4), x->rank = g32(b + 8), x->world = g32(b + 12);
    x->token = g64(b + 16), x->issued = g64(b + 24), x->cur = g64(b + 32), x->done = g64(b + 40);
    x->wait_peer = (int32_t)g32(b + 48), x->cur_ms = g32(b + 52), x->idle_ms = g32(b + 56);
    x->nrecent = g32(b + 60) > RECENT ? RECENT : g32(b + 60);
    for (uint32_t i = 0; i < x->nrecent; i++) {
        const uint8_t *d = b + 64 + 24 * i;
        x->recent[i] = (desc){g64(d), g64(d + 8), d[16], d[17], d[18], (int32_t)g32(d + 20)};
    }
    memcpy(x->text, b + 64 + RECENT * 24, TEXT);
    x->text[TEXT - 1] = 0;
    for (char *p = x->text; *p; p++)
        if (*p < 0x20 || *p > 0x7e) *p = '?';
    return 0;
}

/* This rank's state now. */
static void snapshot(tp_watch *w, beat *x, int64_t now)
{
    tp_comm *c = w->c;
    memset(x, 0, sizeof *x);
    x->rank = (uint32_t)w->rank, x->world = (uint32_t)w->world, x->token = w->token;
    x->issued = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
    x->cur = __atomic_load_n(&c->p_cur, __ATOMIC_ACQUIRE);
    x->done = __atomic_load_n(&c->p_done, __ATOMIC_ACQUIRE);
    int64_t cs = __atomic_load_n(&c->p_cur_start, __ATOMIC_RELAXED);
    int64_t da = __atomic_load_n(&c->p_done_at, __ATOMIC_RELAXED);
    if (!da) da = w->t0;
    x->wait_peer = __atomic_load_n(&c->p_wait_peer, __ATOMIC_RELAXED);
    x->cur_ms = x->cur && now > cs ? (uint32_t)((now - cs) / 1000000) : 0;
    x->idle_ms = !x->cur && now > da ? (uint32_t)((now - da) / 1000000) : 0;
    for (uint64_t s = x->issued; s >= 1 && x->nrecent < RECENT; s--) {
        tp_trace_ent e;
        if (!tp_trace_get(c, s, &e)) break;
        x->recent[x->nrecent++] = (desc){e.seq, e.bytes, e.kind, e.dt, e.op, e.root};
    }
    if (__atomic_load_n(&c->p2p, __ATOMIC_RELAXED)) x->flags |= 2;
    port_mutex_lock(&w->mu);
    if (w->failed_text[0]) {
        x->flags |= 1;
        scopy(x->text, sizeof x->text, w->failed_text);
    }
    port_mutex_unlock(&w->mu);
}

static void send_beat(tp_watch *w, const beat *x)
{
    uint8_t b[BEAT_BYTES];
    encode(x, b);
    for (int q = 0; q < w->world; q++)
        if (q != w->rank)
            sendto(w->fd, b, BEAT_BYTES, MSG_DONTWAIT, (struct sockaddr *)&w->addr[q], sizeof w->addr[q]);
}

static void drain(tp_watch *w)
{
    uint8_t b[BEAT_BYTES + 1];
    beat x;
    for (;;) {
        ssize_t n = recv(w->fd, b, sizeof b, MSG_DONTWAIT);
        if (n < 0) return;
        if (decode(b, (size_t)n, &x) || x.token != w->token || x.world != (uint32_t)w->world ||
            x.rank >= (uint32_t)w->world || (int)x.rank == w->rank)
            continue; /* not a beat of this job */
        port_mutex_lock(&w->mu);
        w->ps[x.rank] = (peer_state){1, port_now_ns(), x};
        port_mutex_unlock(&w->mu);
    }
}

/* Sizes per rank (what each rank passed): a trace entry holds an allgather's or a
 * reduce_scatter's whole buffer, which differs between ranks of one mismatch. */
static void desc_text(char *s, size_t n, const desc *d, int world)
{
    char extra[32] = "";
    if (d->kind == TP_K_BROADCAST || d->kind >= TP_K_SEND)
        snprintf(extra, sizeof extra, " %s %d", d->kind == TP_K_BROADCAST ? "root" : "peer", d->root);
    if (d->kind == TP_K_TREE) snprintf(extra, sizeof extra, " phases %d", d->root);
    int red = d->kind == TP_K_ALLREDUCE || d->kind == TP_K_REDUCE_SCATTER || d->kind == TP_K_TREE;
    int per = d->kind == TP_K_ALLGATHER || d->kind == TP_K_REDUCE_SCATTER;
    snprintf(s, n, "%s %s %s %llu B%s%s", tp_kind_name(d->kind), d->dt < RT_NDTYPE ? rt_dtype_names[d->dt] : "?",
             red ? tp_op_names[d->op < TP_NOPS ? d->op : 0] : "-",
             (unsigned long long)(per ? d->bytes / (uint64_t)world : d->bytes), per ? " per rank" : "", extra);
}

/* A peer's op at a sequence number this rank also issued, described differently: one
 * line naming both sides in out, the lower rank first (both ranks print the same line). */
static int mismatch(tp_watch *w, const beat *p, char *out, size_t n)
{
    /* Point-to-point ops take sequence numbers on their two ranks only. */
    if ((p->flags & 2) || __atomic_load_n(&w->c->p2p, __ATOMIC_RELAXED)) return 0;
    for (uint32_t i = 0; i < p->nrecent; i++) {
        const desc *d = &p->recent[i];
        tp_trace_ent e;
        if (!tp_trace_get(w->c, d->seq, &e)) continue;
        desc m = {e.seq, e.bytes, e.kind, e.dt, e.op, e.root};
        int red = m.kind == TP_K_ALLREDUCE || m.kind == TP_K_REDUCE_SCATTER || m.kind == TP_K_TREE;
        int same = m.kind == d->kind && m.dt == d->dt && m.bytes == d->bytes && (!red || m.op == d->op) &&
                   (m.kind == TP_K_BROADCAST || m.kind == TP_K_TREE ? m.root == d->root : 1);
        if (same) continue;
        char a[96], b[96];
        int lo = w->rank < (int)p->rank;
        desc_text(a, sizeof a, lo ? &m : d, w->world);
        desc_text(b, sizeof b, lo ? d : &m, w->world);
        snprintf(out, n, "collective mismatch at #%llu: rank %d issued %s, rank %d issued %s (every rank "
                 "must issue the same collectives in the same order)", (unsigned long long)d->seq,
                 lo ? w->rank : (int)p->rank, a, lo ? (int)p->rank : w->rank, b);
        return 1;
    }
    return 0;
}

static void rank_list(char *s, size_t n, const int *r, int k)
{
    size_t o = (size_t)snprintf(s, n, "rank%s ", k > 1 ? "s" : "");
    for (int i = 0; i < k && o < n; i++) o += (size_t)snprintf(s + o, n - o, "%s%d", i ? "," : "", r[i]);
}

/* "allreduce #57": from this rank's ring, else from a peer's beat; under w->mu. */
static void op_text(tp_watch *w, uint64_t seq, char *s, size_t n)
{
    tp_trace_ent e;
    if (tp_trace_get(w->c, seq, &e)) {
        snprintf(s, n, "%s #%llu", tp_kind_name(e.kind), (unsigned long long)seq);
        return;
    }
    for (int q = 0; q < w->world; q++)
        for (uint32_t i = 0; w->ps[q].heard && i < w->ps[q].b.nrecent; i++)
            if (w->ps[q].b.recent[i].seq == seq) {
                snprintf(s, n, "%s #%llu", tp_kind_name(w->ps[q].b.recent[i].kind), (unsigned long long)seq);
                return;
            }
    snprintf(s, n, "#%llu", (unsigned long long)seq);
}

/* Who the others wait on. Waiting ranks: alive, in an op for at least min_wait s.
 * Returns 1 with the line in out (late rank(s) named), 0 when nobody waits that long.
 * *max_wait: the longest wait; *me_late: this rank is among the late. */
static int attribute(tp_watch *w, double min_wait, char *out, size_t n, double *max_wait, int *me_late)
{
    int W = w->world, nwait = 0, nlate = 0, *waiting = w->lines, *late = waiting + W, p2p = 0;
    int64_t now = port_now_ns();
    beat me;
    snapshot(w, &me, now);
    uint64_t S = 0;
    double mw = 0;
    port_mutex_lock(&w->mu);
    w->ps[w->rank] = (peer_state){1, now, me};
    for (int q = 0; q < W; q++) {
        peer_state *p = &w->ps[q];
        double age = p->heard ? (double)(now - p->at) * 1e-9 : (double)(now - w->t0) * 1e-9;
        p2p |= p->heard && (p->b.flags & 2);
        if (!p->heard || age > w->silent_s || !p->b.cur) continue;
        double wt = p->b.cur_ms * 1e-3 + age;
        if (wt < min_wait) continue;
        waiting[nwait++] = q;
        if (p->b.cur > S) S = p->b.cur;
        if (wt > mw) mw = wt;
    }
    *max_wait = mw;
    *me_late = 0;
    if (!nwait) { port_mutex_unlock(&w->mu); return 0; }
    /* Silent ranks first: a stopped process is the likeliest cause. */
    double silent_for = 0;
    for (int q = 0; q < W; q++) {
        peer_state *p = &w->ps[q];
        double age = p->heard ? (double)(now - p->at) * 1e-9 : (double)(now - w->t0) * 1e-9;
        if (!p->heard) continue; /* never heard: UDP blocked? nothing to say about it */
        if (age > w->silent_s) {
            late[nlate++] = q;
            if (age > silent_for) silent_for = age;
        }
    }
    int silent = nlate > 0;
    if (!silent && !p2p) /* positions compare only when all ops are collective */
        for (int q = 0; q < W; q++) {
            const beat *b = &w->ps[q].b;
            if (w->ps[q].heard && (b->cur ? b->cur < S : b->done < S)) late[nlate++] = q; /* not yet in op S */
        }
    char who[160], wl[160], last[64], in[64], state[160];
    if (!nlate) {
        /* Everybody is in the op: name whom each waits on (a network or peer problem). */
        size_t o = 0;
        for (int i = 0; i < nwait && o < sizeof state; i++) {
            const beat *b = &w->ps[waiting[i]].b;
            if (b->wait_peer >= 0)
                o += (size_t)snprintf(state + o, sizeof state - o, "%s%d on %d", o ? ", " : "", waiting[i],
                                      b->wait_peer);
        }
        if (!o) snprintf(state, sizeof state, "none reported");
        op_text(w, S, in, sizeof in);
        port_mutex_unlock(&w->mu);
        snprintf(out, n, "stall: no rank is behind: all ranks are in %s for up to %.1f s (rank waits: %s)", in, mw,
                 state);
        return 1;
    }
    int q0 = late[0];
    const beat *lb = &w->ps[q0].b;
    if (silent)
        snprintf(state, sizeof state, "no heartbeat for %.1f s: stopped or hung?", silent_for);
    else if (lb->cur)
        snprintf(state, sizeof state, "in %s for %.1f s", (op_text(w, lb->cur, in, sizeof in), in),
                 lb->cur_ms * 1e-3);
    else
        snprintf(state, sizeof state, "alive, outside any collective for %.1f s: long compute?", lb->idle_ms * 1e-3);
    if (lb->done) op_text(w, lb->done, last, sizeof last);
    else snprintf(last, sizeof last, "none");
    for (int i = 0; i < nlate; i++) *me_late |= late[i] == w->rank;
    rank_list(who, sizeof who, late, nlate);
    rank_list(wl, sizeof wl, waiting, nwait);
    op_text(w, S, in, sizeof in);
    port_mutex_unlock(&w->mu);
    char big[1100];
    snprintf(big, sizeof big, "stall: %s late (%s); rank %d's last heartbeat: %s finished; %s wait%s in %s for "
             "up to %.1f s", who, state, q0, last, wl, nwait == 1 ? "s" : "", in, mw);
    scopy(out, n, big);
    return 1;
}

static void check_mismatch(tp_watch *w)
{
    char line[400];
    for (int q = 0; q < w->world; q++) {
        if (q == w->rank) continue;
        port_mutex_lock(&w->mu);
        beat b = w->ps[q].b;
        int heard = w->ps[q].heard;
        port_mutex_unlock(&w->mu);
        if (!heard || !mismatch(w, &b, line, sizeof line)) continue;
        /* Nothing the program can do about it, and the data path may already hold
         * garbage: stop this rank now, every rank sees the same beats and does too. */
        port_mutex_lock(&w->mu);
        scopy(w->failed_text, sizeof w->failed_text, line);
        port_mutex_unlock(&w->mu);
        rt_error("%s", line);
        tp_trace_dump(w->c, line);
        beat me;
        snapshot(w, &me, port_now_ns());
        send_beat(w, &me);
        end_rank(w, line);
        return;
    }
}

/* Once, a few beats after the start: peers never heard from (UDP between the hosts
 * blocked?) cannot be named in a stall report; say so while it can be fixed. */
static void check_heard(tp_watch *w)
{
    if (w->heard_checked || port_now_ns() - w->t0 < (int64_t)(3e9 > 5 * w->interval_s * 1e9 ? 3e9 : 5 * w->interval_s * 1e9))
        return;
    w->heard_checked = 1;
    int *q = w->lines, n = 0;
    port_mutex_lock(&w->mu);
    for (int r = 0; r < w->world; r++)
        if (r != w->rank && !w->ps[r].heard) q[n++] = r;
    port_mutex_unlock(&w->mu);
    if (!n) return;
    char list[160];
    rank_list(list, sizeof list, q, n);
    rt_warn("stall watch: no heartbeat from %s%s (UDP to this rank's port blocked?); stalls involving %s cannot be "
            "attributed", list, n < w->world - 1 ? "" : " or any peer", n == 1 ? "it" : "them");
}

static void evaluate(tp_watch *w)
{
    char line[600];
    double mw;
    int me_late;
    check_heard(w);
    if (!attribute(w, 0.8 * w->warn_s, line, sizeof line, &mw, &me_late)) {
        w->last_warn = 0;
        return;
    }
    int64_t now = port_now_ns();
    if (me_late && mw >= w->timeout_s) {
        /* The others time out waiting for this rank: it goes too, with their line. */
        char why[700];
        snprintf(why, sizeof why, "the other ranks timed out after %g s waiting: %s", w->timeout_s, line);
        rt_error("%s", why);
        tp_trace_dump(w->c, why);
        port_mutex_lock(&w->mu);
        scopy(w->failed_text, sizeof w->failed_text, line);
        port_mutex_unlock(&w->mu);
        beat me;
        snapshot(w, &me, now);
        send_beat(w, &me);
        end_rank(w, why);
        return;
    }
    if (w->last_warn && now - w->last_warn < (int64_t)(w->warn_s * 1e9)) return;
    int first = !w->last_warn;
    w->last_warn = now;
    rt_warn("%s", line);
    if (first) tp_trace_dump(w->c, line);
}

static void *watch_thread(void *arg)
{
    tp_watch *w = arg;
    int64_t next = 0, step = (int64_t)(w->interval_s * 1e9), last_sent = 0;
    /* Between regular beats, progress is sent as it happens, at most every `quick` ns
     * (0.1 s, longer for big worlds so a rank sends at most ~32 datagrams a second):
     * the last beat of a rank that stops then says where it really was. */
    int64_t quick = (int64_t)(1e8 > w->interval_s * 1e9 * w->world / 32 ? 1e8 : w->interval_s * 1e9 * w->world / 32);
    uint64_t sent_done = 0, sent_cur = 0;
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        int64_t now = port_now_ns();
        uint64_t done = __atomic_load_n(&w->c->p_done, __ATOMIC_ACQUIRE), cur = __atomic_load_n(&w->c->p_cur, __ATOMIC_ACQUIRE);
        if (now < next && now - last_sent >= quick && quick < step && (done != sent_done || cur != sent_cur)) {
            beat me;
            snapshot(w, &me, now);
            send_beat(w, &me);
            last_sent = now, sent_done = me.done, sent_cur = me.cur;
        }
        if (now >= next) {
            beat me;
            snapshot(w, &me, now);
            send_beat(w, &me);
            last_sent = now, sent_done = me.done, sent_cur = me.cur;
            next = now + step;
            if (!w->ended) check_mismatch(w);
            if (!w->ended) evaluate(w);
            if (usr1) {
                usr1 = 0;
                tp_trace_dump(w->c, "SIGUSR1");
            }
        }
        struct pollfd pf = {w->fd, POLLIN, 0};
        int ms = (int)((next - port_now_ns()) / 1000000) + 1, cap = (int)(quick / 1000000);
        poll(&pf, 1, ms < 1 ? 1 : ms > cap ? cap : ms);
        drain(w);
    }
    return NULL;
}

int tp_watch_enabled(void) { return rt_env_flag(RT_ENV_STALL_WATCH, 1); }

int tp_watch_create(const tp_bootstrap *bs, tp_watch **out, char *err, size_t errlen)
{
    *out = NULL;
    tp_watch *w = calloc(1, sizeof *w);
    int W = bs->world;
    if (!w || !(w->addr = calloc((size_t)W, sizeof *w->addr)) || !(w->ps = calloc((size_t)W, sizeof *w->ps)) ||
        !(w->lines = calloc((size_t)W * 2 + 16, sizeof(int)))) {
        snprintf(err, errlen, "stall watch: out of memory");
        goto fail;
    }
    w->rank = bs->rank, w->world = W, w->token = bs->token_hash, w->fd = -1;
    port_mutex_init(&w->mu);
    /* Bound to all interfaces, port chosen by the kernel; peers learn ip:port below. */
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof sa;
    w->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (w->fd < 0 || bind(w->fd, (struct sockaddr *)&sa, sizeof sa) || getsockname(w->fd, (struct sockaddr *)&sa, &sl)) {
        snprintf(err, errlen, "stall watch: UDP socket: %s", strerror(errno));
        goto fail;
    }
    struct { char ip[48]; uint16_t port; } mine = {{0}, ntohs(sa.sin_port)}, *all = calloc((size_t)W, sizeof mine);
    if (!all) { snprintf(err, errlen, "stall watch: out of memory"); goto fail; }
    /* The address peers should send to: as the TCP backend's. */
    port_sock_host_ip(rt_env_str(RT_ENV_SOCKET_IFNAME), getenv("MASTER_ADDR"), mine.ip, sizeof mine.ip);
    char aerr[200] = "";
    if (bs->allgather(bs->ctx, &mine, sizeof mine, all, aerr, sizeof aerr)) {
        snprintf(err, errlen, "stall watch: address exchange: %s", aerr);
        free(all);
        goto fail;
    }
    for (int q = 0; q < W; q++) {
        all[q].ip[sizeof all[q].ip - 1] = 0;
        w->addr[q] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(all[q].port)};
        if (inet_pton(AF_INET, all[q].ip, &w->addr[q].sin_addr) != 1) w->addr[q].sin_addr.s_addr = htonl(0x7f000001);
    }
    free(all);
    *out = w;
    return 0;
fail:
    tp_watch_destroy(w);
    return -1;
}

static void set_times(tp_watch *w, double timeout_s)
{
    w->timeout_s = timeout_s;
    w->warn_s = rt_env_number(RT_ENV_STALL_WARN);
    if (w->warn_s > w->timeout_s) w->warn_s = w->timeout_s;
    w->interval_s = w->warn_s / 10 < 0.05 ? 0.05 : w->warn_s / 10 > 1 ? 1 : w->warn_s / 10;
    w->silent_s = 0.5 * w->warn_s;
}

void tp_watch_start(tp_watch *w, tp_comm *c)
{
    w->c = c;
    w->t0 = port_now_ns();
    set_times(w, c->timeout_s); /* the comm's per-op timeout is what the ranks hit */
    /* SIGUSR1 dumps the flight recorder, unless the program has its own use for it. */
    struct sigaction old;
    if (!sigaction(SIGUSR1, NULL, &old) && old.sa_handler == SIG_DFL) {
        struct sigaction sa = {0};
        sa.sa_handler = on_usr1;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, NULL);
    }
    if (!port_thread_start(&w->th, watch_thread, w)) w->started = 1;
    else rt_warn("stall watch: cannot start its thread; stalls will not be reported");
}

void tp_watch_destroy(tp_watch *w)
{
    if (!w) return;
    if (w->started) {
        __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
        port_thread_join(w->th);
    }
    if (w->fd >= 0) close(w->fd);
    if (w->ps) pthread_mutex_destroy(&w->mu);
    free(w->addr);
    free(w->ps);
    free(w->lines);
    free(w);
}

/* A protocol error (a message of the wrong size) is often the first sign of a
 * mismatch that the peer's next beat names: wait for every peer's beat to cover seq,
 * at most a few quick beats, so both ranks of the mismatch print the same line. */
static void await_peers(tp_watch *w, uint64_t seq)
{
    double quick = 0.1 > w->interval_s * w->world / 32 ? 0.1 : w->interval_s * w->world / 32;
    int64_t end = port_now_ns() + (int64_t)((3 * quick < 1 ? 3 * quick : 1) * 1e9);
    for (;;) {
        drain(w);
        int all = 1;
        port_mutex_lock(&w->mu);
        for (int q = 0; q < w->world && all; q++)
            if (q != w->rank && !(w->ps[q].heard && (w->ps[q].b.issued >= seq || (w->ps[q].b.flags & 1)))) all = 0;
        port_mutex_unlock(&w->mu);
        if (all || port_now_ns() >= end) return;
        struct pollfd pf = {w->fd, POLLIN, 0};
        poll(&pf, 1, 10);
    }
}

int tp_watch_on_fail(tp_watch *w, uint64_t seq, int timed_out, int protocol, char *out, size_t outlen)
{
    if (!w->c) return 0;
    drain(w);
    char line[600];
    double mw;
    int me_late, found = 0;
    if (protocol) await_peers(w, seq);
    /* A mismatch explains any failure (a protocol error, a hang). */
    for (int q = 0; q < w->world && !found; q++) {
        if (q == w->rank) continue;
        port_mutex_lock(&w->mu);
        beat b = w->ps[q].b;
        int heard = w->ps[q].heard;
        port_mutex_unlock(&w->mu);
        found = heard && mismatch(w, &b, out, outlen);
    }
    /* A stall explains a timeout, and a failure after a long wait (a peer that timed
     * out first closed its connections). */
    if (!found && attribute(w, timed_out ? 0 : 0.8 * w->warn_s, line, sizeof line, &mw, &me_late)) {
        snprintf(out, outlen, "%s", line);
        found = 1;
    }
    /* A peer failed first and said why (its last beat): the same words here. */
    for (int q = 0; q < w->world && !found; q++) {
        port_mutex_lock(&w->mu);
        if (q != w->rank && (w->ps[q].b.flags & 1) && w->ps[q].b.text[0]) {
            snprintf(out, outlen, "rank %d failed first: %s", q, w->ps[q].b.text);
            found = 1;
        }
        port_mutex_unlock(&w->mu);
    }
    port_mutex_lock(&w->mu);
    if (!w->failed_text[0] && found) scopy(w->failed_text, sizeof w->failed_text, out);
    port_mutex_unlock(&w->mu);
    beat me;
    snapshot(w, &me, port_now_ns());
    send_beat(w, &me);
    return found;
}
