/* UTF-8 code points for the text readers (text.c's normalisation, bpe.c's byte-level
 * tokenizer): one decoder with one rule of what is valid. */
#ifndef NN_DATA_UTF8_H
#define NN_DATA_UTF8_H
#include <stddef.h>
#include <stdint.h>

/* Decodes the code point at s (n bytes left): its length, or 0 when the bytes are not
 * valid UTF-8 (overlong forms, surrogates and values past U+10FFFF included). */
static inline int nn_utf8_get(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (s[0] < 0x80) return *cp = s[0], 1;
    int len = s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t v = s[0] & (0x7f >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10ffff)) || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    return *cp = v, len;
}

/* Encodes v (at most U+10FFFF) at o: its length, 1 to 4. */
static inline int nn_utf8_put(unsigned char *o, uint32_t v)
{
    if (v < 0x80) return o[0] = (unsigned char)v, 1;
    if (v < 0x800) return o[0] = (unsigned char)(0xc0 | v >> 6), o[1] = (unsigned char)(0x80 | (v & 0x3f)), 2;
    if (v < 0x10000)
        return o[0] = (unsigned char)(0xe0 | v >> 12), o[1] = (unsigned char)(0x80 | (v >> 6 & 0x3f)),
               o[2] = (unsigned char)(0x80 | (v & 0x3f)), 3;
    return o[0] = (unsigned char)(0xf0 | v >> 18), o[1] = (unsigned char)(0x80 | (v >> 12 & 0x3f)),
           o[2] = (unsigned char)(0x80 | (v >> 6 & 0x3f)), o[3] = (unsigned char)(0x80 | (v & 0x3f)), 4;
}
#endif
