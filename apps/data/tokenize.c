/* ddprt-data tokenize: text files to llm.c token shards (nn/data/tokens.h).
 *   tokenize [FILE|DIR ...] --to OUT [--bpe DIR] [--name NAME] [--val-fraction F]
 *            [--doc-sep LINE] [--shard-tokens N]
 * Byte-level tokens (vocabulary 256) unless --bpe DIR names GPT-2's encoder.json and
 * vocab.bpe; then each document starts with <|endoftext|> and the two files are copied
 * to OUT so samples printed later decode to text. Documents: each file, split further
 * at lines equal to --doc-sep (Debian's fortunes use "%"). The first --val-fraction of
 * the tokens (default 0.1) go to OUT/NAME_val.bin, the rest to OUT/NAME_train.bin, or
 * NAME_train_000001.bin ... when more than --shard-tokens (default 10^8). Without
 * inputs: Debian's fortunes (/usr/share/games/fortunes, package fortunes). */
#include "apps/data/data.h"
#include "nn/data/bpe.h"
#include "nn/data/tokens.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORTUNES "/usr/share/games/fortunes"

typedef struct tk {
    nn_bpe *bpe;
    const char *sep;
    int32_t *tok;
    size_t n, cap;
    long files, bytes, docs;
    char *err;
    size_t errlen;
} tk;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int add_doc(tk *t, const char *s, size_t n)
{
    t->docs++;
    if (!t->bpe) {
        if (t->n + n > t->cap) {
            size_t cap = (t->n + n) * 2 + 4096;
            int32_t *p = realloc(t->tok, cap * sizeof *p);
            if (!p) return -1;
            t->tok = p, t->cap = cap;
        }
        for (size_t i = 0; i < n; i++) t->tok[t->n++] = (unsigned char)s[i];
        return 0;
    }
    int eot = nn_bpe_eot(t->bpe);
    if (eot >= 0) {
        if (t->n == t->cap) {
            size_t cap = t->cap * 2 + 4096;
            int32_t *q = realloc(t->tok, cap * sizeof *q);
            if (!q) return -1;
            t->tok = q, t->cap = cap;
        }
        t->tok[t->n++] = eot;
    }
    return nn_bpe_encode(t->bpe, s, n, &t->tok, &t->n, &t->cap);
}

static int add_file(tk *t, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(t->err, t->errlen, "tokenize: %s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += r) == cap) buf = realloc(buf, cap *= 2);
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        snprintf(t->err, t->errlen, "tokenize: %s: cannot read: %s", path, buf ? strerror(errno) : "out of memory");
        free(buf);
        return -1;
    }
    t->files++;
    t->bytes += (long)n;
    size_t start = 0, sl = t->sep ? strlen(t->sep) : 0;
    /* byte-level keeps the text verbatim: separators are part of it */
    if (t->sep && t->bpe)
        for (size_t i = 0; i <= n;) {
            size_t e = i;
            while (e < n && buf[e] != '\n') e++;
            if (e - i == sl && !memcmp(buf + i, t->sep, sl)) {
                if (i > start && add_doc(t, buf + start, i - start)) goto oom;
                start = e + 1 < n ? e + 1 : n;
            }
            i = e + 1;
        }
    if (start < n && add_doc(t, buf + start, n - start)) goto oom;
    free(buf);
    return 0;
oom:
    free(buf);
    snprintf(t->err, t->errlen, "tokenize: out of memory");
    return -1;
}

/* A directory: its regular files (not symlinks, not fortune's *.dat indexes), sorted. */
static int add_path(tk *t, const char *path)
{
    struct stat st;
    if (lstat(path, &st)) {
        snprintf(t->err, t->errlen, "tokenize: %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return add_file(t, path);
    DIR *d = opendir(path);
    if (!d) {
        snprintf(t->err, t->errlen, "tokenize: %s: cannot list: %s", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[1200];
        size_t l = strlen(e->d_name);
        snprintf(p, sizeof p, "%.600s/%.500s", path, e->d_name);
        if (e->d_name[0] == '.' || (l > 4 && !strcmp(e->d_name + l - 4, ".dat")) || lstat(p, &st) || !S_ISREG(st.st_mode))
            continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(p);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!rc) rc = add_file(t, names[i]);
        free(names[i]);
    }
    free(names);
    return rc;
}

static int copy_file(const char *from, const char *to, char *err, size_t errlen)
{
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t r;
    int ok = a && b;
    while (ok && (r = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, r, b) == r;
    if (a) fclose(a);
    if (b && fclose(b)) ok = 0;
    if (!ok) snprintf(err, errlen, "tokenize: cannot copy %s to %s: %s", from, to, strerror(errno));
    return ok ? 0 : -1;
}

/* 1 when directory `to` (made later if missing) is dir or inside it: its nearest
 * existing ancestor, resolved, starts with dir resolved. */
static int inside(const char *to, const char *dir)
{
    char rd[PATH_MAX], rt[PATH_MAX], cur[PATH_MAX];
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode) || !realpath(dir, rd)) return 0;
    snprintf(cur, sizeof cur, "%s", to);
    while (!realpath(cur, rt)) {
        char *s = strrchr(cur, '/');
        if (s == cur) s[1] = 0;
        else if (s) *s = 0;
        else if (!getcwd(rt, sizeof rt)) return 0;
        else break;
    }
    size_t l = strlen(rd);
    return !strncmp(rt, rd, l) && (rt[l] == 0 || rt[l] == '/' || l == 1);
}

/* --name is a prefix of file names in --to, --to is not an input directory: the shards
 * land where asked and are never read back as input by a later run. */
static int check_places(const data_opts *o, char *err, size_t errlen)
{
    const char *n = o->name;
    if (n && (!*n || strchr(n, '/') || !strcmp(n, ".") || !strcmp(n, ".."))) {
        snprintf(err, errlen, "tokenize: --name '%s': a file name prefix, without '/' (the shards go into --to %s)", n,
                 o->to);
        return -1;
    }
    for (int i = 0; i <= o->ninputs; i++) {
        const char *in = i < o->ninputs ? o->inputs[i] : o->ninputs ? NULL : FORTUNES;
        if (in && inside(o->to, in)) {
            snprintf(err, errlen, "tokenize: --to %s is the input directory %s or inside it: the shards would be read "
                     "as input by the next run; write them elsewhere", o->to, in);
            return -1;
        }
    }
    return 0;
}

int data_tokenize(const data_opts *o, char *err, size_t errlen)
{
    if (check_places(o, err, errlen)) return -1;
    const char *to = o->to, *bpe_dir = o->bpe, *name = o->name;
    double frac = o->val_fraction;
    long long shard = o->shard_tokens;
    tk t = {.sep = o->doc_sep, .err = err, .errlen = errlen};
    char e2[1024];
    if (bpe_dir && !(t.bpe = nn_bpe_load(bpe_dir, e2, sizeof e2))) {
        snprintf(err, errlen, "tokenize: %s", e2);
        return -1;
    }
    int vocab = t.bpe ? nn_bpe_vocab(t.bpe) : 256, rc = 0;
    for (int i = 0; i < o->ninputs && !rc; i++) rc = add_path(&t, o->inputs[i]);
    if (!rc && !o->ninputs) {
        struct stat st;
        if (stat(FORTUNES, &st)) {
            snprintf(err, errlen, "tokenize: no input files, and the default corpus %s is missing (sudo apt-get "
                     "install fortunes)", FORTUNES);
            rc = -1;
        } else {
            if (!t.sep) t.sep = "%";
            if (!name) name = "fortunes";
            rc = add_path(&t, FORTUNES);
        }
    }
    if (!rc && t.n < 2) {
        snprintf(err, errlen, "tokenize: the input holds %zu token(s): nothing to train on", t.n);
        rc = -1;
    }
    if (!rc) { /* OUT and its parents */
        char d[700];
        snprintf(d, sizeof d, "%.690s", to);
        for (char *q = d + 1; *q; q++)
            if (*q == '/') *q = 0, mkdir(d, 0755), *q = '/';
        mkdir(d, 0755);
    }
    size_t nval = (size_t)(frac * (double)t.n), ntrain = t.n - nval;
    char p[1200];
    if (!name) name = "tokens";
    if (!rc && nval) {
        snprintf(p, sizeof p, "%.600s/%.100s_val.bin", to, name);
        if (nn_tokens_write(p, t.tok, nval, vocab, e2, sizeof e2)) snprintf(err, errlen, "tokenize: %s", e2), rc = -1;
        else printf("%s: %zu tokens\n", p, nval);
    }
    long nsh = (long)((ntrain + (size_t)shard - 1) / (size_t)shard);
    int width = 6; /* llm.c's 000001; wider when needed, so that name order stays shard order */
    for (long m = 1000000; m <= nsh && width < 19; m *= 10) width++;
    for (long s = 0; !rc && s < nsh; s++) {
        size_t lo = nval + (size_t)s * (size_t)shard, k = t.n - lo < (size_t)shard ? t.n - lo : (size_t)shard;
        if (nsh == 1) snprintf(p, sizeof p, "%.600s/%.100s_train.bin", to, name);
        else snprintf(p, sizeof p, "%.600s/%.100s_train_%0*ld.bin", to, name, width, s + 1);
        if (nn_tokens_write(p, t.tok + lo, k, vocab, e2, sizeof e2)) snprintf(err, errlen, "tokenize: %s", e2), rc = -1;
        else printf("%s: %zu tokens\n", p, k);
    }
    if (!rc && t.bpe) {
        char a[700], b[1200];
        const char *files[2] = {"encoder.json", "vocab.bpe"};
        for (int i = 0; i < 2 && !rc; i++) {
            snprintf(a, sizeof a, "%.600s/%s", bpe_dir, files[i]);
            snprintf(b, sizeof b, "%.600s/%s", to, files[i]);
            if (strcmp(a, b)) rc = copy_file(a, b, err, errlen);
        }
    }
    if (!rc)
        printf("tokenize: %ld file(s), %ld bytes, %ld document(s) -> %zu tokens (%s, vocabulary %d)\n", t.files, t.bytes,
               t.docs, t.n, t.bpe ? "GPT-2 BPE" : "bytes", vocab);
    free(t.tok);
    nn_bpe_free(t.bpe);
    return rc;
}
