/* Prints docs/env.md from the table in rt/env.c (`make env-doc`). */
#include "rt/env.h"
#include <stdio.h>

int main(void)
{
    rt_env_doc(stdout);
    return fflush(stdout) ? 1 : 0;
}
