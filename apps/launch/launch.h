/* ddprt-launch internals: the parsed flags (launch_main.c) and one start of the local
 * ranks, supervised until all have exited (launch_ranks.c). */
#ifndef APPS_LAUNCH_H
#define APPS_LAUNCH_H
#include "apps/launch/launch_ctl.h"

typedef struct launch_opts {
    int nproc, nnodes, node_rank, port, no_prefix, max_restarts, ctl_port;
    int min_nodes;     /* --nnodes MIN:MAX (elastic when MIN < MAX); else = nnodes */
    int group_rank;    /* this round's place of the node among the rounds' nodes (RANK's base) */
    const char *addr, *resume, *bind_to, *nnodes_arg;
    const char *grow_file; /* elastic: created on GROW; the ranks' DDPRT_ELASTIC */
    char **prog;       /* PROGRAM ARGS..., NULL-terminated */
    double grace_s;    /* DDPRT_LAUNCH_GRACE: SIGTERM to SIGKILL */
} launch_opts;

typedef struct launch_result {
    int status; /* the job's exit status */
    int sig;    /* SIGINT/SIGTERM that stopped it (0: none) */
    int failed; /* the first rank that failed (-1: none) */
} launch_result;

/* Starts the local ranks of prog (o gives their count, node, prefixing, binding) and
 * supervises them until all have exited: relays their output, forwards the signals that
 * arrive on sig_fd (a pipe the handler writes signal numbers to), and when one rank
 * fails (or ctl says another node's did) stops the others, SIGTERM then SIGKILL after
 * o->grace_s. ctl: the launchers' control channel (NULL on one node). */
launch_result launch_run_ranks(char **prog, const launch_opts *o, lc *ctl, int sig_fd);
#endif
