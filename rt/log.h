/* Errors and logging. DDPRT_LOG=error|warn|info|debug picks the level (default info).
 * Every line starts with "ddprt" and, once set, the rank: "ddprt[rank 2]: error: ...". */
#ifndef RT_LOG_H
#define RT_LOG_H
#include <stdarg.h>

enum { RT_LOG_ERROR = 0, RT_LOG_WARN = 1, RT_LOG_INFO = 2, RT_LOG_DEBUG = 3 };

void rt_log_init(void);                 /* reads DDPRT_LOG; safe to call twice */
void rt_log_set_rank(int rank);         /* -1: no rank in the prefix */
void rt_log_set_level(int level);
int rt_log_level(void);
void rt_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One clear line on stderr, then exit(1). */
_Noreturn void rt_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define rt_error(...) rt_log(RT_LOG_ERROR, __VA_ARGS__)
#define rt_warn(...) rt_log(RT_LOG_WARN, __VA_ARGS__)
#define rt_info(...) rt_log(RT_LOG_INFO, __VA_ARGS__)
#define rt_debug(...) rt_log(RT_LOG_DEBUG, __VA_ARGS__)
#endif
