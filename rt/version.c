#include "rt/version.h"
#include <stdio.h>
#include <string.h>

int rt_version_arg(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--version")) {
            const char *slash = strrchr(argv[0], '/');
            printf("%s (ddprt) %s\n", slash ? slash + 1 : argv[0], DDPRT_VERSION);
            return 1;
        }
    return 0;
}
