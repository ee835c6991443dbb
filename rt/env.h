/* The DDPRT_* environment variables: one table (rt/env.c) with each variable's domain,
 * default and meaning, checked in one place at start-up (a value outside a variable's
 * domain, DDPRT_ALGO=rign or DDPRT_TCP_BUFSIZE=1M, is one error line instead of being
 * ignored silently somewhere deep in a backend), read only through the accessors below
 * and printed as docs/env.md (`make env-doc`; test_rt fails when that page is stale). */
#ifndef RT_ENV_H
#define RT_ENV_H
#include <stddef.h>
#include <stdio.h>
#ifdef __cplusplus
extern "C" {
#endif

/* One id per variable, in the table's (and docs/env.md's) order. */
typedef enum rt_env {
    RT_ENV_TIMEOUT, RT_ENV_JOB_TOKEN, RT_ENV_RDZV_HELLO_TIMEOUT, RT_ENV_LAUNCH_GRACE, RT_ENV_RESTART_COUNT,
    RT_ENV_ELASTIC, RT_ENV_ELASTIC_WAIT,
    RT_ENV_ALGO, RT_ENV_SOCKET_IFNAME, RT_ENV_TCP_LOCAL, RT_ENV_TCP_NSOCKS, RT_ENV_TCP_SPIN_US,
    RT_ENV_TCP_BUFSIZE, RT_ENV_SHM, RT_ENV_SHM_SPIN_US, RT_ENV_SHM_CMA, RT_ENV_SHM_CMA_MIN, RT_ENV_SHM_MAP,
    RT_ENV_SHM_MAP_MIN, RT_ENV_P2P, RT_ENV_IB_HCA, RT_ENV_IB_GID_INDEX, RT_ENV_IB_TIMEOUT, RT_ENV_IB_RETRY_CNT,
    RT_ENV_VERBS_SPIN_US, RT_ENV_VERBS_SLOT_KB, RT_ENV_VERBS_CLOSE_GRACE_MS, RT_ENV_STALL_WARN,
    RT_ENV_STALL_WATCH, RT_ENV_TRACE_ENTRIES, RT_ENV_TRACE_DIR, RT_ENV_COMPRESS_CHECK, RT_ENV_ISA, RT_ENV_CONV,
    RT_ENV_BF16_GEMM,
    RT_ENV_CUDA_SYNC, RT_ENV_WGMMA, RT_ENV_TMA, RT_ENV_PROBE_DUMP, RT_ENV_SIMT_SCHED, RT_ENV_SIMT_SEED, RT_ENV_SIMT_TRACE, RT_ENV_SIMT_BANKS, RT_ENV_LOG, RT_ENV_DATA, RT_ENV_VERBS_TEST_FAULT, RT_ENV_SHM_TEST_FAULT, RT_ENV_BUILD,
    RT_ENV_TEST_TIMEOUT, RT_ENV_SAN, RT_ENV_LIB, RT_ENV_PYTHON, RT_ENV_HVD_CHECK, RT_ENV_ELASTIC_STATE, RT_ENV_COUNT
} rt_env;

#define RT_DEFAULT_TIMEOUT_S 300.0 /* DDPRT_TIMEOUT unset */

/* 0 when every set DDPRT_* variable is valid; -1 with "DDPRT_X=v: expected ..." in err.
 * A DDPRT_* name that no part of ddprt reads gets a warning with the closest known
 * name (a typo such as DDPRT_TIMOUT would otherwise do nothing). */
int rt_env_check(char *err, size_t errlen);
/* The same check for one variable (unset or empty: valid). */
int rt_env_check_one(rt_env v, char *err, size_t errlen);

/* The accessors. An empty value counts as unset everywhere. Values outside the domain
 * are refused by rt_env_check; here they read as unset. */
const char *rt_env_name(rt_env v);           /* "DDPRT_TIMEOUT" */
const char *rt_env_str(rt_env v);            /* the value; NULL when unset */
double rt_env_num(rt_env v, double dflt);    /* the number, else dflt */
/* The number, else the table's default (its one written place: the doc and the code
 * read the same string). For the variables whose default is a number. */
double rt_env_number(rt_env v);
int rt_env_flag(rt_env v, int dflt);         /* a 0|1 variable: 0 for "0", 1 for "1", else dflt */
/* The value's index among the variable's '|'-separated choices, else dflt. */
int rt_env_choice(rt_env v, int dflt);
double rt_env_timeout_s(void);               /* DDPRT_TIMEOUT, or RT_DEFAULT_TIMEOUT_S */

/* docs/env.md: the table as Markdown. */
void rt_env_doc(FILE *f);

/* Whether v is one of the '|'-separated choices ("ring|rd|hier"); its index there (-1:
 * none of them). */
int rt_in_choices(const char *v, const char *choices);
int rt_choice_index(const char *v, const char *choices);
/* Levenshtein distance (names up to 62 characters; 99 beyond): "did you mean" hints. */
int rt_edit_distance(const char *a, const char *b);
#ifdef __cplusplus
}
#endif
#endif
