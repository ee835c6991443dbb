/* DistributedSampler semantics (PyTorch): each epoch a permutation seeded with
 * seed + epoch, padded by repeating its start (or truncated with drop_last) to a
 * multiple of the world size, then rank r takes elements r, r+world, ... Every rank
 * therefore gets the same number of samples, and so the same number of batches: a
 * job never hangs on the last batch of an epoch (seed article 002). */
#ifndef NN_SAMPLER_H
#define NN_SAMPLER_H
#include "rt/arena.h"
#include <stdint.h>

typedef struct nn_sampler {
    int n, world, rank, shuffle, drop_last;
    uint64_t seed;
    int num_samples, total; /* per rank; all ranks */
    int32_t *perm;          /* n entries, scratch */
    int32_t *indices;       /* num_samples entries for this rank */
} nn_sampler;

void nn_sampler_init(nn_sampler *s, rt_arena *a, int n, int world, int rank, int shuffle,
                     int drop_last, uint64_t seed);
void nn_sampler_set_epoch(nn_sampler *s, int epoch);
/* After set_epoch: the num_samples indices rank `shard` of the sampler's world takes
 * (--invariant: one virtual shard of K), into out. */
void nn_sampler_shard(const nn_sampler *s, int shard, int32_t *out);
/* splitmix64: the small seeded generator used for shuffling. */
uint64_t nn_splitmix64(uint64_t *state);
#endif
