/* Named-tensor files: the writer (format and guarantees: nn/stio.h). */
#include "nn/stio.h"
#include <errno.h>
#include <fcntl.h>
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

/* Buffered emitter for the header: counts only when fd < 0 (first pass: the length). */
typedef struct {
    int fd, failed, *counts;
    size_t n, total;
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

static void header(out *o, const stio_tensor *t, int nt, const stio_meta *m, int nm, const uint32_t *crc)
{
    put(o, "{\"__metadata__\":{", 17);
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
        if (!m[i].key || !m[i].value || !strncmp(m[i].key, "crc32.", 6)) {
            snprintf(err, errlen, "%s: metadata %d: missing, or a reserved key (crc32.*)", path, i);
            return -1;
        }
    return 0;
}

/* Older generations: PATH.k -> PATH.k+1 (the oldest goes), then PATH.1 = PATH (a hard
 * link: PATH itself stays until the new file replaces it). */
static int rotate(const char *path, int keep, int *counts, char *what, size_t wlen)
{
    char a[1100], b[1100];
    struct stat st;
    if (stat(path, &st)) return 0; /* first save */
    snprintf(a, sizeof a, "%s.%d", path, keep - 1);
    snprintf(what, wlen, "unlink %s", a);
    if (inject(S_UNLINK, counts) || (unlink(a) && errno != ENOENT)) return -1;
    for (int k = keep - 2; k >= 1; k--) {
        snprintf(a, sizeof a, "%s.%d", path, k);
        snprintf(b, sizeof b, "%s.%d", path, k + 1);
        snprintf(what, wlen, "rename %s to %s", a, b);
        if (inject(S_ROTATE, counts) || (rename(a, b) && errno != ENOENT)) return -1;
    }
    snprintf(a, sizeof a, "%s.1", path);
    snprintf(what, wlen, "link %s to %s", path, a);
    if (inject(S_LINK, counts) || link(path, a)) return -1;
    return 0;
}

int stio_save(const char *path, const stio_tensor *t, int nt, const stio_meta *m, int nm, int keep, char *err,
              size_t errlen)
{
    uint32_t crc[1024];
    int counts[S_N] = {0};
    if (nt < 0 || nt > 1024 || nm < 0 || keep < 1 || keep > 1000) {
        snprintf(err, errlen, "%s: stio_save: %d tensors (at most 1024), keep %d (1-1000)", path, nt, keep);
        return -1;
    }
    if (check_args(path, t, nt, m, nm, err, errlen)) return -1;
    for (int i = 0; i < nt; i++) {
        size_t n = tensor_bytes(&t[i]);
        uLong c = crc32(0, NULL, 0);
        for (size_t off = 0; off < n; off += 1u << 30) /* zlib takes 32-bit lengths */
            c = crc32(c, (const Bytef *)t[i].data + off, (uInt)(n - off > (1u << 30) ? 1u << 30 : n - off));
        crc[i] = (uint32_t)c;
    }
    out o = {.fd = -1, .counts = counts};
    header(&o, t, nt, m, nm, crc);
    uint64_t hlen = o.total;
    char tmp[1100], what[2300], dir[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    snprintf(what, sizeof what, "create %s", tmp);
    int fd = inject(S_OPEN, counts) ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) goto fail;
    snprintf(what, sizeof what, "write %s", tmp);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
    if (write_all(fd, len8, 8, counts)) goto fail;
    o = (out){.fd = fd, .counts = counts};
    header(&o, t, nt, m, nm, crc);
    flush(&o);
    if (o.failed) { errno = o.failed; goto fail; }
    for (int i = 0; i < nt; i++)
        if (write_all(fd, t[i].data, tensor_bytes(&t[i]), counts)) goto fail;
    snprintf(what, sizeof what, "fsync %s", tmp);
    if (inject(S_FSYNC, counts) || fsync(fd)) goto fail;
    snprintf(what, sizeof what, "close %s", tmp);
    int c = inject(S_CLOSE, counts) ? -1 : 0;
    int e = errno;
    if (close(fd) && !c) c = -1, e = errno;
    fd = -1;
    errno = e;
    if (c) goto fail;
    if (keep > 1 && rotate(path, keep, counts, what, sizeof what)) goto fail;
    snprintf(what, sizeof what, "rename %s to %s", tmp, path);
    if (inject(S_RENAME, counts) || rename(tmp, path)) goto fail;
    /* The rename is durable once the directory is: without this a crash could bring
     * back the old name (or none). PATH is the new file already: report, do not undo. */
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int bad = dfd < 0 || inject(S_FSYNC_DIR, counts) || fsync(dfd);
    e = errno;
    if (dfd >= 0) close(dfd);
    if (bad) {
        snprintf(err, errlen, "%s: saved, but fsync of directory %s failed: %s (the save may not survive a crash)",
                 path, dir, strerror(e));
        return -1;
    }
    return 0;
fail:
    e = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    snprintf(err, errlen, "%s: save failed: cannot %s: %s (the previous checkpoint is untouched)", path, what,
             strerror(e));
    return -1;
}
