/* The launchers' control channel: coordinated restarts across nodes (ddprt-launch
 * --nnodes M --max-restarts N), like torchrun's elastic agents meeting once per restart
 * round. Node 0's launcher listens on the control port; the others connect and say
 * HELLO (their flags must agree). Every round starts with node 0's GO (round number,
 * whether to resume, the round's job token: ranks of an older round cannot join the new
 * rendezvous). A launcher whose rank fails reports it at once; node 0 tells every other
 * launcher to STOP its ranks, waits until all have reported EXIT, then sends GO for the
 * next round or END with the job's status. Lines of text, heartbeats every second; a
 * launcher that dies or goes silent makes the others stop their ranks and exit with one
 * line naming it. Every wait has a deadline. */
#ifndef RT_LAUNCH_CTL_H
#define RT_LAUNCH_CTL_H
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lc_peer {
    int fd, node, exited, code, rank;
    int64_t last_rx;
    size_t n;
    char in[512], addr[64];
} lc_peer;

typedef struct lc {
    int master, node, nnodes, npeers, round, lost;
    int started;                          /* round 0 agreed: heartbeats are expected from now on */
    int ended, end_code;                  /* worker: node 0 sent END early (while the ranks ran) */
    int fail_node, fail_rank, fail_code; /* master: the round's chosen failure (-1: none) */
    double silence_s, wait_s;             /* peer silent this long: lost; longest wait for a decision */
    int64_t last_tx;
    lc_peer *p;                           /* master: one per other node; worker: node 0 */
    char where[128];                      /* master's address:port, for messages */
    char base[160];                       /* master: the job token rounds derive theirs from */
} lc;

typedef struct lc_decision {
    int end, code;                 /* end: exit with code */
    int round, resume, node, rank; /* otherwise: start round (restart count), resume, who failed */
    int status;
    char token[200];
} lc_decision;

enum { LC_NONE, LC_STOP, LC_LOST };

/* Meets the other launchers and agrees on round 0. base_token: the job token of node 0
 * (NULL: node 0 makes a random one). 0, or -1 after printing why. */
int lc_start(lc *c, const char *addr, int port, int node, int nnodes, int nproc, int max_restarts, int has_resume,
             const char *base_token, lc_decision *d);
/* Adds the channel's fds to pf (returns how many). */
int lc_fill(lc *c, struct pollfd *pf);
/* After poll: reads messages, sends heartbeats. LC_STOP: stop the local ranks (another
 * node failed); LC_LOST: a launcher is gone (printed), stop the ranks and exit 1. */
int lc_service(lc *c, const struct pollfd *pf, int n);
/* A local rank failed with code (reported to node 0 at once). */
void lc_local_fail(lc *c, int rank, int code);
/* The local ranks have all exited (rank: the failed one, -1 none; code its status):
 * waits for the round's outcome. 0 with d filled, or -1 (printed) when a launcher is lost. */
int lc_round_end(lc *c, int rank, int code, int max_restarts, int has_resume, const char *resume_path,
                 lc_decision *d);
/* Closes the channel; node 0 first tells the others to end with code. */
void lc_close(lc *c, int code);
#endif
