/* Helpers for tests that run real processes (rendezvous, launcher): spawn with output
 * captured to files, wait with a deadline, read the output back, pick a free port. */
#ifndef T_PROC_H
#define T_PROC_H
#include <sys/types.h>

typedef struct t_proc {
    pid_t pid;
    char out[256], err[256]; /* files holding the child's stdout / stderr */
} t_proc;

/* A test whose processes leave files in t_tmpdir(): removed when the test body returns
 * (the runner ends a test with _exit, so no atexit hook would run). */
#define PTEST(name)                                 \
    static void name##_body(void);                  \
    TEST(name) { name##_body(); t_tmp_cleanup(); }  \
    static void name##_body(void)
/* Removes t_tmpdir() and the files in it (if it was created). */
void t_tmp_cleanup(void);
/* A fresh directory for this test's files (under $TMPDIR or /tmp); same path until exit
 * or t_tmp_cleanup(). t_tmpdir() is an alias kept for tests written against the first
 * version of this header (test/t_data.h has its own t_tmpdir(tag); the macro takes
 * either form so that a file may include both headers). */
const char *t_proc_tmpdir(void);
#define t_tmpdir(...) t_proc_tmpdir()
/* Unsets every launcher variable (torchrun, Slurm, Open MPI, PMI, DDPRT_*) so a test run
 * under a launcher sees a clean environment. */
void t_clean_env(void);
/* A restart test's files in t_proc_tmpdir(): dir; the data set dir/data (ntrain
 * synthetic training images and 200 test ones, gzip when gz); the paths of the
 * uninterrupted and the restarted run's checkpoints, dir/full.st and dir/el.st. */
typedef struct t_restart { char dir[400], data[420], full[450], el[450]; } t_restart;
void t_restart_files(t_restart *f, int ntrain, int gz);
/* setenv of each NAME=VALUE assignment in vars (separated by spaces). */
void t_setenv_list(const char *vars);
/* Starts argv[0] (a path) with "NAME=VALUE" entries of env (NULL-terminated, may be
 * NULL) added; name labels the output files. */
void t_spawn(t_proc *p, const char *name, char *const argv[], char *const env[]);
/* Exit status (128+sig for a signal), or -1 after killing it at the deadline. */
int t_wait(t_proc *p, double secs);
/* File contents (static buffer, rotated among 8; truncated at 16 KiB). */
const char *t_slurp(const char *path);
/* A TCP port that was free a moment ago (bound to 0 and released). */
int t_free_port(void);
/* Runs argv (a launcher, or one process) with env added (as t_spawn): exit 0 within
 * secs and, for every rank r < world, fmt filled with r and world (as "rank %d of %d
 * ok") in its stdout; t_fail otherwise. */
void t_launch_ok(char *const argv[], char *const env[], int world, const char *fmt, double secs);
/* Starts t-rdzv_rank (test/progs/rdzv_rank.c): INIT RANK WORLD plus up to two "k=v"
 * arguments (NULL = none) and extra environment. */
void t_rank_proc(t_proc *p, const char *name, const char *init, int rank, int world, const char *a1,
                 const char *a2, char *const *env);
/* Waits (20 s at most) and checks exit 0 and "of WORLD" in its output (t_fail otherwise). */
void t_rank_ok(t_proc *p, int world);
#endif
