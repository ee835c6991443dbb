/* Token shards as llm.c writes them (dev/data/data_common.py): a header of 256 int32
 * (magic, version, token count, the rest 0), then the tokens. Magic 20240520 version 1
 * holds uint16 tokens (GPT-2), magic 20240801 version 7 uint32 (LLaMA 3). ddprt
 * writes the vocabulary size in header[3] (0 in llm.c's files: GPT-2's 50257 or
 * LLaMA 3's 128256 by the magic). A directory of shards is a data set (nn/data/
 * tokens.c): *train*.bin and *val*.bin, in name order, cut into windows of seq_len + 1
 * tokens every seq_len tokens (a sample's inputs [0, T) and next-token targets [1, T]). */
#ifndef NN_DATA_TOKENS_H
#define NN_DATA_TOKENS_H
#include <stddef.h>
#include <stdint.h>

#define NN_TOK_MAGIC16 20240520
#define NN_TOK_MAGIC32 20240801
#define NN_TOK_HEADER_BYTES 1024

/* One shard's header, checked against the file's size. 0, or -1 with "PATH: offset N:
 * problem" in err. */
typedef struct nn_tok_info { int64_t ntok; int tbytes, vocab; } nn_tok_info;
int nn_tokens_probe(const char *path, nn_tok_info *info, char *err, size_t errlen);
/* Writes a shard atomically (PATH.tmp, then renamed): uint16 tokens when vocab <= 65536,
 * else uint32. 0, or -1 with err. */
int nn_tokens_write(const char *path, const int32_t *tok, size_t n, int vocab, char *err, size_t errlen);
/* The shards of a split in dir ("train" or "val"), sorted: count (any number; -1 when
 * out of memory), and the first max of their paths in out (NULL: count only). */
int nn_tokens_list(const char *dir, const char *split, char (*out)[600], int max);
#endif
