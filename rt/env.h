/* The DDPRT_* environment variables, checked in one place at start-up: a value outside
 * a variable's domain (DDPRT_ALGO=rign, DDPRT_TCP_BUFSIZE=1M) is one error line instead
 * of being ignored silently somewhere deep in a backend. */
#ifndef RT_ENV_H
#define RT_ENV_H
#include <stddef.h>

/* 0 when every set DDPRT_* variable is valid; -1 with "DDPRT_X=v: expected ..." in err.
 * A DDPRT_* name that no part of ddprt reads gets a warning with the closest known
 * name (a typo such as DDPRT_TIMOUT would otherwise do nothing). */
int rt_env_check(char *err, size_t errlen);
/* The number in DDPRT_<name> when set and valid, else dflt (call rt_env_check first). */
double rt_env_num(const char *name, double dflt);
/* Levenshtein distance (names up to 62 characters; 99 beyond): "did you mean" hints. */
int rt_edit_distance(const char *a, const char *b);
#endif
