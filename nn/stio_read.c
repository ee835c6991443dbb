/* Named-tensor files: the reader. A strict parser for the safetensors header (JSON
 * subset: one object of tensors and "__metadata__"); every length, offset and count
 * is checked before use, and each error names the file and the byte offset. */
#include "nn/stio.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_VALUE 4096

typedef struct {
    char name[STIO_MAX_NAME];
    int dtype, ndim;
    int64_t shape[STIO_MAX_DIMS];
    uint64_t begin, end;
} tinfo;

typedef struct { char *key, *value; } kv;

struct stio_file {
    char name[512];
    int fd;                 /* -1: in memory */
    const unsigned char *mem;
    uint64_t size, hlen;    /* file bytes; header bytes (after the 8-byte length) */
    tinfo *t;
    int nt, cap;
    kv *m;
    int nm, mcap;
    size_t hcrc_at;         /* offset in the header of crc32.__header__'s 8 digits (0: none) */
};

typedef struct { const char *s; size_t n, i; stio_file *f; char *err; size_t errlen; } parser;

static int fail(parser *p, const char *what)
{
    snprintf(p->err, p->errlen, "%s: offset %zu: %s", p->f->name, (size_t)(8 + p->i), what);
    return -1;
}

static void ws(parser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\r' || p->s[p->i] == '\t')) p->i++;
}

static int expect(parser *p, char c)
{
    char m[40];
    ws(p);
    if (p->i < p->n && p->s[p->i] == c) { p->i++; return 0; }
    snprintf(m, sizeof m, "header: expected '%c'", c);
    return fail(p, m);
}

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

/* A JSON string into out (cap bytes, NUL-terminated); too long is an error. */
static int str(parser *p, char *out, size_t cap)
{
    size_t k = 0;
    if (expect(p, '"')) return -1;
    while (p->i < p->n && p->s[p->i] != '"') {
        unsigned c = (unsigned char)p->s[p->i++];
        if (c < 0x20) return fail(p, "header: control character in a string");
        if (c == '\\') {
            if (p->i >= p->n) break;
            char e = p->s[p->i++];
            if (e == 'u') {
                unsigned u = 0;
                for (int j = 0; j < 4; j++) {
                    int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
                    if (h < 0) return fail(p, "header: bad \\u escape");
                    u = u << 4 | (unsigned)h;
                    p->i++;
                }
                if (u >= 0xd800 && u < 0xe000) return fail(p, "header: surrogate \\u escape");
                unsigned char b[3];
                int nb = u < 0x80 ? (b[0] = (unsigned char)u, 1)
                       : u < 0x800 ? (b[0] = (unsigned char)(0xc0 | u >> 6), b[1] = (unsigned char)(0x80 | (u & 63)), 2)
                       : (b[0] = (unsigned char)(0xe0 | u >> 12), b[1] = (unsigned char)(0x80 | (u >> 6 & 63)),
                          b[2] = (unsigned char)(0x80 | (u & 63)), 3);
                if (!u) return fail(p, "header: NUL in a string");
                for (int j = 0; j < nb; j++) {
                    if (k + 1 >= cap) return fail(p, "header: string too long");
                    out[k++] = (char)b[j];
                }
                continue;
            }
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *q = e ? strchr(from, e) : NULL;
            if (!q) return fail(p, "header: bad escape in a string");
            c = (unsigned char)to[q - from];
        }
        if (k + 1 >= cap) return fail(p, "header: string too long");
        out[k++] = (char)c;
    }
    if (p->i >= p->n) return fail(p, "header: unterminated string");
    p->i++;
    out[k] = 0;
    return 0;
}

static int unum(parser *p, uint64_t *v)
{
    ws(p);
    size_t start = p->i;
    *v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        if (*v > (UINT64_MAX - 9) / 10) return fail(p, "header: number too large");
        *v = *v * 10 + (uint64_t)(p->s[p->i++] - '0');
    }
    return p->i == start ? fail(p, "header: expected a non-negative integer") : 0;
}

static int uint_array(parser *p, uint64_t *v, int max, int *n)
{
    *n = 0;
    if (expect(p, '[')) return -1;
    ws(p);
    if (p->i < p->n && p->s[p->i] == ']') { p->i++; return 0; }
    for (;;) {
        if (*n == max) return fail(p, "header: array too long");
        if (unum(p, &v[(*n)++])) return -1;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        return expect(p, ']');
    }
}

static int tensor(parser *p, const char *name)
{
    stio_file *f = p->f;
    if (f->nt == f->cap) {
        int nc = f->cap ? 2 * f->cap : 16;
        tinfo *t = realloc(f->t, sizeof *t * (size_t)nc);
        if (!t) return fail(p, "out of memory");
        f->t = t, f->cap = nc;
    }
    tinfo *t = &f->t[f->nt];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    int have = 0, n;
    char key[32], dt[16];
    uint64_t v[STIO_MAX_DIMS], off[2];
    if (expect(p, '{')) return -1;
    do {
        if (str(p, key, sizeof key) || expect(p, ':')) return -1;
        if (!strcmp(key, "dtype") && !(have & 1)) {
            if (str(p, dt, sizeof dt)) return -1;
            for (t->dtype = 0; t->dtype < STIO_NDTYPE && strcmp(dt, stio_dtype_names[t->dtype]); t->dtype++) {}
            if (t->dtype == STIO_NDTYPE) return fail(p, "header: unsupported dtype");
            have |= 1;
        } else if (!strcmp(key, "shape") && !(have & 2)) {
            if (uint_array(p, v, STIO_MAX_DIMS, &t->ndim)) return -1;
            for (int d = 0; d < t->ndim; d++) {
                if (v[d] > (uint64_t)INT64_MAX) return fail(p, "header: dimension too large");
                t->shape[d] = (int64_t)v[d];
            }
            have |= 2;
        } else if (!strcmp(key, "data_offsets") && !(have & 4)) {
            if (uint_array(p, off, 2, &n)) return -1;
            if (n != 2 || off[0] > off[1]) return fail(p, "header: data_offsets must be [begin,end] with begin <= end");
            t->begin = off[0], t->end = off[1];
            have |= 4;
        } else {
            return fail(p, "header: unexpected or repeated key in a tensor entry");
        }
        ws(p);
    } while (p->i < p->n && p->s[p->i] == ',' && ++p->i);
    if (expect(p, '}')) return -1;
    if (have != 7) return fail(p, "header: tensor entry lacks dtype, shape or data_offsets");
    uint64_t bytes = stio_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        if (__builtin_mul_overflow(bytes, (uint64_t)t->shape[d], &bytes)) return fail(p, "header: tensor size overflows");
    if (t->end - t->begin != bytes) return fail(p, "header: data_offsets do not match dtype and shape");
    for (int i = 0; i < f->nt; i++)
        if (!strcmp(f->t[i].name, name)) return fail(p, "header: tensor name repeated");
    f->nt++;
    return 0;
}

static int metadata(parser *p)
{
    stio_file *f = p->f;
    char key[STIO_MAX_NAME + 8], *val = malloc(MAX_VALUE);
    if (!val) return fail(p, "out of memory");
    int rc = expect(p, '{');
    ws(p);
    if (!rc && p->i < p->n && p->s[p->i] == '}') { p->i++; free(val); return 0; }
    while (!rc) {
        if ((rc = str(p, key, sizeof key) || expect(p, ':'))) break;
        ws(p);
        size_t vat = p->i + 1; /* the value's first byte, if it has no escapes */
        if ((rc = str(p, val, MAX_VALUE))) break;
        if (!strcmp(key, STIO_HEADER_CRC)) {
            /* Verified over the raw bytes: they must be the 8 digits themselves. */
            if (p->i - vat != 9 || strspn(val, "0123456789abcdef") != 8) { rc = fail(p, "header: bad " STIO_HEADER_CRC); break; }
            f->hcrc_at = vat;
        }
        if (stio_meta_get(f, key)) { rc = fail(p, "header: metadata key repeated"); break; }
        if (f->nm == f->mcap) {
            int nc = f->mcap ? 2 * f->mcap : 16;
            kv *m = realloc(f->m, sizeof *m * (size_t)nc);
            if (!m) { rc = fail(p, "out of memory"); break; }
            f->m = m, f->mcap = nc;
        }
        f->m[f->nm].key = strdup(key);
        f->m[f->nm].value = strdup(val);
        if (!f->m[f->nm].key || !f->m[f->nm].value) {
            free(f->m[f->nm].key), free(f->m[f->nm].value);
            rc = fail(p, "out of memory");
            break;
        }
        f->nm++;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        rc = expect(p, '}');
        break;
    }
    free(val);
    return rc;
}

static int cmp_begin(const void *a, const void *b)
{
    const tinfo *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

static int parse(stio_file *f, const char *hdr, char *err, size_t errlen)
{
    parser p = {hdr, (size_t)f->hlen, 0, f, err, errlen};
    char name[STIO_MAX_NAME];
    int seen_meta = 0;
    if (expect(&p, '{')) return -1;
    ws(&p);
    if (p.i < p.n && p.s[p.i] == '}') p.i++;
    else
        for (;;) {
            if (str(&p, name, sizeof name) || expect(&p, ':')) return -1;
            if (!strcmp(name, "__metadata__")) {
                if (seen_meta++) return fail(&p, "header: __metadata__ repeated");
                if (metadata(&p)) return -1;
            } else if (tensor(&p, name)) {
                return -1;
            }
            ws(&p);
            if (p.i < p.n && p.s[p.i] == ',') { p.i++; continue; }
            if (expect(&p, '}')) return -1;
            break;
        }
    ws(&p);
    if (p.i != p.n) return fail(&p, "header: bytes after the closing '}'");
    /* The tensors must tile the data exactly: no gap, no overlap, no trailing bytes. */
    uint64_t dlen = f->size - 8 - f->hlen, at = 0;
    tinfo *s = malloc(sizeof *s * (size_t)(f->nt ? f->nt : 1));
    if (!s) { snprintf(err, errlen, "%s: out of memory", f->name); return -1; }
    memcpy(s, f->t, sizeof *s * (size_t)f->nt);
    qsort(s, (size_t)f->nt, sizeof *s, cmp_begin);
    int rc = 0;
    for (int i = 0; i < f->nt && !rc; i++) {
        if (s[i].begin != at) {
            snprintf(err, errlen, "%s: offset %llu: tensor %s data starts at %llu, expected %llu (gap or overlap)",
                     f->name, (unsigned long long)(8 + f->hlen + at), s[i].name, (unsigned long long)s[i].begin,
                     (unsigned long long)at);
            rc = -1;
        } else if (s[i].end > dlen) {
            snprintf(err, errlen, "%s: offset %llu: tensor %s data ends %llu bytes past the end of the file "
                     "(truncated?)", f->name, (unsigned long long)(8 + f->hlen + s[i].begin), s[i].name,
                     (unsigned long long)(s[i].end - dlen));
            rc = -1;
        }
        at = s[i].end;
    }
    if (!rc && at != dlen) {
        snprintf(err, errlen, "%s: offset %llu: %llu bytes after the last tensor", f->name,
                 (unsigned long long)(8 + f->hlen + at), (unsigned long long)(dlen - at));
        rc = -1;
    }
    free(s);
    return rc;
}

static int open_common(stio_file *f, char *err, size_t errlen)
{
    unsigned char len8[8];
    if (f->size < 8) {
        snprintf(err, errlen, "%s: offset 0: %llu bytes: too short for a safetensors file", f->name,
                 (unsigned long long)f->size);
        return -1;
    }
    if (f->fd >= 0 ? pread(f->fd, len8, 8, 0) != 8 : (memcpy(len8, f->mem, 8), 0)) {
        snprintf(err, errlen, "%s: offset 0: cannot read: %s", f->name, strerror(errno));
        return -1;
    }
    for (int i = 7; i >= 0; i--) f->hlen = f->hlen << 8 | len8[i];
    if (f->hlen < 2 || f->hlen > STIO_MAX_HEADER || f->hlen > f->size - 8) {
        snprintf(err, errlen, "%s: offset 0: header length %llu is out of range (file has %llu bytes)", f->name,
                 (unsigned long long)f->hlen, (unsigned long long)f->size);
        return -1;
    }
    char *h = malloc((size_t)f->hlen);
    if (!h) { snprintf(err, errlen, "%s: out of memory for the header", f->name); return -1; }
    if (f->fd >= 0 ? pread(f->fd, h, (size_t)f->hlen, 8) != (ssize_t)f->hlen : (memcpy(h, f->mem + 8, (size_t)f->hlen), 0)) {
        snprintf(err, errlen, "%s: offset 8: cannot read the header", f->name);
        free(h);
        return -1;
    }
    int rc = parse(f, h, err, errlen);
    if (!rc && f->hcrc_at) {
        unsigned long want = strtoul(stio_meta_get(f, STIO_HEADER_CRC), NULL, 16);
        memset(h + f->hcrc_at, '0', 8);
        uLong got = crc32(0, (const Bytef *)h, (uInt)f->hlen);
        if (got != want) {
            snprintf(err, errlen, "%s: offset 8: header checksum mismatch (stored %08lx, computed %08lx): the file is "
                     "corrupt", f->name, want, (unsigned long)got);
            rc = -1;
        }
    }
    free(h);
    return rc;
}

int stio_open(stio_file **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    stio_file *f = calloc(1, sizeof *f);
    struct stat st;
    if (!f) { snprintf(err, errlen, "%s: out of memory", path); return -1; }
    snprintf(f->name, sizeof f->name, "%s", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0 || fstat(f->fd, &st)) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        stio_close(f);
        return -1;
    }
    f->size = (uint64_t)st.st_size;
    if (open_common(f, err, errlen)) { stio_close(f); return -1; }
    *out = f;
    return 0;
}

int stio_open_mem(stio_file **out, const void *buf, size_t len, const char *name, char *err, size_t errlen)
{
    *out = NULL;
    stio_file *f = calloc(1, sizeof *f);
    if (!f) { snprintf(err, errlen, "%s: out of memory", name); return -1; }
    snprintf(f->name, sizeof f->name, "%s", name);
    f->fd = -1, f->mem = buf, f->size = len;
    if (open_common(f, err, errlen)) { stio_close(f); return -1; }
    *out = f;
    return 0;
}

void stio_close(stio_file *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->nm; i++) free(f->m[i].key), free(f->m[i].value);
    free(f->m);
    free(f->t);
    free(f);
}

int stio_open_part(stio_file **out, const char *base, const char *suffix, const stio_file *main, char *err,
                   size_t errlen)
{
    char path[1200], e2[600];
    const char *id = stio_meta_get(main, STIO_SAVE_ID);
    *out = NULL;
    if (!id) {
        snprintf(err, errlen, "%s: no save id (%s): not written together with %s%s", main->name, STIO_SAVE_ID, base,
                 suffix);
        return -1;
    }
    for (int prev = 0; prev < 2; prev++) {
        stio_file *f;
        snprintf(path, sizeof path, "%s%s%s", base, suffix, prev ? ".prev" : "");
        if (stio_open(&f, path, e2, sizeof e2)) {
            if (prev && errno == ENOENT) break; /* no .prev: the first file's error stands */
            snprintf(err, errlen, "%s", e2);
            if (!prev && errno != ENOENT) return -1;
            continue;
        }
        const char *pid = stio_meta_get(f, STIO_SAVE_ID);
        if (pid && !strcmp(pid, id)) {
            *out = f;
            return 0;
        }
        if (!prev)
            snprintf(err, errlen, "%s is from another save than %s (save ids %s and %s): resume from a pair written "
                     "together (an older generation, %s.1?)", path, main->name, pid ? pid : "none", id, base);
        stio_close(f);
    }
    return -1;
}

const char *stio_meta_get(const stio_file *f, const char *key)
{
    for (int i = 0; i < f->nm; i++)
        if (!strcmp(f->m[i].key, key)) return f->m[i].value;
    return NULL;
}

int stio_count(const stio_file *f) { return f->nt; }

int stio_info(const stio_file *f, int i, stio_tensor *out)
{
    if (i < 0 || i >= f->nt) return -1;
    const tinfo *t = &f->t[i];
    *out = (stio_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim};
    memcpy(out->shape, t->shape, sizeof t->shape);
    return 0;
}

uint64_t stio_data_offset(const stio_file *f, int i)
{
    return i < 0 || i >= f->nt ? 0 : 8 + f->hlen + f->t[i].begin;
}

static void shape_text(char *s, size_t n, const int64_t *shape, int ndim)
{
    size_t o = (size_t)snprintf(s, n, "[");
    for (int d = 0; d < ndim && o < n; d++) o += (size_t)snprintf(s + o, n - o, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (o < n) snprintf(s + o, n - o, "]");
}

int stio_read(stio_file *f, const stio_tensor *want, int nt, char *err, size_t errlen)
{
    for (int i = 0; i < nt; i++) {
        const stio_tensor *w = &want[i];
        const tinfo *t = NULL;
        for (int j = 0; j < f->nt && !t; j++)
            if (!strcmp(f->t[j].name, w->name)) t = &f->t[j];
        if (!t) {
            snprintf(err, errlen, "%s: no tensor %s in the file (%d tensors; another model?)", f->name, w->name, f->nt);
            return -1;
        }
        char a[200], b[200];
        shape_text(a, sizeof a, t->shape, t->ndim);
        shape_text(b, sizeof b, w->shape, w->ndim);
        if (t->dtype != w->dtype || strcmp(a, b)) {
            snprintf(err, errlen, "%s: tensor %s is %s %s in the file, expected %s %s", f->name, w->name,
                     stio_dtype_names[t->dtype], a, w->dtype >= 0 && w->dtype < STIO_NDTYPE ? stio_dtype_names[w->dtype] : "?", b);
            return -1;
        }
        uint64_t off = 8 + f->hlen + t->begin, n = t->end - t->begin;
        if (f->fd < 0) {
            memcpy(w->data, f->mem + off, (size_t)n);
        } else {
            for (uint64_t got = 0; got < n;) {
                ssize_t r = pread(f->fd, (char *)w->data + got, (size_t)(n - got), (off_t)(off + got));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) {
                    snprintf(err, errlen, "%s: offset %llu: cannot read tensor %s: %s", f->name,
                             (unsigned long long)(off + got), w->name, r ? strerror(errno) : "end of file");
                    return -1;
                }
                got += (uint64_t)r;
            }
        }
        char key[STIO_MAX_NAME + 8];
        snprintf(key, sizeof key, "crc32.%s", w->name);
        const char *c = stio_meta_get(f, key);
        if (c) {
            uLong crc = crc32(0, NULL, 0);
            for (uint64_t o = 0; o < n; o += 1u << 30)
                crc = crc32(crc, (const Bytef *)w->data + o, (uInt)(n - o > (1u << 30) ? 1u << 30 : n - o));
            char *end;
            unsigned long want_crc = strtoul(c, &end, 16);
            if (*end || want_crc != (uint32_t)crc) {
                snprintf(err, errlen, "%s: offset %llu: tensor %s: checksum mismatch (file %s, data %08x): the file is "
                         "corrupt", f->name, (unsigned long long)off, w->name, c, (unsigned)crc);
                return -1;
            }
        }
    }
    return 0;
}
