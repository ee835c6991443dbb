/* file:///path on a shared filesystem (Slurm clusters without a known master): rank 0
 * listens on an ephemeral port and publishes "where to find me" in PATH, written
 * atomically (PATH.tmp.PID, then rename), so a reader sees either the old file or the
 * whole new one. The file carries the token hash and a fresh random generation: a
 * stale file from an earlier run is either another job's (token differs: ignored) or
 * points at a dead port (refused: read again) or at a new listener that refuses the
 * old generation (read again). Rank 0 removes the file once everyone has met. The
 * rest of the meeting and the collectives are the TCP ones. */
#include "rt/rdzv_int.h"
#include "rt/env.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/log.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_MAGIC "ddprt-rdzv-file 1"

typedef struct { uint64_t token, gen; int world, port; char host[64]; } rdzv_file;

static uint64_t random64(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
        close(fd);
    }
    v ^= (uint64_t)port_now_ns() ^ ((uint64_t)getpid() << 32);
    return v ? v : 1;
}

/* 0 read and parsed; 1 missing; 2 not a rendezvous file. */
static int read_file(const char *path, rdzv_file *f)
{
    FILE *fp = fopen(path, "r");
    if (!fp) return 1;
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    unsigned long long tok, gen;
    if (sscanf(buf, FILE_MAGIC "\ntoken %llx\ngen %llx\nworld %d\naddr %63[^:]:%d\n", &tok, &gen, &f->world,
               f->host, &f->port) != 5 || f->port < 1 || f->port > 65535)
        return 2;
    f->token = tok;
    f->gen = gen;
    return 0;
}

static int write_file(const char *path, const rdzv_file *f, char *err, size_t errlen)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *fp = fopen(tmp, "w");
    int ok = fp && fprintf(fp, FILE_MAGIC "\ntoken %016llx\ngen %016llx\nworld %d\naddr %s:%d\n",
                           (unsigned long long)f->token, (unsigned long long)f->gen, f->world, f->host, f->port) > 0;
    if (fp) {
        /* Durable before it becomes visible under the real name; always close. */
        ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
        ok = (fclose(fp) == 0) && ok;
    }
    if (!ok || rename(tmp, path)) {
        snprintf(err, errlen, "rank 0: cannot write rendezvous file %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int rt_rdzv_open_file(rt_rdzv *r, const rt_rdzv_plan *p, char *err, size_t errlen)
{
    rdzv_file f;
    char e[256];
    if (r->rank == 0) {
        r->lfd = port_sock_listen(NULL, 0, r->world + 64, e, sizeof e);
        if (r->lfd < 0) { snprintf(err, errlen, "rank 0: %s", e); return -1; }
        memset(&f, 0, sizeof f);
        f.token = r->token_hash;
        f.gen = r->gen = random64();
        f.world = r->world;
        f.port = port_sock_local_port(r->lfd);
        port_sock_host_ip(rt_env_str(RT_ENV_SOCKET_IFNAME), NULL, f.host, sizeof f.host);
        if (write_file(p->path, &f, err, errlen)) return -1;
        int rc = rt_rdzv_serve_meeting(r, err, errlen);
        /* Everyone has read it (or the meeting failed): remove it so that a rerun cannot
         * mistake it for its own; leave it alone if a newer run replaced it. */
        rdzv_file now;
        if (read_file(p->path, &now) == 0 && now.gen == f.gen) unlink(p->path);
        return rc;
    }
    int64_t deadline = port_now_ns() + (int64_t)(r->timeout_s * 1e9), backoff = 20000000;
    char last[RT_RDZV_MAX_TEXT + 1200] = "no attempt";
    for (;;) {
        int k = read_file(p->path, &f), rc = 1;
        if (k == 1) snprintf(last, sizeof last, "%s does not exist yet (rank 0 writes it)", p->path);
        else if (k == 2) snprintf(last, sizeof last, "%s is not a ddprt rendezvous file (yet)", p->path);
        else if (f.token != r->token_hash)
            snprintf(last, sizeof last, "%s belongs to another job (token differs; stale file from an earlier run?)",
                     p->path);
        else if (f.world != r->world)
            snprintf(last, sizeof last, "%s is for world size %d, this rank has %d (stale file?)", p->path, f.world,
                     r->world);
        else {
            r->gen = f.gen;
            rc = rt_rdzv_try_join(r, f.host, f.port, deadline, last, sizeof last, err, errlen);
            if (rc <= 0) return rc;
        }
        if (rt_rdzv_backoff(r, deadline, &backoff, 500000000LL, "through", last, err, errlen)) return -1;
    }
}
