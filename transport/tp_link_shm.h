/* The shm transport's point-to-point link (tp_link_shm.c): a byte ring per direction
 * of every same-host pair that took shm (tp_transport.h), in the receiver's inbox.
 * Internal to transport/. */
#ifndef TP_LINK_SHM_H
#define TP_LINK_SHM_H
#include "transport/tp_link.h"
#include "transport/tp_transport.h"

typedef struct tp_link_shm tp_link_shm;
extern const tp_link tp_link_shm_ops;

/* Before the connect step's swap: makes this rank's inbox (empty) into c->lshm and
 * writes what the peers need to map it (pid, fd) into pid_fd[2]. */
void tp_link_shm_open(tp_comm *c, int64_t *pid_fd);
/* Collective (every rank, after the plan tp[]): sizes the inbox, maps the inbox of every
 * peer whose pair took shm. 0: in use; 1: some rank could not (c->lshm freed, the
 * pairs take the net); < 0 a backend code. info, pid_fd: every rank's (world, 2 world). */
int tp_link_shm_setup(tp_comm *c, const tp_peer_info *info, const int64_t *pid_fd, const uint8_t *tp);
void tp_link_shm_free(tp_comm *c);
#endif
