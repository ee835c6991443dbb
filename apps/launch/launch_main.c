/* ddprt-launch: torchrun for ddprt programs. Starts N local ranks with the environment
 * torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
 * MASTER_PORT) plus a job token, relays their output with a "[rank R] " prefix per
 * line, forwards SIGINT/SIGTERM, and when one rank fails stops the others (SIGTERM,
 * then SIGKILL after a grace period) and exits with the failed rank's status, so a
 * dead rank never leaves the rest of the job spinning.
 *
 * This file: the flags, the job's environment and the restart rounds; one start of
 * the ranks and its supervision: launch_ranks.c. */
#include "apps/launch/launch.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/args.h"
#include "rt/env.h"
#include "rt/version.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define L(n, t, dom, field, lo, hi, ch, h) {n, 0, t, dom, offsetof(launch_opts, field), lo, hi, ch, NULL, h, 0, NULL}
static const rt_arg flags[] = {
    L("nproc-per-node", RT_ARG_INT, RT_ARG_RANGE, nproc, 1, 4096, NULL, "ranks to start on this node (required)"),
    L("nnodes", RT_ARG_STR, RT_ARG_ANY, nnodes_arg, 0, 0, NULL,
      "nodes in the job, or MIN:MAX for an elastic job (torchrun's form; default: 1)"),
    L("node-rank", RT_ARG_INT, RT_ARG_RANGE, node_rank, 0, 65535, NULL, "this node's index (default: 0)"),
    L("master-addr", RT_ARG_STR, RT_ARG_ANY, addr, 0, 0, NULL, "rank 0's host (default: $MASTER_ADDR or 127.0.0.1)"),
    L("master-port", RT_ARG_INT, RT_ARG_RANGE, port, 1, 65535, NULL,
      "rendezvous port (default: $MASTER_PORT, else a free port on one node, 29500 on several)"),
    L("no-prefix", RT_ARG_FLAG, RT_ARG_ANY, no_prefix, 0, 0, NULL, "relay the ranks' output without \"[rank R] \""),
    L("max-restarts", RT_ARG_INT, RT_ARG_RANGE, max_restarts, 0, 1000000, NULL,
      "when a rank fails, stop the local ranks and start them again, up to N times"),
    L("resume-arg", RT_ARG_STR, RT_ARG_ANY, resume, 0, 0, NULL,
      "with --max-restarts: on a restart, when PATH exists, add --resume PATH to the program's arguments"),
    L("control-port", RT_ARG_INT, RT_ARG_RANGE, ctl_port, 1, 65535, NULL,
      "with --nnodes > 1 and --max-restarts: node 0's restart channel (default: master port + 1)"),
    L("bind-to", RT_ARG_STR, RT_ARG_ANY, bind_to, 0, 0, "core|none", "core: each local rank on its own CPUs (default: none)"),
};
static const rt_args spec = {"ddprt-launch", flags, RT_NARGS(flags), -1, 1};

static const char head[] =
    "usage: ddprt-launch --nproc-per-node N [flags] [--] PROGRAM [ARGS...]\n\n"
    "Starts N ranks of PROGRAM on this node with torchrun's environment (RANK, LOCAL_RANK,\n"
    "WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and DDPRT_JOB_TOKEN.\n\n";
static const char tail[] =
    "\nDDPRT_LAUNCH_GRACE: seconds between SIGTERM and SIGKILL when stopping ranks (10).\n"
    "--max-restarts: DDPRT_RESTART_COUNT tells the ranks which start it is. With --nnodes M > 1\n"
    "every node's launcher takes part in each restart: node 0's launcher listens on --control-port,\n"
    "decides each round and gives every round its own job token; a launcher that is lost stops\n"
    "the whole job. --nnodes MIN:MAX: an elastic job (docs/reliability.md): a lost node ends the\n"
    "round and the job goes on with the nodes left (at least MIN) from --resume-arg's checkpoint; a\n"
    "node that joins enters at the ranks' next checkpoint. --bind-to core: consecutive CPUs of those\n"
    "this launcher may use (with more ranks than CPUs, CPU i mod count), as mpirun binds by\n"
    "default; ranks that exchange through shared memory then never share a core.\n";

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int e = errno;
    unsigned char s = (unsigned char)sig;
    if (write(sig_pipe[1], &s, 1) < 0) {} /* pipe full: a signal is already pending */
    errno = e;
}

static void set_env_int(const char *name, int v)
{
    char s[32];
    snprintf(s, sizeof s, "%d", v);
    setenv(name, s, 1);
}

static int usage_error(const char *msg)
{
    fprintf(stderr, "ddprt-launch: error: %s (see ddprt-launch --help)\n", msg);
    return 2;
}

/* The flags, checked together (a flag that would be ignored is an error, not a
 * surprise later); pos (argc + 1 entries) receives the program and its arguments. -1
 * to go on, else the exit status. */
static int parse_args(int argc, char **argv, launch_opts *o, char **pos)
{
    char msg[256];
    int npos = 0;
    *o = (launch_opts){.nproc = -1, .nnodes = 1, .port = -1, .ctl_port = -1, .grace_s = 10, .group_rank = -1};
    int rc = rt_args_main(&spec, o, argc, argv, pos, &npos, head, tail);
    if (rc >= 0) return rc;
    o->prog = pos;
    if (o->nproc < 0) return usage_error("--nproc-per-node N is required");
    if (o->nnodes_arg) { /* N, or MIN:MAX */
        char *end, *e2;
        long lo = strtol(o->nnodes_arg, &end, 10), hi = *end == ':' ? strtol(end + 1, &e2, 10) : lo;
        if (end == o->nnodes_arg || (*end && (*end != ':' || !*(end + 1) || *e2)) || lo < 1 || hi < lo || hi > 65536) {
            snprintf(msg, sizeof msg, "--nnodes %s: expected N or MIN:MAX with 1 <= MIN <= MAX <= 65536", o->nnodes_arg);
            return usage_error(msg);
        }
        o->nnodes = (int)hi, o->min_nodes = (int)lo;
    }
    if (o->addr && !*o->addr) return usage_error("--master-addr '': give rank 0's host name or address");
    if (!o->min_nodes) o->min_nodes = o->nnodes;
    if (!npos) return usage_error("no program given: ddprt-launch --nproc-per-node N -- PROGRAM [ARGS...]");
    if (o->node_rank >= o->nnodes) {
        snprintf(msg, sizeof msg, "--node-rank %d is out of range for --nnodes %d", o->node_rank, o->nnodes);
        return usage_error(msg);
    }
    if ((long)o->nnodes * o->nproc > 65536) return usage_error("too many ranks (--nnodes x --nproc-per-node > 65536)");
    int el = o->min_nodes < o->nnodes;
    if (o->resume && !o->max_restarts && !el)
        return usage_error("--resume-arg is used on restarts only: give --max-restarts N (or --nnodes MIN:MAX) too");
    if (o->ctl_port > 0 && !(o->nnodes > 1 && (o->max_restarts > 0 || el)))
        return usage_error("--control-port is used only with --nnodes > 1 and --max-restarts N, or --nnodes MIN:MAX");
    o->grace_s = rt_env_num(RT_ENV_LAUNCH_GRACE, o->grace_s); /* its domain: rt_env_check */
    return -1;
}

/* MASTER_ADDR/PORT, the world and a job token in the environment every rank inherits.
 * 0, or the exit status after one line. */
static int job_environment(launch_opts *o)
{
    if (!o->addr) o->addr = getenv("MASTER_ADDR") && *getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "127.0.0.1";
    /* Every node's launcher, node 0's too: a name that does not resolve is one line now,
     * not a rendezvous that waits out its timeout. */
    char e[300];
    if (port_sock_resolve_check(o->addr, port_now_ns() + 3000000000LL, e, sizeof e)) {
        fprintf(stderr, "ddprt-launch: error: --master-addr: %s\n", e);
        return 2;
    }
    const char *penv = getenv("MASTER_PORT");
    if (o->port < 0 && penv && *penv) {
        char *end;
        long p = strtol(penv, &end, 10);
        if (*end || p < 1 || p > 65535) {
            fprintf(stderr, "ddprt-launch: error: MASTER_PORT=%s: expected a port 1..65535\n", penv);
            return 2;
        }
        o->port = (int)p;
    }
    if (o->port < 0 && o->nnodes == 1) {
        /* One node, no port asked for: take a free one, so two jobs on one machine do not
         * collide on 29500 ("Address already in use"). */
        char err[256];
        int fd = port_sock_listen(NULL, 0, 1, err, sizeof err);
        o->port = fd >= 0 ? port_sock_local_port(fd) : 29500;
        port_sock_close(fd);
    }
    if (o->port < 0) o->port = 29500;
    const char *tok = rt_env_str(RT_ENV_JOB_TOKEN);
    if (!tok && o->nnodes == 1) {
        /* A random token per launch: a stray rank of another job cannot join this one. */
        char hex[40];
        lc_random_token(hex);
        setenv("DDPRT_JOB_TOKEN", hex, 1);
    } else if (!tok) {
        /* Several nodes and no token: one that every launcher of this job derives alike
         * (rendezvous address, port, node count), so rank 0 tells a rank of its own job
         * started with other flags (--nproc-per-node: named at once) from a stranger's
         * (refused), instead of waiting for the deadline. */
        char key[400], hex[40];
        snprintf(key, sizeof key, "ddprt-job %s %d %d %d", o->addr, o->port, o->min_nodes, o->nnodes);
        uint64_t h = 1469598103934665603ULL;
        for (const char *c = key; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        snprintf(hex, sizeof hex, "nodes-%016llx", (unsigned long long)h);
        setenv("DDPRT_JOB_TOKEN", hex, 1);
    }
    setenv("MASTER_ADDR", o->addr, 1);
    set_env_int("MASTER_PORT", o->port);
    set_env_int("WORLD_SIZE", o->nnodes * o->nproc);
    set_env_int("LOCAL_WORLD_SIZE", o->nproc);
    set_env_int("GROUP_RANK", o->node_rank);
    return 0;
}

/* Signals become bytes on a pipe that the supervision loop polls. */
static int install_signals(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK)) { perror("ddprt-launch: pipe"); return -1; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* prog's argv with "--resume PATH" appended (for a restart), or NULL. */
static char **restart_args(char **prog, const char *path)
{
    int n = 0;
    while (prog[n]) n++;
    char **a = calloc((size_t)n + 3, sizeof *a);
    if (!a) return NULL;
    memcpy(a, prog, sizeof *a * (size_t)n);
    a[n] = "--resume";
    a[n + 1] = (char *)path;
    return a;
}

/* Several nodes: every round's outcome is decided by node 0 on the control channel
 * next to the rendezvous port, which also carries one job token to every node. */
static int rounds_on_nodes(const launch_opts *o)
{
    lc ctl;
    lc_decision d;
    int ctl_port = o->ctl_port > 0 ? o->ctl_port : o->port < 65535 ? o->port + 1 : o->port - 1;
    const char *base = rt_env_str(RT_ENV_JOB_TOKEN);
    int el = o->min_nodes < o->nnodes;
    lc_cfg cfg = {o->addr, ctl_port, o->node_rank, o->nnodes, o->min_nodes, o->nproc, o->max_restarts,
                  o->resume != NULL, base ? base : ""};
    if (lc_start(&ctl, &cfg, &d)) return 1;
    if (d.end) return d.code; /* elastic: the job ended before this node could join */
    launch_opts ro = *o;
    char grow[400];
    if (el) { /* the ranks stop at their next restart point once it exists */
        const char *tmp = getenv("TMPDIR");
        snprintf(grow, sizeof grow, "%s/ddprt-grow.%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
        unlink(grow);
        setenv("DDPRT_ELASTIC", grow, 1);
        ro.grow_file = grow;
    }
    char **args = o->prog;
    int64_t t0 = port_now_ns();
    /* A node joining a running job starts from its newest checkpoint, as the others do. */
    if (d.resume && o->resume && (args = restart_args(o->prog, o->resume)) == NULL) return 1;
    for (;;) {
        /* This round's world: its nodes in node order (the same as --node-rank unless elastic). */
        setenv("DDPRT_JOB_TOKEN", d.token, 1);
        if (d.round) set_env_int("DDPRT_RESTART_COUNT", d.round);
        set_env_int("WORLD_SIZE", d.nmembers * o->nproc);
        set_env_int("GROUP_RANK", d.group_rank);
        ro.group_rank = d.group_rank;
        if (el)
            fprintf(stderr, "ddprt-launch: node %d: round %d: %d node(s), ranks %d..%d of %d%s%s (%.1f s after start)\n",
                    o->node_rank, d.round, d.nmembers, d.group_rank * o->nproc, (d.group_rank + 1) * o->nproc - 1,
                    d.nmembers * o->nproc, args != o->prog ? ", resuming from " : "", args != o->prog ? o->resume : "",
                    (double)(port_now_ns() - t0) / 1e9);
        launch_result r = launch_run_ranks(args, &ro, &ctl, sig_pipe[0]);
        if (el) unlink(grow); /* served (or the round ended otherwise) */
        if (args != o->prog) free(args);
        args = o->prog;
        if (ctl.lost || r.sig || lc_round_end(&ctl, r.failed, r.failed >= 0 ? r.status : 0, o->resume ? o->resume : "",
                                              &d)) {
            int st = r.sig ? 128 + r.sig : r.status ? r.status : 1;
            lc_close(&ctl, st);
            return st;
        }
        if (d.end) {
            lc_close(&ctl, d.code);
            return d.code;
        }
        if (d.resume && o->resume && (args = restart_args(o->prog, o->resume)) == NULL) return 1;
        if (el && strcmp(d.why, "rank failed"))
            fprintf(stderr, "ddprt-launch: node %d: new membership after %s: %d node(s)%s%s\n", o->node_rank,
                    d.why[0] ? d.why : "a change", d.nmembers, args != o->prog ? "; resuming from " : "",
                    args != o->prog ? o->resume : "");
        else
            fprintf(stderr, "ddprt-launch: node %d: restart %d of %d after rank %d failed (status %d) on node %d%s%s\n",
                    o->node_rank, ctl.master ? ctl.restarts : d.round, o->max_restarts, d.rank, d.status, d.node,
                    args != o->prog ? "; resuming from " : "", args != o->prog ? o->resume : "");
    }
}

/* One node: a failed rank restarts the local ranks, up to --max-restarts times. */
static int rounds_here(const launch_opts *o)
{
    const char *base_tok = rt_env_str(RT_ENV_JOB_TOKEN);
    char base[160], rtok[200];
    snprintf(base, sizeof base, "%s", base_tok ? base_tok : "");
    char **args = o->prog;
    for (int restarts = 0;;) {
        launch_result r = launch_run_ranks(args, o, NULL, sig_pipe[0]);
        if (args != o->prog) free(args);
        args = o->prog;
        if (r.status == 0 || r.sig || r.failed < 0 || restarts >= o->max_restarts) return r.status;
        restarts++;
        set_env_int("DDPRT_RESTART_COUNT", restarts);
        /* A rank died: start the local ranks again, resuming from the newest checkpoint
         * when --resume-arg names one that exists. Each start gets its own job token, so a
         * rank of the previous start can never join the new rendezvous. */
        if (*base) {
            snprintf(rtok, sizeof rtok, "%s-r%d", base, restarts);
            setenv("DDPRT_JOB_TOKEN", rtok, 1);
        }
        if (o->resume && !access(o->resume, R_OK) && (args = restart_args(o->prog, o->resume)) == NULL) return r.status;
        fprintf(stderr, "ddprt-launch: restart %d of %d after rank %d failed (status %d)%s%s\n", restarts,
                o->max_restarts, r.failed, r.status, args != o->prog ? "; resuming from " : "",
                args != o->prog ? o->resume : "");
    }
}

/* The job from its flags; the exit status. */
static int launch(int argc, char **argv, char **pos)
{
    launch_opts o;
    char err[512];
    int rc = parse_args(argc, argv, &o, pos);
    if (rc >= 0) return rc;
    if (rt_env_check(err, sizeof err)) {
        fprintf(stderr, "ddprt-launch: error: %s\n", err);
        return 2;
    }
    if ((rc = job_environment(&o))) return rc;
    if (install_signals()) return 1;
    return o.nnodes > 1 && (o.max_restarts > 0 || o.min_nodes < o.nnodes) ? rounds_on_nodes(&o) : rounds_here(&o);
}

int main(int argc, char **argv)
{
    char **pos = calloc((size_t)argc + 1, sizeof *pos);
    int rc = pos ? launch(argc, argv, pos) : 1;
    free(pos);
    return rc;
}
