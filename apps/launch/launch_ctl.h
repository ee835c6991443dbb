/* The launchers' control channel: coordinated restarts across nodes (ddprt-launch
 * --nnodes M --max-restarts N), like torchrun's elastic agents meeting once per restart
 * round. Node 0's launcher listens on the control port; the others connect and say
 * HELLO (their flags must agree). Every round starts with node 0's GO (round number,
 * whether to resume, the round's membership and job token: ranks of an older round
 * cannot join the new rendezvous). A launcher whose rank fails reports it at once;
 * node 0 tells every other launcher to STOP its ranks, waits until all have reported
 * EXIT, then sends GO for the next round or END with the job's status. Lines of text,
 * heartbeats every second; a launcher that dies or goes silent makes the others stop
 * their ranks and exit with one line naming it. Every wait has a deadline.
 *
 * Elastic (--nnodes MIN:MAX, torchrun's form): the job starts with the nodes present
 * (at least MIN; the missing are named), and node 0 keeps its port open. A lost node
 * (control connection closed, or silent) ends the round: the survivors' ranks are
 * stopped and the next round runs on the nodes left, resuming from the newest
 * checkpoint, if at least MIN remain. A node that (re)joins waits for the next restart
 * point: node 0 sends GROW, every launcher creates its ranks' DDPRT_ELASTIC file, and
 * they stop together after their next checkpoint (ddprt-train exits 75),
 * and the next round includes it. Membership changes do not count as restarts. Ranks
 * are numbered by the nodes' order in the round (GROUP_RANK), so the world stays
 * dense. */
#ifndef RT_LAUNCH_CTL_H
#define RT_LAUNCH_CTL_H
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#define LC_EXIT_RESTART_POINT 75 /* a rank's status when it stopped at a restart point */

typedef struct lc_peer {
    int fd, node, exited, code, rank;
    int member;                           /* master: in the running round */
    int64_t last_rx;
    size_t n;
    char in[512], addr[64];
} lc_peer;

typedef struct lc {
    int master, node, nnodes, npeers, round, lost;
    int min_nodes;                        /* elastic when < nnodes */
    int started;                          /* round 0 agreed: heartbeats are expected from now on */
    int ended, end_code;                  /* worker: node 0 sent END early (while the ranks ran) */
    int fail_node, fail_rank, fail_code; /* master: the round's chosen failure (-1: none) */
    int restarts;                         /* master: rounds that followed a failure (not a membership change) */
    int changed;                          /* master, elastic: the round lost a member */
    int lfd;                              /* master, elastic: the control port, open for joining nodes */
    int nmembers;                         /* master: nodes in the running round */
    int nproc, max_restarts, has_resume;  /* what HELLOs must agree with */
    double silence_s, wait_s;             /* peer silent this long: lost; longest wait for a decision */
    int64_t last_tx;
    lc_peer *p;                           /* master: slot k is node k + 1; worker: node 0 */
    char where[128];                      /* master's address:port, for messages */
    char base[160];                       /* master: the job token rounds derive theirs from */
} lc;

typedef struct lc_decision {
    int end, code;                 /* end: exit with code */
    int round, resume, node, rank; /* otherwise: start round (restart count), resume, who failed */
    int status;
    int nmembers, group_rank;      /* the round's nodes; this node's place among them */
    char token[200];
    char why[200];                 /* what ended the last round (for the restart line) */
} lc_decision;

typedef struct lc_cfg {
    const char *addr;
    int port, node, nnodes, min_nodes, nproc, max_restarts, has_resume;
    const char *base_token; /* node 0's job token (NULL/"": a random one) */
} lc_cfg;

enum { LC_NONE, LC_STOP, LC_LOST, LC_GROW };

/* Meets the other launchers and agrees on round 0. 0, or -1 after printing why. */
int lc_start(lc *c, const lc_cfg *cfg, lc_decision *d);
/* Adds the channel's fds to pf (returns how many; at most lc_nfds). */
int lc_fill(lc *c, struct pollfd *pf);
int lc_nfds(const lc *c);
/* After poll: reads messages, sends heartbeats, takes joining nodes. LC_STOP: stop the
 * local ranks (another node failed or was lost); LC_GROW: tell the local ranks to stop
 * at their next restart point (a node waits to join); LC_LOST: a launcher is gone (printed), stop the ranks
 * and exit 1. */
int lc_service(lc *c, const struct pollfd *pf, int n);
/* A local rank failed with code (reported to node 0 at once). */
void lc_local_fail(lc *c, int rank, int code);
/* The local ranks have all exited (rank: the failed one, -1 none; code its status):
 * waits for the round's outcome. 0 with d filled, or -1 (printed) when a launcher is lost. */
int lc_round_end(lc *c, int rank, int code, const char *resume_path, lc_decision *d);
/* Closes the channel; node 0 first tells the others to end with code. */
void lc_close(lc *c, int code);
/* A random job token: 32 hex digits and a NUL into out (/dev/urandom; the clock and pid
 * where it cannot be read). */
void lc_random_token(char *out);
#endif
