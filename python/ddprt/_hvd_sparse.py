"""Sparse allreduce (Horovod's sparse_allreduce_async), also DistributedOptimizer's path
for sparse gradients (nn.Embedding(sparse=True)) unless sparse_as_dense=True.

As Horovod: every rank's indices and values are allgathered (the ranks' numbers of
nonzeros may differ) and make one sparse tensor of the same size. Unlike Horovod, whose
result is uncoalesced with Average's values divided before summing, the result here is
coalesced (duplicate indices summed, in rank order) and Average divides the sums: the
dense Average's value, bitwise whatever the number of ranks."""
import torch

from . import _core as core
from ._core import Average, Sum
from ._horovod import _Done, _Hvd, _check_pairing, _op
from ._hvd_misc import span
from ._hvd_sets import resolve


def _sparse_reduce(t, op):
    """The coalesced sum (op Sum) or average (op Average) of every rank's sparse t."""
    if op not in (Sum, Average):
        raise ValueError("ddprt: sparse allreduce takes op Sum or Average (as Horovod, which sums the values)")
    # Each rank's (sparse dims, nonzeros): an empty tensor (a zero_()ed gradient has
    # all dims sparse) takes the others' layout; non-empty ones must agree.
    meta = core.allgather(torch.tensor([[t.sparse_dim(), t._nnz()]], dtype=torch.int64)).tolist()
    dims = sorted({d for d, n in meta if n})
    if len(dims) > 1:
        raise ValueError("ddprt: sparse allreduce: the ranks' sparse dimensions differ: " +
                         "; ".join("rank %d: %d" % (r, d) for r, (d, n) in enumerate(meta) if n))
    if dims and t.sparse_dim() != dims[0]:
        t = torch.sparse_coo_tensor(torch.empty(dims[0], 0, dtype=torch.int64),
                                    torch.empty((0,) + tuple(t.shape[dims[0]:]), dtype=t.dtype), t.shape)
    idx = core.allgather(t._indices().t().contiguous())
    val = core.allgather(t._values().contiguous())
    out = torch.sparse_coo_tensor(idx.t(), val, t.shape, dtype=t.dtype).coalesce()
    if op == Average:
        w = core.size()
        v = out.values()
        v = torch.div(v, w, rounding_mode="trunc") if not (v.dtype.is_floating_point or v.is_complex()) else v / w
        out = torch.sparse_coo_tensor(out.indices(), v, t.shape, dtype=t.dtype).coalesce()
    return out


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=None):
    """A handle whose synchronize() gives the coalesced sum or average of every rank's
    sparse tensor (the same size on every rank; numbers of nonzeros may differ)."""
    if not tensor.is_sparse:
        raise ValueError("ddprt.sparse_allreduce_async: expected a sparse COO tensor, got a %s one" % tensor.layout)
    if tensor.device.type != "cpu":
        raise ValueError("ddprt.sparse_allreduce_async: a %s tensor; ddprt takes CPU tensors" % tensor.device)
    op = _op(op, None)
    with resolve(process_set).scope("sparse_allreduce"):
        _check_pairing(tensor, name, op)
        with span("sparse_allreduce", tensor._values().numel() * tensor.element_size()):
            return _Hvd(_Done(_sparse_reduce(tensor, op)))


def sparse_reduce_grad(grad, op):
    """DistributedOptimizer's sparse gradient (order agreed: no pairing check)."""
    return _Hvd(_Done(_sparse_reduce(grad, op)))
