/* Tensors: dtype, shape up to 4-D (NCHW), contiguous data inside an arena. */
#ifndef RT_TENSOR_H
#define RT_TENSOR_H
#include "rt/arena.h"
#include <stddef.h>
#include <stdint.h>

typedef enum { RT_F32, RT_F64, RT_F16, RT_BF16, RT_I32, RT_I64, RT_U8, RT_NDTYPE } rt_dtype;
extern const char *const rt_dtype_names[RT_NDTYPE];
size_t rt_dtype_size(rt_dtype t);

typedef struct rt_tensor {
    const char *name;
    rt_dtype dtype;
    int ndim;
    int shape[4];
    void *data;
} rt_tensor;

size_t rt_tensor_numel(const rt_tensor *t);
size_t rt_tensor_bytes(const rt_tensor *t);
/* Carves a tensor from the arena (data NULL while planning). dims beyond ndim are 1. */
rt_tensor rt_tensor_new(rt_arena *a, int cat, const char *name, rt_dtype dt, int ndim,
                        int d0, int d1, int d2, int d3);
static inline float *rt_f32(const rt_tensor *t) { return (float *)t->data; }
#endif
