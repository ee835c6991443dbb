/* Socket helpers (POSIX). Every blocking call takes a monotonic deadline in ns
 * (port_now_ns() based); none waits forever. Return codes: >= 0 ok (an fd where one
 * is returned), PORT_ERR (errno set), PORT_TIMEOUT, PORT_CLOSED (peer closed). */
#ifndef PORT_SOCK_H
#define PORT_SOCK_H
#include <stddef.h>
#include <stdint.h>

enum { PORT_ERR = -1, PORT_TIMEOUT = -2, PORT_CLOSED = -3 };

/* Listens on host:port (host NULL or "" = all interfaces, port 0 = ephemeral).
 * On failure returns PORT_ERR and writes e.g. "cannot listen on 0.0.0.0:23456:
 * Address already in use" into err. */
int port_sock_listen(const char *host, int port, int backlog, char *err, size_t errlen);
int port_sock_local_port(int fd);
/* 0 when host resolves. Else -1 with "cannot resolve 'h': reason" in err; a temporary
 * DNS failure (EAI_AGAIN) is retried until deadline_ns, a definitive one is not. */
int port_sock_resolve_check(const char *host, int64_t deadline_ns, char *err, size_t errlen);
/* One connection attempt, bounded by the deadline. */
int port_sock_connect(const char *host, int port, int64_t deadline_ns, char *err, size_t errlen);
/* Accepts one connection; PORT_TIMEOUT when none arrives before the deadline. */
int port_sock_accept(int lfd, int64_t deadline_ns, char *peer, size_t peerlen);
/* TCP_NODELAY and, when bufbytes > 0, SO_SNDBUF/SO_RCVBUF. */
void port_sock_tune(int fd, int bufbytes);
int port_sock_set_nonblock(int fd, int on);
/* Full transfers on a blocking or non-blocking fd, polling until the deadline. */
int port_sock_write_full(int fd, const void *buf, size_t n, int64_t deadline_ns);
int port_sock_read_full(int fd, void *buf, size_t n, int64_t deadline_ns);
/* Waits until fd is readable (1), the deadline passes (0), or error (PORT_ERR). */
int port_sock_wait_readable(int fd, int64_t deadline_ns);
/* The first IPv4 address of an interface that an NCCL_SOCKET_IFNAME-style spec names:
 * "eth0", "eth,ib" (prefixes), "=eth0" (exact), "^docker,lo" (anything but). 0 or PORT_ERR. */
int port_sock_iface_addr(const char *spec, char *ip, size_t iplen);
void port_sock_close(int fd);
/* Waits until any of fds[0..n) is readable, closed or in error (negative fds are
 * skipped); sets ready[i] = 1 for those. Returns how many, 0 once the deadline has
 * passed (a past deadline still checks once without waiting), or PORT_ERR. */
int port_sock_poll_readable(const int *fds, int n, int *ready, int64_t deadline_ns);
/* One non-blocking read: > 0 bytes read, 0 when nothing is there yet, PORT_CLOSED, PORT_ERR. */
long port_sock_read_some(int fd, void *buf, size_t n);
/* This host's name (gethostname), "?" when unknown. */
void port_sock_hostname(char *name, size_t len);
/* The IPv4 address peers should use for this host: the interface ifspec names (NULL or
 * "": none; see port_sock_iface_addr), else the source address of the route toward host
 * `toward` (NULL: none), else the hostname's (non-loopback, of this network namespace),
 * else the first non-loopback interface's, else 127.0.0.1. */
void port_sock_host_ip(const char *ifspec, const char *toward, char *ip, size_t iplen);
/* The local IPv4 address of a connected socket (the source address of the route to
 * the peer) into ip; 0, or -1 when it is not IPv4. *loopback: it is 127.0.0.0/8. */
int port_sock_local_ip(int fd, char *ip, size_t iplen, int *loopback);
/* Identity of "this host" as seen by the network: hostname + boot id + network
 * namespace. Two processes with equal ids reach each other over loopback, abstract
 * unix sockets and /dev/shm; containers on one node (own netns) get different ids. */
uint64_t port_host_id(void);
#endif
