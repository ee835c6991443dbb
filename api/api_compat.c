/* The calls of API 1 whose signature or meaning changed in API 2 (include/ddprt.h,
 * "Versions"), kept for binaries built against API 1: libddprt.so exports them under
 * their old names at symbol version DDPRT_0 (api/api.map), which is what such a binary
 * asks the loader for; a build against today's header binds the DDPRT_1 forms. Not
 * part of any header: nothing new should call them. */
#include "api/api_int.h"

#define OLD_FORM(impl, name) __asm__(".symver " #impl ", " #name "@DDPRT_0")
#define EXPORTED __attribute__((visibility("default")))

/* API 1: ddprt_allgatherv(c, send, sendcount, recv, ...): the count before recv. */
EXPORTED int api_v1_allgatherv(ddprt_comm *c, const void *send, size_t sendcount, void *recv,
                               const size_t *recvcounts, const size_t *displs, ddprt_dtype dt);
int api_v1_allgatherv(ddprt_comm *c, const void *send, size_t sendcount, void *recv, const size_t *recvcounts,
                      const size_t *displs, ddprt_dtype dt)
{
    return ddprt_allgatherv(c, send, recv, sendcount, recvcounts, displs, dt);
}
OLD_FORM(api_v1_allgatherv, ddprt_allgatherv);

/* API 1: ddprt_test(req): 0 running, 1 done and ok, < 0 failed or a bad request;
 * released on any non-zero return but a bad request's. */
EXPORTED int api_v1_test(ddprt_request *r);
int api_v1_test(ddprt_request *r)
{
    int rc = api_req_check(r, "ddprt_test");
    return rc ? rc : api_test(r);
}
OLD_FORM(api_v1_test, ddprt_test);
