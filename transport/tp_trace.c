/* Flight recorder: the comm's last collectives in a ring (see tp_trace.h). One small
 * mutex guards the ring: three uncontended lock pairs per op, against a reader (the
 * watch thread, a dump) that must never see half an entry. */
#include "transport/tp_comm_int.h"
#include "rt/env.h"
#include "rt/log.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const state_names[] = {"-", "issued", "running", "done", "failed"};

int tp_trace_init(tp_comm *c, char *err, size_t errlen)
{
    double n = rt_env_number(RT_ENV_TRACE_ENTRIES);
    c->ntrace = !rt_env_flag(RT_ENV_STALL_WATCH, 1) ? 0 : n < 16 ? 16 : n > (1 << 24) ? (1 << 24) : (uint32_t)n;
    c->trace = c->ntrace ? calloc(c->ntrace, sizeof *c->trace) : NULL;
    if (c->ntrace && !c->trace) {
        snprintf(err, errlen, "tp_comm_create: out of memory for %u trace entries", c->ntrace);
        return -1;
    }
    port_mutex_init(&c->trace_mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->mono0 = port_now_ns();
    c->wall0 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    return 0;
}

void tp_trace_free(tp_comm *c)
{
    if (!c->trace) return;
    pthread_mutex_destroy(&c->trace_mu);
    free(c->trace);
    c->trace = NULL;
}

void tp_trace_issue(tp_comm *c, uint64_t seq, int kind, int dt, int op, int root, uint64_t bytes, int64_t t)
{
    if (!c->ntrace) return;
    port_mutex_lock(&c->trace_mu);
    tp_trace_ent *e = &c->trace[seq % c->ntrace];
    *e = (tp_trace_ent){.kind = (uint8_t)kind, .dt = (uint8_t)dt, .op = (uint8_t)op, .state = TP_TR_ISSUED,
                        .root = root, .seq = seq, .bytes = bytes, .t_issue = t};
    port_mutex_unlock(&c->trace_mu);
}

void tp_trace_state(tp_comm *c, uint64_t seq, int state, int rc, int64_t t)
{
    if (!c->ntrace) return;
    port_mutex_lock(&c->trace_mu);
    tp_trace_ent *e = &c->trace[seq % c->ntrace];
    if (e->seq == seq) {
        e->state = (uint8_t)state;
        e->rc = rc;
        if (state == TP_TR_RUNNING) e->t_start = t;
        else e->t_end = t;
    }
    port_mutex_unlock(&c->trace_mu);
}

int tp_trace_get(const tp_comm *c, uint64_t seq, tp_trace_ent *out)
{
    tp_comm *m = (tp_comm *)c;
    if (!c->ntrace) return 0;
    port_mutex_lock(&m->trace_mu);
    *out = c->trace[seq % c->ntrace];
    port_mutex_unlock(&m->trace_mu);
    return seq && out->seq == seq;
}

static double wall(const tp_comm *c, int64_t t) { return t ? c->wall0 + (double)(t - c->mono0) * 1e-9 : 0; }

int tp_trace_dump(tp_comm *c, const char *why)
{
    const char *dir = rt_env_str(RT_ENV_TRACE_DIR);
    char path[1100], tmp[1200], host[128] = "?";
    snprintf(path, sizeof path, "%s/ddprt-trace.%d", dir ? dir : ".", c->rank);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rt_warn("flight recorder: cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    gethostname(host, sizeof host - 1);
    uint64_t issued = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
    fprintf(f, "# ddprt-trace 1\nrank %d\nworld %d\npid %d\nhost %s\nnow %.6f\nissued %llu\nwhy %s\n", c->rank,
            c->world, (int)getpid(), host, wall(c, port_now_ns()), (unsigned long long)issued, why);
    fprintf(f, "# seq kind dtype redop root bytes state rc t_issue t_start t_end (unix s; 0 = not yet)\n");
    uint64_t first = issued > c->ntrace ? issued - c->ntrace + 1 : 1;
    for (uint64_t s = first; s <= issued; s++) {
        tp_trace_ent e;
        if (!tp_trace_get(c, s, &e)) continue;
        fprintf(f, "%llu %s %s %s %d %llu %s %d %.6f %.6f %.6f\n", (unsigned long long)e.seq, tp_kind_name(e.kind),
                e.dt < RT_NDTYPE ? rt_dtype_names[e.dt] : "?", e.op < TP_NOPS ? tp_op_names[e.op] : "?", e.root,
                (unsigned long long)e.bytes, state_names[e.state <= TP_TR_FAILED ? e.state : 0], e.rc,
                wall(c, e.t_issue), wall(c, e.t_start), wall(c, e.t_end));
    }
    int bad = fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        rt_warn("flight recorder: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (!__atomic_exchange_n(&c->dumped, 1, __ATOMIC_RELAXED)) rt_warn("flight recorder: wrote %s", path);
    return 0;
}
