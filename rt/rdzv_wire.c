/* Rendezvous wire format: fixed little-endian encoding, explicit bounds on every
 * length. The parsers are pure functions of a byte buffer so that the fuzz target
 * (test/fuzz/fuzz_rdzv.c) can throw arbitrary bytes at exactly the code rank 0 runs
 * on whatever connects to its port. */
#include "rt/rdzv_int.h"
#include "rt/env.h"
#include "rt/hash.h"
#include <string.h>

static void put16(uint8_t *b, uint16_t v) { b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *b) { return (uint16_t)(b[0] | b[1] << 8); }
static uint32_t get32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t get64(const uint8_t *b) { return get32(b) | (uint64_t)get32(b + 4) << 32; }

size_t rt_rdzv_put_hdr(uint8_t *b, int type, uint32_t len, uint32_t seq)
{
    put32(b, RT_RDZV_MAGIC);
    put16(b + 4, RT_RDZV_VERSION);
    put16(b + 6, (uint16_t)type);
    put32(b + 8, len);
    put32(b + 12, seq);
    return RT_RDZV_HDR;
}

/* The largest payload each message type may carry; anything bigger is an attack or
 * a bug, and is refused before a byte of it is read. */
static uint32_t max_payload(int type)
{
    switch (type) {
    case RZ_HELLO: return RT_RDZV_MAX_HELLO;
    case RZ_WELCOME: return 8;
    case RZ_REJECT: case RZ_ABORT: return 4 + RT_RDZV_MAX_TEXT;
    case RZ_GATHER: case RZ_RESULT: return RT_RDZV_MAX_MSG;
    default: return 0;
    }
}

int rt_rdzv_parse_hdr(const uint8_t *b, size_t n, rt_rdzv_hdr *h, const char **why)
{
    if (n < RT_RDZV_HDR) { *why = "short header"; return -1; }
    h->magic = get32(b);
    h->version = get16(b + 4);
    h->type = get16(b + 6);
    h->len = get32(b + 8);
    h->seq = get32(b + 12);
    if (h->magic != RT_RDZV_MAGIC) { *why = "bad magic (not a ddprt rendezvous peer)"; return -1; }
    if (h->version != RT_RDZV_VERSION) { *why = "unsupported protocol version (different ddprt build?)"; return -1; }
    if (h->type < RZ_HELLO || h->type > RZ_ABORT) { *why = "unknown message type"; return -1; }
    if (h->len > max_payload(h->type)) { *why = "message length over the limit"; return -1; }
    return 0;
}

/* hello payload: rank i32 | world i32 | local_rank i32 | pid u32 | token u64 |
 * config u64 | gen u64 | host_id u64 | hostlen u16 | host bytes */
#define HELLO_FIXED 50
size_t rt_rdzv_put_hello(uint8_t *b, size_t cap, const rt_rdzv_hello *h)
{
    size_t hl = strnlen(h->host, sizeof h->host - 1);
    if (cap < HELLO_FIXED + hl) return 0;
    put32(b, (uint32_t)h->rank);
    put32(b + 4, (uint32_t)h->world);
    put32(b + 8, (uint32_t)h->local_rank);
    put32(b + 12, h->pid);
    put64(b + 16, h->token_hash);
    put64(b + 24, h->config_hash);
    put64(b + 32, h->gen);
    put64(b + 40, h->host_id);
    put16(b + 48, (uint16_t)hl);
    memcpy(b + HELLO_FIXED, h->host, hl);
    return HELLO_FIXED + hl;
}

int rt_rdzv_parse_hello(const uint8_t *b, size_t n, rt_rdzv_hello *h, const char **why)
{
    if (n < HELLO_FIXED) { *why = "hello too short"; return -1; }
    size_t hl = get16(b + 48);
    if (hl >= sizeof h->host || n != HELLO_FIXED + hl) { *why = "hello length does not add up"; return -1; }
    h->rank = (int32_t)get32(b);
    h->world = (int32_t)get32(b + 4);
    h->local_rank = (int32_t)get32(b + 8);
    h->pid = get32(b + 12);
    h->token_hash = get64(b + 16);
    h->config_hash = get64(b + 24);
    h->gen = get64(b + 32);
    h->host_id = get64(b + 40);
    if (h->world < 1 || h->world > RT_RDZV_MAX_WORLD) { *why = "world size out of range"; return -1; }
    if (h->rank < 0 || h->local_rank < -1) { *why = "negative rank"; return -1; }
    for (size_t i = 0; i < hl; i++) {
        /* Hostnames go into log lines: printable ASCII only. */
        if (b[HELLO_FIXED + i] < 0x21 || b[HELLO_FIXED + i] > 0x7e) { *why = "bad hostname"; return -1; }
        h->host[i] = (char)b[HELLO_FIXED + i];
    }
    h->host[hl] = 0;
    return 0;
}

size_t rt_rdzv_put_text(uint8_t *b, size_t cap, uint32_t code, const char *text)
{
    size_t tl = strnlen(text, RT_RDZV_MAX_TEXT);
    if (cap < 4 + tl) return 0;
    put32(b, code);
    memcpy(b + 4, text, tl);
    return 4 + tl;
}

int rt_rdzv_parse_text(const uint8_t *b, size_t n, uint32_t *code, char *text, size_t textlen,
                       const char **why)
{
    if (n < 4 || n > 4 + RT_RDZV_MAX_TEXT) { *why = "bad text message length"; return -1; }
    if (textlen == 0) { *why = "no room for text"; return -1; }
    *code = get32(b);
    size_t k = 0;
    for (size_t i = 4; i < n && k + 1 < textlen; i++)
        text[k++] = b[i] >= 0x20 && b[i] < 0x7f ? (char)b[i] : '?';
    text[k] = 0;
    return 0;
}

size_t rt_rdzv_put_welcome(uint8_t *b, size_t cap, int32_t world, int32_t local_rank)
{
    if (cap < 8) return 0;
    put32(b, (uint32_t)world);
    put32(b + 4, (uint32_t)local_rank);
    return 8;
}

int rt_rdzv_parse_welcome(const uint8_t *b, size_t n, int32_t *world, int32_t *local_rank,
                          const char **why)
{
    if (n != 8) { *why = "bad welcome length"; return -1; }
    *world = (int32_t)get32(b);
    *local_rank = (int32_t)get32(b + 4);
    if (*world < 1 || *world > RT_RDZV_MAX_WORLD || *local_rank < 0) { *why = "bad welcome"; return -1; }
    return 0;
}

uint64_t rt_rdzv_token_hash_of(const char *token)
{
    if (!token || !*token) return 0;
    /* FNV-1a over a domain prefix + the token: the token itself never goes on the wire. */
    uint64_t h = rt_fnv1a_str(rt_fnv1a_str(RT_FNV1A_INIT, "ddprt-job-token:"), token);
    return h ? h : 1;
}

/* Rank 0 gives a connection this long to say hello (rt/rdzv_tcp.c at the meeting,
 * rt/rdzv_door.c after it). */
int64_t rt_rdzv_hello_timeout_ns(const rt_rdzv *r)
{
    double t = rt_env_number(RT_ENV_RDZV_HELLO_TIMEOUT);
    if (!(t > 0)) t = 5.0;
    if (t > r->timeout_s) t = r->timeout_s;
    return (int64_t)(t * 1e9);
}
