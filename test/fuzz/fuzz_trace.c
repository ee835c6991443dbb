/* libFuzzer target: ddprt-trace's reader (apps/trace/trace_read.c) on arbitrary bytes.
 * A parse that fails names the file and a line; one that succeeds hands back a rank in
 * its world, a world in ddprt-trace's range, and rows with their fields in their
 * domains. With FUZZ_SEED_DIR set, a well-formed file is written there as a seed. Build
 * and run: make fuzz. */
#include "apps/trace/trace.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char good[] =
    "# ddprt-trace 1\nrank 1\nworld 2\npid 42\nhost h\nnow 100.5\nissued 3\nwhy SIGUSR1\n"
    "# seq kind dtype redop root bytes state rc t_issue t_start t_end (unix s; 0 = not yet)\n"
    "1 allreduce float sum 0 1024 done 0 1.0 1.0 1.5\n2 broadcast float ? 1 8 running 0 2.0 2.0 0\n"
    "3 allgather bf16 max -1 0 issued 0 3.0 0 0\n";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *s = getenv("FUZZ_SEED_DIR");
    if (s) {
        char p[300];
        snprintf(p, sizeof p, "%s/good", s);
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(good, 1, sizeof good - 1, f) != sizeof good - 1 || fclose(f)) abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    trace_file f;
    char err[1200];
    if (trace_parse((const char *)d, n, "fuzz.trace", &f, err, sizeof err)) {
        if (strncmp(err, "fuzz.trace", 10) || f.e) abort();
        return 0;
    }
    if (!f.ok || f.world < 1 || f.world > TRACE_MAX_WORLD || f.rank < 0 || f.rank >= f.world || f.n < 0) abort();
    for (int i = 0; i < f.n; i++)
        if (!f.e[i].seq || (f.issued && f.e[i].seq > f.issued) || f.e[i].bytes > (1ull << 62) || f.e[i].t0 < 0)
            abort();
    trace_file_free(&f);
    return 0;
}
