#include "rt/env.h"
#include "rt/log.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

enum { E_ENUM, E_POS, E_NONNEG, E_INT, E_ANY };
typedef struct { const char *name; int kind; const char *choices; } env_var;
/* choices: '|'-separated for E_ENUM. E_POS: number > 0; E_NONNEG: number >= 0;
 * E_INT: integer >= 0; E_ANY: free text (checked where it is used). */
static const env_var vars[] = {
    {"DDPRT_ALGO", E_ENUM, "ring|rd|hier|auto"},
    {"DDPRT_ISA", E_ENUM, "generic|avx2|avx512"},
    {"DDPRT_LOG", E_ENUM, "error|warn|warning|info|debug"},
    {"DDPRT_TCP_LOCAL", E_ENUM, "tcp|unix"},
    {"DDPRT_SHM", E_ENUM, "0|1"},
    {"DDPRT_SHM_SPIN_US", E_INT, NULL},
    {"DDPRT_SHM_CMA", E_ENUM, "0|1"},
    {"DDPRT_SHM_CMA_MIN", E_INT, NULL},
    {"DDPRT_SHM_MAP", E_ENUM, "0|1"},
    {"DDPRT_COMPRESS_CHECK", E_ENUM, "0|1"},
    {"DDPRT_SHM_MAP_MIN", E_INT, NULL},
    {"DDPRT_CUDA_SYNC", E_ENUM, "0|1"},
    {"DDPRT_TCP_BUFSIZE", E_INT, NULL},
    {"DDPRT_TCP_NSOCKS", E_ENUM, "1|2|3|4|5|6|7|8"}, /* TCP_MAX_NSOCKS */
    {"DDPRT_TIMEOUT", E_POS, NULL},
    {"DDPRT_STALL_WARN", E_POS, NULL},
    {"DDPRT_STALL_WATCH", E_ENUM, "0|1"}, /* 0: no stall watch, no flight recorder */
    {"DDPRT_TRACE_ENTRIES", E_INT, NULL},
    {"DDPRT_TRACE_DIR", E_ANY, NULL},
    {"DDPRT_RDZV_HELLO_TIMEOUT", E_POS, NULL},
    {"DDPRT_LAUNCH_GRACE", E_NONNEG, NULL},
    {"DDPRT_RESTART_COUNT", E_INT, NULL}, /* set by ddprt-launch --max-restarts */
    {"DDPRT_TCP_SPIN_US", E_INT, NULL},
    {"DDPRT_VERBS_SPIN_US", E_INT, NULL},
    {"DDPRT_VERBS_SLOT_KB", E_INT, NULL},
    {"DDPRT_VERBS_CLOSE_GRACE_MS", E_INT, NULL},
    {"DDPRT_IB_TIMEOUT", E_INT, NULL},
    {"DDPRT_IB_RETRY_CNT", E_INT, NULL},
    {"DDPRT_IB_GID_INDEX", E_INT, NULL},
    {"DDPRT_IB_HCA", E_ANY, NULL},
    {"DDPRT_SOCKET_IFNAME", E_ANY, NULL},
    {"DDPRT_JOB_TOKEN", E_ANY, NULL},
    {"DDPRT_DATA", E_ANY, NULL},
    {"DDPRT_CUDA", E_ANY, NULL},
    {"DDPRT_VERBS_TEST_FAULT", E_ANY, NULL},
    {"DDPRT_SHM_TEST_FAULT", E_ANY, NULL},
    {"DDPRT_BUILD", E_ANY, NULL},        /* make test */
    {"DDPRT_TEST_TIMEOUT", E_ANY, NULL}, /* make test */
    {"DDPRT_SAN", E_ANY, NULL},          /* make test: the sanitizer flags of the build */
    {"DDPRT_LIB", E_ANY, NULL},          /* the Python package: path of libddprt.so */
    {"DDPRT_PYTHON", E_ANY, NULL},       /* make test: the Python with numpy and torch */
};
#define NVARS (int)(sizeof vars / sizeof vars[0])

static int in_choices(const char *v, const char *choices)
{
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        size_t k = strcspn(c, "|");
        if (k == n && !strncmp(c, v, n)) return 1;
        c += k + (c[k] == '|');
    }
    return 0;
}

static int check_one(const env_var *e, const char *v, char *err, size_t errlen)
{
    char *end;
    if (e->kind == E_ANY || !*v) return 0; /* empty = unset, as everywhere */
    if (e->kind == E_ENUM) {
        if (in_choices(v, e->choices)) return 0;
        snprintf(err, errlen, "%s=%s: expected one of %s", e->name, v, e->choices);
        return -1;
    }
    double x = strtod(v, &end);
    int ok = *v && !*end && isfinite(x);
    if (e->kind == E_POS) ok = ok && x > 0;
    if (e->kind == E_NONNEG) ok = ok && x >= 0;
    if (e->kind == E_INT) ok = ok && x >= 0 && x == floor(x) && x < 2147483648.0 && !strpbrk(v, ".eExXpP");
    if (ok) return 0;
    snprintf(err, errlen, "%s=%s: expected %s", e->name, v,
             e->kind == E_POS ? "a number > 0" : e->kind == E_NONNEG ? "a number >= 0" : "an integer >= 0");
    return -1;
}

int rt_edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b), d[64];
    if (la > 62 || lb > 62) return 99;
    for (int j = 0; j <= lb; j++) d[j] = j;
    for (int i = 1; i <= la; i++) {
        int prev = d[0];
        d[0] = i;
        for (int j = 1; j <= lb; j++) {
            int cur = d[j], best = prev + (a[i - 1] != b[j - 1]);
            if (d[j] + 1 < best) best = d[j] + 1;
            if (d[j - 1] + 1 < best) best = d[j - 1] + 1;
            d[j] = best;
            prev = cur;
        }
    }
    return d[lb];
}

int rt_env_check(char *err, size_t errlen)
{
    static int warned;
    for (char **ep = environ; ep && *ep; ep++) {
        if (strncmp(*ep, "DDPRT_", 6)) continue;
        const char *eq = strchr(*ep, '=');
        if (!eq) continue;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *ep < 63 ? eq - *ep : 63), *ep);
        int best = 99, bi = -1;
        for (int i = 0; i < NVARS; i++) {
            if (!strcmp(vars[i].name, name)) { bi = i; best = 0; break; }
            int dd = rt_edit_distance(name, vars[i].name);
            if (dd < best) { best = dd; bi = i; }
        }
        if (best == 0) {
            if (check_one(&vars[bi], eq + 1, err, errlen)) return -1;
        } else if (!warned && strncmp(name, "DDPRT_TEST", 10)) { /* DDPRT_TEST*: test programs' own */
            warned = 1;
            if (best <= 3) rt_warn("%s is not a ddprt variable (did you mean %s?); ignored", name, vars[bi].name);
            else rt_warn("%s is not a ddprt variable; ignored", name);
        }
    }
    return 0;
}

double rt_env_num(const char *name, double dflt)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v) return dflt;
    double x = strtod(v, &end);
    return *end || !isfinite(x) ? dflt : x;
}
