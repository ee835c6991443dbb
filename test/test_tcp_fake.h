/* Test harness for the TCP backend without the rendezvous: forks one process per rank;
 * the test process is the meeting point (each rank's allgather goes through a pipe to
 * it), so a test can act between the address exchange and the connects (a stranger
 * on a data port), and it watches every rank's exit status and exit time. */
#ifndef TEST_TCP_FAKE_H
#define TEST_TCP_FAKE_H
#include "transport/tp_backend.h"
#include <stddef.h>
#include <stdint.h>

/* Runs in rank's process after tp_tcp_create; returns the exit code; msg is reported. */
typedef int (*tcpf_body)(tp_backend *b, int rank, int world, char *msg, size_t msglen);
/* Called in the test process with the first allgather's table, before it goes out. */
typedef void (*tcpf_hook)(const void *all, size_t len, int world, void *arg);

typedef struct tcpf_result {
    int code;          /* exit code, or 128 + signal */
    double exit_s;     /* exit time, seconds after the start */
    char msg[320];     /* what the body (or a failed create) said */
} tcpf_result;

/* When >= 0: that rank exits (code 7) right after the address exchange, before
 * connecting: a rank lost while the mesh forms. */
extern int tcpf_die_rank;
/* 0 when every rank ran and exited (any code), -1 when the harness itself broke. */
int tcpf_run(int world, double timeout_s, uint64_t token, tcpf_body body, tcpf_hook hook, void *arg,
             tcpf_result *res);
/* A body for tcpf_run, set through tcpf_mm before it (the ranks are forked): `pre`
 * matching 8-byte messages, then rank 0 sends slen bytes where rank 1 posts a recv of
 * rlen; each wait has wait_s. Exit 2 and "RC ERROR" in msg on a failure, else 0. */
typedef struct { int pre; size_t slen, rlen; double wait_s; } tcpf_mismatch;
extern tcpf_mismatch tcpf_mm;
int tcpf_body_mismatch(tp_backend *b, int rank, int world, char *msg, size_t n);
/* Fills buf with a pattern that depends on (seed, i); checks it; returns mismatches. */
void tcpf_fill(void *buf, size_t n, unsigned seed);
size_t tcpf_check(const void *buf, size_t n, unsigned seed);
#endif
