/* One flight-recorder file parsed strictly (trace.h): the version, header values and
 * every row's fields in their domains, so a merge never rests on a misread number. */
#include "apps/trace/trace.h"
#include "rt/tensor.h"
#include "transport/tp.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const states[] = {"-", "issued", "running", "done", "failed"};

/* Digits only (no sign, no space), fitting 64 bits. */
static int u64(const char *s, unsigned long long *v)
{
    if (!*s || strspn(s, "0123456789") != strlen(s)) return -1;
    errno = 0;
    *v = strtoull(s, NULL, 10);
    return errno ? -1 : 0;
}

static int i32(const char *s, int *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (!*s || *end || errno || x < INT_MIN || x > INT_MAX) return -1;
    *v = (int)x;
    return 0;
}

/* A time in unix seconds (0 = not yet). */
static int secs(const char *s, double *v)
{
    char *end;
    *v = strtod(s, &end);
    return !*s || *end || !isfinite(*v) || *v < 0 ? -1 : 0;
}

static int one_of(const char *s, const char *const *names, int n, const char *extra)
{
    for (int i = 0; i < n; i++)
        if (names[i] && !strcmp(s, names[i])) return 1;
    return extra && !strcmp(s, extra);
}

/* A row: seq kind dtype redop root bytes state rc t_issue t_start t_end. NULL or what is wrong. */
static const char *row(char *line, const trace_file *f, trace_ent *e)
{
    char *tok[12], *save = NULL;
    int nt = 0, root, rc;
    for (char *t = strtok_r(line, " ", &save); t && nt < 12; t = strtok_r(NULL, " ", &save)) tok[nt++] = t;
    if (nt != 11) return "not a trace line (expected 11 fields: seq kind dtype redop root bytes state rc times)";
    const char *kinds[TP_NKINDS];
    for (int k = 0; k < TP_NKINDS; k++) kinds[k] = tp_kind_name(k);
    if (u64(tok[0], &e->seq) || !e->seq) return "sequence number: expected 1 to 2^64-1";
    if (f->issued && e->seq > f->issued) return "sequence number past the header's 'issued'";
    if (!one_of(tok[1], kinds, TP_NKINDS, NULL)) return "unknown kind of collective";
    if (!one_of(tok[2], rt_dtype_names, RT_NDTYPE, "?")) return "unknown data type";
    if (!one_of(tok[3], tp_op_names, TP_NOPS, "?")) return "unknown reduction";
    if (i32(tok[4], &root) || root < -1) return "root: expected an integer >= -1";
    if (u64(tok[5], &e->bytes) || e->bytes > (1ull << 62)) return "bytes: expected a size 0 to 2^62";
    if (!one_of(tok[6], states, 5, NULL)) return "unknown state";
    if (i32(tok[7], &rc)) return "rc: expected an integer";
    if (secs(tok[8], &e->t0) || secs(tok[9], &e->t1) || secs(tok[10], &e->t2)) return "times: expected seconds >= 0";
    snprintf(e->kind, sizeof e->kind, "%s", tok[1]);
    snprintf(e->dt, sizeof e->dt, "%s", tok[2]);
    snprintf(e->op, sizeof e->op, "%s", tok[3]);
    snprintf(e->state, sizeof e->state, "%s", tok[6]);
    return NULL;
}

/* A header line (KEY VALUE): 1 when it was one, -1 with *why when its value is bad or
 * the key came before (seen: a bit per key; rows: rows were read, so the header ended). */
static int header(const char *line, trace_file *f, unsigned *seen, int rows, const char **why)
{
    static const char *const keys[] = {"rank", "world", "pid", "host", "now", "issued", "why"};
    const char *sp = strchr(line, ' ');
    if (!sp) return 0;
    const char *v = sp + 1;
    size_t k = (size_t)(sp - line);
    unsigned long long u;
    int key = -1;
    for (int i = 0; i < 7 && key < 0; i++)
        if (strlen(keys[i]) == k && !strncmp(line, keys[i], k)) key = i;
    if (key < 0) return 0;
    if (rows) return *why = "a header line after the rows", -1;
    if (*seen >> key & 1) return *why = "a header line given twice", -1;
    *seen |= 1u << key;
    switch (key) {
    case 0:
        if (i32(v, &f->rank) || f->rank < 0) return *why = "rank: expected an integer >= 0", -1;
        break;
    case 1:
        if (i32(v, &f->world) || f->world < 1) return *why = "world: expected a positive integer", -1;
        if (f->world > TRACE_MAX_WORLD) return *why = "world: more ranks than ddprt-trace merges (65536)", -1;
        break;
    case 2:
        if (i32(v, &f->pid)) return *why = "pid: expected an integer", -1;
        break;
    case 3: snprintf(f->host, sizeof f->host, "%.127s", v); break;
    case 4:
        if (secs(v, &f->now)) return *why = "now: expected seconds >= 0", -1;
        break;
    case 5:
        if (u64(v, &u)) return *why = "issued: expected 0 to 2^64-1", -1;
        f->issued = u;
        break;
    default: snprintf(f->why, sizeof f->why, "%.590s", v); break;
    }
    return 1;
}

void trace_file_free(trace_file *f)
{
    free(f->e);
    f->e = NULL;
    f->n = 0;
}

int trace_parse(const char *text, size_t n, const char *path, trace_file *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    snprintf(f->file, sizeof f->file, "%s", path);
    f->rank = -1;
    int cap = 0, lineno = 0, version = 0;
    unsigned seen = 0;
    const char *why = NULL;
    char line[1024], vmsg[120];
    for (size_t at = 0; at < n && !why;) {
        const char *nl = memchr(text + at, '\n', n - at);
        size_t len = (nl ? (size_t)(nl - text) : n) - at;
        lineno++;
        if (!nl) { /* the writer died inside this line: the complete ones stand */
            f->cut = lineno;
            break;
        }
        if (len >= sizeof line || memchr(text + at, 0, len)) {
            why = len >= sizeof line ? "line longer than 1023 bytes" : "a NUL byte (not a trace file)";
            break;
        }
        memcpy(line, text + at, len);
        line[len] = 0;
        at += len + 1;
        if (!version) { /* the first line says the format */
            unsigned long long v;
            if (strncmp(line, "# ddprt-trace ", 14) || u64(line + 14, &v))
                why = "not a ddprt-trace file (no '# ddprt-trace 1' first line)";
            else if (v != TRACE_VERSION) {
                snprintf(vmsg, sizeof vmsg, "version %llu; this ddprt-trace reads version %d (another ddprt's file?)",
                         v, TRACE_VERSION);
                why = vmsg;
            }
            version = 1;
            continue;
        }
        if (line[0] == '#' || !line[0]) continue;
        int h = header(line, f, &seen, f->n > 0, &why);
        if (h) continue;
        if (f->n == cap) {
            trace_ent *ne = f->n < INT_MAX / 2 ? realloc(f->e, sizeof *ne * (size_t)(cap = cap ? 2 * cap : 256)) : NULL;
            if (!ne) { why = "out of memory"; break; }
            f->e = ne;
        }
        why = row(line, f, &f->e[f->n]);
        if (!why) f->n++;
    }
    if (!why && !version) why = "empty (no '# ddprt-trace 1' first line)", lineno = 1;
    if (!why && (f->rank < 0 || f->world <= 0)) why = "no rank and world lines", lineno = 0;
    if (!why && f->rank >= f->world) why = "rank outside the world", lineno = 0;
    if (why) {
        if (lineno) snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
        else snprintf(err, errlen, "%s: %s", path, why);
        trace_file_free(f);
        return -1;
    }
    f->ok = 1;
    return 0;
}
