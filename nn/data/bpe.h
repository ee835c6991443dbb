/* Tokenizers for ddprt-data tokenize and for printing samples: byte-level (token = byte,
 * vocabulary 256) and GPT-2's byte-level BPE read from a user's encoder.json and
 * vocab.bpe (the files OpenAI published with GPT-2; nothing is downloaded).
 * Pre-tokenization follows GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with letters, digits and spaces classified by C.UTF-8 (exact for ASCII text).
 * Tool and start-up code: it allocates with malloc. */
#ifndef NN_DATA_BPE_H
#define NN_DATA_BPE_H
#include <stddef.h>
#include <stdint.h>

typedef struct nn_bpe nn_bpe;

/* Loads DIR/encoder.json and DIR/vocab.bpe. NULL with "FILE: offset N: problem" in err. */
nn_bpe *nn_bpe_load(const char *dir, char *err, size_t errlen);
void nn_bpe_free(nn_bpe *b);
int nn_bpe_vocab(const nn_bpe *b);
int nn_bpe_eot(const nn_bpe *b);   /* <|endoftext|>'s id, or -1 */
/* Appends the ids of text[0..n) at (*out)[*len], growing *out (realloc, *cap). 0, or -1
 * when out of memory. Invalid UTF-8 bytes are encoded as themselves (as GPT-2 does). */
int nn_bpe_encode(const nn_bpe *b, const char *text, size_t n, int32_t **out, size_t *len, size_t *cap);
/* The bytes of token id, NULL for an id outside the vocabulary. */
const char *nn_bpe_decode(const nn_bpe *b, int id, size_t *len);
#endif
