/* See jhuff.h. The state is libjpeg's public decompress struct plus the entropy
 * decoder's method table, whose layout (jpegint.h) has not changed since libjpeg 6b. */
#include "nn/data/jhuff.h"
#include <stddef.h>
#include <string.h>
#ifndef DDPRT_JPEG
#define DDPRT_JPEG 0
#endif
int nn_jhuff_enabled = 1;
#if !DDPRT_JPEG
int nn_jhuff_install(void *cinfo, nn_jhuff *j)
{
    (void)cinfo, (void)j;
    return 0;
}
#else
#include <stdio.h>
#include <jpeglib.h>

struct jpeg_entropy_decoder {
    void (*start_pass)(j_decompress_ptr cinfo);
    boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
    boolean insufficient_data;
};

/* Zig-zag to natural order; 16 extra entries absorb a run past the end as libjpeg's do. */
static const uint8_t nat[80] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
                                40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
                                29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
                                47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

static int build(nn_jh_tab *t, const JHUFF_TBL *h, int ac)
{
    int code = 0, k = 0;
    memset(t->fast, 0, sizeof t->fast);
    for (int len = 1; len <= 16; len++) {
        int n = h->bits[len];
        t->valoff[len] = k - code;
        if (k + n > 256) return -1;
        for (int i = 0; i < n; i++, k++, code++) {
            if (!ac && h->huffval[k] > 15) return -1; /* a DC size above 15 bits: libjpeg's error path */
            t->val[k] = h->huffval[k];
            if (len <= NN_JH_FAST)
                for (int f = 0; f < 1 << (NN_JH_FAST - len); f++)
                    t->fast[code << (NN_JH_FAST - len) | f] = (uint16_t)(len << 8 | h->huffval[k]);
        }
        t->maxcode[len] = n ? code - 1 : -1;
        if (code > 1 << len) return -1; /* not a prefix code */
        code <<= 1;
    }
    t->maxcode[17] = 0x7fffffff;
    if (!ac) return 0;
    /* Code and value bits within NN_JH_ACB: one look-up yields run and value. */
    memset(t->ac, 0, sizeof t->ac);
    for (int pk = 0; pk < 1 << NN_JH_ACB; pk++) {
        int e = t->fast[pk >> (NN_JH_ACB - NN_JH_FAST)], len = e >> 8, rs = e & 255, s = rs & 15;
        if (!e || !s || len + s > NN_JH_ACB) continue;
        int v = (pk >> (NN_JH_ACB - len - s)) & ((1 << s) - 1);
        if (v < 1 << (s - 1)) v -= (1 << s) - 1;
        t->ac[pk] = (int32_t)((uint32_t)v << 16 | (uint32_t)(rs >> 4) << 8 | (uint32_t)(len + s));
    }
    return 0;
}

/* Tops the buffer up to at least 57 bits. Never moves past a marker: after one, zeros
 * (counted in pad) so that reading past the data shows up as nbits < pad. */
static inline void refill(nn_jh_bits *j)
{
    if (j->end - j->p >= 8 && !j->marker) {
        uint64_t w;
        memcpy(&w, j->p, 8);
        w = __builtin_bswap64(w);
        uint64_t x = ~w; /* 0xFF bytes become zero bytes */
        if (!((x - 0x0101010101010101ull) & ~x & 0x8080808080808080ull)) {
            /* The bits of a partly taken byte are ORed in again, identically, next time. */
            int nb = (64 - j->nbits) >> 3;
            j->bits |= w >> j->nbits;
            j->p += nb, j->nbits += nb << 3;
            return;
        }
    }
    while (j->nbits <= 56) {
        unsigned b = 0;
        if (!j->marker) {
            if (j->p >= j->end) j->marker = 1;
            else if (j->p[0] != 0xff) b = *j->p++;
            else if (j->p + 1 < j->end && j->p[1] == 0) b = 0xff, j->p += 2;
            else j->marker = 1;
        }
        if (j->marker) {
            j->pad += 64 - j->nbits;
            j->nbits = 64;
            return;
        }
        j->bits |= (uint64_t)b << (56 - j->nbits);
        j->nbits += 8;
    }
}

static inline int sym(nn_jh_bits *j, const nn_jh_tab *t)
{
    int e = t->fast[j->bits >> (64 - NN_JH_FAST)];
    if (e) {
        j->bits <<= e >> 8, j->nbits -= e >> 8;
        return e & 255;
    }
    uint32_t top = (uint32_t)(j->bits >> 48);
    for (int len = NN_JH_FAST + 1; len <= 16; len++) {
        int32_t c = (int32_t)(top >> (16 - len));
        if (c <= t->maxcode[len]) {
            j->bits <<= len, j->nbits -= len;
            return t->val[(c + t->valoff[len]) & 255];
        }
    }
    if (!j->bad) j->bad = "bad Huffman code";
    j->bits <<= 16, j->nbits -= 16;
    return 0;
}

static inline int value(nn_jh_bits *j, int s)
{
    int v = (int)(j->bits >> (64 - s));
    j->bits <<= s, j->nbits -= s;
    return v < 1 << (s - 1) ? v - (1 << s) + 1 : v;
}

static boolean decode_mcu(j_decompress_ptr ci, JBLOCKROW *data)
{
    nn_jhuff *J = ci->client_data;
    nn_jh_bits bs = J->b, *j = &bs; /* in registers, not memory, in the loops below */
    JBLOCK dummy;
    if (ci->restart_interval) {
        if (J->togo == 0) { /* drop the padding bits; the next two bytes must be RSTn */
            if (!(j->end - j->p >= 2 && j->p[0] == 0xff && j->p[1] == 0xd0 + J->next_rst) && !j->bad)
                j->bad = "restart marker missing or out of order";
            if (j->end - j->p >= 2) j->p += 2;
            j->bits = 0, j->nbits = j->pad = j->marker = 0;
            J->next_rst = (J->next_rst + 1) & 7;
            J->togo = (int)ci->restart_interval;
            memset(J->dc, 0, sizeof J->dc);
        }
        J->togo--;
    }
    for (int b = 0; b < ci->blocks_in_MCU; b++) {
        JCOEF *blk = data ? data[b][0] : dummy;
        int c = ci->MCU_membership[b];
        const nn_jh_tab *at = J->act[c];
        if (j->nbits < 32) refill(j);
        int s = sym(j, J->dct[c]);
        if (s) {
            if (j->nbits < 32) refill(j);
            J->dc[c] += value(j, s);
        }
        blk[0] = (JCOEF)J->dc[c];
        for (int k = 1; k < 64; k++) {
            if (j->nbits < 32) refill(j);
            int32_t f = at->ac[j->bits >> (64 - NN_JH_ACB)];
            if (f) {
                k += (f >> 8) & 255;
                j->bits <<= f & 255, j->nbits -= f & 255;
                blk[nat[k]] = (JCOEF)(f >> 16);
                continue;
            }
            int rs = sym(j, at), r = rs >> 4;
            s = rs & 15;
            if (s) {
                k += r;
                if (j->nbits < 16) refill(j);
                blk[nat[k]] = (JCOEF)value(j, s);
            } else {
                if (r != 15) break;
                k += 15;
            }
        }
    }
    if (j->nbits < j->pad && !j->bad) j->bad = "premature end of data segment";
    J->b = bs;
    return TRUE;
}

int nn_jhuff_install(void *cinfo, nn_jhuff *j)
{
    j_decompress_ptr ci = cinfo;
    if (!nn_jhuff_enabled || ci->progressive_mode || ci->arith_code || ci->data_precision != 8 ||
        ci->comps_in_scan != ci->num_components || ci->comps_in_scan > 4 || !ci->entropy || !ci->src)
        return 0;
    memset(j, 0, offsetof(nn_jhuff, tab));
    for (int c = 0; c < ci->comps_in_scan; c++) {
        jpeg_component_info *cp = ci->cur_comp_info[c];
        int d = cp->dc_tbl_no, a = cp->ac_tbl_no;
        if (d < 0 || d > 3 || a < 0 || a > 3 || !ci->dc_huff_tbl_ptrs[d] || !ci->ac_huff_tbl_ptrs[a]) return 0;
        if (build(&j->tab[d], ci->dc_huff_tbl_ptrs[d], 0) || build(&j->tab[4 + a], ci->ac_huff_tbl_ptrs[a], 1)) return 0;
        j->dct[c] = &j->tab[d], j->act[c] = &j->tab[4 + a];
    }
    j->b.p = ci->src->next_input_byte;
    j->b.end = j->b.p + ci->src->bytes_in_buffer;
    j->togo = (int)ci->restart_interval;
    ci->client_data = j;
    ci->entropy->decode_mcu = decode_mcu;
    return 1;
}
#endif
