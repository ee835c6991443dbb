/* The C API under misuse, in this process (a one-process job: no transport): every
 * call after ddprt_finalize is an error, not a use after free (ASan-clean: make test
 * SAN=-fsanitize=address T=api_); a request issued before finalize completes with an
 * error and is released; a ddprt_mem_alloc block outlives finalize until
 * ddprt_mem_free; count 0 with NULL buffers is a valid empty op. The same with a
 * transport, at 2 ranks: test_api.c. */
#include "test/t.h"
#include "test/t_proc.h"
#include "include/ddprt.h"
#include <string.h>

static int said(const char *what) { return strstr(ddprt_last_error(), what) != NULL; }

static ddprt_comm *one(void)
{
    t_clean_env();
    ddprt_comm *c = NULL;
    int rc = ddprt_init(&c, NULL);
    CHECKF(rc == DDPRT_OK && c && ddprt_size(c) == 1, "init: %d %s", rc, ddprt_last_error());
    return c;
}

TEST(api_calls_after_finalize_are_errors)
{
    ddprt_comm *c = one();
    float x[4] = {1, 2, 3, 4}, y[4];
    ddprt_request *pending = NULL, *polled = NULL;
    CHECK_EQ(ddprt_iallreduce(c, x, y, 4, DDPRT_FLOAT32, DDPRT_SUM, &pending), DDPRT_OK);
    CHECK_EQ(ddprt_iallreduce(c, x, y, 4, DDPRT_FLOAT32, DDPRT_SUM, &polled), DDPRT_OK);
    float *blk = ddprt_mem_alloc(c, 64);
    CHECK(blk != NULL);
    ddprt_finalize(c);
    ddprt_finalize(c);
    CHECKF(said("ddprt_finalize: the communicator was finalized already"), "%s", ddprt_last_error());
    CHECK_EQ(ddprt_rank(c), DDPRT_EINVAL);
    CHECKF(said("ddprt_rank: the communicator was finalized"), "%s", ddprt_last_error());
    CHECK_EQ(ddprt_size(c), DDPRT_EINVAL);
    CHECK_EQ(ddprt_local_size(c), DDPRT_EINVAL);
    CHECK_EQ(ddprt_allreduce(c, x, y, 4, DDPRT_FLOAT32, DDPRT_SUM), DDPRT_EINVAL);
    CHECKF(said("ddprt_allreduce: the communicator was finalized"), "%s", ddprt_last_error());
    CHECK_EQ(ddprt_barrier(c), DDPRT_EINVAL);
    CHECK_EQ(ddprt_broadcast(c, x, 4, DDPRT_FLOAT32, 0), DDPRT_EINVAL);
    ddprt_request *late = NULL;
    CHECK_EQ(ddprt_iallgather(c, x, y, 4, DDPRT_FLOAT32, &late), DDPRT_EINVAL);
    CHECK(late == NULL);
    CHECK(ddprt_mem_alloc(c, 64) == NULL);
    CHECKF(said("ddprt_mem_alloc: the communicator was finalized"), "%s", ddprt_last_error());
    ddprt_abort(c, "after");
    CHECK(!strcmp(ddprt_comm_error(c), ""));
    /* Issued before finalize: an error naming finalize, then released. */
    CHECK_EQ(ddprt_wait(pending), DDPRT_ECLOSED);
    CHECKF(said("ddprt_wait: the communicator was finalized before"), "%s", ddprt_last_error());
    CHECK_EQ(ddprt_wait(pending), DDPRT_EINVAL);
    CHECKF(said("already completed"), "%s", ddprt_last_error());
    int done = 0;
    CHECK_EQ(ddprt_test(&polled, &done), DDPRT_ECLOSED);
    CHECK(done == 1 && polled == NULL);
    /* The block stays the caller's until freed. */
    for (int i = 0; i < 16; i++) blk[i] = (float)i;
    CHECK(blk[15] == 15.0f);
    ddprt_mem_free(c, blk);
}

TEST(api_count_0_with_null_buffers_is_an_empty_op)
{
    ddprt_comm *c = one();
    CHECK_EQ(ddprt_allreduce(c, NULL, NULL, 0, DDPRT_FLOAT32, DDPRT_SUM), DDPRT_OK);
    CHECK_EQ(ddprt_allgather(c, NULL, NULL, 0, DDPRT_INT64), DDPRT_OK);
    CHECK_EQ(ddprt_reduce_scatter(c, NULL, NULL, 0, DDPRT_FLOAT64, DDPRT_MAX), DDPRT_OK);
    CHECK_EQ(ddprt_broadcast(c, NULL, 0, DDPRT_UINT8, 0), DDPRT_OK);
    size_t counts[1] = {0};
    CHECK_EQ(ddprt_allgatherv(c, NULL, NULL, 0, counts, NULL, DDPRT_FLOAT32), DDPRT_OK);
    ddprt_request *r = NULL;
    CHECK_EQ(ddprt_iallreduce(c, NULL, NULL, 0, DDPRT_FLOAT32, DDPRT_SUM, &r), DDPRT_OK);
    CHECK_EQ(ddprt_wait(r), DDPRT_OK);
    CHECK_EQ(ddprt_allreduce(c, NULL, NULL, 1, DDPRT_FLOAT32, DDPRT_SUM), DDPRT_EINVAL);
    CHECK_EQ(ddprt_rank(NULL), DDPRT_EINVAL);
    ddprt_finalize(c);
}
