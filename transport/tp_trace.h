/* The flight recorder (internal to transport/): every comm keeps its last
 * DDPRT_TRACE_ENTRIES (default 2000) collectives in a ring allocated at creation:
 * sequence, op, dtype, bytes, issue / start / end times, state. It is written to
 * DDPRT_TRACE_DIR (default .)/ddprt-trace.RANK when the comm fails, on SIGUSR1, and at a
 * stall warning (transport/tp_watch.h); build/ddprt-trace merges the files of a job.
 * DDPRT_STALL_WATCH=0 turns its per-op stores off with the stall watch. It calls nothing
 * of the comm or the watch: they call it. */
#ifndef TP_TRACE_H
#define TP_TRACE_H
#include <stddef.h>
#include <stdint.h>

struct tp_comm;

enum { TP_TR_ISSUED = 1, TP_TR_RUNNING = 2, TP_TR_DONE = 3, TP_TR_FAILED = 4 };
typedef struct tp_trace_ent {
    uint32_t ver; /* seqlock: odd while being written */
    uint8_t kind, dt, op, state;
    int32_t root, rc;
    uint64_t seq, bytes;
    int64_t t_issue, t_start, t_end; /* monotonic ns; 0 = not yet */
} tp_trace_ent;

/* Ring of the comm (tp_comm.c calls these; the ring lives in the comm). */
int tp_trace_init(struct tp_comm *c, char *err, size_t errlen);
void tp_trace_free(struct tp_comm *c);
/* t: now (port_now_ns), which the caller has read anyway. */
void tp_trace_issue(struct tp_comm *c, uint64_t seq, int kind, int dt, int op, int root, uint64_t bytes, int64_t t);
void tp_trace_state(struct tp_comm *c, uint64_t seq, int state, int rc, int64_t t);
/* Reads entry of seq (0 if no longer in the ring). */
int tp_trace_get(const struct tp_comm *c, uint64_t seq, tp_trace_ent *out);
/* Writes ddprt-trace.RANK with why in its header; 0 or -1. Not signal-safe: called
 * from the watch thread (SIGUSR1 only sets a flag) or the failing thread. */
int tp_trace_dump(struct tp_comm *c, const char *why);
#endif
