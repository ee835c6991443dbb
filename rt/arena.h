/* Arena allocator: one aligned block, aligned bump allocation, a high-water mark.
 * A "planning" arena (rt_arena_plan) has no memory: it only adds up the requests, so
 * the same build code that carves buffers can first size them (as ggml's no_alloc).
 * Each request carries a category for --mem-report. */
#ifndef RT_ARENA_H
#define RT_ARENA_H
#include <stddef.h>

enum rt_mem_cat {
    RT_MEM_PARAMS, RT_MEM_GRADS, RT_MEM_OPTIM, RT_MEM_ACTS, RT_MEM_WORKSPACE,
    RT_MEM_DATA, RT_MEM_COMM, RT_MEM_OTHER, RT_MEM_NCAT
};
extern const char *const rt_mem_cat_names[RT_MEM_NCAT];

typedef struct rt_arena {
    const char *name;
    unsigned char *base;  /* NULL when planning */
    size_t size, used, high;
    size_t by_cat[RT_MEM_NCAT];
    int planning;
} rt_arena;

#define RT_ALIGN 64

void rt_arena_plan(rt_arena *a, const char *name);
/* Allocates `size` bytes (rounded to RT_ALIGN); returns 0, or -1 (the caller says it:
 * it knows what the arena was for). */
int rt_arena_init(rt_arena *a, const char *name, size_t size);
/* Takes an externally owned block (pinned or device memory from ports/). */
void rt_arena_init_from(rt_arena *a, const char *name, void *base, size_t size);
void rt_arena_free(rt_arena *a);
/* Contents are undefined; NULL when planning. Fatal (naming
 * `what`, the bytes asked and the bytes left) when the request does not fit. */
void *rt_arena_alloc(rt_arena *a, size_t bytes, int cat, const char *what);
/* Like rt_arena_alloc but returns NULL instead of exiting when it does not fit. */
void *rt_arena_try_alloc(rt_arena *a, size_t bytes, int cat, const char *what);
size_t rt_arena_mark(const rt_arena *a);
void rt_arena_reset(rt_arena *a, size_t mark); /* frees everything after mark */
/* Prints the plan by category and the total, to stdout. */
void rt_arena_report(const rt_arena *a);
#endif
