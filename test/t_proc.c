#include "test/t_proc.h"
#include "test/t.h"
#include "test/t_data.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char dir[256];

void t_tmp_cleanup(void)
{
    if (!dir[0] || !strcmp(dir, "/tmp")) return;
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[600];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d) closedir(d);
    rmdir(dir);
    dir[0] = 0;
}

const char *t_proc_tmpdir(void)
{
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/ddprt-t-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) snprintf(dir, sizeof dir, "/tmp");
    }
    return dir;
}

void t_restart_files(t_restart *f, int ntrain, int gz)
{
    snprintf(f->dir, sizeof f->dir, "%s", t_proc_tmpdir());
    snprintf(f->data, sizeof f->data, "%s/data", f->dir);
    mkdir(f->data, 0755);
    t_write_synthetic_dataset(f->data, ntrain, 200, gz);
    snprintf(f->full, sizeof f->full, "%s/full.st", f->dir);
    snprintf(f->el, sizeof f->el, "%s/el.st", f->dir);
}

void t_setenv_list(const char *vars)
{
    char buf[1024], *save = NULL;
    snprintf(buf, sizeof buf, "%s", vars);
    for (char *a = strtok_r(buf, " ", &save); a; a = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(a, '=');
        if (!eq) continue;
        *eq = 0;
        setenv(a, eq + 1, 1);
    }
}

void t_clean_env(void)
{
    static const char *const prefixes[] = {"SLURM_", "OMPI_", "PMI_", "PMIX_", "DDPRT_JOB", "DDPRT_TIMEOUT", "DDPRT_RDZV", NULL};
    static const char *const names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                        "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID", NULL};
    for (int i = 0; names[i]; i++) unsetenv(names[i]);
    /* unsetenv shifts environ, so restart the scan after every removal. */
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; *e && !again; e++)
            for (int i = 0; prefixes[i] && !again; i++)
                if (!strncmp(*e, prefixes[i], strlen(prefixes[i]))) {
                    char name[256];
                    size_t n = strcspn(*e, "=");
                    snprintf(name, sizeof name, "%.*s", (int)(n < 255 ? n : 255), *e);
                    unsetenv(name);
                    again = 1;
                }
    }
}

void t_spawn(t_proc *p, const char *name, char *const argv[], char *const env[])
{
    snprintf(p->out, sizeof p->out, "%s/%s.out", t_tmpdir(), name);
    snprintf(p->err, sizeof p->err, "%s/%s.err", t_tmpdir(), name);
    fflush(NULL);
    p->pid = fork();
    if (p->pid == 0) {
        int o = open(p->out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(p->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        for (int i = 0; env && env[i]; i++) putenv(env[i]);
        execv(argv[0], argv);
        fprintf(stderr, "cannot exec %s\n", argv[0]);
        _exit(127);
    }
}

int t_wait(t_proc *p, double secs)
{
    int64_t deadline = port_now_ns() + (int64_t)(secs * 1e9);
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0) return -1;
        if (port_now_ns() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            return -1;
        }
        port_sleep_ns(5000000);
    }
}

const char *t_slurp(const char *path)
{
    static char buf[8][16384];
    static int k;
    char *b = buf[k++ % 8];
    b[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return b;
    size_t n = fread(b, 1, sizeof buf[0] - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

/* A port below the kernel's ephemeral range (32768 up here), so that no outgoing
 * connection of a test running beside this one is given it between this probe and
 * the program's own listen (a kernel-chosen port was, once: "Address already in use").
 * Probed on 0.0.0.0, which conflicts with any listener on the port; random, so that
 * parallel tests rarely pick the same one; never one this process was given before
 * (two jobs started back to back got the same port once, neither listening yet). */
int t_free_port(void)
{
    char err[256];
    static int given[256], ngiven;
    unsigned x = (unsigned)getpid() * 2654435761u ^ (unsigned)port_now_ns() ^ (unsigned)ngiven * 40503u;
    for (int i = 0; i < 200; i++) {
        x = x * 1103515245u + 12345u;
        int port = 20000 + (int)((x >> 8) % 12000u), seen = 0;
        for (int k = 0; k < ngiven && k < 256 && !seen; k++) seen = given[k] == port;
        if (seen) continue;
        int fd = port_sock_listen("0.0.0.0", port, 1, err, sizeof err);
        if (fd < 0) continue;
        port_sock_close(fd);
        given[ngiven++ % 256] = port;
        return port;
    }
    int fd = port_sock_listen("127.0.0.1", 0, 1, err, sizeof err);
    int port = port_sock_local_port(fd);
    port_sock_close(fd);
    return port;
}

void t_rank_proc(t_proc *p, const char *name, const char *init, int rank, int world, const char *a1,
                 const char *a2, char *const *env)
{
    char rs[16], ws[16];
    snprintf(rs, sizeof rs, "%d", rank);
    snprintf(ws, sizeof ws, "%d", world);
    char *argv[] = {(char *)t_prog("t-rdzv_rank"), (char *)init, rs, ws, (char *)(a1 ? a1 : "-"),
                    (char *)(a2 ? a2 : "-"), NULL};
    t_spawn(p, name, argv, env);
}

void t_rank_ok(t_proc *p, int world)
{
    int st = t_wait(p, 20);
    CHECKF(st == 0, "%s: status %d, stderr: %s", p->out, st, t_slurp(p->err));
    char want[64];
    snprintf(want, sizeof want, "of %d", world);
    CHECKF(strstr(t_slurp(p->out), want), "%s: %s", p->out, t_slurp(p->out));
}

void t_launch_ok(char *const argv[], char *const env[], int world, const char *fmt, double secs)
{
    t_clean_env();
    t_proc p;
    t_spawn(&p, "launch", argv, env);
    int rc = t_wait(&p, secs);
    const char *out = t_slurp(p.out);
    CHECKF(rc == 0, "%s exited %d\nstdout: %s\nstderr: %s", argv[0], rc, out, t_slurp(p.err));
    for (int r = 0; r < world; r++) {
        char want[64];
        snprintf(want, sizeof want, fmt, r, world);
        CHECKF(strstr(out, want), "missing '%s' in: %s\nstderr: %s", want, out, t_slurp(p.err));
    }
}
