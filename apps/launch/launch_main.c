/* ddprt-launch: torchrun for ddprt programs. Starts N local ranks with the environment
 * torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
 * MASTER_PORT) plus a job token, relays their output with a "[rank R] " prefix per
 * line, forwards SIGINT/SIGTERM, and when one rank fails stops the others (SIGTERM,
 * then SIGKILL after a grace period) and exits with the failed rank's status, so a
 * dead rank never leaves the rest of the job spinning. */
#include "ports/posix/port.h"
#include "apps/launch/launch_ctl.h"
#include "rt/version.h"
#include "ports/posix/port_sock.h"
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LINE_MAX_BYTES 8192

typedef struct { int fd, rank, to, midline; size_t n; char buf[LINE_MAX_BYTES]; } stream;
typedef struct { pid_t pid; int rank, alive, status; } child;

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int e = errno;
    unsigned char s = (unsigned char)sig;
    if (write(sig_pipe[1], &s, 1) < 0) {} /* pipe full: a signal is already pending */
    errno = e;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ddprt-launch --nproc-per-node N [--nnodes M --node-rank R] [--master-addr A]\n"
               "                    [--master-port P] [--no-prefix] [--max-restarts N [--resume-arg PATH]]\n"
               "                    [--control-port P] [--bind-to core|none] [--version]\n"
               "                    -- PROGRAM [ARGS...]\n"
               "Starts N ranks of PROGRAM on this node with torchrun's environment (RANK, LOCAL_RANK,\n"
               "WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and DDPRT_JOB_TOKEN.\n"
               "Defaults: --nnodes 1 --node-rank 0 --master-addr $MASTER_ADDR or 127.0.0.1,\n"
               "--master-port $MASTER_PORT, else a free port (one node) or 29500.\n"
               "DDPRT_LAUNCH_GRACE: seconds between SIGTERM and SIGKILL when stopping ranks (10).\n"
               "--max-restarts N: when a rank fails, stop the local ranks and start them again, up to N\n"
               "times (DDPRT_RESTART_COUNT tells them which start it is); --resume-arg PATH: on a restart,\n"
               "when PATH exists, add --resume PATH to the program's arguments (ddprt-train --save PATH).\n"
               "With --nnodes M > 1 every node's launcher takes part in each restart: node 0's launcher\n"
               "listens on --control-port (default: master port + 1), decides each round and gives every\n"
               "round its own job token; a launcher that is lost stops the whole job.\n"
               "--bind-to core: local rank i runs on its own share of the CPUs this launcher may use\n"
               "(consecutive; with more ranks than CPUs, CPU i mod count), as mpirun binds by default;\n"
               "ranks that exchange through shared memory then never share a core. Default none.\n");
}

static _Noreturn void bad(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "ddprt-launch: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (ddprt-launch --help for usage)\n");
    exit(2);
}

static int int_arg(const char *flag, const char *v, int lo, int hi)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi) bad("%s needs an integer in range, got '%s'", flag, v ? v : "");
    return (int)x;
}

/* Writes one relayed chunk with the rank prefix at line starts, as one write() so that
 * lines of different ranks do not interleave. */
static void emit(stream *s, const char *p, size_t n, int prefix)
{
    char out[LINE_MAX_BYTES + 64];
    size_t k = 0;
    if (prefix && !s->midline) k = (size_t)snprintf(out, sizeof out, "[rank %d] ", s->rank);
    memcpy(out + k, p, n);
    k += n;
    s->midline = n == 0 || p[n - 1] != '\n';
    for (size_t w = 0; w < k;) {
        ssize_t r = write(s->to, out + w, k - w);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return; /* our own output is gone (closed pipe): drop, keep the ranks going */
        w += (size_t)r;
    }
}

/* Reads what a rank wrote; relays complete lines. Returns 0 at EOF (stream closed). */
static int relay(stream *s)
{
    ssize_t r = read(s->fd, s->buf + s->n, sizeof s->buf - s->n);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (r <= 0) {
        if (s->n) { s->buf[s->n++] = '\n'; emit(s, s->buf, s->n, 1); }
        close(s->fd);
        s->fd = -1;
        return 0;
    }
    s->n += (size_t)r;
    char *nl;
    size_t start = 0;
    while ((nl = memchr(s->buf + start, '\n', s->n - start))) {
        size_t len = (size_t)(nl - (s->buf + start)) + 1;
        emit(s, s->buf + start, len, 1);
        start += len;
    }
    if (start == 0 && s->n == sizeof s->buf) { emit(s, s->buf, s->n, 1); start = s->n; } /* a giant line */
    memmove(s->buf, s->buf + start, s->n - start);
    s->n -= start;
    return 1;
}

static void signal_all(child *c, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (c[i].alive) kill(c[i].pid, sig);
}

static void set_env_int(const char *name, int v)
{
    char s[32];
    snprintf(s, sizeof s, "%d", v);
    setenv(name, s, 1);
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

/* Starts the local ranks of prog and supervises them until all have exited. Returns
 * the job's status; *sig: the signal that stopped it (0 none); *failed: the first
 * rank that failed (-1 none). */
/* --bind-to core: local rank i of nproc on its share of the allowed CPUs. */
static void bind_rank(int i, int nproc)
{
    cpu_set_t all, mine;
    if (sched_getaffinity(0, sizeof all, &all)) return;
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) cpus[n++] = c;
    if (!n) return;
    CPU_ZERO(&mine);
    if (nproc >= n) CPU_SET(cpus[i % n], &mine);
    else
        for (int k = i * n / nproc; k < (i + 1) * n / nproc; k++) CPU_SET(cpus[k], &mine);
    if (sched_setaffinity(0, sizeof mine, &mine))
        fprintf(stderr, "ddprt-launch: cannot bind local rank %d: %s\n", i, strerror(errno));
}

static int bind_core;

static int run_ranks(char **prog, int nproc, int node_rank, int prefix, lc *ctl, int *sig_out, int *failed_out)
{
    child *ch = calloc((size_t)nproc, sizeof *ch);
    stream *st = calloc((size_t)nproc * 2, sizeof *st);
    struct pollfd *pf = calloc((size_t)nproc * 2 + 1 + (ctl ? (size_t)ctl->npeers : 0), sizeof *pf);
    if (!ch || !st || !pf) { fprintf(stderr, "ddprt-launch: out of memory\n"); return 1; }
    for (int i = 0; i < nproc * 2; i++) st[i].fd = -1;
    int alive = 0;
    for (int i = 0; i < nproc; i++) {
        int po[2] = {-1, -1}, pe[2] = {-1, -1};
        if (prefix && (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC))) { perror("ddprt-launch: pipe"); break; }
        int rank = node_rank * nproc + i;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) { perror("ddprt-launch: fork"); break; }
        if (pid == 0) {
            signal(SIGPIPE, SIG_DFL);
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGCHLD, SIG_DFL);
            if (prefix) { dup2(po[1], 1); dup2(pe[1], 2); }
            set_env_int("RANK", rank);
            set_env_int("LOCAL_RANK", i);
            if (bind_core) bind_rank(i, nproc);
            execvp(prog[0], prog);
            fprintf(stderr, "ddprt-launch: cannot run '%s': %s\n", prog[0], strerror(errno));
            _exit(127);
        }
        ch[i] = (child){pid, rank, 1, 0};
        alive++;
        if (prefix) {
            close(po[1]);
            close(pe[1]);
            st[2 * i] = (stream){.fd = po[0], .rank = rank, .to = 1};
            st[2 * i + 1] = (stream){.fd = pe[0], .rank = rank, .to = 2};
        }
    }

    int first_fail = -1, fail_code = 0, got_sig = 0, stopping = alive < nproc, killed = 0, told = 0;
    double grace = getenv("DDPRT_LAUNCH_GRACE") ? atof(getenv("DDPRT_LAUNCH_GRACE")) : 10;
    int64_t kill_at = stopping ? port_now_ns() + (int64_t)(grace * 1e9) : 0, drain_until = 0;
    if (stopping) {
        signal_all(ch, nproc, SIGTERM);
        first_fail = 0, fail_code = 1;
        if (ctl) lc_local_fail(ctl, first_fail, fail_code);
    }
    for (;;) {
        int open_streams = 0, n = 0;
        pf[n++] = (struct pollfd){sig_pipe[0], POLLIN, 0};
        for (int i = 0; i < nproc * 2; i++)
            if (st[i].fd >= 0) { pf[n++] = (struct pollfd){st[i].fd, POLLIN, 0}; open_streams++; }
        if (alive == 0 && open_streams == 0) break;
        if (alive == 0 && !drain_until) drain_until = port_now_ns() + 2000000000LL;
        /* Grandchildren may keep a rank's pipe open after it exited: stop waiting for them. */
        if (drain_until && port_now_ns() > drain_until) break;
        int nstreams = n;
        if (ctl && !ctl->lost) n += lc_fill(ctl, pf + n);
        poll(pf, (nfds_t)n, 200);
        /* Another node's rank failed (stop ours, not a failure here) or a launcher is gone. */
        if (ctl && !ctl->lost && lc_service(ctl, pf + nstreams, n - nstreams) != LC_NONE && !stopping) {
            told = 1, stopping = 1;
            signal_all(ch, nproc, SIGTERM);
            kill_at = port_now_ns() + (int64_t)(grace * 1e9);
        }
        n = nstreams;
        if (pf[0].revents) {
            unsigned char sigs[64];
            ssize_t k = read(sig_pipe[0], sigs, sizeof sigs);
            for (ssize_t j = 0; j < k; j++) {
                if (sigs[j] != SIGINT && sigs[j] != SIGTERM) continue;
                got_sig = sigs[j];
                signal_all(ch, nproc, got_sig);
                if (!stopping) { stopping = 1; kill_at = port_now_ns() + (int64_t)(grace * 1e9); }
            }
        }
        for (int j = 1, i = 0; j < n; j++) {
            while (st[i].fd != pf[j].fd) i++;
            if (pf[j].revents) relay(&st[i]);
        }
        int status;
        pid_t pid;
        /* Of the ranks that failed since the last look, one killed by a signal is the
         * likelier cause (the others often fail on its closed connections). */
        int cand = -1, cand_status = 0;
        pid_t cand_pid = 0;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < nproc; i++) {
                if (ch[i].pid != pid || !ch[i].alive) continue;
                ch[i].alive = 0;
                alive--;
                int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                if (code == 0 || first_fail >= 0 || got_sig || told) continue;
                if (cand < 0 || (WIFSIGNALED(status) && !WIFSIGNALED(cand_status)))
                    cand = i, cand_status = status, cand_pid = pid;
            }
        }
        if (cand >= 0) {
            first_fail = ch[cand].rank;
            fail_code = WIFEXITED(cand_status) ? WEXITSTATUS(cand_status) : 128 + WTERMSIG(cand_status);
            if (WIFSIGNALED(cand_status))
                fprintf(stderr, "ddprt-launch: rank %d (pid %d) was killed by signal %d (%s); stopping the other ranks\n",
                        ch[cand].rank, (int)cand_pid, WTERMSIG(cand_status), strsignal(WTERMSIG(cand_status)));
            else
                fprintf(stderr, "ddprt-launch: rank %d (pid %d) exited with status %d; stopping the other ranks\n",
                        ch[cand].rank, (int)cand_pid, fail_code);
            signal_all(ch, nproc, SIGTERM);
            if (ctl) lc_local_fail(ctl, first_fail, fail_code);
            if (!stopping) { stopping = 1; kill_at = port_now_ns() + (int64_t)(grace * 1e9); }
        }
        if (stopping && !killed && alive > 0 && port_now_ns() > kill_at) {
            for (int i = 0; i < nproc; i++)
                if (ch[i].alive) fprintf(stderr, "ddprt-launch: rank %d did not exit %g s after being told to stop; killing it\n",
                                         ch[i].rank, grace);
            signal_all(ch, nproc, SIGKILL);
            killed = 1;
        }
    }
    free(ch);
    free(st);
    free(pf);
    *sig_out = got_sig;
    *failed_out = first_fail;
    if (first_fail >= 0) return fail_code;
    return got_sig ? 128 + got_sig : 0;
}

int main(int argc, char **argv)
{
    int nproc = -1, nnodes = 1, node_rank = 0, port = -1, prefix = 1, a = 1, max_restarts = 0, ctl_port = -1;
    const char *addr = NULL, *resume = NULL;
    for (; a < argc; a++) {
        char flag[64];
        const char *v = NULL, *s = argv[a];
        if (!strcmp(s, "--")) { a++; break; }
        if (strncmp(s, "--", 2)) break; /* first non-flag: the program (torchrun allows this) */
        /* --flag=value and --flag value; torch.distributed.launch's underscores too. */
        snprintf(flag, sizeof flag, "%s", s);
        for (char *c = flag + 2; *c; c++) if (*c == '_') *c = '-';
        char *eq = strchr(flag, '=');
        if (eq) { *eq = 0; v = s + (eq - flag) + 1; }
        int takes = strcmp(flag, "--no-prefix") && strcmp(flag, "--help") && strcmp(flag, "-h") &&
                    strcmp(flag, "--version");
        if (takes && !v) {
            if (a + 1 >= argc) bad("%s needs a value%s", flag, "");
            v = argv[++a];
        }
        if (!strcmp(flag, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(flag, "--version")) { printf("ddprt-launch (ddprt) %s\n", DDPRT_VERSION); return 0; }
        else if (!strcmp(flag, "--nproc-per-node")) nproc = int_arg(flag, v, 1, 4096);
        else if (!strcmp(flag, "--nnodes")) nnodes = int_arg(flag, v, 1, 65536);
        else if (!strcmp(flag, "--node-rank")) node_rank = int_arg(flag, v, 0, 65535);
        else if (!strcmp(flag, "--master-addr")) addr = v;
        else if (!strcmp(flag, "--master-port")) port = int_arg(flag, v, 1, 65535);
        else if (!strcmp(flag, "--no-prefix")) prefix = 0;
        else if (!strcmp(flag, "--max-restarts")) max_restarts = int_arg(flag, v, 0, 1000000);
        else if (!strcmp(flag, "--resume-arg")) resume = v;
        else if (!strcmp(flag, "--control-port")) ctl_port = int_arg(flag, v, 1, 65535);
        else if (!strcmp(flag, "--bind-to")) {
            if (strcmp(v, "core") && strcmp(v, "none")) bad("--bind-to takes core or none, not '%s'%s", v, "");
            bind_core = !strcmp(v, "core");
        }
        else bad("unknown flag '%s'%s", s, "");
    }
    if (nproc < 0) bad("--nproc-per-node N is required%s%s", "", "");
    if (a >= argc) bad("no program given: ddprt-launch --nproc-per-node N -- PROGRAM [ARGS...]%s%s", "", "");
    if (node_rank >= nnodes) {
        char r[16], m[16];
        snprintf(r, sizeof r, "%d", node_rank);
        snprintf(m, sizeof m, "%d", nnodes);
        bad("--node-rank %s is out of range for --nnodes %s", r, m);
    }
    if (nnodes * nproc > 65536) bad("too many ranks%s%s", "", "");
    char **prog = argv + a;

    if (!addr) addr = getenv("MASTER_ADDR") && *getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "127.0.0.1";
    const char *penv = getenv("MASTER_PORT");
    if (port < 0 && penv && *penv) port = int_arg("MASTER_PORT", penv, 1, 65535);
    if (port < 0 && nnodes == 1) {
        /* One node, no port asked for: take a free one, so two jobs on one machine do not
         * collide on 29500 ("Address already in use"). */
        char err[256];
        int fd = port_sock_listen(NULL, 0, 1, err, sizeof err);
        port = fd >= 0 ? port_sock_local_port(fd) : 29500;
        port_sock_close(fd);
    }
    if (port < 0) port = 29500;
    const char *tok = getenv("DDPRT_JOB_TOKEN");
    if ((!tok || !*tok) && nnodes == 1) {
        /* A random token per launch: a stray rank of another job cannot join this one. */
        unsigned char r[16] = {0};
        char hex[40];
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, r, sizeof r) != (ssize_t)sizeof r) {
            uint64_t t = (uint64_t)port_now_ns() ^ (uint64_t)getpid() << 40;
            memcpy(r, &t, sizeof t);
        }
        if (fd >= 0) close(fd);
        for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", r[i]);
        setenv("DDPRT_JOB_TOKEN", hex, 1);
    }
    setenv("MASTER_ADDR", addr, 1);
    set_env_int("MASTER_PORT", port);
    set_env_int("WORLD_SIZE", nnodes * nproc);
    set_env_int("LOCAL_WORLD_SIZE", nproc);
    set_env_int("GROUP_RANK", node_rank);

    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK)) { perror("ddprt-launch: pipe"); return 1; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int restarts = 0;
    char **args = prog;
    const char *base_tok = getenv("DDPRT_JOB_TOKEN");
    char base[160] = "", rtok[200];
    snprintf(base, sizeof base, "%s", base_tok ? base_tok : "");
    lc ctl, *c = NULL;
    if (nnodes > 1 && max_restarts > 0) {
        /* Restarts across nodes are decided together on a control channel next to the
         * rendezvous port; it also carries one job token to every node. */
        lc_decision d;
        if (ctl_port < 0) ctl_port = port < 65535 ? port + 1 : port - 1;
        if (lc_start(&ctl, addr, ctl_port, node_rank, nnodes, nproc, max_restarts, resume != NULL, base, &d)) return 1;
        c = &ctl;
        setenv("DDPRT_JOB_TOKEN", d.token, 1);
    }
    for (;;) {
        int sig = 0, failed = -1, rc = run_ranks(args, nproc, node_rank, prefix, c, &sig, &failed);
        if (args != prog) free(args);
        args = prog;
        if (c) {
            lc_decision d;
            if (c->lost || sig || lc_round_end(c, failed, failed >= 0 ? rc : 0, max_restarts, resume != NULL,
                                               resume ? resume : "", &d)) {
                int st = sig ? 128 + sig : rc ? rc : 1;
                lc_close(c, st);
                return st;
            }
            if (d.end) {
                lc_close(c, d.code);
                return d.code;
            }
            restarts = d.round;
            set_env_int("DDPRT_RESTART_COUNT", restarts);
            setenv("DDPRT_JOB_TOKEN", d.token, 1);
            if (d.resume && resume && (args = restart_args(prog, resume)) == NULL) return 1;
            fprintf(stderr, "ddprt-launch: node %d: restart %d of %d after rank %d failed (status %d) on node %d%s%s\n",
                    node_rank, restarts, max_restarts, d.rank, d.status, d.node, args != prog ? "; resuming from " : "",
                    args != prog ? resume : "");
            continue;
        }
        if (rc == 0 || sig || failed < 0 || restarts >= max_restarts) return rc;
        restarts++;
        set_env_int("DDPRT_RESTART_COUNT", restarts);
        /* A rank died: start the local ranks again, resuming from the newest checkpoint
         * when --resume-arg names one that exists. Each start gets its own job token, so a
         * rank of the previous start can never join the new rendezvous. */
        if (*base) {
            snprintf(rtok, sizeof rtok, "%s-r%d", base, restarts);
            setenv("DDPRT_JOB_TOKEN", rtok, 1);
        }
        if (resume && !access(resume, R_OK) && (args = restart_args(prog, resume)) == NULL) return rc;
        fprintf(stderr, "ddprt-launch: restart %d of %d after rank %d failed (status %d)%s%s\n", restarts, max_restarts,
                failed, rc, args != prog ? "; resuming from " : "", args != prog ? resume : "");
    }
}
