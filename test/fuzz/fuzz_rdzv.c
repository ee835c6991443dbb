/* libFuzzer target: the rendezvous message parsers (rt/rdzv_wire.c) and the Slurm
 * hostlist expander (rt/rdzv_env.c), i.e. everything rank 0 runs on bytes from whoever
 * connects to its port or whatever a scheduler puts in the environment.
 * Build and run: make fuzz (clang -fsanitize=fuzzer,address,undefined, 30 s). */
#include "rt/rdzv_int.h"
#include <stdlib.h>
#include <string.h>

static int count_host(const char *h, void *ctx)
{
    /* Every expanded name must be a bounded C string. */
    if (strlen(h) >= 256) abort();
    ++*(int *)ctx;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    rt_rdzv_hdr h;
    rt_rdzv_hello hello, again;
    const char *why;
    char text[RT_RDZV_MAX_TEXT + 1];
    uint32_t code;
    int32_t world, lr;
    uint8_t buf[RT_RDZV_HDR + RT_RDZV_MAX_HELLO];

    /* As the server sees a stream: header first, then a payload of exactly h.len bytes. */
    if (rt_rdzv_parse_hdr(d, n, &h, &why) == 0) {
        if (h.len > RT_RDZV_MAX_MSG) abort(); /* the bound every reader relies on */
        size_t pn = n - RT_RDZV_HDR < h.len ? n - RT_RDZV_HDR : h.len;
        const uint8_t *p = d + RT_RDZV_HDR;
        if (h.type == RZ_HELLO) rt_rdzv_parse_hello(p, pn, &hello, &why);
        if (h.type == RZ_REJECT || h.type == RZ_ABORT) rt_rdzv_parse_text(p, pn, &code, text, sizeof text, &why);
        if (h.type == RZ_WELCOME) rt_rdzv_parse_welcome(p, pn, &world, &lr, &why);
    }
    /* Each payload parser on the raw bytes, plus an encode/parse round trip. */
    if (rt_rdzv_parse_hello(d, n, &hello, &why) == 0) {
        size_t m = rt_rdzv_put_hello(buf, sizeof buf, &hello);
        if (m != n || memcmp(buf, d, n) || rt_rdzv_parse_hello(buf, m, &again, &why) ||
            memcmp(&hello.rank, &again.rank, offsetof(rt_rdzv_hello, host)) || strcmp(hello.host, again.host))
            abort();
    }
    if (rt_rdzv_parse_text(d, n, &code, text, sizeof text, &why) == 0 && strlen(text) > RT_RDZV_MAX_TEXT) abort();
    rt_rdzv_parse_welcome(d, n, &world, &lr, &why);

    /* Hostlists come from the environment: a C string, short in practice. */
    if (n < 512) {
        char list[512];
        memcpy(list, d, n);
        list[n] = 0;
        int c = 0, k = rt_hostlist_each(list, count_host, &c);
        if (k >= 0 && k != c) abort();
        char first[256];
        if (rt_hostlist_first(list, first, sizeof first) == 0 && strlen(first) >= sizeof first) abort();
    }
    return 0;
}
