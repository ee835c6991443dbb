#include "rt/tensor.h"

const char *const rt_dtype_names[RT_NDTYPE] = {"float", "double", "half", "bfloat16",
                                               "int32", "int64", "uint8"};

size_t rt_dtype_size(rt_dtype t)
{
    static const size_t sz[RT_NDTYPE] = {4, 8, 2, 2, 4, 8, 1};
    return (unsigned)t < RT_NDTYPE ? sz[t] : 0;
}

size_t rt_tensor_numel(const rt_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

size_t rt_tensor_bytes(const rt_tensor *t) { return rt_tensor_numel(t) * rt_dtype_size(t->dtype); }

rt_tensor rt_tensor_new(rt_arena *a, int cat, const char *name, rt_dtype dt, int ndim,
                        int d0, int d1, int d2, int d3)
{
    rt_tensor t = {.name = name, .dtype = dt, .ndim = ndim, .shape = {d0, d1, d2, d3}};
    for (int i = ndim; i < 4; i++) t.shape[i] = 1;
    t.data = rt_arena_alloc(a, rt_tensor_bytes(&t), cat, name);
    return t;
}
