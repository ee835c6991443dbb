#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int log_level = RT_LOG_INFO;
static int log_rank = -1;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void rt_log_init(void)
{
    const char *s = getenv("DDPRT_LOG");
    if (!s || !*s) return;
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, level_names[i]) || (i == 1 && !strcmp(s, "warning"))) {
            log_level = i;
            return;
        }
    /* Another value is refused by rt_env_check with one line (every program runs it at
     * start-up); a warning here would only precede that error. */
}

void rt_log_set_rank(int rank) { log_rank = rank; }
void rt_log_set_level(int level) { log_level = level; }
int rt_log_level(void) { return log_level; }

static void vlog(int level, const char *fmt, va_list ap)
{
    /* Build the line first so concurrent ranks/threads do not interleave within it. */
    char line[2048];
    int n = log_rank >= 0
                ? snprintf(line, sizeof line, "ddprt[rank %d]: %s: ", log_rank, level_names[level])
                : snprintf(line, sizeof line, "ddprt: %s: ", level_names[level]);
    vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    size_t len = strlen(line);
    if (len && line[len - 1] != '\n') { line[len++] = '\n'; line[len] = 0; }
    fputs(line, stderr);
}

void rt_log(int level, const char *fmt, ...)
{
    if (level > log_level) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void rt_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(RT_LOG_ERROR, fmt, ap);
    va_end(ap);
    fflush(stdout);
    exit(1);
}
