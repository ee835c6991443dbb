/* Helpers for tests that run real processes (rendezvous, launcher): spawn with output
 * captured to files, wait with a deadline, read the output back, pick a free port. */
#ifndef T_PROC_H
#define T_PROC_H
#include <sys/types.h>

typedef struct t_proc {
    pid_t pid;
    char out[256], err[256]; /* files holding the child's stdout / stderr */
} t_proc;

/* A fresh directory for this test's files (under $TMPDIR or /tmp); same path until exit. */
const char *t_tmpdir(void);
/* Unsets every launcher variable (torchrun, Slurm, Open MPI, PMI, DDPRT_*) so a test run
 * under a launcher sees a clean environment. */
void t_clean_env(void);
/* Starts argv[0] (a path) with "NAME=VALUE" entries of env (NULL-terminated, may be
 * NULL) added; name labels the output files. */
void t_spawn(t_proc *p, const char *name, char *const argv[], char *const env[]);
/* Exit status (128+sig for a signal), or -1 after killing it at the deadline. */
int t_wait(t_proc *p, double secs);
/* File contents (static buffer, rotated among 8; truncated at 16 KiB). */
const char *t_slurp(const char *path);
/* A TCP port that was free a moment ago (bound to 0 and released). */
int t_free_port(void);
#endif
