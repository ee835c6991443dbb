"""Adasum (Horovod's op=hvd.Adasum) over ddprt's allgather.

Adasum combines two vectors as (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b (a coefficient
is 1 where |x|^2 < 1e-8), in Horovod's tree: ranks in pairs (0,1), (2,3), ..., then the
pairs' results in pairs, and so on (an odd one out goes up a level as it is). ddprt has
no Adasum kernel: every rank allgathers every rank's tensor and computes the same tree in
float64, rounded once to the tensor's dtype, so every rank holds the same bits. It moves
size times an allreduce's bytes (fine for the small jobs and checks it serves); Horovod
needs a power-of-two number of ranks, this any number.

DistributedOptimizer(op=Adasum) is Horovod's Adasum optimizer: the wrapped optimizer
steps locally, and each parameter becomes its start plus the Adasum of the ranks' deltas
(parameters in name order, the same on every rank)."""
import torch

from . import _core as core
from ._horovod import _Done
from ._hvd_sets import resolve


def _combine(a, b):
    dot, an, bn = float(a @ b), float(a @ a), float(b @ b)
    ac = 1.0 - dot / an * 0.5 if an >= 1e-8 else 1.0
    bc = 1.0 - dot / bn * 0.5 if bn >= 1e-8 else 1.0
    return ac * a + bc * b


def adasum(t):
    """The Adasum of every rank's t (same shape everywhere), as a new tensor."""
    if not t.dtype.is_floating_point:
        raise ValueError("ddprt: Adasum takes floating-point tensors, not %s" % t.dtype)
    rows = core.allgather(t.detach().reshape(1, -1).contiguous()).double()
    level = [rows[r] for r in range(rows.shape[0])]
    while len(level) > 1:
        nxt = [_combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = nxt + level[len(nxt) * 2:]
    return level[0].to(t.dtype).reshape(t.shape)


def adasum_(tensor, pre=1.0, post=1.0):
    """In place, with Horovod's prescale and postscale factors; completes at issue."""
    if tensor.requires_grad and torch.is_grad_enabled():
        raise ValueError("ddprt: Adasum has no gradient (Horovod defines none): detach the tensor")
    x = tensor.detach()
    if pre != 1.0:
        x.mul_(pre)
    x.copy_(adasum(x))
    if post != 1.0:
        x.mul_(post)
    return _Done(tensor)


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """Methods of the class DistributedOptimizer(op=Adasum) derives from the wrapped one."""

    def __init__(self, params, named_parameters, compression, process_set):
        super(self.__class__, self).__init__(params)
        self._ps = resolve(process_set)
        self._compression = compression
        if named_parameters is None:
            named_parameters = [("allreduce.noname.%d.%d" % (g, i), v) for g, group in enumerate(self.param_groups)
                                for i, v in enumerate(group["params"])]
        named = dict(named_parameters)
        mine = {id(p) for g in self.param_groups for p in g["params"]}
        self._order = [named[k] for k in sorted(named) if id(named[k]) in mine and named[k].requires_grad]

    def synchronize(self):
        pass  # the deltas are combined in step(), after the local step

    def step(self, closure=None):
        start = [p.detach().clone() for p in self._order]
        loss = super(self.__class__, self).step(closure)
        with self._ps.scope("DistributedOptimizer"), torch.no_grad():
            for p, s in zip(self._order, start):
                c, ctx = self._compression.compress(p - s)
                p.copy_(s + self._compression.decompress(adasum(c), ctx))
        return loss


def DistributedAdasumOptimizer(optimizer, named_parameters, compression, process_set):
    if named_parameters is not None:
        named_parameters = list(named_parameters)
        if len({k for k, _ in named_parameters}) != len(named_parameters):
            raise ValueError("DistributedOptimizer: parameter names are not unique")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedAdasumOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, process_set)
