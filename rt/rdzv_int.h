/* Rendezvous internals shared by rt/rdzv*.c, the tests and the fuzz target:
 * the wire format (pure encode/parse functions on byte buffers), the resolved
 * launch plan (which init method, rank, world, master), Slurm hostlists. */
#ifndef RT_RDZV_INT_H
#define RT_RDZV_INT_H
#include "rt/rdzv.h"
#include "ports/posix/port.h"
#include <stddef.h>
#include <stdint.h>

/* ---- wire format (all integers little-endian) ----
 * header: magic u32 | version u16 | type u16 | len u32 (payload bytes) | seq u32 */
#define RT_RDZV_MAGIC 0x5a524444u /* "DDRZ" */
#define RT_RDZV_VERSION 2 /* 2: hello carries the host id */
#define RT_RDZV_HDR 16
#define RT_RDZV_MAX_MSG (64u << 20) /* largest payload: an allgather result */
#define RT_RDZV_MAX_HELLO 300
#define RT_RDZV_MAX_TEXT 512
#define RT_RDZV_MAX_WORLD 65536
enum { RZ_HELLO = 1, RZ_WELCOME = 2, RZ_REJECT = 3, RZ_GATHER = 4, RZ_RESULT = 5, RZ_ABORT = 6 };
/* REJECT codes: FATAL ends the client's open; RETRY makes it look again (stale file). */
enum { RZ_REJ_FATAL = 1, RZ_REJ_RETRY = 2 };

typedef struct rt_rdzv_hdr {
    uint32_t magic, len, seq;
    uint16_t version, type;
} rt_rdzv_hdr;

typedef struct rt_rdzv_hello {
    int32_t rank, world, local_rank; /* local_rank -1: rank 0 derives it from hostnames */
    uint32_t pid;
    uint64_t token_hash, config_hash, gen; /* gen: file:// generation, 0 for tcp:// */
    char host[256];
    uint64_t host_id;  /* port_host_id(): machine + network namespace */
} rt_rdzv_hello;

/* Encoders write into b (cap bytes) and return the bytes written, 0 if it does not fit. */
size_t rt_rdzv_put_hdr(uint8_t *b, int type, uint32_t len, uint32_t seq);
size_t rt_rdzv_put_hello(uint8_t *b, size_t cap, const rt_rdzv_hello *h);
size_t rt_rdzv_put_text(uint8_t *b, size_t cap, uint32_t code, const char *text);
size_t rt_rdzv_put_welcome(uint8_t *b, size_t cap, int32_t world, int32_t local_rank);
/* Parsers: pure functions of (b, n); 0 on success, -1 with *why set to a static reason.
 * parse_hdr checks magic, version, type and the per-type payload bound. */
int rt_rdzv_parse_hdr(const uint8_t *b, size_t n, rt_rdzv_hdr *h, const char **why);
int rt_rdzv_parse_hello(const uint8_t *b, size_t n, rt_rdzv_hello *h, const char **why);
/* REJECT / ABORT payload: code u32 | text; text is copied with non-printables replaced. */
int rt_rdzv_parse_text(const uint8_t *b, size_t n, uint32_t *code, char *text, size_t textlen,
                       const char **why);
int rt_rdzv_parse_welcome(const uint8_t *b, size_t n, int32_t *world, int32_t *local_rank,
                          const char **why);
/* FNV-1a 64 of a token, never 0 (0 means "no token"). */
uint64_t rt_rdzv_token_hash_of(const char *token);

/* ---- launch plan: what rt_rdzv_open will do, resolved from opts + environment ---- */
enum { RT_RDZV_SINGLE = 0, RT_RDZV_TCP = 1, RT_RDZV_FILE = 2 };
typedef struct rt_rdzv_plan {
    int kind;
    int rank, world, local_rank; /* local_rank -1 = unknown: derived at the meeting */
    char host[256];              /* master host (TCP) */
    int port;
    char path[1024];             /* FILE */
    char token[256];             /* "" = none */
    double timeout_s;
    const char *source;          /* "tcp://", "env://", "torchrun env", "Slurm", ... */
    char where[1100];            /* "tcp://HOST:PORT" or "file:///path", for messages */
} rt_rdzv_plan;
int rt_rdzv_resolve(const rt_rdzv_opts *o, rt_rdzv_plan *p, char *err, size_t errlen);

/* Slurm hostlists ("node[01-04,07]", "a[1-2],b3", "r[1-2]n[3-4]"): calls fn for each host
 * in order until fn returns non-zero. Returns the number visited, or -1 on bad syntax or
 * more than RT_HOSTLIST_MAX hosts. */
#define RT_HOSTLIST_MAX 65536 /* no job has more hosts than ranks (ddprt-launch's cap) */
int rt_hostlist_each(const char *list, int (*fn)(const char *host, void *ctx), void *ctx);
/* First host of a hostlist into out; 0 or -1. */
int rt_hostlist_first(const char *list, char *out, size_t outlen);

/* ---- the meeting (rt/rdzv_tcp.c, rt/rdzv_file.c) ---- */
struct rt_rdzv {
    int rank, world, local_rank;
    uint64_t token_hash, config_hash, gen;
    double timeout_s;
    char where[1100];
    int lfd;                 /* rank 0 during the meeting */
    int master;              /* rank > 0: connection to rank 0 */
    int *fds;                /* rank 0: fds[r] = connection to rank r (fds[0] = -1) */
    char (*peer)[300];       /* rank 0: "host (ip:port)" of each rank, for messages */
    uint32_t seq;            /* collective round */
    int failed;
    char err[512];
    char refused[300];       /* rank 0: the last rank refused for its world or rank, for the timeout's line */
    port_thread door;        /* rank 0 after the meeting: rt/rdzv_door.c */
    int door_on, door_stop;
    /* This rank's IPv4 address on the route to the meeting point (rank > 0: its
     * connection to rank 0; rank 0: the address remote ranks reached it at). */
    char self_ip[48];
};
/* Rank 0: answer late comers on r->lfd until close (0, or -1: no door, lfd closed). */
int rt_rdzv_door_open(rt_rdzv *r);
void rt_rdzv_door_close(rt_rdzv *r);
/* Rank 0: serves the meeting on r->lfd until every rank joined; 0 or -1 with err. */
int rt_rdzv_serve_meeting(rt_rdzv *r, char *err, size_t errlen);
/* Rank > 0: one attempt to join at host:port. 0 joined; 1 retry later (last set);
 * -1 definitive failure (err set). */
int rt_rdzv_try_join(rt_rdzv *r, const char *host, int port, int64_t deadline_ns,
                     char *last, size_t lastlen, char *err, size_t errlen);
/* Rank > 0, between attempts: once deadline_ns has passed, -1 with err ("no rendezvous
 * VIA <where> after T s: LAST"); else sleeps *backoff (not past the deadline), doubles
 * it up to cap_ns and returns 0. */
int rt_rdzv_backoff(const rt_rdzv *r, int64_t deadline_ns, int64_t *backoff, int64_t cap_ns, const char *via,
                    const char *last, char *err, size_t errlen);
int rt_rdzv_open_tcp(rt_rdzv *r, const rt_rdzv_plan *p, char *err, size_t errlen);
int rt_rdzv_open_file(rt_rdzv *r, const rt_rdzv_plan *p, char *err, size_t errlen);
/* Rank 0's per-connection deadline for a hello (DDPRT_RDZV_HELLO_TIMEOUT, default 5 s). */
int64_t rt_rdzv_hello_timeout_ns(const rt_rdzv *r);
#endif
