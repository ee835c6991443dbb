"""ddprt for PyTorch: DDP communication hooks and the Horovod API.

    model = DistributedDataParallel(net)                 # on a gloo process group
    model.register_comm_hook(None, ddprt.torch.allreduce_hook)

    import ddprt.torch as hvd                            # a Horovod script, one line changed
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

The hooks return a torch.futures.Future that ddprt's progress thread completes, so
bucket allreduces run while backward computes the next buckets, as with gloo. Each
bucket is copied (scaled by 1/size, as DDP's own path does) into memory that the other
ranks of the host map (ddprt_mem_alloc), so same-host allreduces take the single-copy
path; the result is handed to DDP from there."""
import torch

from . import _core as core
from ._core import (Average, DdprtError, Max, Min, Product, Sum, barrier, finalize, init, is_initialized,
                    local_rank, local_size, rank, shutdown, size)
from ._horovod import (Adasum, Compression, DistributedOptimizer, allgather, allgather_async, allgather_object,
                       allreduce, allreduce_, allreduce_async, allreduce_async_, broadcast, broadcast_,
                       broadcast_async, broadcast_async_, broadcast_object, broadcast_optimizer_state,
                       broadcast_parameters, poll, synchronize)
from ._progress import progress

_ALIGN = 64


def empty(shape, dtype=torch.float32):
    """A CPU tensor in memory the other ranks of this host map (see ddprt.empty)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    n = 1
    for d in shape:
        n *= d
    es = torch.empty((), dtype=dtype).element_size()
    raw = torch.frombuffer(core._raw(n * es), dtype=torch.uint8)
    return raw[:n * es].view(dtype).view(shape)


class HookState:
    """The hooks' staging buffers for one DDP model (pass one per model when a process
    trains several; state None shares a default one).

    Bucket layouts are learned: the buckets of a backward pass are recorded, and at
    the first bucket of the next pass (index 0: every op of the previous pass is done)
    one registered block is carved for them if the layout changed (DDP rebuilds its
    buckets after the first iteration). Until a bucket has its slot it is reduced in
    its own buffer: the same bits, through the copy protocol."""

    def __init__(self):
        self.want = {}     # bucket index -> (numel, dtype) seen in the current pass
        self.planned = {}  # the layout the block was carved for
        self.views = {}    # bucket index -> staging tensor
        self.staged = self.direct = 0

    def _replan(self):
        self.views = {}
        total = sum((n * torch.empty((), dtype=dt).element_size() + _ALIGN - 1) // _ALIGN * _ALIGN
                    for n, dt in self.want.values())
        blk = core._Block(total)
        off = 0
        for i in sorted(self.want):
            n, dt = self.want[i]
            nb = n * torch.empty((), dtype=dt).element_size()
            # One storage per bucket: DDP views the result with offsets from its start.
            self.views[i] = torch.frombuffer(core._slice(blk, off, nb), dtype=dt, count=n)
            off += (nb + _ALIGN - 1) // _ALIGN * _ALIGN
        self.planned = dict(self.want)

    def staging(self, index, numel, dtype):
        if index == 0:
            if self.want and self.want != self.planned:
                self._replan()
            self.want = {}
        self.want[index] = (numel, dtype)
        v = self.views.get(index)
        if v is not None and v.numel() == numel and v.dtype == dtype:
            self.staged += 1
            return v
        self.direct += 1
        return None


_default = {}


def _state(state, key):
    if isinstance(state, HookState):
        return state
    if key not in _default:
        _default[key] = HookState()
    return _default[key]


def _hook(state, bucket, cdtype):
    st = _state(state, cdtype)
    buf = bucket.buffer()
    w = core.size()
    fut = torch.futures.Future()
    work = st.staging(bucket.index(), buf.numel(), cdtype or buf.dtype)
    if work is None:
        work = buf if cdtype is None else torch.empty(buf.numel(), dtype=cdtype)
    # DDP's own path scales each gradient by 1/size on its way into the bucket: the
    # same, on the way into the staging buffer (so the sum is DDP's, bit for bit).
    if w > 1:
        torch.mul(buf, 1.0 / w, out=work)
    elif work is not buf:
        work.copy_(buf)
    try:
        h = core.allreduce_async_(work, op=Sum)
    except DdprtError as e:
        fut.set_exception(e)
        return fut

    def done(err):
        if err is not None:
            fut.set_exception(err)
        elif cdtype is not None:
            buf.copy_(work)
            fut.set_result(buf)
        else:
            fut.set_result(work)

    progress.submit(h, done)
    return fut


def allreduce_hook(state, bucket):
    """DDP comm hook: the bucket averaged over the ranks (ddprt's allreduce)."""
    return _hook(state, bucket, None)


def fp16_compress_hook(state, bucket):
    """DDP comm hook: the bucket sent as float16 (half the bytes), averaged, and
    decompressed into the bucket (as torch's fp16_compress_hook)."""
    return _hook(state, bucket, torch.float16)


def bf16_compress_hook(state, bucket):
    """As fp16_compress_hook with bfloat16 (float32's range, fewer mantissa bits)."""
    return _hook(state, bucket, torch.bfloat16)


# DDP refuses a hook named bf16_compress_hook without NCCL (it takes it for torch's own).
bf16_compress_hook.__name__ = bf16_compress_hook.__qualname__ = "ddprt_bf16_compress_hook"
