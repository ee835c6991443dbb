/* ddprt-data's commands and flags, one rt/args table per command. */
#include "apps/data/data.h"
#include "rt/args.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D(n, t, dom, field, lo, hi, ch, h) {n, 0, t, dom, offsetof(data_opts, field), lo, hi, ch, NULL, h, 0, NULL}
/* A flag with its default, written once: set by rt_args_defaults, printed by the usage. */
#define DD(n, t, dom, field, lo, hi, ch, dflt, h) {n, 0, t, dom, offsetof(data_opts, field), lo, hi, ch, NULL, h, 0, dflt}

/* "WxH": two integers in 1..DATA_MAX_SIDE whose product is at most DATA_MAX_PIXELS. */
static int parse_wxh(const char *v, void *field, char *err, size_t errlen)
{
    int *wh = field;
    char *e1, *e2;
    long w = strtol(v, &e1, 10), h = *e1 == 'x' ? strtol(e1 + 1, &e2, 10) : 0;
    if (*e1 != 'x' || e1 == v || !*(e1 + 1) || *e2 || w < 1 || h < 1 || w > DATA_MAX_SIDE || h > DATA_MAX_SIDE ||
        w * h > DATA_MAX_PIXELS) {
        snprintf(err, errlen, "--size: expected WxH with sides 1..%d and at most %ld pixels (e.g. 500x375), got '%s'",
                 DATA_MAX_SIDE, DATA_MAX_PIXELS, v);
        return -1;
    }
    wh[0] = (int)w, wh[1] = (int)h;
    return 0;
}

static const rt_arg convert_flags[] = {
    D("from", RT_ARG_STR, RT_ARG_ANY, from, 0, 0, NULL, "IDX directory (default: the located data set)"),
    D("to", RT_ARG_STR, RT_ARG_ANY, to, 0, 0, NULL, "output directory (required)"),
    DD("format", RT_ARG_STR, RT_ARG_ANY, format, 0, 0, "png|jpeg|jpg|cifar", "png", "png, jpeg or cifar"),
    D("limit", RT_ARG_INT, RT_ARG_NONNEG, limit, 0, 0, NULL, "at most N training samples, N/6 test samples (0: all)"),
    DD("quality", RT_ARG_INT, RT_ARG_RANGE, quality, 1, 100, NULL, "95", "JPEG quality 1-100"),
};
static const rt_arg synth_flags[] = {
    D("to", RT_ARG_STR, RT_ARG_ANY, to, 0, 0, NULL, "output directory (required)"),
    DD("n", RT_ARG_INT, RT_ARG_RANGE, n, 1, 10000000, NULL, "200", "number of images"),
    {"size", 0, RT_ARG_FN, RT_ARG_ANY, offsetof(data_opts, size), 0, 0, NULL, parse_wxh,
     "image size WxH", 0, "500x375"},
    DD("classes", RT_ARG_INT, RT_ARG_RANGE, classes, 1, 10000, NULL, "4", "class folders"),
    DD("quality", RT_ARG_INT, RT_ARG_RANGE, quality, 1, 100, NULL, "90", "JPEG quality 1-100"),
    DD("noise", RT_ARG_INT, RT_ARG_RANGE, noise, 0, 127, NULL, "24", "noise amplitude 0-127"),
};
static const rt_arg bench_flags[] = {
    DD("image-size", RT_ARG_INT, RT_ARG_RANGE, image_size, 1, 4096, NULL, "224", "output side"),
    DD("augment", RT_ARG_STR, RT_ARG_ANY, augment, 0, 0, "none|cifar|imagenet", "imagenet", "none, cifar or imagenet"),
    D("eval", RT_ARG_FLAG, RT_ARG_ANY, eval, 0, 0, NULL, "the evaluation transform instead of the training one"),
    DD("n", RT_ARG_INT, RT_ARG_RANGE, n, 1, 10000000, NULL, "200", "images per thread"),
    DD("threads", RT_ARG_INT, RT_ARG_RANGE, threads, 1, 64, NULL, "1", "decoding threads 1-64"),
    D("libjpeg-huffman", RT_ARG_FLAG, RT_ARG_ANY, libjpeg_huffman, 0, 0, NULL,
      "libjpeg's own entropy decoder instead of ddprt's (for comparison)"),
};

static const rt_arg tokenize_flags[] = {
    D("to", RT_ARG_STR, RT_ARG_ANY, to, 0, 0, NULL, "output directory (required)"),
    D("bpe", RT_ARG_STR, RT_ARG_ANY, bpe, 0, 0, NULL, "GPT-2 BPE from DIR/encoder.json + DIR/vocab.bpe (default: bytes)"),
    D("name", RT_ARG_STR, RT_ARG_ANY, name, 0, 0, NULL, "shard names NAME_train.bin, NAME_val.bin (default: tokens; fortunes)"),
    DD("val-fraction", RT_ARG_DOUBLE, RT_ARG_UNIT, val_fraction, 0, 0, NULL, "0.1", "the first F of the tokens are the validation split"),
    D("doc-sep", RT_ARG_STR, RT_ARG_ANY, doc_sep, 0, 0, NULL, "lines equal to this separate documents (BPE: each after <|endoftext|>)"),
    DD("shard-tokens", RT_ARG_INT, RT_ARG_RANGE, shard_tokens, 1, 2147483647, NULL, "100000000", "tokens per training shard"),
};

typedef struct command { const char *name; rt_args spec; const char *line, *about; } command;
static const command cmds[DATA_NCMD] = {
    {"convert", {"ddprt-data convert", convert_flags, RT_NARGS(convert_flags), 0, 0}, "convert --to OUT [--from IDXDIR] [--format png|jpeg|cifar] [--limit N] [--quality Q]",
     "Fashion-MNIST (IDX; default: the located data set) as an image folder OUT/{train,val}/CLASS\n"
     "of PNG or JPEG files (class folders 0-tshirt-top ... 9-ankle-boot, so the sorted ids equal the\n"
     "IDX labels), or as CIFAR-10-style binary (images up to 32x32, centred; gray copied to R, G, B).\n"},
    {"synth", {"ddprt-data synth", synth_flags, RT_NARGS(synth_flags), 0, 0}, "synth --to OUT [--n N] [--size WxH] [--classes K] [--quality Q] [--noise A]",
     "N JPEGs with smooth colour fields, shapes and sensor-like noise in OUT/train/classKK:\n"
     "benchmark input of ImageNet-like size.\n"},
    {"bench", {"ddprt-data bench", bench_flags, RT_NARGS(bench_flags), 1, 0}, "bench DIR [--image-size S] [--augment A] [--eval] [--n N] [--threads T] [--libjpeg-huffman]",
     "decode + transform throughput per thread (CPU time) on DIR/train.\n"},
    {"tokenize", {"ddprt-data tokenize", tokenize_flags, RT_NARGS(tokenize_flags), -1, 0},
     "tokenize [FILE|DIR ...] --to OUT [--bpe DIR] [--name NAME] [--val-fraction F] [--doc-sep LINE] [--shard-tokens N]",
     "Text to llm.c token shards OUT/NAME_{train,val}.bin: bytes (vocabulary 256), or GPT-2's BPE from\n"
     "a user's encoder.json + vocab.bpe (copied to OUT, so samples print as text). Directories: their\n"
     "regular files in name order. Without inputs: Debian's fortunes (package fortunes), documents\n"
     "split at \"%\" lines.\n"},
};

void data_usage(int cmd, int brief)
{
    if (cmd < 0) {
        for (int i = 0; i < DATA_NCMD; i++) printf("%s ddprt-data %s\n", i ? "      " : "usage:", cmds[i].line);
        if (!brief) printf("\nddprt-data COMMAND --help: the flags of one command.\n");
        return;
    }
    printf("usage: ddprt-data %s\n\n%s\n", cmds[cmd].line, cmds[cmd].about);
    rt_args_usage(&cmds[cmd].spec, stdout);
}

int data_parse(int argc, char **argv, data_opts *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->cmd = -1;
    for (int c = 0; argc > 1 && c < DATA_NCMD; c++)
        if (!strcmp(argv[1], cmds[c].name)) o->cmd = c;
    if (o->cmd < 0) {
        if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) return RT_ARGS_HELP;
        if (argc > 1 && !strcmp(argv[1], "--version")) return RT_ARGS_VERSION;
        snprintf(err, errlen, argc > 1 ? "unknown command '%.64s' (convert, synth, bench, tokenize; see --help)"
                                       : "no command given (convert, synth, bench, tokenize; see --help)",
                 argc > 1 ? argv[1] : "");
        return RT_ARGS_ERROR;
    }
    /* the command's defaults, from its table (each checked against its flag's domain) */
    if (rt_args_defaults(&cmds[o->cmd].spec, o, err, errlen)) return RT_ARGS_ERROR;
    static char *pos[1024]; /* tokenize's inputs: argv less the program and the command */
    int np = 0;
    if (argc - 2 > (int)(sizeof pos / sizeof *pos)) {
        snprintf(err, errlen, "%d arguments after the command, more than %d: name directories instead of their files",
                 argc - 2, (int)(sizeof pos / sizeof *pos));
        return RT_ARGS_ERROR;
    }
    int rc = rt_args_parse(&cmds[o->cmd].spec, o, argc - 1, argv + 1, pos, &np, err, errlen);
    if (rc) return rc;
    o->inputs = pos, o->ninputs = np;
    if (o->cmd == DATA_BENCH) {
        if (np != 1) {
            snprintf(err, errlen, "bench: the image folder DIR is required (ddprt-data bench DIR; see --help)");
            return RT_ARGS_ERROR;
        }
        o->dir = pos[0];
    } else if (!o->to || !*o->to) {
        snprintf(err, errlen, "%s: --to OUT is required (see --help)", cmds[o->cmd].name);
        return RT_ARGS_ERROR;
    }
    return RT_ARGS_OK;
}
