/* GPT-2 byte-level BPE (nn/data/bpe.h). Tokens are the encoder's ids; every merge
 * "a b" of vocab.bpe joins two tokens into the token "ab", so a word is a list of
 * ids and a merge is a lookup of the pair (a, b) -> (rank, ab). A word starts as one
 * id per byte (the byte's printable stand-in, GPT-2's bytes_to_unicode) and the
 * lowest-ranked adjacent pair is merged until none is in the table. */
#include "nn/data/bpe.h"
#include "nn/data/utf8.h"
#include "rt/hash.h"
#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#define BPE_SLOTS (1 << 18) /* hash slots at most: 2^17 tokens, 2^17 merges */

typedef struct str_ent { uint32_t off, len; int32_t id; } str_ent;
typedef struct pair_ent { uint64_t key; int32_t rank, id, line; } pair_ent;

struct nn_bpe {
    char *pool;              /* token strings (the unicode stand-ins, UTF-8) */
    size_t pool_len, pool_cap;
    str_ent *tok;            /* hash: string -> id */
    size_t tok_cap;
    pair_ent *pairs;         /* hash: (a, b) -> (rank, merged id) */
    size_t pair_cap;
    int vocab, eot;
    int32_t byte_id[256];    /* the id of each single byte */
    char *dec;               /* decoded bytes of each id */
    uint32_t *dec_off, *dec_len;
};

static uint64_t fnv(const void *p, size_t n) { return rt_fnv1a(RT_FNV1A_INIT, p, n); }

static int32_t tok_find(const nn_bpe *b, const char *s, size_t n)
{
    for (size_t i = fnv(s, n) & (b->tok_cap - 1);; i = (i + 1) & (b->tok_cap - 1)) {
        const str_ent *e = &b->tok[i];
        if (!e->len) return -1;
        if (e->len == n && !memcmp(b->pool + e->off, s, n)) return e->id;
    }
}

static const pair_ent *pair_find(const nn_bpe *b, int32_t x, int32_t y)
{
    uint64_t k = (uint64_t)(uint32_t)x << 32 | (uint32_t)y;
    for (size_t i = (k * 0x9E3779B97F4A7C15ull >> 20) & (b->pair_cap - 1);; i = (i + 1) & (b->pair_cap - 1)) {
        const pair_ent *e = &b->pairs[i];
        if (e->rank < 0) return NULL;
        if (e->key == k) return e;
    }
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others
 * (controls, space, ...) for U+0100 upwards in byte order. */
static uint32_t byte_char(int byte)
{
    int printable = (byte >= '!' && byte <= '~') || (byte >= 0xa1 && byte <= 0xac) || (byte >= 0xae && byte <= 0xff);
    if (printable) return (uint32_t)byte;
    int n = 0;
    for (int b = 0; b < byte; b++)
        if (!((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))) n++;
    return 256u + (uint32_t)n;
}

static char *read_file(const char *path, size_t *n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long sz = -1;
    if (f && !fseek(f, 0, SEEK_END) && (sz = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)sz + 1)) &&
        fread(buf, 1, (size_t)sz, f) == (size_t)sz) {
        fclose(f);
        buf[sz] = 0;
        *n = (size_t)sz;
        return buf;
    }
    snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
    if (f) fclose(f);
    free(buf);
    return NULL;
}

static int add_token(nn_bpe *b, const char *s, size_t n, int32_t id)
{
    if (b->pool_len + n > b->pool_cap || !b->pool) { /* a first token of 0 bytes too: no memcpy to NULL */
        size_t cap = (b->pool_len + n) * 2 + 4096;
        char *p = realloc(b->pool, cap);
        if (!p) return -1;
        b->pool = p, b->pool_cap = cap;
    }
    memcpy(b->pool + b->pool_len, s, n);
    size_t i = fnv(s, n) & (b->tok_cap - 1);
    while (b->tok[i].len) {
        if (b->tok[i].len == n && !memcmp(b->pool + b->tok[i].off, s, n)) return -2;
        i = (i + 1) & (b->tok_cap - 1);
    }
    b->tok[i] = (str_ent){(uint32_t)b->pool_len, (uint32_t)n, id};
    b->pool_len += n;
    if (id >= b->vocab) b->vocab = id + 1;
    return 0;
}

/* encoder.json: one flat object of "token": id. Strings may use JSON escapes. */
static int parse_encoder(nn_bpe *b, const char *path, const char *j, size_t n, char *err, size_t errlen)
{
    size_t i = 0, count = 0;
    char *s = malloc(n + 1), msg[200];
    uint32_t *at = calloc(b->tok_cap / 2, sizeof *at); /* each id's entry: its offset + 1 */
#define WS() while (i < n && (j[i] == ' ' || j[i] == '\n' || j[i] == '\r' || j[i] == '\t')) i++
#define BAD(what) do { snprintf(err, errlen, "%s: offset %zu: %s", path, i, what); free(s); free(at); return -1; } while (0)
    if (!s || !at) BAD("out of memory");
    WS();
    if (i >= n || j[i] != '{') BAD("expected '{' (a JSON object of \"token\": id)");
    i++;
    WS();
    if (i < n && j[i] == '}') BAD("empty vocabulary");
    for (;;) {
        WS();
        if (i >= n || j[i] != '"') BAD("expected a string");
        i++;
        size_t k = 0;
        while (i < n && j[i] != '"') {
            if (j[i] != '\\') { s[k++] = j[i++]; continue; }
            if (++i >= n) BAD("escape at the end");
            char c = j[i++];
            if (c == 'u') {
                uint32_t v = 0;
                for (int d = 0; d < 4; d++, i++) {
                    if (i >= n) BAD("short \\u escape");
                    char h = j[i];
                    v = v * 16 + (uint32_t)(h >= '0' && h <= '9' ? h - '0' : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10 : 99);
                    if (v >= 0x10000) BAD("bad \\u escape");
                }
                if (v >= 0xd800 && v < 0xdc00 && i + 6 <= n && j[i] == '\\' && j[i + 1] == 'u') {
                    uint32_t lo = (uint32_t)strtoul((char[5]){j[i + 2], j[i + 3], j[i + 4], j[i + 5], 0}, NULL, 16);
                    if (lo >= 0xdc00 && lo < 0xe000) v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00), i += 6;
                }
                k += (size_t)nn_utf8_put((unsigned char *)s + k, v);
            } else {
                const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *p = strchr(from, c);
                if (!p || !c) BAD("unknown escape");
                s[k++] = to[p - from];
            }
        }
        if (i++ >= n) BAD("unterminated string");
        s[k] = 0; /* for messages */
        if (!k) BAD("an empty token (every token stands for at least one byte)");
        WS();
        if (i >= n || j[i] != ':') BAD("expected ':'");
        i++;
        WS();
        char *end;
        long id = strtol(j + i, &end, 10);
        if (end == j + i || id < 0 || id >= BPE_SLOTS / 2) {
            snprintf(msg, sizeof msg, "token \"%.40s\": expected an id in 0 .. %d (the most tokens this table holds), "
                     "found '%.12s'", s, BPE_SLOTS / 2 - 1, j + i);
            BAD(msg);
        }
        if (id >= (long)(b->tok_cap / 2)) { /* ids are 0 .. N-1: one past the entries is a gap */
            snprintf(msg, sizeof msg, "token \"%.40s\": id %ld, but the file has fewer entries (ids are 0 .. N-1, "
                     "once each)", s, id);
            BAD(msg);
        }
        if (at[id]) { /* two tokens, one id: a merge's result would be the other token */
            snprintf(msg, sizeof msg, "token \"%.40s\": id %ld is already the id of the entry at offset %u", s, id,
                     at[id] - 1);
            BAD(msg);
        }
        at[id] = (uint32_t)i + 1;
        i = (size_t)(end - j);
        if (2 * (count + 1) > b->tok_cap) BAD("more tokens than the table holds");
        int r = add_token(b, s, k, (int32_t)id);
        if (r == -2) BAD("token listed twice");
        if (r) BAD("out of memory");
        count++;
        WS();
        if (i < n && j[i] == ',') { i++; continue; }
        if (i < n && j[i] == '}') break;
        BAD("expected ',' or '}'");
    }
    /* ids 0 .. count-1, each once: a gap would be a row of the model no text reaches */
    if ((size_t)b->vocab != count) {
        size_t gap = 0;
        while (at[gap]) gap++;
        snprintf(msg, sizeof msg, "%zu tokens with ids up to %d (the entry at offset %u): id %zu is missing (the ids "
                 "must be 0 .. %zu)", count, b->vocab - 1, at[b->vocab - 1] - 1, gap, count - 1);
        i = at[b->vocab - 1] - 1;
        BAD(msg);
    }
#undef WS
#undef BAD
    free(s);
    free(at);
    return 0;
}

static int parse_merges(nn_bpe *b, const char *path, char *t, size_t n, char *err, size_t errlen)
{
    int rank = 0, line = 0;
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && t[e] != '\n') e++;
        line++;
        size_t l = e > i && t[e - 1] == '\r' ? e - 1 : e;
        if (l > i && !(line == 1 && t[i] == '#')) {
            char *sp = memchr(t + i, ' ', l - i);
            int32_t a = -1, c = -1, ab = -1;
            int la = sp ? (int)(sp - t - i) : 0;
            if (sp) {
                a = tok_find(b, t + i, (size_t)(sp - t - i));
                c = tok_find(b, sp + 1, (size_t)(t + l - sp - 1));
                /* "a b" -> the token "ab": join the two halves in place */
                memmove(sp, sp + 1, (size_t)(t + l - sp - 1));
                ab = tok_find(b, t + i, l - i - 1);
            }
            if (!sp || a < 0 || c < 0 || ab < 0) {
                snprintf(err, errlen, "%s: line %d (offset %zu): %s", path, line, i,
                         !sp ? "expected two tokens separated by a space" : "a merge of tokens that encoder.json lacks");
                return -1;
            }
            uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)c;
            if (2 * ((size_t)rank + 1) > b->pair_cap) {
                snprintf(err, errlen, "%s: line %d: more merges than the table holds", path, line);
                return -1;
            }
            size_t h = (k * 0x9E3779B97F4A7C15ull >> 20) & (b->pair_cap - 1);
            while (b->pairs[h].rank >= 0 && b->pairs[h].key != k) h = (h + 1) & (b->pair_cap - 1);
            if (b->pairs[h].rank >= 0) { /* its rank would be ambiguous */
                snprintf(err, errlen, "%s: line %d (offset %zu): the merge \"%.*s %.*s\" repeats line %d", path, line,
                         i, la, t + i, (int)(l - i - 1) - la, t + i + la, b->pairs[h].line);
                return -1;
            }
            b->pairs[h] = (pair_ent){k, rank, ab, line};
            rank++;
        }
        i = e + 1;
    }
    return 0;
}

/* Slots for up to one entry per c in the text, at half load: 1024 to 2^18. */
static size_t table_cap(const char *t, size_t n, char c)
{
    size_t k = 1, cap = 1024;
    for (const char *p = t; (p = memchr(p, c, n - (size_t)(p - t))) != NULL; p++) k++;
    while (cap < 2 * (k + 1) && cap < BPE_SLOTS) cap *= 2;
    return cap;
}

nn_bpe *nn_bpe_load(const char *dir, char *err, size_t errlen)
{
    char pe[600], pm[600];
    snprintf(pe, sizeof pe, "%.580s/encoder.json", dir);
    snprintf(pm, sizeof pm, "%.580s/vocab.bpe", dir);
    size_t ne, nm;
    char *je = read_file(pe, &ne, err, errlen), *jm = je ? read_file(pm, &nm, err, errlen) : NULL;
    nn_bpe *b = calloc(1, sizeof *b);
    if (!je || !jm || !b) goto fail;
    /* Tables for what the files can hold (a ':' per token, a line per merge), at most
     * 2^18 slots (2^17 tokens: GPT-2 has 50257): a small pair loads in microseconds. */
    b->tok_cap = table_cap(je, ne, ':');
    b->pair_cap = table_cap(jm, nm, '\n');
    b->tok = calloc(b->tok_cap, sizeof *b->tok);
    b->pairs = malloc(b->pair_cap * sizeof *b->pairs);
    if (!b->tok || !b->pairs) goto fail;
    for (size_t i = 0; i < b->pair_cap; i++) b->pairs[i].rank = -1;
    if (parse_encoder(b, pe, je, ne, err, errlen) || parse_merges(b, pm, jm, nm, err, errlen)) goto fail;
    for (int c = 0; c < 256; c++) {
        char s[4];
        int l = nn_utf8_put((unsigned char *)s, byte_char(c));
        if ((b->byte_id[c] = tok_find(b, s, (size_t)l)) < 0) {
            snprintf(err, errlen, "%s: no token for byte %d (GPT-2's byte alphabet is incomplete)", pe, c);
            goto fail;
        }
    }
    b->eot = tok_find(b, "<|endoftext|>", 13);
    /* decoding table: each token's stand-in characters back to bytes */
    uint32_t rev[512];
    for (int c = 0; c < 512; c++) rev[c] = 0xffffffffu;
    for (int c = 0; c < 256; c++) rev[byte_char(c)] = (uint32_t)c;
    b->dec = malloc(b->pool_len + 1);
    b->dec_off = calloc((size_t)b->vocab, sizeof *b->dec_off);
    b->dec_len = calloc((size_t)b->vocab, sizeof *b->dec_len);
    if (!b->dec || !b->dec_off || !b->dec_len) goto fail;
    size_t o = 0;
    for (size_t i = 0; i < b->tok_cap; i++) {
        const str_ent *e = &b->tok[i];
        if (!e->len) continue;
        b->dec_off[e->id] = (uint32_t)o;
        const unsigned char *s = (const unsigned char *)b->pool + e->off;
        int special = e->id == b->eot;
        for (size_t k = 0; k < e->len;) {
            uint32_t cp;
            int l = nn_utf8_get(s + k, e->len - k, &cp);
            if (!l) l = 1, cp = 0xffffffffu;
            if (!special && cp < 512 && rev[cp] != 0xffffffffu) b->dec[o++] = (char)rev[cp];
            else memcpy(b->dec + o, s + k, (size_t)l), o += (size_t)l; /* special tokens stay as text */
            k += (size_t)l;
        }
        b->dec_len[e->id] = (uint32_t)(o - b->dec_off[e->id]);
    }
    free(je);
    free(jm);
    return b;
fail:
    free(je);
    free(jm);
    nn_bpe_free(b);
    return NULL;
}

void nn_bpe_free(nn_bpe *b)
{
    if (!b) return;
    free(b->pool), free(b->tok), free(b->pairs), free(b->dec), free(b->dec_off), free(b->dec_len);
    free(b);
}

int nn_bpe_vocab(const nn_bpe *b) { return b->vocab; }
int nn_bpe_eot(const nn_bpe *b) { return b->eot; }

const char *nn_bpe_decode(const nn_bpe *b, int id, size_t *len)
{
    if (id < 0 || id >= b->vocab) return NULL;
    *len = b->dec_len[id];
    return b->dec + b->dec_off[id];
}

/* Character classes of the pre-tokenizer. */
enum { C_SPACE, C_LETTER, C_NUMBER, C_OTHER };
static int cls(const unsigned char *s, size_t n, int *len)
{
    static locale_t loc;
    if (!loc) loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    uint32_t cp;
    *len = nn_utf8_get(s, n, &cp);
    if (!*len) return *len = 1, C_OTHER; /* a stray byte */
    if (cp < 0x80) {
        if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return C_SPACE;
        if ((cp | 32) - 'a' < 26) return C_LETTER;
        return cp - '0' < 10 ? C_NUMBER : C_OTHER;
    }
    if (!loc) return C_OTHER;
    if (iswspace_l((wint_t)cp, loc)) return C_SPACE;
    if (iswdigit_l((wint_t)cp, loc)) return C_NUMBER;
    return iswalpha_l((wint_t)cp, loc) ? C_LETTER : C_OTHER;
}

/* Length of the pre-token at s (GPT-2's pattern, alternatives in order). */
static size_t pretoken(const unsigned char *s, size_t n)
{
    static const char *const contr[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (int k = 0; k < 7; k++) {
        size_t l = strlen(contr[k]);
        if (n >= l && !memcmp(s, contr[k], l)) return l;
    }
    int l0, c0 = cls(s, n, &l0);
    size_t i = 0;
    int want = c0;
    if (s[0] == ' ' && n > 1) { /* " ?X+" */
        int l1, c1 = cls(s + 1, n - 1, &l1);
        if (c1 != C_SPACE) want = c1, i = 1;
    }
    if (want != C_SPACE) {
        while (i < n) {
            int l, c = cls(s + i, n - i, &l);
            if (c != want) break;
            i += (size_t)l;
        }
        return i;
    }
    /* whitespace: \s+(?!\S) leaves the last one for the next token, else \s+ */
    size_t last = 0;
    while (i < n) {
        int l, c = cls(s + i, n - i, &l);
        if (c != C_SPACE) break;
        last = i;
        i += (size_t)l;
    }
    if (i < n && last > 0) return last;
    return i;
}

static int push(int32_t **out, size_t *len, size_t *cap, int32_t v)
{
    if (*len == *cap) {
        size_t c = *cap ? *cap * 2 : 4096;
        int32_t *p = realloc(*out, c * sizeof *p);
        if (!p) return -1;
        *out = p, *cap = c;
    }
    (*out)[(*len)++] = v;
    return 0;
}

int nn_bpe_encode(const nn_bpe *b, const char *text, size_t n, int32_t **out, size_t *len, size_t *cap)
{
    const unsigned char *s = (const unsigned char *)text;
    int32_t w[1024];
    for (size_t i = 0; i < n;) {
        size_t l = pretoken(s + i, n - i);
        for (size_t p = 0; p < l;) { /* long runs in pieces of 1024 bytes */
            int m = 0;
            for (; p < l && m < 1024; p++) w[m++] = b->byte_id[s[i + p]];
            for (;;) {
                int best = -1;
                const pair_ent *be = NULL;
                for (int k = 0; k + 1 < m; k++) {
                    const pair_ent *e = pair_find(b, w[k], w[k + 1]);
                    if (e && (!be || e->rank < be->rank)) be = e, best = k;
                }
                if (!be) break;
                int32_t x = w[best], y = w[best + 1], o = 0;
                for (int k = 0; k < m; k++) /* every occurrence of the pair, left to right */
                    if (k + 1 < m && w[k] == x && w[k + 1] == y) w[o++] = be->id, k++;
                    else w[o++] = w[k];
                m = o;
            }
            for (int k = 0; k < m; k++)
                if (push(out, len, cap, w[k])) return -1;
        }
        i += l;
    }
    return 0;
}
