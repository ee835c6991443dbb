/* Command-line flags: the one parser of every ddprt program. A program describes its
 * flags in a table (name, type, where the value goes, its domain, help); the parser is
 * strict: an unknown flag is an error naming the closest known one ("did you mean"), a
 * value outside its domain is an error naming the flag and the value, and a positional
 * argument the program does not take is an error. Accepted forms: --name V, --name=V,
 * --name_with_underscores (argparse), -x V and -xV for flags with a short name, -h /
 * --help, --version, and "--" (everything after it is positional). Usage text is
 * generated from the same table, so it cannot drift from what is parsed. */
#ifndef RT_ARGS_H
#define RT_ARGS_H
#include <stddef.h>
#include <stdio.h>

/* RT_ARG_FLAG: no value, sets an int to 1. RT_ARG_INT: int. RT_ARG_DOUBLE: finite
 * double. RT_ARG_STR: const char * (choices: the '|'-separated words it must be one
 * of). RT_ARG_SIZE: size_t bytes with an optional K/M/G/T suffix (powers of 1024) and
 * trailing B. RT_ARG_FN: fn parses the value into the field. */
enum { RT_ARG_FLAG, RT_ARG_INT, RT_ARG_DOUBLE, RT_ARG_STR, RT_ARG_SIZE, RT_ARG_FN };
/* Domains of numbers: RT_ARG_POS > 0, RT_ARG_NONNEG >= 0, RT_ARG_UNIT in [0, 1),
 * RT_ARG_RANGE in [lo, hi] (sizes: at most hi; RT_ARG_ANY sizes: at most 2^50). */
enum { RT_ARG_ANY, RT_ARG_POS, RT_ARG_NONNEG, RT_ARG_UNIT, RT_ARG_RANGE };

typedef int (*rt_arg_fn)(const char *value, void *field, char *err, size_t errlen);

typedef struct rt_arg {
    const char *name;    /* "batch-size" for --batch-size */
    char short_name;     /* 'b' for -b; 0: none */
    int type, dom;
    size_t off;          /* offsetof(the options struct, field) */
    double lo, hi;       /* RT_ARG_RANGE */
    const char *choices; /* RT_ARG_STR */
    rt_arg_fn fn;        /* RT_ARG_FN */
    const char *help;
    int tag;             /* the program's own mark (ddprt-train: per-rank flags) */
    const char *dflt;    /* the default, as it would be typed; NULL: none (or a default the
                          * help text explains). rt_args_defaults sets it, the usage prints it. */
} rt_arg;

typedef struct rt_args {
    const char *prog;    /* "ddprt-data convert": the name in messages and the usage */
    const rt_arg *tab;
    int n;
    int max_pos;         /* positional arguments taken (-1: any number) */
    int stop_at_pos;     /* 1: the first positional and every argument after it are
                          * positional, flags or not (ddprt-launch's PROGRAM ARGS...) */
} rt_args;

/* A table's length, counted by the compiler (never written by hand). */
#define RT_NARGS(tab) ((int)(sizeof(tab) / sizeof((tab)[0])))

enum { RT_ARGS_OK = 0, RT_ARGS_HELP = 1, RT_ARGS_VERSION = 2, RT_ARGS_ERROR = -1 };
/* Parses argv[1..argc) into opts. pos (room for argc entries) receives the positional
 * arguments in order and *npos their count (both may be NULL when max_pos is 0).
 * Returns RT_ARGS_OK, RT_ARGS_HELP (-h or --help seen), RT_ARGS_VERSION (--version), or
 * RT_ARGS_ERROR with one line in err (no prefix, no newline). */
int rt_args_parse(const rt_args *a, void *opts, int argc, char **argv, char **pos, int *npos, char *err,
                  size_t errlen);
/* Every flag's dflt into opts, through the same parser and domain checks as a typed
 * value: a default is written once, in the table. 0, or -1 with the flag in err. */
int rt_args_defaults(const rt_args *a, void *opts, char *err, size_t errlen);
/* The flag lines of the usage: "  --name N   help (default: D)", one per flag, then --help. */
void rt_args_usage(const rt_args *a, FILE *f);
/* Parses argv and handles the outcomes every program handles alike: --help prints
 * head (the lines before the flag list; may be NULL), the flag list and tail (may be
 * NULL) to stdout and returns 0; --version prints "PROG (ddprt) VERSION" and returns 0;
 * an error prints "PROG: error: LINE (see PROG --help)" to stderr and returns 2.
 * Returns -1 when the program should go on (parsed). */
int rt_args_main(const rt_args *a, void *opts, int argc, char **argv, char **pos, int *npos, const char *head,
                 const char *tail);
/* A size as RT_ARG_SIZE reads it ("64M", "4KB", "1.5G"): 0, or -1 when malformed,
 * negative or above max. */
int rt_args_size(const char *s, double max, size_t *out);
#endif
