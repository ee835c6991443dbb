"""Property test (fuzz) of the Python package's argument checks: ddprt/_args.py and the
conversions of _core.py (arrays, dtypes, ops, roots, init's options), over a fake
library that records the C calls (no C is called: about 10^4 cases a second).

Every case either raises a clean TypeError / ValueError / OverflowError whose message
starts "ddprt" and names the bad argument, with no collective reaching the library, or
is accepted with every value reaching the C call intact (pointer, count, dtype code, op
code, root, each option of init) and the result equal to the input (a world of 1).
Which inputs are valid is decided here, independently of the package (the oracle).

usage: args_fuzz.py [CASES [SEED]]    prints "args fuzz ok: N cases ..." or exits 1
naming the first failing case."""
import ctypes
import operator
import os
import random
import sys
import time

import numpy as np

import ddprt
from ddprt import _core as core
from ddprt import _lib

try:
    import torch
except ImportError:
    torch = None

SIZES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1}
CODES = {n: i for i, n in enumerate(["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"])}
ALIASES = {"float": "float32", "f32": "float32", "double": "float64", "f64": "float64", "half": "float16",
           "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i64": "int64", "u8": "uint8"}
OPS = {"sum": 0, "prod": 1, "product": 1, "min": 2, "max": 3, "avg": 4, "average": 4, "mean": 4}
LOG = {"silent": -1, "error": 0, "warn": 1, "warning": 1, "info": 2, "debug": 3}
COLLECTIVES = {"ddprt_allreduce", "ddprt_iallreduce", "ddprt_broadcast", "ddprt_ibroadcast", "ddprt_reduce_scatter",
               "ddprt_allgather", "ddprt_iallgather", "ddprt_allgatherv", "ddprt_init", "ddprt_mem_alloc"}


# ---- the fake library --------------------------------------------------------------------------

class Fake:
    """libddprt.so's calls for a world of 1: collectives copy send to recv; calls recorded."""

    def __init__(self):
        self.calls, self.blocks = [], {}

    def _rec(self, name, *a):
        self.calls.append((name,) + a)
        return 0

    def ddprt_opts_default(self, po):
        ctypes.memset(po, 0, ctypes.sizeof(_lib.Opts))

    def ddprt_init(self, pc, po):
        o = ctypes.cast(po, ctypes.POINTER(_lib.Opts)).contents
        self.calls.append(("ddprt_init", {f: getattr(o, f) for f, _ in _lib.Opts._fields_}))
        ctypes.cast(pc, ctypes.POINTER(ctypes.c_void_p))[0] = 1
        return 0

    def ddprt_rank(self, c):
        return 0

    ddprt_local_rank = ddprt_rank

    def ddprt_size(self, c):
        return 1

    ddprt_local_size = ddprt_size

    def ddprt_last_error(self):
        return b"fake: the library refused"

    def _copy(self, p, q, n, dt):
        if p != q and n:
            ctypes.memmove(q, p, n * SIZES[list(CODES)[dt]])

    def ddprt_allreduce(self, c, p, q, n, dt, op):
        self._rec("ddprt_allreduce", p, q, n, dt, op)
        self._copy(p, q, n, dt)
        return 0

    def ddprt_iallreduce(self, c, p, q, n, dt, op, req):
        self.ddprt_allreduce(c, p, q, n, dt, op)
        return 0

    def ddprt_broadcast(self, c, p, n, dt, root):
        return self._rec("ddprt_broadcast", p, n, dt, root)

    def ddprt_ibroadcast(self, c, p, n, dt, root, req):
        return self._rec("ddprt_broadcast", p, n, dt, root)

    def ddprt_reduce_scatter(self, c, p, q, n, dt, op):
        self._rec("ddprt_reduce_scatter", p, q, n, dt, op)
        self._copy(p, q, n, dt)
        return 0

    def ddprt_allgather(self, c, p, q, n, dt):
        self._rec("ddprt_allgather", p, q, n, dt)
        self._copy(p, q, n, dt)
        return 0

    def ddprt_iallgather(self, c, p, q, n, dt, req):
        return self.ddprt_allgather(c, p, q, n, dt)

    def ddprt_wait(self, req):
        return 0

    def ddprt_finalize(self, c):
        self.calls.append(("ddprt_finalize",))

    def ddprt_mem_alloc(self, c, n):
        self.calls.append(("ddprt_mem_alloc", n))
        if n > 1 << 16:
            return None  # as the library where memory runs out: the package raises ENOMEM
        b = ctypes.create_string_buffer(n)
        self.blocks[ctypes.addressof(b)] = b
        self.calls.append(("ddprt_mem_alloc", n))
        return ctypes.addressof(b)

    def ddprt_mem_free(self, c, p):
        self.blocks.pop(p, None)


# ---- values --------------------------------------------------------------------------------------

def int_pool():
    v = [0, 1, 2, 3, 4, 5, 7, -1, -2, -5, 100, 65535, 65536, -65535, -65536, 1 << 20, (1 << 20) + 1,
         (1 << 31) - 1, 1 << 31, -(1 << 31), -(1 << 31) - 1, 1 << 32, 1 << 40, 1 << 63, 1 << 64, 10 ** 30, -10 ** 30,
         True, False, 0.0, 1.0, 1.9, -0.0, float("nan"), float("inf"), 1e300, "0", "1", "", None, b"1", 1j, [1], (0,),
         np.int64(3), np.int32(-1), np.uint64(1 << 63), np.int8(4), np.uint8(255), np.float32(1.0), np.bool_(True),
         np.float64(2.0), object()]
    if torch is not None:
        v += [torch.tensor(2), torch.tensor(1.5), torch.tensor(True), torch.tensor([1])]
    return v


def str_pool():
    return ["sum", "SUM", "Avg", "average", "mean", "max", "min", "prod", "product", "loud", "", "sum ", "warn",
            "debug", "silent", "warning", "error", "info", "auto", "tcp", "verbs", "ibverbs", "TCP", "a\x00b",
            "\udcff", "tcp://127.0.0.1:1", "file:///tmp/x", "env://", "x" * 300, "\u00e9t\u00e9"]


def dtype_pool():
    v = [None] * 6 + list(SIZES) + list(ALIASES) + ["complex64", "int8", "uint16", "bool", "", "float128", "f4", ">f4",
                                                    "numpy.float32", "torch.float32"]
    v += [np.dtype(n) for n in ("float32", "float64", "float16", "int32", "int64", "uint8", "int8", ">f4", "<i8")]
    v += [np.float32, np.int64, 3, 1.5, object()]
    if torch is not None:
        v += [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8, torch.int8, torch.bool]
    return v


def array_pool(rng):
    """(x, what) pairs: numpy arrays of every dtype and byte order, shapes 0-d to 4-d,
    empty, non-contiguous, read-only; torch tensors; things that are not arrays."""
    out = []
    np_types = ["float32", "float64", "float16", "int32", "int64", "uint8", "int8", "uint16", "bool", "complex64"]
    shapes = [(), (0,), (1,), (5,), (3, 4), (0, 3), (2, 3, 4), (2, 1, 2, 3), (6,)]
    for t in np_types:
        for order in "<>=":
            for s in shapes:
                dt = np.dtype(t).newbyteorder(order)
                x = (np.arange(int(np.prod(s)), dtype=np.float64) * 3 - 4).astype(dt).reshape(s)
                out.append(x)
                if x.ndim >= 1 and x.shape[0] > 1:
                    out.append(x[::2])
                if x.ndim >= 2:
                    out.append(x.T)
                if rng.random() < 0.3:
                    y = x.copy()
                    y.setflags(write=False)
                    out.append(y)
    if torch is not None:
        for t in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8,
                  torch.int8, torch.bool, torch.complex64):
            for s in shapes:
                x = (torch.arange(int(np.prod(s)), dtype=torch.float64) * 3 - 4).to(t).reshape(s)
                out.append(x)
                if x.dim() >= 2:
                    out.append(x.transpose(0, 1))
                if x.dim() >= 1 and x.shape[0] > 1:
                    out.append(x[::2])
    out += [[1.0, 2.0], (1,), b"ab", bytearray(4), memoryview(b"abcd"), None, 3.0, "x", np.float32(2.0)]
    return out


# ---- the oracle ----------------------------------------------------------------------------------

def is_int(v):
    if isinstance(v, (bool, np.bool_)) or "bool" in str(getattr(v, "dtype", "")):
        return False
    try:
        operator.index(v)
    except TypeError:
        return False
    return True


def int_ok(v, lo, hi):
    return is_int(v) and lo <= operator.index(v) <= hi


def op_code(op):
    """The op's code, or None where it is not an op."""
    if isinstance(op, str):
        return OPS.get(op.lower())
    return operator.index(op) if int_ok(op, 0, 4) else None


def xinfo(x):
    """(kind, dtype name, contiguous, writable, native) of an array, or None."""
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch", str(x.dtype).replace("torch.", ""), x.is_contiguous(), True, True
    if isinstance(x, (np.ndarray, np.generic)):  # a numpy scalar: a read-only 0-d array
        return "numpy", x.dtype.name, x.flags.c_contiguous, x.flags.writeable, x.dtype.isnative
    return None


def dtype_code(dtype, item):
    """The dtype argument's code for elements of item bytes, or None where it is refused."""
    name = str(dtype).replace("torch.", "").replace("numpy.", "")
    name = ALIASES.get(name, name)
    return CODES[name] if name in SIZES and SIZES[name] == item else None


class Bad(Exception):
    pass


def expect_clean(e, words):
    """A refusal: the right kind, "ddprt" first, naming one of words."""
    if not isinstance(e, (TypeError, ValueError, OverflowError)) or isinstance(e, ddprt.DdprtError):
        raise Bad("raised %s: %s" % (type(e).__name__, e))
    m = str(e)
    if not m.startswith("ddprt") or not any(w in m for w in words):
        raise Bad("message %r names none of %s" % (m, words))


def ptr_of(x):
    return x.data_ptr() if xinfo(x)[0] == "torch" else x.__array_interface__["data"][0]


def same_values(a, b):
    if xinfo(a)[0] == "torch":
        return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(a, b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---- the cases -----------------------------------------------------------------------------------

OPNAMES = ["allreduce_", "allreduce", "allreduce_async_", "allreduce_async", "broadcast_", "broadcast",
           "broadcast_async_", "reduce_scatter", "allgather", "allgather_async"]


def case_collective(rng, fake, P):
    name = rng.choice(OPNAMES)
    x = rng.choice(P["arrays"])
    dtype = rng.choice(P["dtypes"])
    op = rng.choice(P["ops"]) if rng.random() < 0.5 else rng.choice([0, 1, 2, 3, 4, core.Sum, core.Average])
    root = rng.choice(P["ints"]) if rng.random() < 0.5 else rng.choice([0, 0, 1, 3])
    inplace, has_op, has_root = name.endswith("_"), "reduce" in name, name.startswith("broadcast")
    # The oracle.
    bad = []
    info = xinfo(x)
    xc = None
    if info is None:
        bad.append(("array", "tensor"))
    else:
        kind, dname, contig, wr, native = info
        item = x.element_size() if kind == "torch" else x.dtype.itemsize
        if dtype is None:
            xc = CODES.get(dname)
            if xc is None:
                bad.append(("dtype",))
        else:
            xc = dtype_code(dtype, item)
            if xc is None:
                bad.append(("dtype",))
        if not native:
            bad.append(("byte order",))
        if inplace and not contig:
            bad.append(("contiguous",))
        if inplace and not wr:
            bad.append(("read-only",))
        if name == "reduce_scatter" and len(x.shape) == 0:
            bad.append(("first dimension",))
    if has_op and op_code(op) is None:
        bad.append(("op",))
    if has_root and not int_ok(root, 0, (1 << 31) - 1):
        bad.append(("root",))
    args = (x,) + ((op,) if has_op else ()) + ((root,) if has_root else ())
    fake.calls.clear()
    try:
        r = getattr(ddprt, name)(*args, dtype=dtype)
        if hasattr(r, "wait"):
            r = r.wait()
    except Exception as e:
        if not bad:
            raise Bad("%s refused a valid call: %s: %s" % (name, type(e).__name__, e))
        expect_clean(e, [w for b in bad for w in b])
        # Nothing but allgather's shape exchange (9 int64) reached the library.
        if [c for c in fake.calls if c[0] in COLLECTIVES and c[1:] and not (c[0] == "ddprt_allgather" and c[3] == 9
                                                                               and c[4] == 5)]:
            raise Bad("%s reached the library before refusing: %s" % (name, fake.calls))
        return "refused"
    if bad:
        raise Bad("%s accepted %s" % (name, bad))
    # Accepted: the values the library got, and the result.
    c = [c for c in fake.calls if c[0] in COLLECTIVES][-1]  # the data's call (after allgather's shapes)
    n = x.numel() if info[0] == "torch" else x.size
    if c[0] in ("ddprt_allreduce", "ddprt_reduce_scatter"):
        _, p, q, cn, cdt, cop = c
        if cop != op_code(op):
            raise Bad("%s: op %r reached C as %d" % (name, op, cop))
    elif c[0] == "ddprt_broadcast":
        _, p, cn, cdt, croot = c
        if croot != operator.index(root):
            raise Bad("%s: root %r reached C as %d" % (name, root, croot))
    else:
        _, p, q, cn, cdt = c
    if cn != n or cdt != xc:
        raise Bad("%s: %d elements of code %s reached C as %d of code %d" % (name, n, xc, cn, cdt))
    if inplace and (r is not x or p != ptr_of(x)):
        raise Bad("%s: not in place" % name)
    want = x.reshape(1) if name.startswith("allgather") and len(x.shape) == 0 else x  # 0-d: one row
    if not same_values(r, want):
        raise Bad("%s: the result differs from the input (a world of 1)" % name)
    return "accepted"


INIT_INTS = {"rank": (-1, (1 << 31) - 1), "world_size": (-1, (1 << 31) - 1), "local_rank": (-1, (1 << 31) - 1),
             "port_offset": (-65535, 65535), "max_requests": (0, 1 << 20)}


def case_init(rng, fake, P):
    kw, bad = {}, []
    for k, (lo, hi) in INIT_INTS.items():
        if rng.random() < 0.4:
            v = rng.choice(P["ints"]) if rng.random() < 0.7 else rng.randint(lo, hi)
            kw[k] = v
            if not int_ok(v, lo, hi) and not (v is None and k in ("rank", "world_size", "local_rank")):
                bad.append(k)
    if rng.random() < 0.4:
        t = rng.choice(P["ints"] + [0.5, 30, 299.9, 1e9, 1e9 - 1, -1e-9])
        kw["timeout"] = t
        ok = t is None or (not isinstance(t, (bool, np.bool_)) and isinstance(t, (int, float, np.floating, np.integer))
                           and t == t and 0 <= t < 1e9)
        if not ok:
            bad.append("timeout")
    for k, pool in (("backend", ["auto", "tcp", "verbs", "ibverbs", "", None, 3, b"tcp"]),
                    ("token", P["strs"] + [None, b"tok", 5]), ("init_method", P["strs"] + [None, b"env://", 1.0])):
        if rng.random() < 0.3:
            v = rng.choice(pool)
            kw[k] = v
            if k == "backend":
                ok = v is None or v in ("auto", "tcp", "verbs")
            else:
                ok = v is None or (isinstance(v, (str, bytes)) and "\0" not in (v if isinstance(v, str) else v.decode("latin1")))
                if ok and isinstance(v, str):
                    try:
                        v.encode()
                    except UnicodeEncodeError:
                        ok = False
            if not ok:
                bad.append(k)
    if rng.random() < 0.3:
        v = rng.choice(P["strs"] + P["ints"][:12])
        kw["log_level"] = v
        if not (v is None or (isinstance(v, str) and v in LOG) or (not isinstance(v, str) and int_ok(v, -1, 3))):
            bad.append("log_level")
    fake.calls.clear()
    core._comm = None
    try:
        ddprt.init(**kw)
    except Exception as e:
        if not bad:
            raise Bad("init(%r) refused: %s: %s" % (kw, type(e).__name__, e))
        expect_clean(e, bad)
        if any(c[0] in COLLECTIVES for c in fake.calls):
            raise Bad("init(%r) reached ddprt_init before refusing" % (kw,))
        return "refused"
    finally:
        core._comm = None
    if bad:
        raise Bad("init(%r) accepted %s" % (kw, bad))
    o = [c for c in fake.calls if c[0] == "ddprt_init"][-1][1]
    for k in INIT_INTS:
        want = -1 if kw.get(k) is None and k in ("rank", "world_size", "local_rank") else kw.get(k, 2 if k == "port_offset" else 0)
        if o[k] != operator.index(want):
            raise Bad("init: %s=%r reached C as %r" % (k, kw.get(k), o[k]))
    if "timeout" in kw and o["timeout_s"] != float(kw["timeout"] or 0):  # numpy.float32: exact in a double
        raise Bad("init: timeout=%r reached C as %r" % (kw["timeout"], o["timeout_s"]))
    for k in ("backend", "token", "init_method"):
        v = kw.get(k)
        want = v.encode() if isinstance(v, str) else v
        if o[k] != want:
            raise Bad("init: %s=%r reached C as %r" % (k, v, o[k]))
    if "log_level" in kw and kw["log_level"] is not None:
        v = kw["log_level"]
        want = LOG[v] if isinstance(v, str) else operator.index(v)
        if o["log_level"] != want:
            raise Bad("init: log_level=%r reached C as %r" % (v, o["log_level"]))
    return "accepted"


def case_empty(rng, fake, P):
    shape = rng.choice([rng.choice(P["ints"]), (2, 3), (0,), [4], (1 << 30, 1 << 30), (2, -1), (), (3, 1.0)])
    dtype = rng.choice(["float32", "float64", "int64", "uint8", "float16", "int32", "complex128", ">f4", "<f4",
                        "bfloat16", "bool", np.float32, "f4"])
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    try:
        dt = np.dtype(dtype)
        dt_ok = dt.name in SIZES and dt.isnative
    except TypeError:
        dt_ok = False
    bad = ([] if dt_ok else ["dtype"]) + ([] if all(int_ok(d, 0, 1 << 48) for d in dims) else ["dimension"])
    fake.calls.clear()
    core._comm = ctypes.c_void_p(1)
    try:
        a = ddprt.empty(shape, dtype)
    except Exception as e:
        if not bad and isinstance(e, ddprt.DdprtError) and "fake" in str(e):
            return "refused"  # the library's own refusal (too big)
        if not bad and isinstance(e, (MemoryError, OverflowError)):
            return "refused"  # a huge valid shape: ctypes cannot allocate it
        if not bad:
            raise Bad("empty(%r, %r) refused: %s: %s" % (shape, dtype, type(e).__name__, e))
        expect_clean(e, bad)
        if any(c[0] in COLLECTIVES for c in fake.calls):
            raise Bad("empty(%r, %r) reached the library before refusing" % (shape, dtype))
        return "refused"
    finally:
        core._comm = None
    if bad:
        raise Bad("empty(%r, %r) accepted %s" % (shape, dtype, bad))
    if a.shape != tuple(operator.index(d) for d in dims) or a.dtype != np.dtype(dtype):
        raise Bad("empty(%r, %r) gave %s %s" % (shape, dtype, a.shape, a.dtype))
    return "accepted"


def main():
    cases = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 41
    rng = random.Random(seed)
    fake = Fake()
    _lib.get = lambda: fake  # every C call of the package goes to the fake
    P = {"ints": int_pool(), "strs": str_pool(), "dtypes": dtype_pool(), "arrays": array_pool(rng)}
    P["ops"] = P["ints"] + P["strs"] + [core.Sum, core.Product, core.Min, core.Max, core.Average]
    kinds = [(case_collective, 0.8), (case_init, 0.15), (case_empty, 0.05)]
    count, failed = {}, 0
    keep = int(os.environ.get("ARGS_FUZZ_KEEP", "1"))  # failures to print before stopping
    t0 = time.time()
    for i in range(cases):
        u, k = rng.random(), 0
        while u > kinds[k][1]:
            u -= kinds[k][1]
            k += 1
        fn = kinds[k][0]
        core._comm, core._info = ctypes.c_void_p(1), (0, 1, 0, 1)
        try:
            out = fn(rng, fake, P)
        except Bad as e:
            print("args fuzz FAILED at case %d (seed %d, %s): %s" % (i, seed, fn.__name__, e))
            failed += 1
            if failed >= keep:
                sys.exit(1)
            continue
        key = fn.__name__[5:] + " " + out
        count[key] = count.get(key, 0) + 1
        fake.blocks.clear() if len(fake.blocks) > 1000 else None
    dt = time.time() - t0
    core._comm = core._info = None  # nothing for finalize() at exit
    if failed:
        sys.exit(1)
    print("args fuzz ok: %d cases (seed %d) in %.1f s: %s" % (cases, seed, dt,
                                                                ", ".join("%s %d" % kv for kv in sorted(count.items()))))


if __name__ == "__main__":
    main()
