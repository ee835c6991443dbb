"""One rank of the core-call check (ddprt-launch, any world size; alone: one process).
Every call of the ddprt package on every dtype (f32 f64 f16 bf16 i32 i64 u8) and, for
the reductions, every op, against numpy references that reduce in rank order as ddprt
does (halves: in f32, rounded to nearest-even after each step; integer AVG truncates):
results must be bitwise equal. Arrays, registered arrays (ddprt.empty), and CPU torch
tensors when torch is installed. Prints "rank R of W ok (N checks[, torch])"."""
import sys

import numpy as np

import ddprt

ddprt.init()
R, W = ddprt.rank(), ddprt.size()
DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]
OPS = {"sum": ddprt.Sum, "prod": ddprt.Product, "min": ddprt.Min, "max": ddprt.Max, "avg": ddprt.Average}
checks = 0


def bf16_to_f32(u):
    return (u.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(f):
    b = f.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def data(dt, r, n, seed):
    """Rank r's operand: the array ddprt sees (bf16 as uint16 bits)."""
    g = np.random.default_rng(seed * 131 + r)
    if dt in ("float32", "float64", "float16"):
        return g.standard_normal(n).astype(dt)
    if dt == "bfloat16":
        return f32_to_bf16(g.standard_normal(n).astype(np.float32))
    if dt == "uint8":
        return g.integers(0, 256, n).astype(np.uint8)
    return g.integers(-50, 51, n).astype(dt)


def combine(a, b, op):
    if op == "sum" or op == "avg":
        return a + b
    if op == "prod":
        return a * b
    return np.minimum(a, b) if op == "min" else np.maximum(a, b)


def reference(dt, op, xs):
    """xs in rank order, reduced as ddprt does."""
    with np.errstate(over="ignore"):
        if dt in ("float16", "bfloat16"):
            to32 = bf16_to_f32 if dt == "bfloat16" else (lambda v: v.astype(np.float32))
            back = f32_to_bf16 if dt == "bfloat16" else (lambda v: v.astype(np.float16))
            acc = xs[0]
            for x in xs[1:]:
                acc = back(combine(to32(acc), to32(x), op))
            return back(to32(acc) / np.float32(W)) if op == "avg" else acc
        acc = xs[0].copy()
        for x in xs[1:]:
            acc = combine(acc, x, op).astype(xs[0].dtype)
        if op != "avg":
            return acc
        if dt.startswith("float"):
            return (acc / acc.dtype.type(W)).astype(acc.dtype)
        return (np.sign(acc) * (np.abs(acc.astype(np.int64)) // W)).astype(acc.dtype)  # C division


def same(got, want, what):
    global checks
    checks += 1
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or g.tobytes() != w.tobytes():
        bad = np.flatnonzero(g.reshape(-1).view(np.uint8) != w.reshape(-1).view(np.uint8))[:1] if g.shape == w.shape else []
        raise AssertionError("rank %d: %s: shape %s vs %s, first differing byte %s: got %s want %s" % (
            R, what, g.shape, w.shape, list(bad), g.reshape(-1)[:4], w.reshape(-1)[:4]))


class Kind:
    """numpy arrays, or torch tensors made from them."""

    def __init__(self, torch=None):
        self.torch = torch

    def wrap(self, a, dt):
        if self.torch is None:
            return a
        t = self.torch.from_numpy(a.view(np.int16) if dt == "bfloat16" else a)
        return t.view(self.torch.bfloat16) if dt == "bfloat16" else t

    def unwrap(self, t, dt):
        if self.torch is None:
            return t
        return t.view(self.torch.int16).numpy().view(np.uint16) if dt == "bfloat16" else t.numpy()

    def dtarg(self, dt):
        return dt if self.torch is None and dt == "bfloat16" else None


def matrix(kind, seed, sizes):
    for dt in DTYPES:
        for n in sizes:
            for op, code in OPS.items():
                xs = [data(dt, r, n, seed) for r in range(W)]
                want = reference(dt, op, xs)
                tag = "%s %s n=%d %s" % ("torch" if kind.torch else "numpy", dt, n, op)
                a = kind.wrap(xs[R].copy(), dt)
                same(kind.unwrap(ddprt.allreduce(a, op=code, dtype=kind.dtarg(dt)), dt), want, "allreduce " + tag)
                same(kind.unwrap(a, dt), xs[R], "allreduce left its input alone " + tag)
                ddprt.allreduce_(a, op=code, dtype=kind.dtarg(dt))
                same(kind.unwrap(a, dt), want, "allreduce_ " + tag)
                a = kind.wrap(xs[R].copy(), dt)
                h = ddprt.allreduce_async_(a, op=code, dtype=kind.dtarg(dt))
                same(kind.unwrap(h.wait(), dt), want, "allreduce_async_ " + tag)
                h = ddprt.allreduce_async(kind.wrap(xs[R].copy(), dt), op=code, dtype=kind.dtarg(dt))
                while not h.test():
                    pass
                same(kind.unwrap(h.wait(), dt), want, "allreduce_async " + tag)
                # reduce_scatter: every rank's blocks hold ranks' data, so block q = xs reduced.
                big = [np.concatenate([data(dt, r, n, seed + q) for q in range(W)]) for r in range(W)]
                out = ddprt.reduce_scatter(kind.wrap(big[R].copy(), dt), op=code, dtype=kind.dtarg(dt))
                same(kind.unwrap(out, dt), reference(dt, op, [data(dt, r, n, seed + R) for r in range(W)]),
                     "reduce_scatter " + tag)
            xs = [data(dt, r, n, seed) for r in range(W)]
            tag = "%s %s n=%d" % ("torch" if kind.torch else "numpy", dt, n)
            b = kind.wrap(xs[R].copy(), dt)
            ddprt.broadcast_(b, root=W - 1, dtype=kind.dtarg(dt))
            same(kind.unwrap(b, dt), xs[W - 1], "broadcast_ " + tag)
            same(kind.unwrap(ddprt.broadcast(kind.wrap(xs[R].copy(), dt), root=0, dtype=kind.dtarg(dt)), dt), xs[0],
                 "broadcast " + tag)
            same(kind.unwrap(ddprt.allgather(kind.wrap(xs[R].copy(), dt), dtype=kind.dtarg(dt)), dt),
                 np.concatenate(xs), "allgather " + tag)
            same(kind.unwrap(ddprt.allgather_async(kind.wrap(xs[R].copy(), dt), dtype=kind.dtarg(dt)).wait(), dt),
                 np.concatenate(xs), "allgather_async " + tag)
            # Unequal first dimensions (rank r gives r + 1 rows of 3).
            rows = [data(dt, r, 3 * (r + 1), seed).reshape(r + 1, 3) for r in range(W)]
            same(kind.unwrap(ddprt.allgather(kind.wrap(rows[R].copy(), dt), dtype=kind.dtarg(dt)), dt),
                 np.concatenate(rows), "allgather unequal " + tag)


def registered():
    """ddprt.empty arrays take the in-place path between processes: same bits."""
    for dt in ("float32", "float64", "float16", "int32", "int64", "uint8"):
        for op, code in OPS.items():
            xs = [data(dt, r, 50000, 7) for r in range(W)]
            a = ddprt.empty(50000, dtype=dt)
            a[:] = xs[R]
            ddprt.allreduce_(a, op=code)
            same(a, reference(dt, op, xs), "registered %s %s" % (dt, op))


def errors():
    global checks
    cases = [
        (lambda: ddprt.allreduce_(np.zeros((4, 4), np.float32)[:, 1]), ValueError, "not C-contiguous"),
        (lambda: ddprt.allreduce(np.zeros(4, np.complex64)), TypeError, "complex64 is not one of"),
        (lambda: ddprt.allreduce(np.zeros(4, np.float32), op="median"), ValueError, "not one of sum"),
        (lambda: ddprt.allreduce([1, 2]), TypeError, "expected a numpy array"),
        (lambda: ddprt.broadcast_(np.zeros(4, np.float32), root=W), ddprt.DdprtError, "root %d is not a rank" % W),
    ]
    if W > 1:
        cases.append((lambda: ddprt.reduce_scatter(np.zeros(W * 2 + 1, np.float32)), ValueError, "not a multiple"))
    for fn, exc, text in cases:
        checks += 1
        try:
            fn()
        except exc as e:
            assert text in str(e), "rank %d: %r lacks %r" % (R, str(e), text)
        else:
            raise AssertionError("rank %d: no %s for %s" % (R, exc.__name__, text))
    ddprt.barrier()  # argument errors sent nothing: the job is healthy


matrix(Kind(), 1, (7, 20000))
registered()
errors()
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    matrix(Kind(torch), 2, (7, 3000))
ddprt.barrier()
print("rank %d of %d ok (%d checks%s)" % (R, W, checks, ", torch" if torch is not None else ""))
sys.stdout.flush()
ddprt.finalize()
