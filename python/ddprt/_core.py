"""The collectives on numpy arrays and CPU torch tensors, over libddprt.so (ctypes).

Buffers travel by pointer: a contiguous array or tensor is reduced in place or into a
new one of the same kind without a copy. ctypes releases the GIL during every call, so
other Python threads run while a collective does."""
import atexit
import contextlib
import ctypes
import threading

from . import _lib
from ._args import _int, _np_dtype, _seconds, _text

_E = _lib.ENUMS
Sum, Product, Min, Max, Average = _E["DDPRT_SUM"], _E["DDPRT_PROD"], _E["DDPRT_MIN"], _E["DDPRT_MAX"], _E["DDPRT_AVG"]
_OPS = {"sum": Sum, "prod": Product, "product": Product, "min": Min, "max": Max, "avg": Average,
        "average": Average, "mean": Average}
_DTYPE_NAMES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]  # by code
_DTYPES = {n: _E["DDPRT_" + n.upper()] for n in _DTYPE_NAMES}
_DTYPES.update({a: _DTYPES[n] for a, n in (("float", "float32"), ("f32", "float32"), ("double", "float64"),
                                           ("f64", "float64"), ("half", "float16"), ("f16", "float16"),
                                           ("bf16", "bfloat16"), ("i32", "int32"), ("i64", "int64"), ("u8", "uint8"))})
_ESIZE = [4, 8, 2, 2, 4, 8, 1]
_BACKENDS = ("auto", "tcp", "verbs")
_LOG = {"silent": -1, "error": 0, "warn": 1, "warning": 1, "info": 2, "debug": 3}


class DdprtError(RuntimeError):
    """A collective failed. The message names the op and, for a peer's failure, the
    rank ("allreduce #12 (64 MiB): rank 2 closed the connection"). The communicator
    stays failed: every later call raises the same line."""

    def __init__(self, message, code=-1):
        super().__init__(message)
        self.code = code


class PeerError(DdprtError):
    """A collective failed because of a peer (it closed its connections, an I/O error,
    or the deadline passed waiting for it): the job must restart without or with it.
    ddprt.torch exports it as Horovod's HorovodInternalError."""


# DDPRT_EIO, DDPRT_ETIMEOUT, DDPRT_ECLOSED: the codes a peer's failure gives.
_PEER_CODES = (_E["DDPRT_EIO"], _E["DDPRT_ETIMEOUT"], _E["DDPRT_ECLOSED"])


_comm = None
_info = None  # (rank, size, local_rank, local_size)
_timeout = 300.0  # the per-op deadline: bounds what finalize() waits for
_gen = 0  # bumped by every init(): handles of an earlier communicator are refused
_lock = threading.Lock()


def _err(rc):
    msg = _lib.get().ddprt_last_error().decode("utf-8", "replace")
    # A collective mismatch is the program's error, not a peer's: restarting will not help.
    peer = rc in _PEER_CODES and "collective mismatch" not in msg
    return (PeerError if peer else DdprtError)(msg or "ddprt error %d" % rc, rc)


def _check(rc):
    if rc:
        raise _err(rc)


_tls = threading.local()  # .sub: (comm, info) of the process set a Horovod call runs in


@contextlib.contextmanager
def _using(comm, info):
    """Every call of this thread inside goes to comm (a process set's communicator,
    _hvd_sets.py); rank() and size() answer for it. Nests."""
    was = getattr(_tls, "sub", None)
    _tls.sub = (comm, info)
    try:
        yield
    finally:
        _tls.sub = was


def _c():
    sub = getattr(_tls, "sub", None)
    if sub is not None:
        return sub[0]
    if _comm is None:
        raise DdprtError("ddprt is not initialized: call ddprt.init() first")
    return _comm


def init(init_method=None, rank=None, world_size=None, local_rank=None, timeout=None, backend=None, token=None,
         port_offset=2, log_level=None, max_requests=0):
    """Meets the other ranks, as ddprt-train does: torchrun's and ddprt-launch's variables
    (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Slurm, Open MPI, or
    init_method "tcp://HOST:PORT", "file:///path", "env://". Without any: one process.
    ddprt meets on the port + port_offset, so torch.distributed.init_process_group can
    use the same variables. timeout: seconds per op (default DDPRT_TIMEOUT, else 300).
    log_level: "silent", "error", "warn" (default: stall reports on stderr), "info",
    "debug" (DDPRT_LOG wins when set). Calling it again does nothing."""
    global _comm, _info, _timeout, _gen
    import os
    with _lock:
        if _comm is not None:
            return
        lib = _lib.get()
        o = _lib.Opts()
        lib.ddprt_opts_default(ctypes.byref(o))
        enc = lambda s: s.encode() if isinstance(s, str) else s
        o.init_method = enc(_text(init_method, "init_method"))
        o.rank = -1 if rank is None else _int(rank, "rank", -1)
        o.world_size = -1 if world_size is None else _int(world_size, "world_size", -1)
        o.local_rank = -1 if local_rank is None else _int(local_rank, "local_rank", -1)
        o.timeout_s = _seconds(timeout)
        if backend is not None and backend not in _BACKENDS:
            raise ValueError("ddprt.init: backend %r is not one of %s" % (backend, ", ".join(_BACKENDS)))
        o.backend, o.token = enc(backend), enc(_text(token, "token"))
        o.port_offset = _int(port_offset, "port_offset", -65535, 65535)
        o.max_requests = _int(max_requests, "max_requests", 0, 1 << 20)
        if log_level is None:
            log_level = -1 if os.environ.get("DDPRT_LOG") else "warn"
        if isinstance(log_level, str):
            if log_level not in _LOG:
                raise ValueError("ddprt.init: log_level %r is not one of %s" % (log_level, ", ".join(_LOG)))
            o.log_level = _LOG[log_level]
        else:
            o.log_level = _int(log_level, "log_level", -1, 3)
        c = ctypes.c_void_p()
        rc = lib.ddprt_init(ctypes.byref(c), ctypes.byref(o))
        if rc:
            raise _err(rc)
        _comm = c
        _gen += 1
        _timeout = float(timeout or os.environ.get("DDPRT_TIMEOUT") or 300)
        _info = (lib.ddprt_rank(c), lib.ddprt_size(c), lib.ddprt_local_rank(c), lib.ddprt_local_size(c))


def finalize():
    """Waits for the ops in flight and closes the connections. Arrays from ddprt.empty()
    are freed too."""
    global _comm, _info
    from ._progress import progress
    # The progress thread may be waiting in an op of this comm: let it finish first.
    progress.drain(_timeout + 10)
    with _lock:
        if _comm is None:
            return
        c, _comm, _info = _comm, None, None
    _lib.get().ddprt_finalize(c)


shutdown = finalize
atexit.register(finalize)


def is_initialized():
    return _comm is not None


def _i(k):
    _c()
    sub = getattr(_tls, "sub", None)
    return sub[1][k] if sub is not None else _info[k]


def rank():
    return _i(0)


def size():
    return _i(1)


def local_rank():
    return _i(2)


def local_size():
    return _i(3)


def abort(why="aborted by the program"):
    """Fails the communicator on purpose: the other ranks' ops fail naming this rank."""
    _lib.get().ddprt_abort(_c(), why.encode())


# ---- buffers ---------------------------------------------------------------------------

def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _desc(x, dtype=None, writable=False):
    """(pointer, elements, dtype code) of a contiguous CPU array or tensor."""
    if _is_torch(x):
        if x.device.type != "cpu":
            raise ValueError("ddprt: the tensor is on %s; ddprt works on CPU tensors" % x.device)
        if not x.is_contiguous():
            raise ValueError("ddprt: the tensor is not contiguous (call .contiguous())")
        name = str(x.dtype).replace("torch.", "")
        ptr, n, item = x.data_ptr(), x.numel(), x.element_size()
    elif hasattr(x, "__array_interface__") and hasattr(x, "flags"):
        if not x.flags.c_contiguous:
            raise ValueError("ddprt: the array is not C-contiguous (numpy.ascontiguousarray)")
        if writable and not x.flags.writeable:
            raise ValueError("ddprt: the array is read-only")
        if not x.dtype.isnative:
            # Reduced as native, its bytes would be other numbers.
            raise ValueError("ddprt: the array's dtype %s is not in this machine's byte order "
                             "(x.astype(x.dtype.newbyteorder('='))" % x.dtype.str)
        name = x.dtype.name
        ptr, n, item = x.__array_interface__["data"][0], x.size, x.dtype.itemsize
    else:
        raise TypeError("ddprt: expected a numpy array or a CPU torch tensor, got %s" % type(x).__name__)
    if dtype is not None:
        code = _DTYPES.get(str(dtype).replace("torch.", "").replace("numpy.", ""))
        if code is None or _ESIZE[code] != item:
            raise TypeError("ddprt: dtype %s does not fit elements of %d bytes" % (dtype, item))
    else:
        code = _DTYPES.get(name)
        if code is None:
            raise TypeError("ddprt: dtype %s is not one of %s" % (name, ", ".join(_DTYPE_NAMES)))
    return ptr, n, code


def _op(op):
    if isinstance(op, str):
        if op.lower() not in _OPS:
            raise ValueError("ddprt: op %r is not one of sum, avg, min, max, prod" % op)
        return _OPS[op.lower()]
    try:
        return _int(op, "op", 0, 4)
    except (TypeError, ValueError):
        raise ValueError("ddprt: op %r is not one of ddprt.Sum, Average, Min, Max, Product" % (op,)) from None


def _empty_like(x):
    if _is_torch(x):
        import torch
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    import numpy
    return numpy.empty_like(x, order="C")


def _contig(x):
    if _is_torch(x):
        return x.contiguous()
    if not (hasattr(x, "__array_interface__") and hasattr(x, "flags")):
        raise TypeError("ddprt: expected a numpy array or a CPU torch tensor, got %s" % type(x).__name__)
    # Not numpy.ascontiguousarray: it makes a 0-d array 1-d (allreduce(array(2.)) had shape (1,)).
    return x if x.flags.c_contiguous else x.copy(order="C")


# ---- asynchronous handles ----------------------------------------------------------------

class Handle:
    """An op in flight. wait() blocks (bounded by the op's deadline) and returns the
    result, or raises DdprtError; test() never blocks. The buffers are kept alive until
    the op completes."""
    __slots__ = ("_req", "_gen", "_result", "_keep", "_state", "_error", "__weakref__")

    def __init__(self, req, result, keep):
        self._req, self._gen, self._result, self._keep = req, _gen, result, keep
        self._state, self._error = 0, None  # 0 running, 1 done, 2 failed

    def _finish(self, rc):
        self._req, self._keep = None, None
        if rc < 0:
            self._state, self._error = 2, _err(rc)
        else:
            self._state = 1

    def wait(self):
        # A handle of a finalized comm is safe to wait for: the library says so.
        if self._state == 0:
            self._finish(_lib.get().ddprt_wait(self._req))
        if self._state == 2:
            raise self._error
        return self._result

    def __del__(self):
        # Dropped without wait(): its request slot comes back, and the buffers it keeps
        # stay alive until the op is done (bounded by the op's deadline).
        try:
            if self._state == 0 and self._req:
                req, self._req, self._state = self._req, None, 1
                _lib.get().ddprt_wait(req)
        except Exception:  # interpreter shutdown: the process is going anyway
            pass

    def test(self):
        if self._state == 0:
            done = ctypes.c_int(0)
            rc = _lib.get().ddprt_test(ctypes.byref(self._req), ctypes.byref(done))
            if rc == 0 and not done.value:
                return False
            self._finish(rc)  # done: the library released the request (ok or failed)
        return True

    def done(self):
        return self.test()


def _issue(fn, args, result, keep):
    req = ctypes.c_void_p()
    rc = fn(*args, ctypes.byref(req))
    _check(rc)
    return Handle(req, result, keep)


# ---- the collectives ---------------------------------------------------------------------

def allreduce_(x, op=Sum, dtype=None):
    """Reduces x across the ranks in place. op defaults to Sum, as in MPI, NCCL and
    torch.distributed.all_reduce (ddprt.torch.allreduce, Horovod's, averages by default);
    sums are taken in rank order: the same bits everywhere."""
    p, n, dt = _desc(x, dtype, writable=True)
    _check(_lib.get().ddprt_allreduce(_c(), p, p, n, dt, _op(op)))
    return x


def allreduce(x, op=Sum, dtype=None):
    """The reduction of x across the ranks, in a new array or tensor: the sum unless op
    says otherwise (MPI's and NCCL's default; ddprt.torch.allreduce follows Horovod and
    averages)."""
    x = _contig(x)
    out = _empty_like(x)
    p, n, dt = _desc(x, dtype)
    q = _desc(out, dtype)[0]
    _check(_lib.get().ddprt_allreduce(_c(), p, q, n, dt, _op(op)))
    return out


def allreduce_async_(x, op=Sum, dtype=None):
    p, n, dt = _desc(x, dtype, writable=True)
    lib = _lib.get()
    return _issue(lib.ddprt_iallreduce, (_c(), p, p, n, dt, _op(op)), x, x)


def allreduce_async(x, op=Sum, dtype=None):
    x = _contig(x)
    out = _empty_like(x)
    p, n, dt = _desc(x, dtype)
    return _issue(_lib.get().ddprt_iallreduce, (_c(), p, _desc(out, dtype)[0], n, dt, _op(op)), out, (x, out))


def broadcast_(x, root=0, dtype=None):
    """Rank root's x, copied into x on every rank."""
    p, n, dt = _desc(x, dtype, writable=True)
    _check(_lib.get().ddprt_broadcast(_c(), p, n, dt, _int(root, "root")))
    return x


def broadcast(x, root=0, dtype=None):
    out = _contig(x)
    if _is_torch(out):
        return broadcast_(out.clone(), root, dtype)
    import numpy
    return broadcast_(numpy.array(out, order="C"), root, dtype)  # a numpy scalar's copy() is read-only


def broadcast_async_(x, root=0, dtype=None):
    p, n, dt = _desc(x, dtype, writable=True)
    return _issue(_lib.get().ddprt_ibroadcast, (_c(), p, n, dt, _int(root, "root")), x, x)


def _shapes(x):
    """Every rank's shape (ndim <= 8): one small allgather (ctypes: no numpy needed)."""
    shp = tuple(x.shape)
    if len(shp) > 8:
        raise ValueError("ddprt.allgather: more than 8 dimensions")
    mine = (ctypes.c_int64 * 9)(len(shp), *shp)
    allv = (ctypes.c_int64 * (9 * size()))()
    _check(_lib.get().ddprt_allgather(_c(), mine, allv, 9, 5))
    return [tuple(allv[9 * r + 1:9 * r + 1 + allv[9 * r]]) for r in range(size())]


def _new(x, shape):
    if _is_torch(x):
        import torch
        return torch.empty(shape, dtype=x.dtype)
    import numpy
    return numpy.empty(shape, dtype=x.dtype)


def allgather(x, dtype=None):
    """Every rank's x concatenated along the first dimension, in rank order. The first
    dimension may differ between ranks; the others must agree."""
    return _allgather_rows(x, dtype)[0]


def _allgather_rows(x, dtype=None):
    """(allgather(x), every rank's number of rows)."""
    x = _contig(x)
    shapes = _shapes(x)
    rows = []
    for r, s in enumerate(shapes):
        s = s or (1,)
        if tuple(s[1:]) != tuple((shapes[0] or (1,))[1:]):  # against rank 0's: the same line on every rank
            raise ValueError("ddprt.allgather: rank 0's shape %s and rank %d's %s differ beyond the first "
                             "dimension" % (shapes[0], r, s))
        rows.append(s[0])
    tail = tuple((tuple(x.shape) or (1,))[1:])
    out = _new(x, (sum(rows),) + tail)
    p, n, dt = _desc(x, dtype)
    q = _desc(out, dtype)[0]
    lib = _lib.get()
    if len(set(rows)) == 1:
        _check(lib.ddprt_allgather(_c(), p, q, n, dt))
    else:
        per = 1
        for d in tail:
            per *= d
        counts = (ctypes.c_size_t * len(rows))(*[r * per for r in rows])
        _check(lib.ddprt_allgatherv(_c(), p, q, n, counts, None, dt))
    return out, rows


def allgather_async(x, dtype=None):
    """allgather for equal shapes on every rank (no negotiation in flight)."""
    x = _contig(x)
    out = _new(x, ((x.shape[0] if x.shape else 1) * size(),) + tuple(x.shape[1:]))
    p, n, dt = _desc(x, dtype)
    return _issue(_lib.get().ddprt_iallgather, (_c(), p, _desc(out, dtype)[0], n, dt), out, (x, out))


def reduce_scatter(x, op=Sum, dtype=None):
    """x split along its first dimension into size() blocks; returns this rank's block
    reduced across the ranks."""
    x = _contig(x)
    w = size()
    if not x.shape or x.shape[0] % w:
        raise ValueError("ddprt.reduce_scatter: the first dimension (%s) is not a multiple of the world size %d"
                         % (x.shape[0] if x.shape else "none", w))
    out = _new(x, (x.shape[0] // w,) + tuple(x.shape[1:]))
    p, n, dt = _desc(x, dtype)
    _check(_lib.get().ddprt_reduce_scatter(_c(), p, _desc(out, dtype)[0], n // w, dt, _op(op)))
    return out


def barrier():
    _check(_lib.get().ddprt_barrier(_c()))


# ---- registered memory -------------------------------------------------------------------

class _Block:
    """A ddprt_mem_alloc block; freed when the last array over it goes, also after
    finalize(): the library keeps such blocks (and a finalized comm's handle) valid."""

    def __init__(self, nbytes):
        self.ptr = None
        self.comm = _c()
        self.ptr = _lib.get().ddprt_mem_alloc(self.comm, max(1, nbytes))
        if not self.ptr:
            raise _err(_E["DDPRT_ENOMEM"])
        self.nbytes = nbytes

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr:
            try:
                _lib.get().ddprt_mem_free(self.comm, ptr)
            except Exception:  # interpreter shutdown: the process is going anyway
                pass


def _raw(nbytes):
    """A ctypes byte array over a fresh registered block (it keeps the block alive)."""
    return _slice(_Block(nbytes), 0, nbytes)


def _slice(blk, offset, nbytes):
    """Bytes [offset, offset + nbytes) of blk as their own ctypes array: a tensor made
    from it has its own storage starting there (DDP's as_strided views of a hook's
    result take offsets from the start of the storage)."""
    buf = (ctypes.c_uint8 * max(1, nbytes)).from_address(blk.ptr + offset)
    buf._ddprt_block = blk
    return buf


def empty(shape, dtype="float32"):
    """A numpy array in memory the other ranks of this host map: allreduces on such
    arrays (on every rank) reduce in place across processes, without copies. The array
    stays valid after finalize() (its memory goes with the last array over it)."""
    import numpy
    dt = _np_dtype(numpy, dtype, [n for n in _DTYPE_NAMES if n != "bfloat16"])
    shape = (shape,) if not isinstance(shape, (tuple, list)) else tuple(shape)
    shape = tuple(_int(d, "a dimension of the shape", 0, 1 << 48) for d in shape)
    n = 1
    for d in shape:
        n *= d
    return numpy.frombuffer(_raw(n * dt.itemsize), dtype=dt, count=n).reshape(shape)
