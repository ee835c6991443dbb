/* make install PREFIX=<temp>: a program compiles and links against the installed
 * headers and libddprt.a with `pkg-config --cflags --libs ddprt-static`; a program on
 * the C API (test/progs/api_rank.c) against libddprt.so with `pkg-config --cflags --libs
 * ddprt` runs 2 ranks under the installed ddprt-launch; the .so exports ddprt_* only;
 * every installed program answers --version with the one version of rt/version.h. */
#include "test/t.h"
#include "test/t_proc.h"
#include "rt/version.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char hello[] =
    "#include \"nn/trainer.h\"\n"
    "#include \"transport/tp.h\"\n"
    "#include \"rt/version.h\"\n"
    "#include <stdio.h>\n"
    "int main(int argc, char **argv)\n"
    "{\n"
    "    if (rt_version_arg(argc, argv)) return 0;\n"
    "    printf(\"hello ddprt %s isa %s\\n\", DDPRT_VERSION, k_isa());\n"
    "    return 0;\n"
    "}\n";

PTEST(install_into_a_prefix_and_build_against_it_with_pkg_config)
{
    if (system("command -v pkg-config >/dev/null 2>&1")) {
        t_note("skipped: no pkg-config (apt-get install pkgconf)");
        return;
    }
    const char *d = t_proc_tmpdir();
    char src[600];
    snprintf(src, sizeof src, "%s/hello.c", d);
    FILE *f = fopen(src, "w");
    CHECK(f && fputs(hello, f) >= 0 && fclose(f) == 0);
    /* A make of our own: not the outer make's jobserver. SAN keeps a sanitizer build's
     * link flags in ddprt.pc. */
    unsetenv("MAKEFLAGS"), unsetenv("MFLAGS"), unsetenv("MAKELEVEL");
    static const char script[] =
        "set -e; P=\"$1\"; cd \"$2\"\n"
        "make -s --no-print-directory install BUILD=\"$3\" SAN=\"$4\" PREFIX=\"$P/pfx\" >/dev/null\n"
        "export PKG_CONFIG_PATH=\"$P/pfx/lib/pkgconfig\"\n"
        "cc -std=c11 -Wall -Wextra -Werror -o \"$P/hello\" \"$P/hello.c\" $(pkg-config --cflags --libs ddprt-static)\n"
        "\"$P/hello\"; pkg-config --modversion ddprt\n"
        "cc -std=c11 -Wall -Wextra -Werror $4 -o \"$P/api\" test/progs/api_rank.c $(pkg-config --cflags --libs ddprt) "
        "-Wl,-rpath,\"$(pkg-config --variable=libdir ddprt)\"\n"
        "readelf -d \"$P/api\" | grep -q 'NEEDED.*libddprt.so.0'\n"
        "\"$P/pfx/bin/ddprt-launch\" --nproc-per-node 2 -- \"$P/api\" check\n"
        "nm -D --defined-only \"$P/pfx/lib/libddprt.so\" | awk '$3 !~ /^ddprt_|^DDPRT_/ {print \"exported: \" $3}'\n"
        "for p in \"$P\"/pfx/bin/*; do \"$p\" --version; done\n"
        "ls \"$P/pfx/lib/libddprt.a\" \"$P/pfx/include/ddprt/nn/trainer.h\" \"$P/pfx/include/ddprt.h\"\n";
    const char *b = getenv("DDPRT_BUILD"), *san = getenv("DDPRT_SAN");
    char cwd[512];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    const char *argv[] = {"/bin/sh", "-c", script, "sh", d, cwd, b ? b : "build", san ? san : "", NULL};
    t_proc p;
    t_spawn(&p, "install", (char *const *)argv, NULL);
    int rc = t_wait(&p, 240);
    const char *out = t_slurp(p.out);
    CHECKF(rc == 0, "exit %d: %s%s", rc, out, t_slurp(p.err));
    char want[64];
    snprintf(want, sizeof want, "hello ddprt %s isa ", DDPRT_VERSION);
    CHECKF(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "\n%s\n", DDPRT_VERSION); /* pkg-config --modversion */
    CHECKF(strstr(out, want), "%s", out);
    CHECKF(strstr(out, "rank 0 of 2 ok") && strstr(out, "rank 1 of 2 ok"), "the C API program: %s", out);
    CHECKF(!strstr(out, "exported: "), "libddprt.so exports more than ddprt_*: %s", out);
    static const char *const progs[] = {"ddprt-train", "ddprt-launch", "ddprt-bench", "ddprt-bench-kernels",
                                        "ddprt-data", "ddprt-trace", NULL};
    for (int i = 0; progs[i]; i++) {
        snprintf(want, sizeof want, "%s (ddprt) %s\n", progs[i], DDPRT_VERSION);
        CHECKF(strstr(out, want), "no '%s' in: %s", want, out);
    }
}
