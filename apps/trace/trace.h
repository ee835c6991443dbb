/* ddprt-trace's reader: one flight-recorder file (transport/tp_trace.c writes it) parsed
 * from memory, every field checked (test/fuzz/fuzz_trace.c runs it on mutated files). */
#ifndef APPS_TRACE_H
#define APPS_TRACE_H
#include <stddef.h>

#define TRACE_VERSION 1
/* The largest job ddprt-launch starts (--nnodes x --nproc-per-node). */
#define TRACE_MAX_WORLD 65536

typedef struct trace_ent {
    unsigned long long seq, bytes;
    char kind[24], dt[12], op[8], state[12];
    double t0, t1, t2;
} trace_ent;

typedef struct trace_file {
    int ok, rank, world, pid, n;
    int cut; /* the line number of a last line cut by a crash (dropped), else 0 */
    char host[128], why[600], file[512];
    double now;
    unsigned long long issued;
    trace_ent *e;
} trace_file;

/* Parses n bytes of a file's text (path names it in messages) into f (zeroed first): 0,
 * or -1 with "PATH:LINE: problem" in err (f freed). A last line without its newline
 * (the writer was killed) is dropped and its number left in f->cut. */
int trace_parse(const char *text, size_t n, const char *path, trace_file *f, char *err, size_t errlen);
void trace_file_free(trace_file *f);
#endif
