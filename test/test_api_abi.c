/* The C API's binary interface: the Python package's ctypes mirror of include/ddprt.h
 * against what this compiler says (python/tests/abi_check.py reads the layout written
 * here, and must fail on a wrong one); the API 1 forms that binaries built against
 * API 1 bind (ddprt_test@DDPRT_0, ddprt_allgatherv@DDPRT_0) beside the API 2 ones in
 * build/libddprt.so, looked up by symbol version as the loader does. */
#include "test/t.h"
#include "test/t_proc.h"
#include "include/ddprt.h"
#include <dlfcn.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *python(void)
{
    const char *p = getenv("DDPRT_PYTHON");
    if (p && *p) return p;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

#define FIELD(f) fprintf(o, "offsetof ddprt_opts.%s %zu\nsizeof ddprt_opts.%s %zu\n", #f, \
                         offsetof(ddprt_opts, f), #f, sizeof(((ddprt_opts *)0)->f))
#define ENUM(e) fprintf(o, "enum %s %d\n", #e, (int)(e))

/* The layout as this compiler has it; skew: a field whose offset is written 8 off (the
 * check must then fail naming it). The path of the file. */
static const char *write_layout(const char *name, const char *skew)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", t_proc_tmpdir(), name);
    FILE *o = fopen(path, "w");
    if (!o) return NULL;
    fprintf(o, "api_version %d\nsizeof ddprt_opts %zu\nalignof ddprt_opts %zu\n", DDPRT_API_VERSION,
            sizeof(ddprt_opts), alignof(ddprt_opts));
    FIELD(size), FIELD(init_method), FIELD(rank), FIELD(world_size), FIELD(local_rank), FIELD(timeout_s);
    FIELD(backend), FIELD(token), FIELD(port_offset), FIELD(log_level), FIELD(max_requests);
    ENUM(DDPRT_FLOAT32), ENUM(DDPRT_FLOAT64), ENUM(DDPRT_FLOAT16), ENUM(DDPRT_BFLOAT16), ENUM(DDPRT_INT32);
    ENUM(DDPRT_INT64), ENUM(DDPRT_UINT8);
    ENUM(DDPRT_SUM), ENUM(DDPRT_PROD), ENUM(DDPRT_MIN), ENUM(DDPRT_MAX), ENUM(DDPRT_AVG);
    ENUM(DDPRT_OK), ENUM(DDPRT_EIO), ENUM(DDPRT_ETIMEOUT), ENUM(DDPRT_ECLOSED), ENUM(DDPRT_EINVAL);
    ENUM(DDPRT_ENOMEM), ENUM(DDPRT_EBUSY);
    if (skew) fprintf(o, "offsetof ddprt_opts.%s %zu\n", skew, offsetof(ddprt_opts, timeout_s) + 8);
    return fclose(o) ? NULL : path;
}

/* abi_check.py on a layout: its exit code; out: what it printed. */
static int abi_check(const char *layout, const char *load, const char **out)
{
    char pp[600], cwd[400];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    snprintf(pp, sizeof pp, "PYTHONPATH=%s/python", cwd);
    char *env[] = {pp, NULL};
    char *argv[] = {(char *)python(), "python/tests/abi_check.py", (char *)layout, "include/ddprt.h", (char *)load,
                    NULL};
    t_proc p;
    t_spawn(&p, "abi", argv, env);
    int rc = t_wait(&p, 60);
    static char both[8192];
    snprintf(both, sizeof both, "%s%s", t_slurp(p.out), t_slurp(p.err));
    *out = both;
    return rc;
}

/* Only the ctypes definitions are read, and the library loaded only outside a
 * sanitizer build (an uninstrumented interpreter cannot load an instrumented one). */
PTEST(api_python_ctypes_mirror_matches_the_c_header)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "%s -c 'import ctypes' >/dev/null 2>&1", python());
    if (system(cmd)) {
        t_note("skipped: no %s", python());
        return;
    }
    const char *path = write_layout("layout.txt", NULL), *out;
    CHECK(path != NULL);
    int rc = abi_check(path, t_san("") ? "" : "load", &out);
    CHECKF(rc == 0 && strstr(out, "abi ok"), "exit %d: %s", rc, out);
    /* A check that cannot fail is none: C's offset of timeout_s moved, as a changed
     * field in _lib.Opts would move ctypes' one. */
    path = write_layout("skewed.txt", "timeout_s");
    CHECK(path != NULL);
    rc = abi_check(path, "", &out);
    CHECKF(rc == 1 && strstr(out, "ddprt_opts.timeout_s: C offset") && !strstr(out, "abi ok"), "exit %d: %s", rc, out);
}

/* One-process comm through the .so's symbols: API 1's ddprt_test says 1 and releases,
 * API 1's allgatherv takes the count before recv; the default versions are API 2's. */
TEST(api_1_forms_stay_in_the_shared_library_at_ddprt_0)
{
    t_clean_env();
    char so[600];
    const char *b = getenv("DDPRT_BUILD");
    snprintf(so, sizeof so, "%s/libddprt.so", b && *b ? b : "build");
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    CHECKF(h != NULL, "dlopen %s: %s", so, dlerror());
    if (!h) return;
    int (*init)(ddprt_comm **, const ddprt_opts *) = (int (*)(ddprt_comm **, const ddprt_opts *))dlsym(h, "ddprt_init");
    void (*fin)(ddprt_comm *) = (void (*)(ddprt_comm *))dlsym(h, "ddprt_finalize");
    int (*iar)(ddprt_comm *, const void *, void *, size_t, ddprt_dtype, ddprt_op, ddprt_request **) =
        (int (*)(ddprt_comm *, const void *, void *, size_t, ddprt_dtype, ddprt_op, ddprt_request **))dlsym(
            h, "ddprt_iallreduce");
    int (*test1)(ddprt_request *) = (int (*)(ddprt_request *))dlvsym(h, "ddprt_test", "DDPRT_0");
    int (*test2)(ddprt_request **, int *) = (int (*)(ddprt_request **, int *))dlsym(h, "ddprt_test");
    int (*agv1)(ddprt_comm *, const void *, size_t, void *, const size_t *, const size_t *, ddprt_dtype) =
        (int (*)(ddprt_comm *, const void *, size_t, void *, const size_t *, const size_t *, ddprt_dtype))dlvsym(
            h, "ddprt_allgatherv", "DDPRT_0");
    int (*agv2)(ddprt_comm *, const void *, void *, size_t, const size_t *, const size_t *, ddprt_dtype) =
        (int (*)(ddprt_comm *, const void *, void *, size_t, const size_t *, const size_t *, ddprt_dtype))dlsym(
            h, "ddprt_allgatherv");
    int (*apiv)(void) = (int (*)(void))dlsym(h, "ddprt_api_version");
    CHECK(init && fin && iar && test1 && test2 && agv1 && agv2 && apiv);
    CHECK((void *)test1 != (void *)test2 && (void *)agv1 != (void *)agv2);
    CHECK(dlvsym(h, "ddprt_test", "DDPRT_1") == (void *)test2 && dlvsym(h, "ddprt_api_version", "DDPRT_0") == NULL);
    /* API 3's call at its own node: a binary using it does not load an API 2 library */
    CHECK(dlvsym(h, "ddprt_alltoallv", "DDPRT_2") != NULL && dlvsym(h, "ddprt_alltoallv", "DDPRT_1") == NULL);
    ddprt_comm *c = NULL;
    if (!init || !test1 || !test2 || !agv1 || !agv2 || !apiv || init(&c, NULL)) {
        CHECKF(0, "init: comm %p", (void *)c);
        dlclose(h);
        return;
    }
    CHECK_EQ(apiv(), DDPRT_API_VERSION);
    float s[3] = {1, 2, 3}, r[3] = {0};
    size_t n = 3;
    CHECK(agv1(c, s, 3, r, &n, NULL, DDPRT_FLOAT32) == 0 && r[2] == 3);
    r[2] = 0;
    CHECK(agv2(c, s, r, 3, &n, NULL, DDPRT_FLOAT32) == 0 && r[2] == 3);
    ddprt_request *q = NULL;
    CHECK(iar(c, s, r, 3, DDPRT_FLOAT32, DDPRT_SUM, &q) == 0 && q);
    CHECK_EQ(test1(q), 1);               /* done and ok: released */
    CHECK_EQ(test1(q), DDPRT_EINVAL);    /* a released request */
    int done = 0;
    CHECK(iar(c, s, r, 3, DDPRT_FLOAT32, DDPRT_SUM, &q) == 0 && q);
    CHECK(test2(&q, &done) == 0 && done == 1 && q == NULL);
    fin(c);
    dlclose(h);
}
