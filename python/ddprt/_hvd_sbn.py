"""hvd.SyncBatchNorm (horovod.torch.SyncBatchNorm): batch normalisation whose training
statistics are those of the batch concatenated over all ranks.

torch's batch_norm_stats / _gather_stats_with_counts / _backward_reduce / _elemt, which
torch.nn.SyncBatchNorm and Horovod's call, have no CPU kernels in torch 1.13: the same
math here, in float64, rounded once into the input's dtype. Forward: one allgather of
every rank's (count, mean, M2) per channel, combined in rank order (Chan's formula: no
cancellation as with sums of squares; a rank with an empty batch drops out, as torch
masks it). Backward: one allreduce (Sum) of the two per-channel sums, sum(dy) and
sum(dy * (x - mean)); the weight and bias gradients stay this rank's own, as torch's and
Horovod's (the optimizer averages them with the other gradients)."""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ._core import Sum
from ._hvd_sets import resolve


def _flat(x):
    """(C, elements per channel) view of an (N, C, *) tensor, in float64."""
    return x.transpose(0, 1).reshape(x.shape[1], -1).double()


def _bcast(v, x):
    """A per-channel vector shaped to broadcast over (N, C, *)."""
    return v.view((1, -1) + (1,) * (x.dim() - 2))


def _stats(x, ps):
    """(mean, biased var, total count) over every rank's batch, float64."""
    xs = _flat(x)
    c = xs.shape[0]
    n = xs.shape[1]
    mean = xs.mean(1) if n else torch.zeros(c, dtype=torch.float64)
    m2 = ((xs - mean[:, None]) ** 2).sum(1) if n else torch.zeros(c, dtype=torch.float64)
    mine = torch.cat([torch.tensor([float(n)], dtype=torch.float64), mean, m2]).view(1, -1)
    every = ps._allgather(mine)
    tot = torch.zeros((), dtype=torch.float64)
    gmean = torch.zeros(c, dtype=torch.float64)
    gm2 = torch.zeros(c, dtype=torch.float64)
    for row in every:  # rank order: the same bits on every rank
        k = row[0]
        if k < 1:
            continue
        delta = row[1:1 + c] - gmean
        both = tot + k
        gmean = gmean + delta * (k / both)
        gm2 = gm2 + row[1 + c:] + delta * delta * (tot * k / both)
        tot = both
    if tot < 1:
        raise ValueError("ddprt.SyncBatchNorm: every rank's batch is empty")
    return gmean, gm2 / tot, int(tot)


class _SyncBN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, ps):
        x = x.contiguous()
        mean, var, total = _stats(x, ps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_((mean * momentum).to(running_mean.dtype))
                unbiased = var * total / (total - 1) if total > 1 else var
                running_var.mul_(1 - momentum).add_((unbiased * momentum).to(running_var.dtype))
        invstd = torch.rsqrt(var + eps)
        scale = invstd if weight is None else invstd * weight.detach().double()
        y = (x.double() - _bcast(mean, x)) * _bcast(scale, x)
        if bias is not None:
            y = y + _bcast(bias.detach().double(), x)
        ctx.save_for_backward(x, weight)
        ctx.mean, ctx.invstd, ctx.total, ctx.ps = mean, invstd, total, ps
        ctx.affine = (weight is not None, bias is not None)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        mean, invstd, total = ctx.mean, ctx.invstd, ctx.total
        d = _flat(dy.contiguous())
        xmu = _flat(x) - mean[:, None]
        local = torch.stack([d.sum(1), (d * xmu).sum(1)])  # (2, C)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            both = ctx.ps._allreduce_(local.clone(), Sum)
            sum_dy, sum_dy_xmu = both[0], both[1]
            w = invstd if weight is None else invstd * weight.detach().double()
            g = (d - (sum_dy / total)[:, None] - xmu * (invstd * invstd * sum_dy_xmu / total)[:, None]) * w[:, None]
            shp = (x.shape[1], x.shape[0]) + tuple(x.shape[2:])
            gx = g.view(shp).transpose(0, 1).to(x.dtype)
        if ctx.affine[0] and ctx.needs_input_grad[1]:
            gw = (local[1] * invstd).to(weight.dtype)
        if ctx.affine[1] and ctx.needs_input_grad[2]:
            gb = local[0].to(dy.dtype)
        return gx, gw, gb, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """horovod.torch.SyncBatchNorm: in training, the batch statistics of all ranks'
    batches together (uneven batch sizes counted as such); in eval, the running
    statistics (which every rank updated with the same global values). Inputs (N, C, *)
    on CPU. process_set: the ranks that normalise together (default: all)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("ddprt.SyncBatchNorm: expected at least 2D input (N, C, ...), got %dD" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if input.device.type != "cpu":
            raise ValueError("ddprt.SyncBatchNorm: the input is on %s; ddprt works on CPU tensors" % input.device)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average, as torch's
                factor = 1.0 / float(self.num_batches_tracked)
        training = self.training or (self.running_mean is None and self.running_var is None)
        if not training:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        ps = resolve(self.process_set)
        track = not self.training or self.track_running_stats
        return _SyncBN.apply(input, self.weight, self.bias, self.running_mean if track else None,
                             self.running_var if track else None, self.eps, factor, ps)
