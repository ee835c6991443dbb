/* One start of the local ranks (launch.h): fork and exec each with RANK/LOCAL_RANK,
 * relay their output line by line, watch for failures and signals, stop the rest. The
 * supervision loop is a sequence of named steps over one `job`. */
#include "apps/launch/launch.h"
#include "ports/posix/port.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LINE_MAX_BYTES 8192

typedef struct { int fd, rank, to, midline; size_t n; char buf[LINE_MAX_BYTES]; } stream;
typedef struct { pid_t pid; int rank, alive, status; } child;

typedef struct job {
    const launch_opts *o;
    lc *ctl;
    int sig_fd, nproc;
    child *ch;
    stream *st;            /* 2 per rank: stdout, stderr */
    struct pollfd *pf;
    int alive, first_fail, fail_code, got_sig;
    int stopping, killed, told;
    int64_t kill_at, drain_until;
} job;

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

static void signal_all(job *j, int sig)
{
    for (int i = 0; i < j->nproc; i++)
        if (j->ch[i].alive) kill(j->ch[i].pid, sig);
}

static void set_env_int(const char *name, int v)
{
    char s[32];
    snprintf(s, sizeof s, "%d", v);
    setenv(name, s, 1);
}

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

/* Stopping starts now (once): SIGTERM went out, SIGKILL follows after the grace. */
static void begin_stop(job *j)
{
    if (j->stopping) return;
    j->stopping = 1;
    j->kill_at = port_now_ns() + (int64_t)(j->o->grace_s * 1e9);
}

/* Forks the ranks; a rank that cannot be started stops the ones that were. */
static void start_ranks(job *j, char **prog)
{
    const launch_opts *o = j->o;
    int prefix = !o->no_prefix, bind_core = o->bind_to && !strcmp(o->bind_to, "core");
    for (int i = 0; i < j->nproc; i++) {
        int po[2] = {-1, -1}, pe[2] = {-1, -1};
        if (prefix && (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC))) { perror("ddprt-launch: pipe"); break; }
        int rank = (o->group_rank >= 0 ? o->group_rank : o->node_rank) * j->nproc + i;
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
            if (bind_core) bind_rank(i, j->nproc);
            execvp(prog[0], prog);
            fprintf(stderr, "ddprt-launch: cannot run '%s': %s\n", prog[0], strerror(errno));
            _exit(127);
        }
        j->ch[i] = (child){pid, rank, 1, 0};
        j->alive++;
        if (prefix) {
            close(po[1]);
            close(pe[1]);
            j->st[2 * i] = (stream){.fd = po[0], .rank = rank, .to = 1};
            j->st[2 * i + 1] = (stream){.fd = pe[0], .rank = rank, .to = 2};
        }
    }
    if (j->alive < j->nproc) {
        signal_all(j, SIGTERM);
        begin_stop(j);
        j->first_fail = 0, j->fail_code = 1;
        if (j->ctl) lc_local_fail(j->ctl, j->first_fail, j->fail_code);
    }
}

/* SIGINT/SIGTERM to the launcher go to every rank. */
static void forward_signals(job *j)
{
    unsigned char sigs[64];
    ssize_t k = read(j->sig_fd, sigs, sizeof sigs);
    for (ssize_t i = 0; i < k; i++) {
        if (sigs[i] != SIGINT && sigs[i] != SIGTERM) continue;
        j->got_sig = sigs[i];
        signal_all(j, j->got_sig);
        begin_stop(j);
    }
}

/* Collects the ranks that exited; the first failure stops the others. Of the ranks that
 * failed since the last look, one killed by a signal is the likelier cause (the others
 * often fail on its closed connections). */
static void reap_ranks(job *j)
{
    int status, cand = -1, cand_status = 0;
    pid_t pid, cand_pid = 0;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (int i = 0; i < j->nproc; i++) {
            if (j->ch[i].pid != pid || !j->ch[i].alive) continue;
            j->ch[i].alive = 0;
            j->alive--;
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (code == 0 || j->first_fail >= 0 || j->got_sig || j->told) continue;
            if (cand < 0 || (WIFSIGNALED(status) && !WIFSIGNALED(cand_status)))
                cand = i, cand_status = status, cand_pid = pid;
        }
    if (cand < 0) return;
    j->first_fail = j->ch[cand].rank;
    j->fail_code = WIFEXITED(cand_status) ? WEXITSTATUS(cand_status) : 128 + WTERMSIG(cand_status);
    if (j->fail_code == LC_EXIT_RESTART_POINT && j->ctl) {
        /* Every rank agreed to stop after its checkpoint: the others exit on their own. */
        fprintf(stderr, "ddprt-launch: rank %d stopped at a restart point\n", j->ch[cand].rank);
        lc_local_fail(j->ctl, j->first_fail, j->fail_code);
        begin_stop(j);
        return;
    }
    if (WIFSIGNALED(cand_status))
        fprintf(stderr, "ddprt-launch: rank %d (pid %d) was killed by signal %d (%s); stopping the other ranks\n",
                j->ch[cand].rank, (int)cand_pid, WTERMSIG(cand_status), strsignal(WTERMSIG(cand_status)));
    else
        fprintf(stderr, "ddprt-launch: rank %d (pid %d) exited with status %d; stopping the other ranks\n",
                j->ch[cand].rank, (int)cand_pid, j->fail_code);
    signal_all(j, SIGTERM);
    if (j->ctl) lc_local_fail(j->ctl, j->first_fail, j->fail_code);
    begin_stop(j);
}

/* Ranks still alive after the grace get SIGKILL. */
static void escalate(job *j)
{
    if (!j->stopping || j->killed || j->alive <= 0 || port_now_ns() <= j->kill_at) return;
    for (int i = 0; i < j->nproc; i++)
        if (j->ch[i].alive)
            fprintf(stderr, "ddprt-launch: rank %d did not exit %g s after being told to stop; killing it\n",
                    j->ch[i].rank, j->o->grace_s);
    signal_all(j, SIGKILL);
    j->killed = 1;
}

/* One poll round over the signal pipe, the ranks' streams and the control channel.
 * Returns 0 when the job is over (all ranks gone, their output drained). */
static int poll_round(job *j)
{
    int open_streams = 0, n = 0;
    j->pf[n++] = (struct pollfd){j->sig_fd, POLLIN, 0};
    for (int i = 0; i < j->nproc * 2; i++)
        if (j->st[i].fd >= 0) { j->pf[n++] = (struct pollfd){j->st[i].fd, POLLIN, 0}; open_streams++; }
    if (j->alive == 0 && open_streams == 0) return 0;
    if (j->alive == 0 && !j->drain_until) j->drain_until = port_now_ns() + 2000000000LL;
    /* Grandchildren may keep a rank's pipe open after it exited: stop waiting for them. */
    if (j->drain_until && port_now_ns() > j->drain_until) return 0;
    int nstreams = n;
    if (j->ctl && !j->ctl->lost) n += lc_fill(j->ctl, j->pf + n);
    poll(j->pf, (nfds_t)n, 200);
    /* Another node's rank failed (stop ours, not a failure here) or a launcher is gone;
     * or (elastic) a node waits to join: the ranks stop at their next restart point,
     * where they look for the grow file. */
    int ev = j->ctl && !j->ctl->lost ? lc_service(j->ctl, j->pf + nstreams, n - nstreams) : LC_NONE;
    if (ev == LC_GROW && j->o->grow_file) {
        int fd = open(j->o->grow_file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        if (fd < 0) fprintf(stderr, "ddprt-launch: cannot create %s: %s\n", j->o->grow_file, strerror(errno));
        else close(fd);
    } else if (ev != LC_NONE && !j->stopping) {
        j->told = 1;
        signal_all(j, SIGTERM);
        begin_stop(j);
    }
    if (j->pf[0].revents) forward_signals(j);
    for (int p = 1, i = 0; p < nstreams; p++) {
        while (j->st[i].fd != j->pf[p].fd) i++;
        if (j->pf[p].revents) relay(&j->st[i]);
    }
    reap_ranks(j);
    escalate(j);
    return 1;
}

launch_result launch_run_ranks(char **prog, const launch_opts *o, lc *ctl, int sig_fd)
{
    job j = {.o = o, .ctl = ctl, .sig_fd = sig_fd, .nproc = o->nproc, .first_fail = -1};
    j.ch = calloc((size_t)o->nproc, sizeof *j.ch);
    j.st = calloc((size_t)o->nproc * 2, sizeof *j.st);
    j.pf = calloc((size_t)o->nproc * 2 + 1 + (ctl ? (size_t)lc_nfds(ctl) : 0), sizeof *j.pf);
    if (!j.ch || !j.st || !j.pf) {
        fprintf(stderr, "ddprt-launch: out of memory\n");
        free(j.ch), free(j.st), free(j.pf);
        return (launch_result){1, 0, -1};
    }
    for (int i = 0; i < o->nproc * 2; i++) j.st[i].fd = -1;
    start_ranks(&j, prog);
    while (poll_round(&j)) {}
    free(j.ch);
    free(j.st);
    free(j.pf);
    int status = j.first_fail >= 0 ? j.fail_code : j.got_sig ? 128 + j.got_sig : 0;
    return (launch_result){status, j.got_sig, j.first_fail};
}
