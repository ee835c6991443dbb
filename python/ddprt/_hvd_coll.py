"""Horovod's collectives as autograd functions, with horovod/torch/mpi_ops.py's backward
rules (docs/python.md, "Gradients through the collectives"), and alltoall,
reducescatter and the grouped calls.

    allreduce     Sum / Average: the upstream gradient allreduced with the same op and
                  scale factors (Horovod's rule). Min / Max: the summed upstream gradient
                  on the ranks that hold the extreme, zero elsewhere (Horovod reduces the
                  upstream gradients with Min / Max, which is not a gradient). Product:
                  refused in backward.
    broadcast     the upstream gradients averaged onto the root, zero elsewhere.
    allgather     the upstream gradients averaged; each rank takes its own rows.
    alltoall      the upstream gradient sent back with the received splits.
    reducescatter the upstream gradient (times size for Sum, times the scale factors)
                  allgathered."""
import ctypes

import torch

from . import _core as core
from . import _lib
from ._core import Average, Max, Min, Product, Sum
from ._horovod import (Adasum, Compression, _Done, _Hvd, _op, _scale, allreduce_async, allreduce_async_, broadcast_async,
                       synchronize)
from ._hvd_misc import span
from ._hvd_sets import current, resolve


class _Many:
    """A grouped call's handle: synchronize() gives the list of results."""

    def __init__(self, handles):
        self.handles = handles

    def wait(self):
        return [synchronize(h) for h in self.handles]

    def test(self):
        return all(h.h.test() for h in self.handles)


def _scope(process_set, what):
    """A call with process_set= runs on the set's communicator (refused for a non-member)."""
    return resolve(process_set).scope(what)


def _sync_allreduce(t, op, pre=1.0, post=1.0):
    """Not recorded by autograd (backward's own reductions)."""
    return synchronize(allreduce_async(t.contiguous(), op=op, prescale_factor=pre, postscale_factor=post))


# ---- allreduce ----------------------------------------------------------------------------

class HorovodAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, pre, post, name):
        ctx.ps = current()  # backward runs on the same process set
        ctx.op, ctx.pre, ctx.post = op, pre, post
        if op in (Min, Max):
            # The extreme before the postscale: the mask in backward compares the same bits.
            x = _scale(tensor.detach().contiguous().clone(), pre)  # integers: truncated, as Horovod
            z = synchronize(allreduce_async(x, name=name, op=op))
            ctx.save_for_backward(x, z)
            return _scale(z.clone(), post)
        return synchronize(allreduce_async(tensor, None, name, op, pre, post))

    @staticmethod
    def backward(ctx, g):
        with ctx.ps.scope("backward"):
            if ctx.op in (Sum, Average):
                return _sync_allreduce(g, ctx.op, ctx.pre, ctx.post), None, None, None, None
            if ctx.op == Product:
                raise RuntimeError("ddprt: allreduce with op=Product has no gradient here (use Sum or Average)")
            x, z = ctx.saved_tensors
            s = _sync_allreduce(g, Sum, ctx.pre * ctx.post)
            return torch.where(x == z, s, torch.zeros_like(s)), None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """A new tensor: tensor averaged over the ranks (Horovod's default, op=Average), or
    reduced by op (average=False: summed); differentiable. ddprt.allreduce, the core
    call, sums by default as MPI and NCCL do."""
    if op is Adasum:  # no gradient (Horovod defines none): refused for a tensor that needs one
        c, ctx = compression.compress(tensor)
        return compression.decompress(synchronize(allreduce_async(c, None, name, op, prescale_factor,
                                                                  postscale_factor, process_set)), ctx)
    with _scope(process_set, "allreduce"):
        c, ctx = compression.compress(tensor)
        out = HorovodAllreduce.apply(c, _op(op, average), float(prescale_factor), float(postscale_factor), name)
        return compression.decompress(out, ctx)


# ---- broadcast, allgather ---------------------------------------------------------------------

class HorovodBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.ps = current()  # backward runs on the same process set
        ctx.root = root_rank
        return synchronize(broadcast_async(tensor.contiguous(), root_rank))

    @staticmethod
    def backward(ctx, g):
        with ctx.ps.scope("backward"):
            r = _sync_allreduce(g, Average)
            if core.rank() != ctx.root:
                r.zero_()  # Horovod multiplies by 0, which keeps NaN and inf
            return r, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """A new tensor holding root_rank's tensor; differentiable (Horovod's rule)."""
    with _scope(process_set, "broadcast"):
        # root_rank is global, as Horovod's; the set's communicator numbers its members.
        return HorovodBroadcast.apply(tensor, resolve(process_set).root(root_rank), name)


class HorovodAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.ps = current()  # backward runs on the same process set
        out, rows = core._allgather_rows(tensor)
        me = core.rank()
        ctx.off, ctx.n, ctx.shape = sum(rows[:me]), rows[me], tensor.shape
        return out

    @staticmethod
    def backward(ctx, g):
        with ctx.ps.scope("backward"):
            return _sync_allreduce(g, Average).narrow(0, ctx.off, ctx.n).reshape(ctx.shape), None


def allgather(tensor, name=None, process_set=None):
    """Every rank's tensor concatenated along the first dimension (which may differ
    between ranks); differentiable (Horovod's rule)."""
    with _scope(process_set, "allgather"):
        return HorovodAllgather.apply(tensor, name)


# ---- alltoall ---------------------------------------------------------------------------------

def _alltoall(x, splits):
    """(output, received splits as int32): rank r's rows splits[q] go to rank q."""
    x = x.contiguous()
    w, me = core.size(), core.rank()
    if x.dim() == 0:
        raise ValueError("ddprt.alltoall: the tensor needs at least one dimension")
    d0, tail = x.shape[0], tuple(x.shape[1:])
    if splits is None:
        if d0 % w:
            raise ValueError("ddprt.alltoall: the first dimension (%d) is not a multiple of the world size %d; "
                             "pass splits" % (d0, w))
        splits = [d0 // w] * w
    else:
        splits = [int(s) for s in (splits.tolist() if torch.is_tensor(splits) else splits)]
        if len(splits) != w or min(splits) < 0 or sum(splits) != d0:
            raise ValueError("ddprt.alltoall: splits %s must be %d counts >= 0 summing to the first dimension %d"
                             % (splits, w, d0))
    if len(tail) > 8:
        raise ValueError("ddprt.alltoall: more than 8 dimensions")
    mine = torch.tensor(splits + [len(tail)] + list(tail) + [0] * (8 - len(tail)), dtype=torch.int64)
    every = core.allgather(mine).view(w, w + 9)
    tails = [tuple(every[q, w + 1:w + 1 + int(every[q, w])].tolist()) for q in range(w)]
    for q in range(w):
        if tails[q] != tails[0]:  # against rank 0's: the same line on every rank
            raise ValueError("ddprt.alltoall: rank 0's rows are %s, rank %d's %s" % (tails[0], q, tails[q]))
    got = every[:, me].tolist()
    per = 1
    for d in tail:
        per *= d
    out = torch.empty((sum(got),) + tail, dtype=x.dtype)
    p, _, dt = core._desc(x)
    q = core._desc(out)[0]
    sc = (ctypes.c_size_t * w)(*[s * per for s in splits])
    rc = (ctypes.c_size_t * w)(*[s * per for s in got])
    with span("alltoall", x.numel() * x.element_size()):
        core._check(_lib.get().ddprt_alltoallv(core._c(), p, sc, None, q, rc, None, dt))
    return out, torch.tensor(got, dtype=torch.int32)


class HorovodAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name):
        ctx.ps = current()  # backward runs on the same process set
        out, got = _alltoall(tensor, splits)
        ctx.got = got
        if splits is None:
            return out
        ctx.mark_non_differentiable(got)
        return out, got

    @staticmethod
    def backward(ctx, g, *dead):
        with ctx.ps.scope("backward"):
            return _alltoall(g, ctx.got)[0], None, None


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Rows of tensor scattered by splits (default: equal parts) and gathered in rank
    order: the output, or (output, received_splits) when splits is given."""
    with _scope(process_set, "alltoall"):
        return HorovodAlltoall.apply(tensor, splits, name)


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """Completes at issue (ddprt's alltoall is blocking); synchronize() gives
    (output, received_splits) as Horovod's does."""
    with _scope(process_set, "alltoall"):
        return _Hvd(_Done(_alltoall(tensor, splits)))


# ---- reducescatter ----------------------------------------------------------------------------

def _rs_rows(d0, w):
    """Horovod's split: the first d0 % w ranks get one row more."""
    return [d0 // w + (1 if r < d0 % w else 0) for r in range(w)]


def _reducescatter_async(x, op, pre, post):
    if op not in (Sum, Average):
        raise ValueError("ddprt.reducescatter: op must be Sum or Average (as Horovod's)")
    w, me = core.size(), core.rank()
    if x.dim() == 0:
        raise ValueError("ddprt.reducescatter: the tensor needs at least one dimension")
    work = _scale(x.contiguous().clone(), pre)
    rows = _rs_rows(work.shape[0], w)
    fin = (lambda out: _scale(out, post)) if post != 1.0 else None
    if work.shape[0] % w:
        # Uneven rows: the whole reduction, this rank's rows kept.
        full = synchronize(allreduce_async_(work, op=op))
        return _Hvd(_Done(full.narrow(0, sum(rows[:me]), rows[me]).clone()), fin)
    out = torch.empty((rows[me],) + tuple(work.shape[1:]), dtype=work.dtype)
    p, n, dt = core._desc(work)
    h = core._issue(_lib.get().ddprt_ireduce_scatter, (core._c(), p, core._desc(out)[0], n // w, dt, op), out,
                    (work, out))
    return _Hvd(h, fin)


class HorovodReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, pre, post, name):
        ctx.ps = current()  # backward runs on the same process set
        ctx.op, ctx.pre, ctx.post = op, pre, post
        return synchronize(_reducescatter_async(tensor, op, pre, post))

    @staticmethod
    def backward(ctx, g):
        with ctx.ps.scope("backward"):
            g = g * (core.size() * ctx.pre * ctx.post if ctx.op == Sum else ctx.pre * ctx.post)
            return core.allgather(g.contiguous()), None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """tensor reduced over the ranks (Average by default, as Horovod's), this rank's
    rows of it: the first dimension split as Horovod does (the first d0 % size ranks
    one row more); differentiable (Horovod's rule)."""
    with _scope(process_set, "reducescatter"):
        c, ctx = compression.compress(tensor)
        out = HorovodReducescatter.apply(c, _op(op, None), float(prescale_factor), float(postscale_factor), name)
        return compression.decompress(out, ctx)


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0, postscale_factor=1.0):
    with _scope(process_set, "reducescatter"):
        return _reducescatter_async(tensor, _op(op, None), float(prescale_factor), float(postscale_factor))


# ---- grouped calls: one op per tensor, issued together, in list order ------------------------

def _needs_grad(tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None):
    with _scope(process_set, "grouped_allreduce"):
        return _Hvd(_Many([allreduce_async(t, average, name, op, prescale_factor, postscale_factor)
                           for t in tensors]), None, "grouped_allreduce")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=None):
    with _scope(process_set, "grouped_allreduce"):
        return _Hvd(_Many([allreduce_async_(t, average, name, op, prescale_factor, postscale_factor)
                           for t in tensors]), None, "grouped_allreduce")


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None):
    if _needs_grad(tensors) or compression is not Compression.none:
        return [allreduce(t, average, name, compression, op, prescale_factor, postscale_factor, process_set)
                for t in tensors]
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor,
                                               process_set))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def grouped_allgather(tensors, name=None, process_set=None):
    return [allgather(t, name, process_set) for t in tensors]


def grouped_allgather_async(tensors, name=None, process_set=None):
    """Completes at issue (first dimensions may differ between ranks)."""
    with _scope(process_set, "grouped_allgather"):
        with span("grouped_allgather", sum(t.numel() * t.element_size() for t in tensors)):
            return _Hvd(_Done([core.allgather(t.contiguous()) for t in tensors]))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    if _needs_grad(tensors) or compression is not Compression.none:
        return [reducescatter(t, name, compression, op, process_set, prescale_factor, postscale_factor)
                for t in tensors]
    return synchronize(grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                                   postscale_factor))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None, prescale_factor=1.0,
                                postscale_factor=1.0):
    return _Hvd(_Many([reducescatter_async(t, name, op, process_set, prescale_factor, postscale_factor)
                       for t in tensors]), None, "grouped_reducescatter")
