/* Rendezvous: how the ranks of a job find each other (torch.distributed's
 * init_method). Rank 0 (or the shared file) is the meeting point; every rank
 * presents the job token and the configuration hash; strangers are refused.
 * After open, the rendezvous stays usable for small exchanges (allgather, barrier)
 * with which the transport backends swap their addresses. */
#ifndef RT_RDZV_H
#define RT_RDZV_H
#include <stddef.h>
#include <stdint.h>

typedef struct rt_rdzv_opts {
    /* "tcp://HOST:PORT", "file:///path", "env://"; NULL or "" = from the environment
     * (torchrun's MASTER_ADDR/PORT + RANK/WORLD_SIZE, Slurm, Open MPI, MPICH/PMI). */
    const char *init_method;
    int rank, world_size, local_rank; /* -1 = from the environment */
    double timeout_s;                 /* <= 0: DDPRT_TIMEOUT, else the default (300 s) */
    const char *token;                /* NULL: DDPRT_JOB_TOKEN, Slurm job id, or none */
    uint64_t config_hash;             /* 0 = not checked; else must match on all ranks */
} rt_rdzv_opts;

typedef struct rt_rdzv rt_rdzv;

/* 0 on success; -1 with a one-line message in err (what, where, which rank). */
int rt_rdzv_open(rt_rdzv **out, const rt_rdzv_opts *o, char *err, size_t errlen);
int rt_rdzv_rank(const rt_rdzv *r);
int rt_rdzv_world(const rt_rdzv *r);
int rt_rdzv_local_rank(const rt_rdzv *r);
uint64_t rt_rdzv_token_hash(const rt_rdzv *r); /* 0 when the job has no token */
double rt_rdzv_timeout_s(const rt_rdzv *r);
/* Every rank gives len bytes (same len everywhere); all receives world*len, rank order. */
int rt_rdzv_allgather(rt_rdzv *r, const void *mine, size_t len, void *all, char *err, size_t errlen);
int rt_rdzv_barrier(rt_rdzv *r, char *err, size_t errlen);
void rt_rdzv_close(rt_rdzv *r);

/* This rank's IPv4 address on its route to the meeting point ("" = unknown). */
const char *rt_rdzv_self_ip(const rt_rdzv *r);
#endif
