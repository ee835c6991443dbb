/* ddprt-data internals: the commands' options (data_args.c parses them with rt/args),
 * convert and synth (data_convert.c), bench (data_main.c). Every function returns
 * errors instead of exiting, so the fuzz targets (test/fuzz/fuzz_data_*.c) can run
 * them on arbitrary arguments and files. */
#ifndef APPS_DATA_H
#define APPS_DATA_H
#include <stddef.h>

enum { DATA_CONVERT, DATA_SYNTH, DATA_BENCH, DATA_TOKENIZE, DATA_NCMD };

typedef struct data_opts {
    int cmd;
    /* convert */
    const char *from, *to, *format;
    int limit, quality;
    /* synth */
    int n, classes, noise;
    int size[2];          /* --size WxH */
    /* bench */
    const char *dir, *augment;
    int image_size, eval, threads, libjpeg_huffman;
    /* tokenize */
    const char *bpe, *name, *doc_sep;
    double val_fraction;
    int shard_tokens, ninputs;
    char **inputs;        /* the positional FILE|DIR arguments */
} data_opts;

/* Largest side of a synthetic JPEG (libjpeg's JPEG_MAX_DIMENSION) and largest image in
 * pixels (3 bytes each, one buffer): --size beyond them is refused before any work. */
#define DATA_MAX_SIDE 65500
#define DATA_MAX_PIXELS (1L << 28)

/* argv[1] is the command. Returns RT_ARGS_OK with o filled, RT_ARGS_HELP (usage of
 * the command printed), RT_ARGS_VERSION, or RT_ARGS_ERROR with one line in err. */
int data_parse(int argc, char **argv, data_opts *o, char *err, size_t errlen);
/* Prints the usage of one command (cmd) or of all (-1). */
void data_usage(int cmd, int brief);
/* 0, or -1 with one line in err. The located data set is used when o->from is NULL. */
int data_convert(const data_opts *o, char *err, size_t errlen);
int data_synth(const data_opts *o, char *err, size_t errlen);
int data_tokenize(const data_opts *o, char *err, size_t errlen); /* apps/data/tokenize.c */
#endif
