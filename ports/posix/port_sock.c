#include "ports/posix/port_sock.h"
#include "ports/posix/port.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static int ms_left(int64_t deadline_ns)
{
    int64_t left = deadline_ns - port_now_ns();
    if (left <= 0) return 0;
    return left / 1000000 > 1000 ? 1000 : (int)(left / 1000000) + 1;
}

static struct addrinfo *resolve(const char *host, int port, int passive, char *err, size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL;
    char ps[16];
    hints.ai_family = AF_INET; /* IPv4: what cluster rendezvous addresses are in practice */
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host && *host ? host : NULL, ps, &hints, &res);
    if (rc) {
        if (err) snprintf(err, errlen, "cannot resolve '%s': %s", host ? host : "", gai_strerror(rc));
        return NULL;
    }
    return res;
}

int port_sock_resolve_check(const char *host, int64_t deadline_ns, char *err, size_t errlen)
{
    for (;;) {
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(host, NULL, &hints, &res);
        if (!rc) { freeaddrinfo(res); return 0; }
        if (rc != EAI_AGAIN || port_now_ns() >= deadline_ns) {
            snprintf(err, errlen, "cannot resolve '%s': %s", host, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
            return -1;
        }
        port_sleep_ns(200000000);
    }
}

int port_sock_listen(const char *host, int port, int backlog, char *err, size_t errlen)
{
    struct addrinfo *ai = resolve(host, port, 1, err, errlen);
    if (!ai) return PORT_ERR;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, backlog)) {
        int e = errno;
        if (err)
            snprintf(err, errlen, "cannot listen on %s:%d: %s", host && *host ? host : "0.0.0.0",
                     port, strerror(e));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        errno = e;
        return PORT_ERR;
    }
    freeaddrinfo(ai);
    return fd;
}

int port_sock_local_port(int fd)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len)) return -1;
    return ntohs(sa.sin_port);
}

int port_sock_connect(const char *host, int port, int64_t deadline_ns, char *err, size_t errlen)
{
    struct addrinfo *ai = resolve(host, port, 0, err, errlen);
    if (!ai) return PORT_ERR;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) goto fail;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) goto fail;
    for (;;) {
        struct pollfd p = {fd, POLLOUT, 0};
        int ms = ms_left(deadline_ns);
        if (ms == 0) { errno = ETIMEDOUT; goto fail; }
        int r = poll(&p, 1, ms);
        if (r < 0 && errno != EINTR) goto fail;
        if (r > 0) break;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr) { errno = soerr; goto fail; }
    port_sock_set_nonblock(fd, 0);
    freeaddrinfo(ai);
    return fd;
fail: {
    int e = errno;
    if (err) snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port, strerror(e));
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    errno = e;
    return e == ETIMEDOUT ? PORT_TIMEOUT : PORT_ERR;
}
}

int port_sock_accept(int lfd, int64_t deadline_ns, char *peer, size_t peerlen)
{
    for (;;) {
        int r = port_sock_wait_readable(lfd, deadline_ns);
        if (r == 0) return PORT_TIMEOUT;
        if (r < 0) return PORT_ERR;
        struct sockaddr_in sa;
        socklen_t len = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
            return PORT_ERR;
        }
        if (peer) {
            char ip[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
            snprintf(peer, peerlen, "%s:%d", ip, ntohs(sa.sin_port));
        }
        return fd;
    }
}

void port_sock_tune(int fd, int bufbytes)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (bufbytes > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufbytes, sizeof bufbytes);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufbytes, sizeof bufbytes);
    }
}

int port_sock_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return PORT_ERR;
    return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) < 0 ? PORT_ERR : 0;
}

int port_sock_wait_readable(int fd, int64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int ms = ms_left(deadline_ns);
        if (ms == 0) return 0;
        int r = poll(&p, 1, ms);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return PORT_ERR;
    }
}

static int wait_io(int fd, short ev, int64_t deadline_ns)
{
    struct pollfd p = {fd, ev, 0};
    int ms = ms_left(deadline_ns);
    if (ms == 0) return PORT_TIMEOUT;
    int r = poll(&p, 1, ms);
    return r < 0 && errno != EINTR ? PORT_ERR : 0;
}

int port_sock_write_full(int fd, const void *buf, size_t n, int64_t deadline_ns)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && errno == EPIPE) return PORT_CLOSED;
        if (w < 0 && errno == ECONNRESET) return PORT_CLOSED;
        if (w < 0 && errno != EAGAIN && errno != EINTR) return PORT_ERR;
        int r = wait_io(fd, POLLOUT, deadline_ns);
        if (r) return r;
    }
    return 0;
}

int port_sock_read_full(int fd, void *buf, size_t n, int64_t deadline_ns)
{
    char *p = buf;
    while (n) {
        ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
        if (r > 0) { p += r; n -= (size_t)r; continue; }
        if (r == 0) return PORT_CLOSED;
        if (errno == ECONNRESET) return PORT_CLOSED;
        if (errno != EAGAIN && errno != EINTR) return PORT_ERR;
        int w = wait_io(fd, POLLIN, deadline_ns);
        if (w) return w;
    }
    return 0;
}

/* Does interface name n match one entry of an NCCL_SOCKET_IFNAME-style list? Entries
 * are comma separated prefixes ("eth" matches eth0); "=name" is exact. */
static int iface_listed(const char *list, const char *n)
{
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        int exact = *p == '=';
        const char *e = p + exact;
        size_t el = len - (size_t)exact;
        if (el && (exact ? strlen(n) == el && !strncmp(n, e, el) : !strncmp(n, e, el))) return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

int port_sock_iface_addr(const char *spec, char *ip, size_t iplen)
{
    struct ifaddrs *ifs, *i;
    int excl = spec[0] == '^', rc = PORT_ERR;
    const char *list = spec + excl;
    if (getifaddrs(&ifs)) return PORT_ERR;
    for (i = ifs; i && rc; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        if (iface_listed(list, i->ifa_name) == excl) continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, (socklen_t)iplen);
        rc = 0;
    }
    freeifaddrs(ifs);
    return rc;
}

void port_sock_close(int fd)
{
    if (fd >= 0) close(fd);
}

int port_sock_poll_readable(const int *fds, int n, int *ready, int64_t deadline_ns)
{
    /* Small sets (the common case) stay on the stack; a big world's set is malloc'd. */
    struct pollfd small[64], *p = n <= 64 ? small : malloc(sizeof *p * (size_t)n);
    int small_idx[64], *idx = n <= 64 ? small_idx : malloc(sizeof *idx * (size_t)n), m = 0, rc = 0;
    if (!p || !idx) { rc = PORT_ERR; goto out; }
    for (int i = 0; i < n; i++) {
        ready[i] = 0;
        if (fds[i] >= 0) { p[m].fd = fds[i]; p[m].events = POLLIN; p[m].revents = 0; idx[m++] = i; }
    }
    for (;;) {
        int64_t left = deadline_ns - port_now_ns();
        int ms = left <= 0 ? 0 : left / 1000000 > 1000 ? 1000 : (int)(left / 1000000) + 1;
        int r = poll(p, (nfds_t)m, ms);
        if (r < 0 && errno != EINTR) { rc = PORT_ERR; break; }
        if (r > 0) {
            for (int j = 0; j < m; j++)
                if (p[j].revents) { ready[idx[j]] = 1; rc++; }
            break;
        }
        if (left <= 0) break;
    }
out:
    if (p != small) free(p);
    if (idx != small_idx) free(idx);
    return rc;
}

long port_sock_read_some(int fd, void *buf, size_t n)
{
    for (;;) {
        ssize_t r = recv(fd, buf, n, MSG_DONTWAIT);
        if (r > 0) return (long)r;
        if (r == 0) return PORT_CLOSED;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return errno == ECONNRESET ? PORT_CLOSED : PORT_ERR;
    }
}

void port_sock_hostname(char *name, size_t len)
{
    if (gethostname(name, len) || !*name) snprintf(name, len, "?");
    name[len - 1] = 0;
}

/* Is in one of this network namespace's interface addresses? */
static int addr_is_local(struct in_addr in)
{
    struct ifaddrs *ifs, *i;
    int yes = 0;
    if (getifaddrs(&ifs)) return 0;
    for (i = ifs; i && !yes; i = i->ifa_next)
        yes = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
              ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == in.s_addr;
    freeifaddrs(ifs);
    return yes;
}

/* The source address of the route to host `toward`: a UDP connect picks the route and
 * sends nothing. 0, or PORT_ERR. */
static int route_src(const char *toward, char *ip, size_t iplen)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(toward, "9", &hints, &ai)) return PORT_ERR;
    int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int ok = u >= 0 && !connect(u, ai->ai_addr, ai->ai_addrlen) && !getsockname(u, (struct sockaddr *)&sa, &sl);
    if (ok) inet_ntop(AF_INET, &sa.sin_addr, ip, (socklen_t)iplen);
    if (u >= 0) close(u);
    freeaddrinfo(ai);
    return ok ? 0 : PORT_ERR;
}

void port_sock_host_ip(const char *ifspec, const char *toward, char *ip, size_t iplen)
{
    if (ifspec && *ifspec && port_sock_iface_addr(ifspec, ip, iplen) == 0) return;
    if (toward && *toward && route_src(toward, ip, iplen) == 0) return;
    char host[256];
    port_sock_hostname(host, sizeof host);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) == 0) {
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            struct in_addr in = ((struct sockaddr_in *)a->ai_addr)->sin_addr;
            if ((ntohl(in.s_addr) >> 24) == 127) continue; /* loopback: useless to other hosts */
            /* In a network namespace (a container) the hostname may name the node's
             * address, which is not ours: only an address of our own interfaces. */
            if (!addr_is_local(in)) continue;
            inet_ntop(AF_INET, &in, ip, (socklen_t)iplen);
            freeaddrinfo(res);
            return;
        }
        freeaddrinfo(res);
    }
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            struct in_addr in = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
            if ((ntohl(in.s_addr) >> 24) == 127) continue;
            inet_ntop(AF_INET, &in, ip, (socklen_t)iplen);
            freeifaddrs(ifs);
            return;
        }
        freeifaddrs(ifs);
    }
    snprintf(ip, iplen, "127.0.0.1");
}

int port_sock_local_ip(int fd, char *ip, size_t iplen, int *loopback)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) || ss.ss_family != AF_INET) return -1;
    struct in_addr in = ((struct sockaddr_in *)&ss)->sin_addr;
    if (!inet_ntop(AF_INET, &in, ip, (socklen_t)iplen)) return -1;
    if (loopback) *loopback = (ntohl(in.s_addr) >> 24) == 127;
    return 0;
}

/* rt/hash.h's FNV-1a: ports sit below rt and include nothing of it. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t k = 0; k < n; k++) h = (h ^ ((const unsigned char *)p)[k]) * 0x100000001b3ull;
    return h;
}

uint64_t port_host_id(void)
{
    char host[256], boot[64] = "";
    struct stat st;
    uint64_t ns[2] = {0, 0};
    port_sock_hostname(host, sizeof host);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
        fclose(f);
    }
    /* The namespace's inode (and device) tell namespaces apart on one kernel. */
    if (stat("/proc/self/ns/net", &st) == 0) ns[0] = (uint64_t)st.st_ino, ns[1] = (uint64_t)st.st_dev;
    uint64_t h = fnv(0xcbf29ce484222325ull, host, strlen(host) + 1);
    h = fnv(h, boot, strlen(boot) + 1);
    h = fnv(h, ns, sizeof ns);
    return h ? h : 1;
}
