/* Device tests as processes (gpu_procs.h). */
#include "test/gpu/gpu_procs.h"
#include "test/gpu/g.h"
#include "test/t_data.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

void g_run_ranks(g_rank_fn fn, const void *arg, const char *tag, int world, const char *env, int env_rank, int cap_s,
                 char *out, size_t n, int *rcs)
{
    const char *dir = t_tmpdir(tag);
    pid_t pid[8];
    if (world > 8) world = 8;
    fflush(stdout), fflush(stderr);
    for (int r = 0; r < world; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            char path[600];
            snprintf(path, sizeof path, "%s/rank%d.log", dir, r);
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, 1), dup2(fd, 2);
            setvbuf(stdout, NULL, _IONBF, 0);
            if (env && r == env_rank) putenv((char *)env);
            _exit(fn(dir, r, world, arg));
        }
    }
    /* No hang: every rank is done well within its own deadline, or is killed at cap_s. */
    for (int r = 0, waited = 0; r < world; r++) {
        int s = 0;
        while (waitpid(pid[r], &s, WNOHANG) == 0) {
            if (waited++ > cap_s * 100) {
                kill(pid[r], SIGKILL);
                waitpid(pid[r], &s, 0);
                s = 0x7f00; /* exit status 127: hung */
                break;
            }
            usleep(10000);
        }
        rcs[r] = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
    }
    size_t k = 0;
    out[0] = 0;
    for (int r = 0; r < world && k < n; r++) {
        char path[600];
        snprintf(path, sizeof path, "%s/rank%d.log", dir, r);
        FILE *f = fopen(path, "r");
        if (f) k += fread(out + k, 1, n - 1 - k, f), fclose(f);
        out[k] = 0;
    }
}

int g_ipc_skip(void)
{
    if (!G_SIMT || !t_san("address")) return 0;
    t_note("skipped under ASan: the executor's IPC memory needs its guarded mappings");
    return 1;
}
