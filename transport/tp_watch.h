/* Stall reports (internal to transport/; the flight recorder they dump: tp_trace.h).
 *
 * Stall watch: a thread per rank sends a small heartbeat datagram (UDP) to every peer
 * every interval: its collective sequence numbers (issued, running, finished), how
 * long it has been in the running op or outside any, the peer its backend waits on,
 * and the descriptors of its last TP_WATCH_RECENT ops. Why a separate UDP channel:
 * the data path cannot carry it (a TCP stream mid-message or a full socket buffer to
 * a stopped peer blocks it, and verbs has no spare channel); datagrams need no
 * connection setup or ordering, never block the sender (MSG_DONTWAIT; a stopped
 * peer's full buffer just drops them), and each rank hears every rank directly (no
 * hub whose own stall would hide the others'), so every rank computes the same
 * attribution from the same facts. Loss is harmless: each beat carries the whole
 * state. The hot path pays a few stores per op.
 *
 * From the heartbeats each rank finds the ranks that others wait on: silent ranks
 * (no beat for half the warn time: stopped, hung, swapping) first, else ranks not yet
 * in the op the others wait in (long compute). After DDPRT_STALL_WARN seconds
 * (default 10, at most DDPRT_TIMEOUT) of waiting every rank prints one line naming
 * them, repeated every DDPRT_STALL_WARN while it lasts; at DDPRT_TIMEOUT the waiting
 * ranks fail with that attribution and a late rank that is alive exits with it too.
 * Ops issued differently at the same sequence number (kind, dtype, redop, root,
 * bytes) fail the comm on every rank naming both sides. */
#ifndef TP_WATCH_H
#define TP_WATCH_H
#include <stdint.h>
#include <stddef.h>

struct tp_comm;
struct tp_bootstrap;
typedef struct tp_watch tp_watch;

/* DDPRT_STALL_WATCH=0 turns the watch and the flight recorder's per-op stores off (to
 * measure what they cost: ddprt-bench with it 0 vs 1). */
int tp_watch_enabled(void);
/* Watch: created by tp_backend_create (it has the bootstrap) and handed to the comm
 * through the backend; world 1 has none. */
int tp_watch_create(const struct tp_bootstrap *bs, tp_watch **out, char *err, size_t errlen);
void tp_watch_start(tp_watch *w, struct tp_comm *c); /* starts the thread */
/* 1 (default): a mismatched op, or this rank being the one the others timed out on,
 * ends the process (_exit). 0: the comm fails instead (tp_abort with the same line). */
void tp_watch_set_exit(int on);
void tp_watch_destroy(tp_watch *w);
/* The comm failed: send a last beat now (carrying why), then explain: 1 with the
 * attribution (a mismatch, a late rank) in out, 0 when the watch knows nothing.
 * protocol: the failure was a protocol error (first wait, bounded, for the peers'
 * beats of op seq: a mismatch they show explains it). */
int tp_watch_on_fail(tp_watch *w, uint64_t seq, int timed_out, int protocol, char *out, size_t outlen);
#endif
