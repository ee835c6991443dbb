#include "nn/sampler.h"

uint64_t nn_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void nn_sampler_init(nn_sampler *s, rt_arena *a, int n, int world, int rank, int shuffle,
                     int drop_last, uint64_t seed)
{
    s->n = n;
    s->world = world;
    s->rank = rank;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->seed = seed;
    /* Same arithmetic as torch.utils.data.DistributedSampler.__init__. */
    if (drop_last && n % world) s->num_samples = (n - world + world - 1) / world;
    else s->num_samples = (n + world - 1) / world;
    if (s->num_samples < 0) s->num_samples = 0;
    s->total = s->num_samples * world;
    s->perm = rt_arena_alloc(a, (size_t)(n ? n : 1) * sizeof(int32_t), RT_MEM_DATA, "sampler permutation");
    s->indices = rt_arena_alloc(a, (size_t)(s->num_samples ? s->num_samples : 1) * sizeof(int32_t),
                                RT_MEM_DATA, "sampler indices");
}

void nn_sampler_set_epoch(nn_sampler *s, int epoch)
{
    for (int i = 0; i < s->n; i++) s->perm[i] = i;
    if (s->shuffle) {
        uint64_t st = s->seed + (uint64_t)epoch;
        for (int i = s->n - 1; i > 0; i--) {
            int j = (int)(nn_splitmix64(&st) % (uint64_t)(i + 1));
            int32_t t = s->perm[i];
            s->perm[i] = s->perm[j];
            s->perm[j] = t;
        }
    }
    nn_sampler_shard(s, s->rank, s->indices);
}

void nn_sampler_shard(const nn_sampler *s, int shard, int32_t *out)
{
    /* Position k of the padded list is perm[k % n]: padding repeats the start. */
    for (int i = 0; i < s->num_samples; i++) {
        int k = shard + i * s->world;
        out[i] = s->perm[s->n ? k % s->n : 0];
    }
}
