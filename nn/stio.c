/* Named-tensor files: the writer (format and guarantees: nn/stio.h). */
#include "nn/stio.h"
#include "rt/hash.h"
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

const char *const stio_dtype_names[STIO_NDTYPE] = {"F32", "F64", "F16", "BF16", "I32", "I64", "U8"};
static const size_t dtype_sizes[STIO_NDTYPE] = {4, 8, 2, 2, 4, 8, 1};
size_t stio_dtype_size(int dtype) { return dtype >= 0 && dtype < STIO_NDTYPE ? dtype_sizes[dtype] : 0; }

static stio_fault_fn fault_fn;
static void *fault_ctx;
void stio_set_fault(stio_fault_fn fn, void *ctx) { fault_fn = fn, fault_ctx = ctx; }

enum { S_OPEN, S_WRITE, S_FSYNC, S_CLOSE, S_UNLINK, S_ROTATE, S_LINK, S_RENAME, S_FSYNC_DIR, S_N };
static const char *const step_names[S_N] = {"open", "write", "fsync", "close", "unlink", "rotate", "link", "rename",
                                            "fsync-dir"};

/* The step about to run may fail by injection: 0 to go on, -1 with errno set. */
static int inject(int step, int *counts)
{
    int e = fault_fn ? fault_fn(step_names[step], counts[step], fault_ctx) : 0;
    counts[step]++;
    if (e) { errno = e; return -1; }
    return 0;
}

/* Buffered emitter for the header: counts only when fd < 0 (first pass: the length and
 * the header's CRC, taken with the CRC's own value as "00000000"). */
typedef struct {
    int fd, failed, *counts;
    size_t n, total;
    uLong crc;
    char buf[8192];
} out;

static int write_all(int fd, const void *p, size_t n, int *counts)
{
    while (n) {
        if (inject(S_WRITE, counts)) return -1;
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { if (!w) errno = EIO; return -1; }
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

static void flush(out *o)
{
    if (o->fd >= 0 && o->n && !o->failed && write_all(o->fd, o->buf, o->n, o->counts)) o->failed = errno;
    o->n = 0;
}

static void put(out *o, const char *s, size_t n)
{
    o->total += n;
    o->crc = crc32(o->crc, (const Bytef *)s, (uInt)n);
    if (o->fd < 0) return;
    while (n) {
        if (o->n == sizeof o->buf) flush(o);
        size_t k = sizeof o->buf - o->n < n ? sizeof o->buf - o->n : n;
        memcpy(o->buf + o->n, s, k);
        o->n += k, s += k, n -= k;
    }
}

static void putf(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(out *o, const char *fmt, ...)
{
    char b[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    put(o, b, k < 0 ? 0 : (size_t)k < sizeof b ? (size_t)k : sizeof b - 1);
}

/* A JSON string with the escapes the format needs. */
static void put_str(out *o, const char *s)
{
    put(o, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; put(o, e, 2); }
        else if (c < 0x20) putf(o, "\\u%04x", c);
        else put(o, s, 1);
    }
    put(o, "\"", 1);
}

static size_t tensor_bytes(const stio_tensor *t)
{
    size_t n = stio_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

/* hcrc: the header's CRC as 8 hex digits ("00000000" while it is being computed);
 * save_id: the id shared by the files of one save (NULL: a file on its own). */
static void header(out *o, const stio_tensor *t, int nt, const stio_meta *m, int nm, const uint32_t *crc,
                   const char *hcrc, const char *save_id)
{
    put(o, "{\"__metadata__\":{", 17);
    putf(o, "\"" STIO_HEADER_CRC "\":\"%s\",", hcrc);
    if (save_id) putf(o, "\"" STIO_SAVE_ID "\":\"%s\",", save_id);
    for (int i = 0; i < nm; i++) {
        put_str(o, m[i].key);
        put(o, ":", 1);
        put_str(o, m[i].value);
        put(o, ",", 1);
    }
    for (int i = 0; i < nt; i++) {
        char key[STIO_MAX_NAME + 8];
        snprintf(key, sizeof key, "crc32.%s", t[i].name);
        put_str(o, key);
        putf(o, ":\"%08x\"%s", crc[i], i + 1 < nt ? "," : "");
    }
    put(o, "}", 1);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        put(o, ",", 1);
        put_str(o, t[i].name);
        putf(o, ":{\"dtype\":\"%s\",\"shape\":[", stio_dtype_names[t[i].dtype]);
        for (int d = 0; d < t[i].ndim; d++) putf(o, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        size_t b = tensor_bytes(&t[i]);
        putf(o, "],\"data_offsets\":[%zu,%zu]}", off, off + b);
        off += b;
    }
    put(o, "}", 1);
    /* Spaces so that the data starts 8-byte aligned, as the format asks. */
    while ((o->total + 8) % 8) put(o, " ", 1);
}

static int check_args(const char *path, const stio_tensor *t, int nt, const stio_meta *m, int nm, char *err,
                      size_t errlen)
{
    for (int i = 0; i < nt; i++) {
        if (!t[i].name || !*t[i].name || strlen(t[i].name) >= STIO_MAX_NAME || !strcmp(t[i].name, "__metadata__") ||
            t[i].dtype < 0 || t[i].dtype >= STIO_NDTYPE || t[i].ndim < 0 || t[i].ndim > STIO_MAX_DIMS ||
            (!t[i].data && tensor_bytes(&t[i]))) {
            snprintf(err, errlen, "%s: tensor %d (%.64s): bad name, dtype, rank or data", path, i,
                     t[i].name ? t[i].name : "(null)");
            return -1;
        }
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0) { snprintf(err, errlen, "%s: tensor %s: negative dimension", path, t[i].name); return -1; }
        for (int j = 0; j < i; j++)
            if (!strcmp(t[i].name, t[j].name)) { snprintf(err, errlen, "%s: tensor %s twice", path, t[i].name); return -1; }
    }
    for (int i = 0; i < nm; i++)
        if (!m[i].key || !m[i].value || !strncmp(m[i].key, "crc32.", 6) || !strncmp(m[i].key, "stio.", 5)) {
            snprintf(err, errlen, "%s: metadata %d: missing, or a reserved key (crc32.*, stio.*)", path, i);
            return -1;
        }
    return 0;
}

/* Generation g of a part: BASE + suffix (g = 0), BASE.g + suffix. */
static void gen_name(char *out, size_t n, const char *base, int g, const char *suffix)
{
    if (g) snprintf(out, n, "%s.%d%s", base, g, suffix);
    else snprintf(out, n, "%s%s", base, suffix);
}

/* Older generations: BASE.k -> BASE.k+1 for every part (the oldest goes), then BASE.1 =
 * BASE (hard links: BASE itself stays until the new file replaces it). */
static int rotate(const char *base, const stio_part *p, int np, int keep, int *counts, char *what, size_t wlen)
{
    char a[1100], b[1100];
    struct stat st;
    if (stat(base, &st)) return 0; /* first save */
    for (int i = 0; i < np; i++) {
        gen_name(a, sizeof a, base, keep - 1, p[i].suffix);
        snprintf(what, wlen, "unlink %s", a);
        if (inject(S_UNLINK, counts) || (unlink(a) && errno != ENOENT)) return -1;
    }
    for (int k = keep - 2; k >= 1; k--)
        for (int i = 0; i < np; i++) {
            gen_name(a, sizeof a, base, k, p[i].suffix);
            gen_name(b, sizeof b, base, k + 1, p[i].suffix);
            snprintf(what, wlen, "rename %s to %s", a, b);
            if (inject(S_ROTATE, counts) || (rename(a, b) && errno != ENOENT)) return -1;
        }
    for (int i = 0; i < np; i++) {
        gen_name(a, sizeof a, base, 0, p[i].suffix);
        gen_name(b, sizeof b, base, 1, p[i].suffix);
        snprintf(what, wlen, "link %s to %s", a, b);
        if (inject(S_LINK, counts) || (link(a, b) && !(i && errno == ENOENT))) return -1;
    }
    return 0;
}

/* Temporary files of earlier saves of path whose process is gone (killed mid-save):
 * path.tmp.PID with no process PID on this host. Best effort. */
static void sweep_stale(const char *path)
{
    char dir[1100], prefix[600];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    snprintf(prefix, sizeof prefix, "%.580s.tmp.", slash ? slash + 1 : path);
    size_t pl = strlen(prefix);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, pl)) continue;
        char *end;
        long pid = strtol(e->d_name + pl, &end, 10);
        if (*end || end == e->d_name + pl || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to judge) */
        char f[1400];
        snprintf(f, sizeof f, "%s/%s", dir, e->d_name);
        unlink(f);
    }
    if (d) closedir(d);
}

/* Writes one part to tmp (open, length, header, data, fsync, close). what: the step. */
static int write_part(const char *tmp, const stio_part *p, const uint32_t *crc, const char *save_id, int *counts,
                      char *what, size_t wlen)
{
    out o = {.fd = -1, .counts = counts};
    header(&o, p->t, p->nt, p->m, p->nm, crc, "00000000", save_id);
    uint64_t hlen = o.total;
    char hcrc[16];
    snprintf(hcrc, sizeof hcrc, "%08x", (unsigned)o.crc);
    snprintf(what, wlen, "create %.1100s", tmp);
    int fd = inject(S_OPEN, counts) ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    snprintf(what, wlen, "write %.1100s", tmp);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
    int bad = write_all(fd, len8, 8, counts);
    if (!bad) {
        o = (out){.fd = fd, .counts = counts};
        header(&o, p->t, p->nt, p->m, p->nm, crc, hcrc, save_id);
        flush(&o);
        if (o.failed) errno = o.failed, bad = 1;
    }
    for (int i = 0; i < p->nt && !bad; i++) bad = write_all(fd, p->t[i].data, tensor_bytes(&p->t[i]), counts);
    if (!bad) {
        snprintf(what, wlen, "fsync %.1100s", tmp);
        bad = inject(S_FSYNC, counts) || fsync(fd);
    }
    if (!bad) snprintf(what, wlen, "close %.1100s", tmp);
    int c = !bad && inject(S_CLOSE, counts) ? -1 : 0, e = errno;
    if (close(fd) && !bad && !c) c = -1, e = errno;
    errno = e;
    return bad || c ? -1 : 0;
}

static void tensor_crcs(const stio_part *p, uint32_t *crc)
{
    for (int i = 0; i < p->nt; i++) {
        size_t n = tensor_bytes(&p->t[i]);
        uLong c = crc32(0, NULL, 0);
        for (size_t off = 0; off < n; off += 1u << 30) /* zlib takes 32-bit lengths */
            c = crc32(c, (const Bytef *)p->t[i].data + off, (uInt)(n - off > (1u << 30) ? 1u << 30 : n - off));
        crc[i] = (uint32_t)c;
    }
}

/* The id of a save of several files: a hash of everything in them (names, shapes, data
 * CRCs, metadata), so that identical runs write identical bytes, and files of two
 * different saves can never carry the same id unless they hold the same things. */
static void save_id_of(const stio_part *p, int np, uint32_t (*crc)[STIO_MAX_TENSORS], char *out, size_t n)
{
    uint64_t h = RT_FNV1A_INIT;
    for (int k = 0; k < np; k++) {
        h = rt_fnv1a(h, p[k].suffix, strlen(p[k].suffix) + 1);
        for (int i = 0; i < p[k].nt; i++) {
            h = rt_fnv1a(h, p[k].t[i].name, strlen(p[k].t[i].name) + 1);
            h = rt_fnv1a(h, &p[k].t[i].dtype, sizeof p[k].t[i].dtype);
            h = rt_fnv1a(h, p[k].t[i].shape, sizeof p[k].t[i].shape[0] * (size_t)p[k].t[i].ndim);
            h = rt_fnv1a(h, &crc[k][i], sizeof crc[k][i]);
        }
        for (int i = 0; i < p[k].nm; i++) {
            h = rt_fnv1a(h, p[k].m[i].key, strlen(p[k].m[i].key) + 1);
            h = rt_fnv1a(h, p[k].m[i].value, strlen(p[k].m[i].value) + 1);
        }
    }
    snprintf(out, n, "%016llx", (unsigned long long)h);
}

int stio_save_parts(const char *base, const stio_part *p, int np, int keep, char *err, size_t errlen)
{
    static uint32_t crc[STIO_MAX_PARTS][STIO_MAX_TENSORS];
    int counts[S_N] = {0}, k, renamed = 0; /* renamed: parts 1.. in place (their old file kept as .prev) */
    if (np < 1 || np > STIO_MAX_PARTS || keep < 1 || keep > 1000) {
        snprintf(err, errlen, "%s: stio_save: %d files (1-%d), keep %d (1-1000)", base, np, STIO_MAX_PARTS, keep);
        return -1;
    }
    char tmp[STIO_MAX_PARTS][1100], fin[STIO_MAX_PARTS][1100], prev[1200], what[2400], dir[1100], save_id[24];
    for (k = 0; k < np; k++) {
        gen_name(fin[k], sizeof fin[k], base, 0, k ? p[k].suffix : "");
        if (p[k].nt < 0 || p[k].nt > STIO_MAX_TENSORS || p[k].nm < 0 || (k && (!p[k].suffix || !*p[k].suffix))) {
            snprintf(err, errlen, "%s: stio_save: %d tensors (at most %d) or a part without a suffix", fin[k], p[k].nt,
                     STIO_MAX_TENSORS);
            return -1;
        }
        if (check_args(fin[k], p[k].t, p[k].nt, p[k].m, p[k].nm, err, errlen)) return -1;
        snprintf(tmp[k], sizeof tmp[k], "%.1080s.tmp.%d", fin[k], (int)getpid());
        sweep_stale(fin[k]);
        tensor_crcs(&p[k], crc[k]);
    }
    if (np > 1) save_id_of(p, np, crc, save_id, sizeof save_id);
    for (k = 0; k < np; k++)
        if (write_part(tmp[k], &p[k], crc[k], np > 1 ? save_id : NULL, counts, what, sizeof what)) goto fail;
    if (keep > 1 && rotate(base, p, np, keep, counts, what, sizeof what)) goto fail;
    /* Parts 1.. first, each old file kept as .prev until part 0 is in place: a reader
     * that finds part 0 and a part of different saves takes the .prev (stio_open_part). */
    for (renamed = 1; renamed < np; renamed++) {
        snprintf(prev, sizeof prev, "%s.prev", fin[renamed]);
        unlink(prev);
        snprintf(what, sizeof what, "link %s to %s", fin[renamed], prev);
        if (inject(S_LINK, counts) || (link(fin[renamed], prev) && errno != ENOENT)) goto fail;
        snprintf(what, sizeof what, "rename %s to %s", tmp[renamed], fin[renamed]);
        if (inject(S_RENAME, counts) || rename(tmp[renamed], fin[renamed])) goto fail;
    }
    snprintf(what, sizeof what, "rename %s to %s", tmp[0], fin[0]);
    if (inject(S_RENAME, counts) || rename(tmp[0], fin[0])) goto fail;
    for (k = 1; k < np; k++) {
        snprintf(prev, sizeof prev, "%s.prev", fin[k]);
        unlink(prev);
    }
    /* The rename is durable once the directory is: without this a crash could bring
     * back the old name (or none). BASE is the new file already: report, do not undo. */
    snprintf(dir, sizeof dir, "%s", base);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int bad = dfd < 0 || inject(S_FSYNC_DIR, counts) || fsync(dfd);
    int e = errno;
    if (dfd >= 0) close(dfd);
    if (bad) {
        snprintf(err, errlen, "%s: saved, but fsync of directory %s failed: %s (the save may not survive a crash)",
                 base, dir, strerror(e));
        return -1;
    }
    return 0;
fail:
    e = errno;
    /* Undo the parts already renamed (their .prev is the previous save's), then drop
     * every temporary file; the previous save stays as it was. */
    for (k = 1; k < renamed && k < np; k++) {
        snprintf(prev, sizeof prev, "%s.prev", fin[k]);
        if (rename(prev, fin[k]) && errno == ENOENT) unlink(fin[k]); /* there was none before */
    }
    for (k = 0; k < np; k++) unlink(tmp[k]);
    for (k = 1; k < np; k++) {
        snprintf(prev, sizeof prev, "%s.prev", fin[k]);
        unlink(prev);
    }
    snprintf(err, errlen, "%s: save failed: cannot %s: %s (the previous checkpoint is untouched)", base, what,
             strerror(e));
    return -1;
}

int stio_save(const char *path, const stio_tensor *t, int nt, const stio_meta *m, int nm, int keep, char *err,
              size_t errlen)
{
    stio_part p = {"", t, nt, m, nm};
    return stio_save_parts(path, &p, 1, keep, err, errlen);
}
