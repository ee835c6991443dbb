/* Text classification: DIR/train.tsv and DIR/test.tsv, "label<TAB>text" per line,
 * UTF-8. Tokens: lowercase runs of letters and digits (C.UTF-8 classification, so
 * "Café-au-lait" is café, au, lait). The vocabulary comes from train.tsv (both splits
 * build it, identically): <pad> = 0, <unk> = 1, then words with count >= min_freq by
 * count (desc) then bytes, at most max_vocab in all. Labels: integers, or names
 * sorted into ids. Start-up temporaries (the counting table) use malloc; what the
 * loader reads lives in the arena. */
#include "nn/data/dataset.h"
#include "nn/data/utf8.h"
#include "rt/hash.h"
#include "rt/log.h"
#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <wctype.h>

static long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) ? -1 : (long)st.st_size;
}

int nn_text_open(nn_dataset *d, const char *dir, char *err, size_t errlen)
{
    char train[600];
    snprintf(train, sizeof train, "%s/train.tsv", dir);
    snprintf(d->path[0], sizeof d->path[0], "%s/%s.tsv", dir, d->split_train ? "train" : "test");
    long tb = file_size(train), sb = file_size(d->path[0]);
    if (tb < 0 || sb < 0) {
        snprintf(err, errlen, "%s: %s (a text set is train.tsv and test.tsv, label<TAB>text per line)",
                 tb < 0 ? train : d->path[0], strerror(errno));
        return -1;
    }
    FILE *f = fopen(d->path[0], "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", d->path[0], strerror(errno));
        return -1;
    }
    char buf[1 << 16];
    size_t r;
    int n = 0, prev = '\n';
    while ((r = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < r; i++) {
            if (buf[i] != '\n' && buf[i] != '\r' && prev == '\n') n++;
            if (buf[i] != '\r') prev = buf[i];
        }
    fclose(f);
    if (!n) {
        snprintf(err, errlen, "%s: no samples (empty file)", d->path[0]);
        return -1;
    }
    d->n = n;
    d->meta_bytes = (size_t)tb;
    d->c = d->h = 1;
    d->w = d->cfg.seq_len > 0 ? d->cfg.seq_len : 64;
    d->tokens = 1;
    return 0;
}

typedef struct ent { uint32_t off, len, count; int32_t id; } ent;
typedef struct tbl { ent *e; size_t cap, n; const char *base; } tbl;

static uint64_t hash(const char *s, size_t n) { return rt_fnv1a(RT_FNV1A_INIT, s, n); }

static ent *lookup(tbl *t, const char *s, uint32_t len, int insert, uint32_t off)
{
    if (insert && 2 * (t->n + 1) > t->cap) { /* grow (start-up only) */
        tbl g = {calloc(t->cap ? 2 * t->cap : 1024, sizeof(ent)), t->cap ? 2 * t->cap : 1024, 0, t->base};
        if (!g.e) rt_fatal("text: out of memory building the vocabulary");
        for (size_t i = 0; i < t->cap; i++)
            if (t->e[i].len) *lookup(&g, t->base + t->e[i].off, t->e[i].len, 1, t->e[i].off) = t->e[i];
        free(t->e);
        *t = g;
    }
    if (!t->cap) return NULL;
    for (size_t i = hash(s, len) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        ent *e = &t->e[i];
        if (!e->len) {
            if (!insert) return NULL;
            *e = (ent){off, len, 0, -1};
            t->n++;
            return e;
        }
        if (e->len == len && !memcmp(t->base + e->off, s, len)) return e;
    }
}

/* One parsed file: per line the label and the normalised text (lowercase words
 * separated by single spaces) in a malloc'd copy. */
typedef struct line { uint32_t lab, lab_len, txt, txt_len; int lineno; } line;
typedef struct parsed { unsigned char *txt; line *lines; int n, bad; size_t used; } parsed;

static int parse(const char *path, int skip, parsed *P, char *err, size_t errlen, char *skipped, size_t sklen)
{
    static locale_t loc;
    if (!loc) loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    memset(P, 0, sizeof *P);
    long sz = file_size(path);
    FILE *f = fopen(path, "rb");
    unsigned char *raw = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (!f || !raw || fread(raw, 1, (size_t)sz, f) != (size_t)sz) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        if (f) fclose(f);
        free(raw);
        return -1;
    }
    fclose(f);
    raw[sz] = '\n';
    /* A UTF-8 byte order mark (Excel, Notepad) is not part of the first label. */
    size_t bom = sz >= 3 && raw[0] == 0xef && raw[1] == 0xbb && raw[2] == 0xbf ? 3 : 0;
    size_t nl = 1;
    for (long i = 0; i < sz; i++) nl += raw[i] == '\n';
    P->txt = malloc((size_t)sz * 2 + 16); /* lowercasing can lengthen a code point by one byte */
    P->lines = malloc(nl * sizeof(line));
    if (!P->txt || !P->lines) rt_fatal("text: out of memory reading %s", path);
    unsigned char *o = P->txt;
    int lineno = 0;
    for (size_t i = bom; i < (size_t)sz;) {
        size_t end = i;
        while (raw[end] != '\n') end++;
        lineno++;
        size_t e2 = end;
        if (e2 > i && raw[e2 - 1] == '\r') e2--;
        const char *bad = NULL;
        size_t badoff = 0;
        unsigned char *tab = memchr(raw + i, '\t', e2 - i);
        line L = {(uint32_t)(o - P->txt), 0, 0, 0, lineno};
        if (e2 == i) { i = end + 1; continue; } /* blank line */
        if (!tab) bad = "no tab between the label and the text";
        else if (tab == raw + i) bad = "empty label";
        else {
            memcpy(o, raw + i, (size_t)(tab - raw - i));
            L.lab_len = (uint32_t)(tab - raw - i);
            o += L.lab_len;
            L.txt = (uint32_t)(o - P->txt);
            int inword = 0;
            for (size_t k = (size_t)(tab - raw) + 1; k < e2;) {
                uint32_t cp;
                int len = nn_utf8_get(raw + k, e2 - k, &cp);
                if (!len) { bad = "invalid UTF-8"; badoff = k; break; }
                k += (size_t)len;
                int alnum = cp < 0x80 ? ((cp | 32) - 'a' < 26 || cp - '0' < 10) : loc ? iswalnum_l((wint_t)cp, loc) : 1;
                if (!alnum) { inword = 0; continue; }
                if (!inword && o > P->txt + L.txt) *o++ = ' ';
                inword = 1;
                cp = cp < 0x80 ? ((cp - 'A' < 26) ? cp + 32 : cp) : loc ? (uint32_t)towlower_l((wint_t)cp, loc) : cp;
                o += nn_utf8_put(o, cp);
            }
            L.txt_len = (uint32_t)(o - P->txt) - L.txt;
        }
        if (bad) {
            o = P->txt + L.lab;
            char msg[1400];
            if (badoff) snprintf(msg, sizeof msg, "%s:%d: %s at byte offset %zu", path, lineno, bad, badoff);
            else snprintf(msg, sizeof msg, "%s:%d: %s (expected label<TAB>text)", path, lineno, bad);
            if (!skip) {
                snprintf(err, errlen, "%s", msg);
                free(raw), free(P->txt), free(P->lines);
                P->txt = NULL, P->lines = NULL; /* the caller may free P again */
                return -1;
            }
            if (P->bad++ < 3) {
                size_t l = strlen(skipped);
                snprintf(skipped + l, sklen - l, "%s%s", l ? "; " : "", msg);
            }
        } else
            P->lines[P->n++] = L;
        i = end + 1;
    }
    free(raw);
    return 0;
}

static void parsed_free(parsed *P) { free(P->txt), free(P->lines); }

static int cmp_vocab(const void *a, const void *b, void *base)
{
    const ent *x = *(ent *const *)a, *y = *(ent *const *)b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    int c = memcmp((const char *)base + x->off, (const char *)base + y->off, x->len < y->len ? x->len : y->len);
    return c ? c : (int)x->len - (int)y->len;
}
static const char *g_base;
static int cmp_vocab_g(const void *a, const void *b) { return cmp_vocab(a, b, (void *)g_base); }

static int is_int(const unsigned char *s, uint32_t n, long *v)
{
    long x = 0;
    if (!n || n > 9) return 0;
    for (uint32_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        x = x * 10 + (s[i] - '0');
    }
    return *v = x, 1;
}

#define MAX_INT_LABEL 1000000 /* integer labels are class ids: 0..N-1, N at most this */

/* Records a bad line: the error (fail mode), or a skip noted in skipped. */
static int bad_line(parsed *P, int skip, const char *msg, char *err, size_t errlen, char *skipped, size_t sklen)
{
    if (!skip) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    if (P->bad++ < 3 && sklen) {
        size_t l = strlen(skipped);
        snprintf(skipped + l, sklen - l, "%s%s", l ? "; " : "", msg);
    }
    return 0;
}

/* Labels are all class ids (non-negative integers) or all names: the kind most lines
 * have (ids on a tie) wins, and a line of the other kind is bad (an error, or skipped
 * under --bad-sample skip) rather than silently renaming every class. *ints: the
 * kind; *maxl: the largest id. */
static int label_kind(parsed *T, const char *path, int skip, int *ints, long *maxl, char *err, size_t errlen,
                      char *skipped, size_t sklen)
{
    int nint = 0, first[2] = {-1, -1};
    long v;
    for (int i = 0; i < T->n; i++) {
        int k = is_int(T->txt + T->lines[i].lab, T->lines[i].lab_len, &v);
        nint += k;
        if (first[k] < 0) first[k] = i;
    }
    *ints = 2 * nint >= T->n;
    *maxl = -1;
    int kept = 0;
    for (int i = 0; i < T->n; i++) {
        line *l = &T->lines[i];
        const char *lab = (const char *)T->txt + l->lab;
        int k = is_int((const unsigned char *)lab, l->lab_len, &v);
        char msg[1400];
        msg[0] = 0;
        if (k != *ints) {
            const line *e = &T->lines[first[*ints]];
            snprintf(msg, sizeof msg, "%s:%d: label '%.*s' %s (line %d: '%.*s')", path, l->lineno,
                     (int)(l->lab_len < 64 ? l->lab_len : 64), lab,
                     *ints ? "is not a class id (a non-negative integer) as the other labels are"
                           : "is a number among named labels",
                     e->lineno, (int)(e->lab_len < 64 ? e->lab_len : 64), (const char *)T->txt + e->lab);
        } else if (k && v >= MAX_INT_LABEL) {
            snprintf(msg, sizeof msg, "%s:%d: label %ld: class ids are 0..N-1 with N at most %d", path, l->lineno, v,
                     MAX_INT_LABEL);
        }
        if (msg[0]) {
            if (bad_line(T, skip, msg, err, errlen, skipped, sklen)) return -1;
            continue;
        }
        if (k && v > *maxl) *maxl = v;
        T->lines[kept++] = *l;
    }
    T->n = kept;
    if (!kept) {
        snprintf(err, errlen, "%s: no valid lines", path);
        return -1;
    }
    return 0;
}

/* Word counts (and, for named labels, the label table) of the training split. */
static void count_words(const parsed *T, int ints, tbl *words, tbl *labs)
{
    for (int i = 0; i < T->n; i++) {
        const line *l = &T->lines[i];
        if (!ints) lookup(labs, (const char *)T->txt + l->lab, l->lab_len, 1, l->lab);
        for (uint32_t k = l->txt, e = l->txt + l->txt_len; k < e;) {
            uint32_t s = k;
            while (k < e && T->txt[k] != ' ') k++;
            lookup(words, (const char *)T->txt + s, k - s, 1, s)->count++;
            k++;
        }
    }
}

/* The vocabulary: <pad>, <unk>, then words by count (desc) then bytes, min_freq and
 * max_vocab applied; the chosen words get their ids. sel: room for the table's entries. */
static uint64_t build_vocab(nn_dataset *d, const parsed *T, tbl *words, ent **sel)
{
    size_t ns = 0, minf = d->cfg.min_freq > 0 ? (size_t)d->cfg.min_freq : 1;
    for (size_t i = 0; i < words->cap; i++)
        if (words->e[i].len && words->e[i].count >= minf) sel[ns++] = &words->e[i];
    g_base = (const char *)T->txt;
    qsort(sel, ns, sizeof *sel, cmp_vocab_g);
    if (d->cfg.max_vocab > 2 && ns > (size_t)d->cfg.max_vocab - 2) ns = (size_t)d->cfg.max_vocab - 2;
    size_t po = 12;
    memcpy(d->pool, "<pad>\0<unk>", 12);
    d->vocab_off[0] = 0, d->vocab_off[1] = 6;
    for (size_t i = 0; i < ns; i++) {
        sel[i]->id = (int32_t)(i + 2);
        d->vocab_off[i + 2] = (int64_t)po;
        memcpy(d->pool + po, T->txt + sel[i]->off, sel[i]->len);
        po += sel[i]->len;
        d->pool[po++] = 0;
    }
    d->vocab = (int)ns + 2;
    return rt_fnv1a(RT_FNV1A_INIT, d->pool, po);
}

/* Class names (named labels sorted into ids) and the class count. */
static void build_classes(nn_dataset *d, const parsed *T, tbl *labs, int ints, long maxl, ent **sel)
{
    size_t nl = 0, co = 0;
    for (size_t i = 0; i < labs->cap; i++)
        if (labs->e[i].len) sel[nl++] = &labs->e[i];
    g_base = (const char *)T->txt;
    qsort(sel, nl, sizeof *sel, cmp_vocab_g); /* counts are all 0: by name */
    for (size_t i = 0; i < nl; i++) {
        sel[i]->id = (int32_t)i;
        memcpy(d->classes + co, T->txt + sel[i]->off, sel[i]->len);
        co += sel[i]->len;
        d->classes[co++] = 0;
    }
    d->classes_bytes = co;
    d->num_classes = ints ? (int)maxl + 1 : (int)nl;
}

/* Labels and padded token ids of the split's lines; an unknown label is a bad line. */
static int encode_lines(nn_dataset *d, parsed *P, const char *train, int ints, tbl *words, tbl *labs, char *err,
                        size_t errlen, char *skipped, size_t sklen)
{
    int L = d->w, k = 0;
    for (int i = 0; i < P->n; i++) {
        line *l = &P->lines[i];
        const char *lab = (const char *)P->txt + l->lab;
        long y = -1;
        if (ints) {
            if (!is_int((const unsigned char *)lab, l->lab_len, &y) || y >= d->num_classes) y = -1;
        } else {
            ent *e = lookup(labs, lab, l->lab_len, 0, 0);
            y = e ? e->id : -1;
        }
        if (y < 0) {
            char msg[1600];
            snprintf(msg, sizeof msg, "%s:%d: unknown label '%.*s' (not a label of %s)", d->path[0], l->lineno,
                     (int)(l->lab_len < 64 ? l->lab_len : 64), lab, train);
            if (bad_line(P, d->bad_skip, msg, err, errlen, skipped, sklen)) return -1;
            continue;
        }
        d->labels[k] = (int32_t)y;
        int32_t *t = d->toks + (size_t)k * L;
        int nt = 0;
        for (uint32_t q = l->txt, e = l->txt + l->txt_len; q < e && nt < L;) {
            uint32_t s = q;
            while (q < e && P->txt[q] != ' ') q++;
            ent *w = lookup(words, (const char *)P->txt + s, q - s, 0, 0);
            t[nt++] = w && w->id >= 0 ? w->id : 1;
            q++;
        }
        for (; nt < L; nt++) t[nt] = 0;
        k++;
    }
    return k;
}

int nn_text_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen)
{
    size_t tb = d->meta_bytes;
    d->toks = rt_arena_alloc(a, (size_t)d->n * d->w * sizeof(int32_t), RT_MEM_DATA, "text tokens");
    d->labels = rt_arena_alloc(a, (size_t)d->n * sizeof(int32_t), RT_MEM_DATA, "text labels");
    d->pool = rt_arena_alloc(a, tb * 2 + 64, RT_MEM_DATA, "vocabulary");
    d->vocab_off = rt_arena_alloc(a, (tb / 2 + 4) * sizeof(int64_t), RT_MEM_DATA, "vocabulary offsets");
    d->classes = rt_arena_alloc(a, tb + 16, RT_MEM_DATA, "label names");
    if (a->planning) return 0;
    /* Both splits build the vocabulary and the labels from train.tsv, identically; the
     * training split reports its bad lines (the test split would repeat them). */
    char train[600], skipped[2048] = "";
    size_t sklen = d->split_train ? sizeof skipped : 0;
    snprintf(train, sizeof train, "%s/train.tsv", d->dir);
    parsed T, S;
    int ints;
    long maxl;
    if (parse(train, d->bad_skip, &T, err, errlen, skipped, sklen)) return -1;
    if (label_kind(&T, train, d->bad_skip, &ints, &maxl, err, errlen, skipped, sklen)) {
        parsed_free(&T);
        return -1;
    }
    tbl words = {0}, labs = {0};
    words.base = labs.base = (const char *)T.txt;
    count_words(&T, ints, &words, &labs);
    ent **sel = malloc((words.n + labs.n + 1) * sizeof(ent *));
    if (!sel) rt_fatal("text: out of memory building the vocabulary");
    uint64_t h = build_vocab(d, &T, &words, sel);
    build_classes(d, &T, &labs, ints, maxl, sel);
    d->meta_hash = rt_fnv1a(h, d->classes, d->classes_bytes);
    free(sel);
    parsed *P = &T;
    int k = -1;
    if (!d->split_train) {
        P = &S;
        if (parse(d->path[0], d->bad_skip, &S, err, errlen, skipped, sizeof skipped)) P = NULL;
    }
    if (P) k = encode_lines(d, P, train, ints, &words, &labs, err, errlen, skipped, sizeof skipped);
    if (k >= 0 && P->bad) rt_warn("%s: skipped %d bad line(s): %s", d->path[0], P->bad, skipped);
    if (k == 0) snprintf(err, errlen, "%s: no valid lines", d->path[0]);
    d->n = k > 0 ? k : 0;
    free(words.e), free(labs.e);
    parsed_free(&T);
    if (P == &S) parsed_free(&S);
    return k > 0 ? 0 : -1;
}
