"""ddprt for PyTorch: DDP communication hooks and the Horovod API.

    model = DistributedDataParallel(net)                 # on a gloo process group
    model.register_comm_hook(None, ddprt.torch.allreduce_hook)

    import ddprt.torch as hvd                            # a Horovod script, one line changed
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

The hooks return a torch.futures.Future that ddprt's progress thread completes, so
bucket allreduces run while backward computes the next buckets, as with gloo. Each
bucket is copied (scaled by 1/size, as DDP's own path does) into memory that the other
ranks of the host map (ddprt_mem_alloc), so same-host allreduces take the single-copy
path; the result is handed to DDP from there. With HookState(model) the buckets go out
in pieces as backward produces their gradients (_early.py)."""
import torch

from . import _core as core
from . import _early
from ._ddp_order import Stamps, tail
from ._core import (Average, DdprtError, Max, Min, Product, Sum, barrier, finalize, is_initialized,
                    local_rank, local_size, rank, shutdown, size)
from ._horovod import (Adasum, Compression, allgather_async, allgather_object, allreduce_, allreduce_async,
                       allreduce_async_, broadcast_, broadcast_async, broadcast_async_, broadcast_object,
                       broadcast_parameters, poll, synchronize)
from ._hvd_opt import DistributedOptimizer, broadcast_optimizer_state
from ._hvd_coll import (HorovodAllgather, HorovodAllreduce, HorovodAlltoall, HorovodBroadcast, HorovodReducescatter,
                        allgather, allreduce, alltoall, alltoall_async, broadcast, grouped_allgather,
                        grouped_allgather_async, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                        grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async, reducescatter,
                        reducescatter_async)
from ._hvd_join import join
from ._hvd_sparse import sparse_allreduce_async
from ._hvd_sbn import SyncBatchNorm
from ._hvd_sets import add_process_set, remove_process_set
from ._hvd_misc import (ProcessSet, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set,
                        gloo_built, gloo_enabled, init, is_homogeneous, mpi_built, mpi_enabled,
                        mpi_threads_supported, nccl_built, rocm_built, start_timeline, stop_timeline)
from ._progress import progress
from ._core import PeerError as HorovodInternalError
from . import _hvd_elastic as elastic
from ._hvd_elastic import HostsUpdatedInterrupt
import sys as _sys
_sys.modules[__name__ + ".elastic"] = elastic  # `import ddprt.torch.elastic`, as horovod.torch.elastic

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

    HookState(model) (the DDP model) also starts each bucket early: pieces of about
    piece_bytes go on the wire as backward produces their gradients, rather than the
    whole bucket once DDP hands it over (_early.py: how, and when it is safe).

    Bucket layouts are learned: the buckets of a backward pass are recorded, and at
    the first bucket of the next pass (index 0: every op of the previous pass is done)
    one registered block is carved for them if the layout changed (DDP rebuilds its
    buckets after the first iteration). Until a bucket has its slot it is reduced in
    its own buffer: the same bits, through the copy protocol."""

    def __init__(self, model=None, piece_bytes=1 << 20):
        self.want = {}     # bucket index -> (numel, dtype) seen in the current pass
        self.planned = {}  # the layout the block was carved for
        self.views = {}    # bucket index -> staging tensor
        self.staged = self.direct = self.early = 0
        self.ahead = 0  # pieces sent before DDP handed their bucket over
        self.model, self.piece_bytes = model, int(piece_bytes)
        self.passes = 0                 # synchronised passes begun
        self.rec, self.prev = {}, {}    # DDP's bucket layouts of this pass and the one before
        self.cdtype = None
        self.plan = self.active = None  # _early.Plan once learned; _early.Pass of this pass
        self.stamps = Stamps()  # the order check's tails (_ddp_order.py)
        if model is not None:
            if not hasattr(model, "require_backward_grad_sync"):
                raise TypeError("ddprt.torch.HookState(model): expected the DistributedDataParallel model, got %s"
                                % type(model).__name__)
            model.register_forward_pre_hook(self._arm)
            self._accs = _early.accumulators(model)  # kept: the hooks live on these nodes
            for p, acc in self._accs:
                acc.register_hook(lambda outs, ins, p=p: self._ready(p))

    def _arm(self, model, inputs):
        """Before each forward of the model: will this pass's backward be synchronised?"""
        self.active = None
        if not (torch.is_grad_enabled() and model.require_backward_grad_sync):
            return  # no_sync() or no grad: DDP reduces nothing, nor do the pieces
        self.passes += 1
        rec = self.rec
        n = len(rec)
        # DDP rebuilds its buckets (once) in the second pass's forward, after this
        # hook: a layout seen alike on two passes from the second on is final.
        if self.plan is None and self.passes >= 3 and n and sorted(rec) == list(range(n)) and _early.same(rec, self.prev):
            if self.want != self.planned:
                self._replan()
            views = [self.views.get(i) for i in range(n)]
            k = tail(core.size())
            if all(v is not None and v.numel() == rec[i][0].numel() + k and v.dtype == (self.cdtype or rec[i][0].dtype)
                   for i, v in enumerate(views)):
                # Pieces go out in the plan's order, whatever DDP's: no tail needed there.
                self.plan = _early.Plan(rec, [v[:v.numel() - k] for v in views], self.piece_bytes, self.cdtype)
        self.prev, self.rec = rec, {}
        self.active = _early.Pass(self.plan, self) if self.plan is not None else None

    def _ready(self, p):
        a = self.active
        if a is not None:
            a.grad_ready(p)

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
        """Bucket index's staging buffer: numel elements and the order check's tail."""
        numel += tail(core.size())
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
    if st.active is not None:
        if st.active.plan.cdtype != cdtype:
            raise TypeError("ddprt hook: one HookState serves one hook (it learned another compression)")
        st.early += 1
        return st.active.bucket(bucket.index(), buf)
    if st.model is not None:
        st.rec[bucket.index()] = _early.layout(bucket)
        st.cdtype = cdtype
    w, me, i, n = core.size(), core.rank(), bucket.index(), buf.numel()
    fut = torch.futures.Future()
    work = st.staging(i, n, cdtype or buf.dtype)
    if work is None:
        # Not staged yet (the first passes): in place in DDP's buffer in one process;
        # else a buffer with room for the order check's tail.
        work = buf if cdtype is None and w == 1 else torch.empty(n + tail(w), dtype=cdtype or buf.dtype)
    data = work[:n]
    # DDP's own path scales each gradient by 1/size on its way into the bucket: the
    # same, on the way into the staging buffer (so the sum is DDP's, bit for bit).
    if w > 1:
        torch.mul(buf, 1.0 / w, out=data)
    elif work is not buf:
        data.copy_(buf)
    st.stamps.write(work, n, i, me, w)  # this rank's (bucket, size) after the data
    try:
        h = core.allreduce_async_(work, op=Sum)
    except DdprtError as e:
        fut.set_exception(e)
        return fut

    def done(err):
        if err is not None:
            if "mismatch" in str(err):
                err = DdprtError("ddprt DDP hook: bucket %d (%d elements) on rank %d: %s" % (i, n, me, err))
            fut.set_exception(err)
            return
        bad = st.stamps.check(work, n, i, me, w)
        if bad is not None:
            fut.set_exception(DdprtError(bad))
        elif cdtype is not None:
            buf.copy_(data)
            fut.set_result(buf)
        else:
            fut.set_result(data)

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
