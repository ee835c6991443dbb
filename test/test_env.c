/* The DDPRT_* table (rt/env.c): its accessors, docs/env.md printed from it, every
 * variable read through it, and DDPRT_ISA's choices being the detector's (rt/isa.c).
 * The tests run from the repository root (make test). */
#include "test/t.h"
#include "rt/env.h"
#include "rt/isa.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, k;
    do {
        if (n + 4096 > cap && !(buf = realloc(buf, cap = 2 * cap + 4096))) break;
        k = fread(buf + n, 1, 4096, f);
        n += k;
    } while (k > 0);
    fclose(f);
    if (len) *len = n;
    return buf;
}

TEST(env_doc_is_current)
{
    char *gen = NULL;
    size_t glen = 0, dlen = 0;
    FILE *m = open_memstream(&gen, &glen);
    rt_env_doc(m);
    fclose(m);
    char *doc = slurp("docs/env.md", &dlen);
    CHECKF(doc, "docs/env.md: cannot read it (run the tests from the repository root)");
    CHECKF(doc && dlen == glen && !memcmp(doc, gen, glen),
           "docs/env.md differs from the table in rt/env.c: run `make env-doc`");
    free(gen), free(doc);
}

TEST(env_table_has_every_variable_documented)
{
    char *gen = NULL;
    size_t glen = 0;
    FILE *m = open_memstream(&gen, &glen);
    rt_env_doc(m);
    fclose(m);
    for (int v = 0; v < RT_ENV_COUNT; v++) {
        const char *name = rt_env_name((rt_env)v);
        CHECKF(name && !strncmp(name, "DDPRT_", 6), "variable %d has no name", v);
        char row[80];
        snprintf(row, sizeof row, "| `%s` | ", name ? name : "?");
        const char *r = strstr(gen, row);
        /* a row with a value domain, a default and a meaning: no empty cell */
        CHECKF(r && !strstr(r, " |  |") && strchr(r, '\n') - r > (long)strlen(row) + 12, "%s: incomplete row", name);
    }
    free(gen);
}

/* Nothing outside rt/env.c reads a DDPRT_* variable by itself (rt/log.c's DDPRT_LOG aside:
 * env.c warns through the log, so the log cannot call back up), and every variable of
 * the table is read somewhere: by its RT_ENV_ id, or by test code (make test's own). */
TEST(env_every_variable_is_read_through_the_table)
{
    FILE *p = popen("grep -rlF --include=*.c --include=*.h --include=*.cc --include=*.cu --include=*.cuh 'getenv(\"DDPRT_' "
                    "rt transport nn kernels apps ports 2>/dev/null",
                    "r");
    CHECK(p != NULL);
    char line[512];
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        CHECKF(!strcmp(line, "rt/env.c") || !strcmp(line, "rt/log.c"),
               "%s reads a DDPRT_* variable with getenv: use rt/env.h's accessors", line);
    }
    if (p) pclose(p);
    for (int v = 0; v < RT_ENV_COUNT; v++) {
        const char *name = rt_env_name((rt_env)v);
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "grep -rqw --include=*.c --include=*.h --include=*.cc --include=*.cu 'RT_ENV_%s' rt/*.c api transport nn kernels apps "
                 "ports test/simt || grep -rqF '%s' test/*.c test/progs python/ddprt",
                 name + 6, name);
        CHECKF(system(cmd) == 0, "%s is in rt/env.c's table but nothing reads it", name);
    }
}

TEST(env_accessors_read_the_table)
{
    setenv("DDPRT_ALGO", "rd", 1);
    CHECK_EQ(rt_env_choice(RT_ENV_ALGO, 3), 1);
    CHECK(!strcmp(rt_env_str(RT_ENV_ALGO), "rd"));
    setenv("DDPRT_ALGO", "", 1); /* empty: unset */
    CHECK_EQ(rt_env_choice(RT_ENV_ALGO, 3), 3);
    CHECK(rt_env_str(RT_ENV_ALGO) == NULL);
    setenv("DDPRT_ALGO", "rign", 1);
    CHECK_EQ(rt_env_choice(RT_ENV_ALGO, 3), 3);
    char err[200] = "";
    CHECK(rt_env_check_one(RT_ENV_ALGO, err, sizeof err) == -1 && strstr(err, "DDPRT_ALGO=rign"));
    unsetenv("DDPRT_ALGO");
    CHECK(rt_env_timeout_s() == RT_DEFAULT_TIMEOUT_S);
    setenv("DDPRT_TIMEOUT", "7.5", 1);
    CHECK(rt_env_timeout_s() == 7.5);
    setenv("DDPRT_TIMEOUT", "-3", 1);
    CHECK(rt_env_timeout_s() == RT_DEFAULT_TIMEOUT_S);
    CHECK(rt_env_check(err, sizeof err) == -1 && strstr(err, "DDPRT_TIMEOUT=-3: expected a number > 0"));
    unsetenv("DDPRT_TIMEOUT");
    setenv("DDPRT_TCP_BUFSIZE", "1M", 1);
    CHECK(rt_env_num(RT_ENV_TCP_BUFSIZE, 42) == 42);
    setenv("DDPRT_TCP_BUFSIZE", "0", 1);
    CHECK(rt_env_num(RT_ENV_TCP_BUFSIZE, 42) == 0);
    unsetenv("DDPRT_TCP_BUFSIZE");
    /* a number's default is written once, in the table (the doc reads the same string) */
    unsetenv("DDPRT_TCP_SPIN_US");
    CHECK(rt_env_number(RT_ENV_TCP_SPIN_US) == 200);
    CHECK(rt_env_number(RT_ENV_TRACE_ENTRIES) == 2000);
    setenv("DDPRT_TCP_SPIN_US", "7", 1);
    CHECK(rt_env_number(RT_ENV_TCP_SPIN_US) == 7);
    setenv("DDPRT_TCP_SPIN_US", "x", 1);
    CHECK(rt_env_number(RT_ENV_TCP_SPIN_US) == 200);
    unsetenv("DDPRT_TCP_SPIN_US");
    CHECK(rt_env_flag(RT_ENV_SHM, 1) == 1);
    setenv("DDPRT_SHM", "0", 1);
    CHECK(rt_env_flag(RT_ENV_SHM, 1) == 0);
    unsetenv("DDPRT_SHM");
    CHECK(rt_in_choices("rd", "ring|rd|hier") && !rt_in_choices("r", "ring|rd|hier") &&
          !rt_in_choices("", "ring|rd|hier"));
    CHECK(rt_choice_index("ring", "ring|rd|hier") == 0 && rt_choice_index("hier", "ring|rd|hier") == 2 &&
          rt_choice_index("rin", "ring|rd|hier") == -1 && rt_choice_index("hie", "ring|rd|hier") == -1);
}

/* One list: the kernels and the reductions accept every name the check accepts
 * (DDPRT_ISA=avx512bf16 was refused by the check while the kernels took it). */
TEST(env_isa_names_are_the_detector_levels)
{
    char joined[128] = "";
    for (int i = 0; i < RT_NISA; i++)
        snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%s", i ? "|" : "", rt_isa_name(i));
    CHECK(!strcmp(joined, RT_ISA_CHOICES));
    char err[200];
    for (int i = 0; i < RT_NISA; i++) {
        setenv("DDPRT_ISA", rt_isa_name(i), 1);
        CHECKF(rt_env_check(err, sizeof err) == 0, "DDPRT_ISA=%s refused: %s", rt_isa_name(i), err);
        CHECK_EQ(rt_isa_parse(rt_isa_name(i)), i);
    }
    setenv("DDPRT_ISA", "sse9", 1);
    CHECK(rt_env_check(err, sizeof err) == -1 && strstr(err, "DDPRT_ISA=sse9: expected one of " RT_ISA_CHOICES));
    CHECK_EQ(rt_isa_parse("sse9"), -1);
    unsetenv("DDPRT_ISA");
    CHECK(rt_isa_env() == rt_isa_best());
}

/* DDPRT_ISA lowers the level for the kernels and the reductions alike, never raises it. */
TEST(env_isa_lowers_never_raises)
{
    setenv("DDPRT_ISA", "generic", 1);
    CHECK_EQ(rt_isa_env(), RT_ISA_GENERIC);
    CHECK(rt_isa_best() >= RT_ISA_GENERIC && rt_isa_best() < RT_NISA);
}
