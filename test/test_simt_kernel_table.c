/* Every __global__ kernel of kernels/cuda is launched by some device test:
 * test/simt/kernel_table.sh --check (the device suite once on the SIMT executor,
 * tracing the kernels it launches) finds no "NONE" row, so a CUDA kernel without a test
 * fails make test. Built when the executor is (g++ present, SIMT not 0); skipped with a
 * note otherwise. The table with the tests per kernel: test/simt/kernel_table.sh. */
#include "test/t.h"
#include "test/t_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(simt_every_cuda_kernel_has_a_test)
{
#if DDPRT_HAVE_SIMT
    /* the whole device suite once on the executor: 6-7 minutes on a busy 2-core machine
     * (stop 52: past the runner's 300 s once the attention backward and im2col tests came) */
    alarm(1200);
    static char out[1 << 18];
    const char *b = getenv("DDPRT_BUILD");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test/simt/kernel_table.sh --check %s 2>&1", b ? b : "build");
    int rc = t_sh(cmd, out, sizeof out);
    CHECKF(!strstr(out, "| NONE |"), "kernels no device test runs:\n%s", out);
    /* and the kernels were found and traced (an empty list would have no NONE either) */
    const char *s = strstr(out, "every __global__ kernel ran: ");
    CHECKF(rc == 0 && s && atoi(s + strlen("every __global__ kernel ran: ")) > 40, "exit %d\n%s", rc, out);
#else
    t_note("no SIMT executor in this build (g++ missing or SIMT=0): kernel table not checked");
#endif
}
