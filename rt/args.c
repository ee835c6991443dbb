/* The one command-line parser (rt/args.h). */
#include "rt/args.h"
#include "rt/env.h"
#include "rt/version.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIZE_MAX_DEFAULT 1125899906842624.0 /* 2^50 bytes: far above any buffer, far below overflow */

int rt_args_size(const char *s, double max, size_t *out)
{
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (e == s || errno || !isfinite(v) || v < 0 || strpbrk(s, "xXpPnN")) return -1; /* no hex, inf, nan */
    static const char units[] = "KMGT";
    const char *u = *e ? strchr(units, *e == 'k' || *e == 'm' || *e == 'g' || *e == 't' ? *e - 32 : *e) : NULL;
    if (u && *e) {
        for (const char *p = units; p <= u; p++) v *= 1024;
        e++;
    }
    if (*e == 'B' || *e == 'b') e++;
    if (*e || v > max) return -1;
    *out = (size_t)v;
    return 0;
}

/* Bytes as the largest unit that divides them: 1125899906842624 -> "1024T". */
static void size_text(double b, char *s, size_t n)
{
    int u = 0;
    while (u < 4 && b >= 1024 && fmod(b, 1024) == 0) b /= 1024, u++;
    snprintf(s, n, "%.0f%s", b, u ? (const char *[]){"", "K", "M", "G", "T"}[u] : "");
}

/* The domain's words for messages ("a positive integer", "a number in [0, 1)"). */
static void domain_text(const rt_arg *f, char *s, size_t n)
{
    int integer = f->type == RT_ARG_INT;
    const char *what = integer ? "integer" : "number";
    switch (f->dom) {
    case RT_ARG_POS: snprintf(s, n, "a positive %s", what); break;
    case RT_ARG_NONNEG: snprintf(s, n, "a non-negative %s", what); break;
    case RT_ARG_UNIT: snprintf(s, n, "a number in [0, 1)"); break;
    case RT_ARG_RANGE:
        if (integer) snprintf(s, n, "an integer in %.0f..%.0f", f->lo, f->hi);
        else snprintf(s, n, "a number in [%g, %g]", f->lo, f->hi);
        break;
    default: snprintf(s, n, "%s", integer ? "an integer" : "a finite number");
    }
}

static int in_domain(const rt_arg *f, double x)
{
    switch (f->dom) {
    case RT_ARG_POS: return x > 0;
    case RT_ARG_NONNEG: return x >= 0;
    case RT_ARG_UNIT: return x >= 0 && x < 1;
    case RT_ARG_RANGE: return x >= f->lo && x <= f->hi;
    default: return 1;
    }
}

static int set_value(const rt_arg *f, void *opts, const char *v, char *err, size_t errlen)
{
    void *dst = (char *)opts + f->off;
    char dom[64], *end;
    domain_text(f, dom, sizeof dom);
    errno = 0;
    switch (f->type) {
    case RT_ARG_STR:
        if (f->choices && !rt_in_choices(v, f->choices)) {
            snprintf(err, errlen, "--%s: expected one of %s, got '%s'", f->name, f->choices, v);
            return -1;
        }
        *(const char **)dst = v;
        return 0;
    case RT_ARG_FN: return f->fn(v, dst, err, errlen);
    case RT_ARG_SIZE: {
        double max = f->dom == RT_ARG_RANGE ? f->hi : SIZE_MAX_DEFAULT, lo = f->dom == RT_ARG_RANGE ? f->lo : 0;
        size_t x;
        if (rt_args_size(v, max, &x) || (double)x < lo || (f->dom == RT_ARG_POS && x == 0)) {
            char m[32];
            size_text(max, m, sizeof m);
            snprintf(err, errlen, "--%s: expected a size in bytes such as 4, 64K or 256M, %sup to %s, got '%s'",
                     f->name, f->dom == RT_ARG_POS ? "above 0 and " : "", m, v);
            return -1;
        }
        *(size_t *)dst = x;
        return 0;
    }
    case RT_ARG_DOUBLE: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) {
            snprintf(err, errlen, "--%s: expected a finite number, got '%s'", f->name, v);
            return -1;
        }
        if (!in_domain(f, x)) {
            if (f->dom == RT_ARG_RANGE) snprintf(dom, sizeof dom, "in [%g, %g]", f->lo, f->hi);
            snprintf(err, errlen, "--%s: must be %s, got '%s'", f->name,
                     f->dom == RT_ARG_POS ? "> 0" : f->dom == RT_ARG_NONNEG ? ">= 0" : f->dom == RT_ARG_UNIT ? "in [0, 1)" : dom, v);
            return -1;
        }
        *(double *)dst = x;
        return 0;
    }
    default: { /* RT_ARG_INT */
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno || x < INT_MIN || x > INT_MAX || !in_domain(f, (double)x)) {
            snprintf(err, errlen, "--%s: expected %s, got '%s'", f->name, dom, v);
            return -1;
        }
        *(int *)dst = (int)x;
        return 0;
    }
    }
}

static const rt_arg *find_long(const rt_args *a, const char *name)
{
    for (int k = 0; k < a->n; k++)
        if (!strcmp(a->tab[k].name, name)) return &a->tab[k];
    return NULL;
}

static const rt_arg *find_short(const rt_args *a, char c)
{
    for (int k = 0; k < a->n; k++)
        if (a->tab[k].short_name && a->tab[k].short_name == c) return &a->tab[k];
    return NULL;
}

static void unknown(const rt_args *a, const char *shown, const char *name, char *err, size_t errlen)
{
    int best = 99, bi = -1;
    for (int k = 0; k < a->n; k++) {
        int d = rt_edit_distance(name, a->tab[k].name);
        if (d < best) best = d, bi = k;
    }
    /* Close enough to be a typo, not a different word ("--frob" is not "--op"). */
    if (bi >= 0 && best <= 3 && best <= ((int)strlen(name) + 1) / 2)
        snprintf(err, errlen, "unknown flag %s (did you mean --%s? see --help)", shown, a->tab[bi].name);
    else snprintf(err, errlen, "unknown flag %s (see --help)", shown);
}

static int parse(const rt_args *a, void *opts, int argc, char **argv, char **pos, int *npos, char *err,
                 size_t errlen, int *at)
{
    int np = 0, only_pos = 0;
    err[0] = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        *at = i;
        if (only_pos || s[0] != '-' || !s[1]) { /* a positional ("-" alone is one too: stdin) */
            if (a->max_pos >= 0 && np >= a->max_pos) {
                if (a->max_pos == 0)
                    snprintf(err, errlen, "unexpected argument '%s' (flags start with --; see --help)", s);
                else snprintf(err, errlen, "unexpected argument '%s' (at most %d; see --help)", s, a->max_pos);
                return RT_ARGS_ERROR;
            }
            if (pos) pos[np] = argv[i];
            np++;
            if (a->stop_at_pos) only_pos = 1;
            continue;
        }
        if (!strcmp(s, "--")) { only_pos = 1; continue; }
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) return RT_ARGS_HELP;
        if (!strcmp(s, "--version")) return RT_ARGS_VERSION;
        const rt_arg *f;
        const char *v = NULL;
        char name[64];
        if (s[1] != '-') { /* -x V or -xV */
            f = find_short(a, s[1]);
            if (!f) {
                snprintf(err, errlen, "unknown flag %.40s (see --help)", s);
                return RT_ARGS_ERROR;
            }
            if (s[2]) {
                if (f->type == RT_ARG_FLAG) {
                    snprintf(err, errlen, "-%c takes no value (got '%.40s')", s[1], s);
                    return RT_ARGS_ERROR;
                }
                v = s + 2;
            }
        } else {
            const char *eq = strchr(s + 2, '=');
            size_t len = eq ? (size_t)(eq - s - 2) : strlen(s + 2);
            snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), s + 2);
            for (char *p = name; *p; p++) if (*p == '_') *p = '-'; /* argparse's --batch_size */
            f = len < 63 ? find_long(a, name) : NULL;
            if (!f) {
                char shown[80];
                snprintf(shown, sizeof shown, "--%s", name);
                unknown(a, shown, name, err, errlen);
                return RT_ARGS_ERROR;
            }
            if (eq) {
                if (f->type == RT_ARG_FLAG) {
                    snprintf(err, errlen, "--%s takes no value", f->name);
                    return RT_ARGS_ERROR;
                }
                v = eq + 1;
            }
        }
        if (f->type == RT_ARG_FLAG) {
            *(int *)((char *)opts + f->off) = 1;
            continue;
        }
        if (!v) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%s needs a value (see --help)", f->name);
                return RT_ARGS_ERROR;
            }
            v = argv[++i];
        }
        if (set_value(f, opts, v, err, errlen)) return RT_ARGS_ERROR;
    }
    if (npos) *npos = np;
    return RT_ARGS_OK;
}

int rt_args_parse(const rt_args *a, void *opts, int argc, char **argv, char **pos, int *npos, char *err,
                  size_t errlen)
{
    int at = 0, rc = parse(a, opts, argc, argv, pos, npos, err, errlen, &at);
    /* "... --help" after a mistake still shows the help (what the user asked for), unless
     * what follows may be another program's arguments. */
    for (int i = at + 1; rc == RT_ARGS_ERROR && !a->stop_at_pos && i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) rc = RT_ARGS_HELP;
    return rc;
}

int rt_args_defaults(const rt_args *a, void *opts, char *err, size_t errlen)
{
    for (int i = 0; i < a->n; i++)
        if (a->tab[i].dflt && set_value(&a->tab[i], opts, a->tab[i].dflt, err, errlen)) return -1;
    return 0;
}

void rt_args_usage(const rt_args *a, FILE *f)
{
    for (int i = 0; i < a->n; i++) {
        const rt_arg *x = &a->tab[i];
        const char *meta = x->type == RT_ARG_FLAG ? "" : x->type == RT_ARG_STR || x->type == RT_ARG_FN ? " S"
                         : x->type == RT_ARG_DOUBLE ? " X" : " N";
        char left[64];
        if (x->short_name) snprintf(left, sizeof left, "-%c, --%s%s", x->short_name, x->name, meta);
        else snprintf(left, sizeof left, "--%s%s", x->name, meta);
        if (x->dflt) fprintf(f, "  %-24s %s (default: %s)\n", left, x->help, x->dflt);
        else fprintf(f, "  %-24s %s\n", left, x->help);
    }
    fprintf(f, "  %-24s %s\n", "-h, --help", "show this help");
    fprintf(f, "  %-24s %s\n", "--version", "print the version and exit");
}

int rt_args_main(const rt_args *a, void *opts, int argc, char **argv, char **pos, int *npos, const char *head,
                 const char *tail)
{
    char err[512];
    int rc = rt_args_parse(a, opts, argc, argv, pos, npos, err, sizeof err);
    const char *space = strchr(a->prog, ' '); /* "ddprt-data convert": the program is the first word */
    int plen = space ? (int)(space - a->prog) : (int)strlen(a->prog);
    switch (rc) {
    case RT_ARGS_HELP:
        if (head) fputs(head, stdout);
        rt_args_usage(a, stdout);
        if (tail) fputs(tail, stdout);
        return 0;
    case RT_ARGS_VERSION: printf("%.*s (ddprt) %s\n", plen, a->prog, DDPRT_VERSION); return 0;
    case RT_ARGS_ERROR: fprintf(stderr, "%s: error: %s\n", a->prog, err); return 2;
    default: return -1;
    }
}
