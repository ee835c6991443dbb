/* Internals shared by api/api.c (init, errors, requests) and api/api_coll.c (the
 * collectives) of the C API in include/ddprt.h. */
#ifndef RT_API_INT_H
#define RT_API_INT_H
#include "include/ddprt.h"
#include "ports/posix/port.h"
#include "transport/tp.h"

struct ddprt_request {
    tp_handle h;
    ddprt_comm *c;
    int in_use;
    int local_rc; /* 1: h is the transport's; else the op ran locally: 0 ok, < 0 failed */
    ddprt_request *next;
};

struct ddprt_comm {
    tp_comm *tc; /* NULL: a one-process job (every collective is a local copy) */
    int rank, world, local_rank, local_size;
    port_mutex mu; /* guards the free list */
    ddprt_request *reqs, *free;
    int nreq;
    /* Set by ddprt_finalize, which keeps this struct and its request slots (a few KiB,
     * never reused): every later call with c or its requests is an error, not a use
     * after free. tc stays until the last ddprt_mem_alloc block (nblocks) is freed. */
    int dead, nblocks;
};

/* Sets the calling thread's error line; returns code. */
int api_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The comm's failure line (or a generic one) as this thread's error; returns code. */
int api_comm_fail(const ddprt_comm *c, int code);
/* A free request slot (NULL and EBUSY's line when none), released by api_req_put. */
ddprt_request *api_req_get(ddprt_comm *c);
void api_req_put(ddprt_request *r);
/* 0, or EINVAL with the line "WHO: the request is NULL or already completed". */
int api_req_check(ddprt_request *r, const char *who);
/* A checked request: 0 running; 1 done and ok, < 0 failed (both release it). */
int api_test(ddprt_request *r);
/* EINVAL with "WHO: the communicator is NULL (call ddprt_init first)". */
int api_null_comm(const char *who);
/* api_null_comm for NULL, EINVAL "WHO: the communicator was finalized" for a finalized
 * c; else 0. */
int api_live(const ddprt_comm *c, const char *who);
#endif
