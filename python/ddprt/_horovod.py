"""The Horovod API shape (horovod.torch) over ddprt, re-exported by ddprt.torch: a
Horovod script runs after `import horovod.torch as hvd` becomes `import ddprt.torch as
hvd`.

Horovod negotiates the order of ops by tensor name; ddprt has no coordinator, so every
rank must issue the same ops in the same order. DistributedOptimizer does (_hvd_opt.py:
one agreed order of gradients); raw calls are the script's to order (_hvd_coll.py
checks each allreduce's name, size and dtype against the other ranks')."""
import os
import pickle
import zlib

import torch

from . import _core as core
from ._core import Average, Sum
from ._hvd_sets import resolve

class _AdasumOp:
    def __repr__(self):
        return "Adasum"


Adasum = _AdasumOp()  # allreduce and DistributedOptimizer take it (_hvd_adasum.py); other calls refuse it


_OP_NAMES = {Average: "Average", Sum: "Sum", core.Min: "Min", core.Max: "Max", core.Product: "Product",
             Adasum: "Adasum"}


def _op(op, average):
    if op is Adasum:
        raise ValueError("ddprt: Adasum is supported by allreduce and DistributedOptimizer only (as Horovod)")
    if op is None:
        return Average if average is None or average else Sum
    return op


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _Cast(Compressor):
    dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.dtype:
            return tensor.to(cls.dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_Cast):
    dtype = torch.float16


class BF16Compressor(_Cast):
    dtype = torch.bfloat16


class Compression:
    none = Compressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


class _Hvd:
    """A Horovod handle: the ddprt handle and what to do with its result; tl: its span
    on the running timeline (start_timeline)."""
    __slots__ = ("h", "fin", "tl")
    timeline = None

    def __init__(self, h, fin=None, what=None, nbytes=0):
        self.h, self.fin = h, fin
        tl = _Hvd.timeline
        self.tl = tl.begin(what or "op", nbytes) if tl is not None else None


def _scale(t, f):
    if f == 1.0:
        return t
    if t.dtype.is_floating_point:
        return t.mul_(f)
    # Horovod scales integers in double and stores the product truncated toward zero.
    return t.copy_(t.double().mul_(f))


# The pairing check of raw allreduce calls: DDPRT_HVD_CHECK=0 turns it off.
_CHECK = os.environ.get("DDPRT_HVD_CHECK", "1") != "0"


def _check_pairing(tensor, name, op):
    """Horovod pairs allreduces by name; ddprt pairs them by order. Before the data, one
    16-byte allreduce (Max of the fingerprint and of its negation) tells every rank
    whether all issued the same name, shape, dtype and op; if not, every rank raises
    naming each rank's call, and the communicator stays usable."""
    if not _CHECK or core.size() == 1:
        return
    desc = "%s %s %s %s" % (name if name is not None else "(unnamed)", list(tensor.shape),
                            str(tensor.dtype).replace("torch.", ""), _OP_NAMES.get(op, op))
    fp = zlib.crc32(desc.encode())
    v = torch.tensor([fp, -fp], dtype=torch.int64)
    core.allreduce_(v, op=core.Max)
    if int(v[0]) != fp or int(v[1]) != -fp:
        calls = allgather_object(desc)
        raise core.DdprtError("ddprt.torch.allreduce: the ranks' calls do not pair (Horovod matches them by name, "
                              "ddprt by order): " + "; ".join("rank %d: %s" % (r, d) for r, d in enumerate(calls)))


def _iallreduce_(tensor, op, pre=1.0, post=1.0):
    """Unchecked: for calls whose order ddprt itself guarantees (the optimizer's)."""
    _scale(tensor, pre)
    h = core.allreduce_async_(tensor, op=op)
    return _Hvd(h, (lambda out: _scale(out, post)) if post != 1.0 else None, "allreduce",
                tensor.numel() * tensor.element_size())


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None):
    adasum = op is Adasum
    op = Adasum if adasum else _op(op, average)
    with resolve(process_set).scope("allreduce"):
        _check_pairing(tensor, name, op)
        if adasum:
            from ._hvd_adasum import adasum_
            return _Hvd(adasum_(tensor, prescale_factor, postscale_factor), None, "allreduce",
                        tensor.numel() * tensor.element_size())
        return _iallreduce_(tensor, op, prescale_factor, postscale_factor)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None):
    return allreduce_async_(tensor.clone(memory_format=torch.contiguous_format), average, name, op,
                            prescale_factor, postscale_factor, process_set)


def synchronize(handle):
    out = handle.h.wait()
    out = handle.fin(out) if handle.fin else out
    if handle.tl is not None:
        handle.tl.end()
        handle.tl = None
    return out


def poll(handle):
    return handle.h.test()


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    """In place; averaged by default, as allreduce."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


class _Done:
    """The handle of an op that completed at issue (an allgather of uneven first
    dimensions, alltoall, Adasum, ...): wait() returns the result, test() is True."""

    def __init__(self, result):
        self.result = result

    def wait(self):
        return self.result

    def test(self):
        return True


def allgather_async(tensor, name=None, process_set=None):
    """First dimensions may differ between ranks (as Horovod's): the shapes are exchanged
    first (one small blocking allgather); uneven ones complete at issue."""
    with resolve(process_set).scope("allgather"):
        nbytes = tensor.numel() * tensor.element_size()
        if core.size() > 1 and len(set(core._shapes(tensor.contiguous()))) > 1:
            return _Hvd(_Done(core.allgather(tensor)), None, "allgather", nbytes)
        return _Hvd(core.allgather_async(tensor), None, "allgather", nbytes)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """root_rank: a global rank (a member of process_set)."""
    ps = resolve(process_set)
    with ps.scope("broadcast"):
        return _Hvd(core.broadcast_async_(tensor, ps.root(root_rank)), None, "broadcast",
                    tensor.numel() * tensor.element_size())


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor.clone(memory_format=torch.contiguous_format), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast_parameters(params, root_rank=0):
    """Rank root_rank's parameters into every rank's: a state_dict, or named_parameters()."""
    if isinstance(params, dict):
        params = sorted(params.items())
    else:
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    hs = []
    for name, p in params:
        if not torch.is_tensor(p):
            raise ValueError("broadcast_parameters: %s is not a tensor" % (name,))
        hs.append(broadcast_async_(p.data if p.requires_grad else p, root_rank))
    for h in hs:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Any picklable object from root_rank, on every rank (of process_set)."""
    ps = resolve(process_set)
    with ps.scope("broadcast_object"):
        return _broadcast_object(obj, ps.root(root_rank))


def _broadcast_object(obj, root_rank):
    n = torch.zeros(1, dtype=torch.int64)
    if core.rank() == root_rank:
        data = pickle.dumps(obj)
        n[0] = len(data)
    core.broadcast_(n, root_rank)
    buf = torch.empty(int(n[0]), dtype=torch.uint8)
    if core.rank() == root_rank:
        buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    core.broadcast_(buf, root_rank)
    return obj if core.rank() == root_rank else pickle.loads(buf.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    with resolve(process_set).scope("allgather_object"):
        return _allgather_object(obj)


def _allgather_object(obj):
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = core.allgather(torch.tensor([data.numel()], dtype=torch.int64)).tolist()
    allb = core.allgather(data)
    out, at = [], 0
    for s in sizes:
        out.append(pickle.loads(allb[at:at + s].numpy().tobytes()))
        at += s
    return out
