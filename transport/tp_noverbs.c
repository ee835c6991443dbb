/* The verbs backend in a build without libibverbs (make VERBS=0, or no
 * /usr/include/infiniband/verbs.h): selecting it is a clear error, and
 * --backend auto falls back to TCP. */
#include "transport/tp_backend.h"
#include <stdio.h>

#define NO_VERBS "this build has no verbs backend (install libibverbs-dev and rebuild)"

int tp_verbs_create(const tp_bootstrap *bs, tp_backend **out, char *err, size_t errlen)
{
    (void)bs;
    *out = NULL;
    snprintf(err, errlen, "%s", NO_VERBS);
    return -1;
}

int tp_verbs_available(char *desc, size_t len)
{
    snprintf(desc, len, "%s", NO_VERBS);
    return 0;
}
