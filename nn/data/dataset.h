/* Data sets: IDX (Fashion-MNIST), CIFAR-10/100 binary, image folders (JPEG/PNG),
 * text TSV and synthetic, behind one interface. open() validates without allocating;
 * load() carves from an arena (run on a planning arena first, then the real one);
 * nn_data_sample() makes one transformed sample and is what the loader's worker
 * threads call. Random augmentation is a function of (seed, epoch, sample index). */
#ifndef NN_DATA_DATASET_H
#define NN_DATA_DATASET_H
#include "rt/arena.h"
#include <stddef.h>
#include <stdint.h>

#define NN_MNIST_MEAN 0.1307f
#define NN_MNIST_STD 0.3081f

typedef struct nn_data_cfg {
    const char *dir;        /* --data DIR (NULL: $DDPRT_DATA, ./data, Debian's Fashion-MNIST); "synthetic" = no files */
    const char *dataset;    /* --dataset: idx, cifar10, cifar100, imagefolder, text, synthetic, tokens; NULL = detect */
    int image_size;         /* 0 = the data's own size; image folders default 224 */
    const char *augment;    /* none|cifar|imagenet (NULL = the format's default) */
    int workers;            /* decode threads per rank (0 = 1) */
    int bad_skip;           /* --bad-sample skip */
    int seq_len, min_freq, max_vocab; /* text (0 = 64, 1, unlimited) */
    int syn_c, syn_h, syn_w, syn_classes, syn_n; /* --data synthetic shape (0 = 1x28x28, 10, 60000) */
    int syn_vocab;          /* > 0: synthetic samples are syn_w token ids in [0, syn_vocab) */
    int syn_lm;             /* with syn_vocab: language-modelling windows of syn_w = T + 1 tokens */
    uint64_t seed;
} nn_data_cfg;

enum { NN_AUG_NONE, NN_AUG_CIFAR, NN_AUG_IMAGENET };
enum { NN_FMT_IDX, NN_FMT_CIFAR10, NN_FMT_CIFAR100, NN_FMT_FOLDER, NN_FMT_TEXT, NN_FMT_SYNTHETIC, NN_FMT_TOKENS };

typedef struct nn_idx_header {
    int ndims;
    int dims[3];
    size_t count, item_bytes;
} nn_idx_header;

/* One mapped token shard (nn/data/tokens.c). */
typedef struct nn_tok_shard {
    char name[128];
    const void *map;        /* the whole file, header included */
    int64_t ntok, first;    /* tokens; the global index of its first window */
    int tbytes;
} nn_tok_shard;

typedef struct nn_dataset {
    /* public: what the trainer reads */
    const char *format;     /* "idx", "cifar10", "cifar100", "imagefolder", "text", "synthetic" */
    char dir[512];          /* the directory the data came from */
    int n, num_classes;
    int c, h, w;            /* one sample as the model sees it (after transforms) */
    int tokens;             /* 1: a sample is w int32 token ids (c = h = 1) in [0, vocab) */
    int lm;                 /* language modelling: a sample is w = T + 1 tokens, inputs [0, T)
                             * and next-token targets [1, T] (token shards, synthetic) */
    int vocab;
    uint64_t meta_hash;     /* FNV-1a of class names / vocabulary: equal on every rank */
    uint64_t data_hash;     /* the content's fingerprint (CRC-32 of the loaded samples, bit 41 set; token shards:
                             * of each shard whole up to 16 MiB, else of 16 pieces of 64 KiB): the
                             * ranks read the same files, so it is equal on every rank; 0 = none */
    /* private */
    int fmt, split_train, aug, bad_skip;
    nn_data_cfg cfg;
    int src_c, src_h, src_w; /* stored pixels (idx, cifar) */
    float mean[3], std[3];
    char path[2][700];      /* idx: images, labels; cifar: file pattern; folder: split dir; text: tsv */
    nn_idx_header ih, lh;
    int nfiles;             /* cifar: batch files */
    size_t meta_bytes;      /* folder: bytes of the path pool; text: file bytes */
    size_t scratch_bytes;   /* per worker for nn_data_sample */
    uint8_t *pixels;        /* idx/cifar: n samples of src_c*src_h*src_w bytes, CHW */
    int32_t *labels;        /* n */
    char *pool;             /* folder: "CLASS/file\0..." ; text: vocab words */
    int64_t *off;           /* folder: offset of each sample's path in pool */
    char *classes;          /* class names "a\0b\0..." (folder, named text labels) */
    size_t classes_bytes;
    int32_t *toks;          /* text: n * seq_len */
    int64_t *vocab_off;     /* text: vocab word offsets in pool (vocab entries) */
    nn_tok_shard *shards;   /* token shards */
    int nshards;
} nn_dataset;

/* Per-worker scratch for nn_data_sample, carved by the loader. */
typedef struct nn_data_scratch {
    unsigned char *buf;
    size_t bytes;
} nn_data_scratch;

int nn_data_open(nn_dataset *d, const nn_data_cfg *cfg, const char *split, char *err, size_t errlen);
int nn_data_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen);
size_t nn_data_sample_bytes(const nn_dataset *d);
/* One sample, transformed: writes sample_bytes into x and its label. 0, or -1 with
 * "FILE: problem" in err (a bad file). Thread-safe for distinct scratch. */
int nn_data_sample(const nn_dataset *d, int idx, int epoch, int train, void *x, int32_t *y,
                   nn_data_scratch *s, char *err, size_t errlen);
/* The file a sample comes from (for messages). */
void nn_data_sample_name(const nn_dataset *d, int idx, char *out, size_t outlen);
/* Writes PATH.classes (one class name per line) and/or PATH.vocab (one token per line,
 * id = line number) beside a checkpoint. Nothing for formats without names. */
int nn_data_save_meta(const nn_dataset *d, const char *ckpt_path, char *err, size_t errlen);
/* The class name of a label (NULL when the format has none). */
const char *nn_data_class_name(const nn_dataset *d, int label);

/* Finds the directory to use when --data is not given (and validates a given one):
 * 0, or -1 with an error that says how to get data. */
int nn_data_locate(const char *dir, char *out, size_t outlen, char *err, size_t errlen);

/* Format back ends (one file each in nn/data). */
int nn_idx_read_header(const char *path, int want_ndims, nn_idx_header *h, char *err, size_t errlen);
int nn_idx_open(nn_dataset *d, const char *dir, const char *split, char *err, size_t errlen);
int nn_idx_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen);
int nn_cifar_open(nn_dataset *d, const char *dir, char *err, size_t errlen);
int nn_cifar_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen);
int nn_folder_open(nn_dataset *d, const char *dir, char *err, size_t errlen);
int nn_folder_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen);
int nn_folder_sample(const nn_dataset *d, int idx, int epoch, int train, float *x, nn_data_scratch *s,
                     char *err, size_t errlen);
int nn_text_open(nn_dataset *d, const char *dir, char *err, size_t errlen);
int nn_text_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen);
int nn_tokens_detect(const char *dir);
int nn_tokens_open(nn_dataset *d, const char *dir, char *err, size_t errlen);
int nn_tokens_load(nn_dataset *d, rt_arena *a, char *err, size_t errlen);
int nn_tokens_sample(const nn_dataset *d, int idx, int32_t *x, char *err, size_t errlen);
/* Token shard sets: the validation split's vocabulary is the training split's (0), or
 * -1 with err naming a shard of each. Other data sets: 0. */
int nn_tokens_same_vocab(const nn_dataset *train, const nn_dataset *val, char *err, size_t errlen);
#endif
