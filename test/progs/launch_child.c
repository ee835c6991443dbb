/* A rank for launcher tests (test/test_launch.c).
 * usage: t-launch_child env | fail R CODE | wait | stubborn | kill R
 *  env       print the launcher's variables and one stderr line, exit 0
 *  fail R C  rank R exits with status C; the others wait for SIGTERM
 *  wait      print "ready", wait for SIGTERM, print "got SIGTERM", exit 0
 *  stubborn  print "ready", ignore SIGTERM and SIGINT, sleep (the launcher must SIGKILL)
 *  kill R    rank R kills itself with SIGKILL; the others wait for SIGTERM
 *  flaky R   first start (no DDPRT_RESTART_COUNT): as kill R; on a restart every rank
 *            prints "start N args: ..." (its extra arguments) and exits 0
 * Every wait ends after 30 s so a broken launcher cannot leave processes behind. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t got_term;
static void on_term(int sig) { (void)sig; got_term = 1; }

static const char *env(const char *n)
{
    const char *v = getenv(n);
    return v ? v : "unset";
}

static int wait_term(int rank)
{
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < 3000 && !got_term; i++) usleep(10000);
    printf("rank %d %s\n", rank, got_term ? "got SIGTERM" : "was never stopped");
    return got_term ? 0 : 9;
}

int main(int argc, char **argv)
{
    int rank = atoi(env("RANK"));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    const char *mode = argc > 1 ? argv[1] : "env";
    if (!strcmp(mode, "env")) {
        printf("RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s MASTER_ADDR=%s MASTER_PORT=%s "
               "TOKEN=%s\n", env("RANK"), env("LOCAL_RANK"), env("WORLD_SIZE"), env("LOCAL_WORLD_SIZE"),
               env("GROUP_RANK"), env("MASTER_ADDR"), env("MASTER_PORT"), getenv("DDPRT_JOB_TOKEN") ? "set" : "unset");
        fprintf(stderr, "to stderr from %d\n", rank);
        printf("no newline at the end");
        return 0;
    }
    if (!strcmp(mode, "fail") && argc > 3) {
        if (rank == atoi(argv[2])) {
            usleep(100000);
            printf("rank %d failing\n", rank);
            return atoi(argv[3]);
        }
        return wait_term(rank);
    }
    if (!strcmp(mode, "kill") && argc > 2) {
        if (rank == atoi(argv[2])) { usleep(100000); raise(SIGKILL); }
        return wait_term(rank);
    }
    if (!strcmp(mode, "flaky") && argc > 2) {
        const char *n = getenv("DDPRT_RESTART_COUNT");
        if (n) {
            printf("start %s args:", n);
            for (int i = 3; i < argc; i++) printf(" %s", argv[i]);
            printf("\n");
            return 0;
        }
        if (rank == atoi(argv[2])) { usleep(100000); raise(SIGKILL); }
        return wait_term(rank);
    }
    if (!strcmp(mode, "wait")) return wait_term(rank);
    if (!strcmp(mode, "stubborn")) {
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        printf("ready\n");
        fflush(stdout);
        sleep(30);
        return 0;
    }
    fprintf(stderr, "t-launch_child: bad arguments\n");
    return 2;
}
