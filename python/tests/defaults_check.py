"""One rank of the sum-or-average check (ddprt-launch, 2 or more ranks): the core calls
(ddprt.allreduce*, MPI's and NCCL's convention) sum by default; Horovod's calls
(ddprt.torch.allreduce*, as horovod.torch) average by default, and sum when asked
(op=Sum or average=False). Rank r gives r + 1 in every element, so the sum is
W (W + 1) / 2 and the average (W + 1) / 2, exact in float32.
Prints "rank R of W ok (sum N, average M[, no torch])"."""
import sys

import numpy as np

import ddprt

ddprt.init()
R, W = ddprt.rank(), ddprt.size()
assert W >= 2, "run under ddprt-launch with 2 or more ranks: at 1 the sum is the average"
SUM, AVG = W * (W + 1) / 2, (W + 1) / 2
n_sum = n_avg = 0


def same(got, want, what):
    got = np.asarray(got, dtype=np.float64)
    if not (got == want).all():
        raise AssertionError("rank %d: %s: got %s, want %s" % (R, what, got.reshape(-1)[:3], want))


def mine():
    return np.full(5, R + 1, dtype=np.float32)


# numpy, the core calls: Sum.
same(ddprt.allreduce(mine()), SUM, "ddprt.allreduce(x)")
same(ddprt.allreduce_(mine()), SUM, "ddprt.allreduce_(x)")
same(ddprt.allreduce_async(mine()).wait(), SUM, "ddprt.allreduce_async(x)")
same(ddprt.allreduce_async_(mine()).wait(), SUM, "ddprt.allreduce_async_(x)")
same(ddprt.allreduce(mine(), op=ddprt.Average), AVG, "ddprt.allreduce(x, op=Average)")
n_sum, n_avg = 4, 1
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    import ddprt.torch as hvd

    def t():
        return torch.full((5,), float(R + 1))

    # The core calls on tensors: still Sum.
    same(ddprt.allreduce(t()), SUM, "ddprt.allreduce(tensor)")
    # Horovod's: Average unless asked.
    same(hvd.allreduce(t()), AVG, "ddprt.torch.allreduce(tensor)")
    same(hvd.allreduce_(t()), AVG, "ddprt.torch.allreduce_(tensor)")
    same(hvd.synchronize(hvd.allreduce_async(t())), AVG, "ddprt.torch.allreduce_async(tensor)")
    same(hvd.synchronize(hvd.allreduce_async_(t())), AVG, "ddprt.torch.allreduce_async_(tensor)")
    same(hvd.allreduce(t(), op=hvd.Sum), SUM, "ddprt.torch.allreduce(tensor, op=Sum)")
    same(hvd.allreduce(t(), average=False), SUM, "ddprt.torch.allreduce(tensor, average=False)")
    same(hvd.allreduce(t(), op=hvd.Average), AVG, "ddprt.torch.allreduce(tensor, op=Average)")
    n_sum, n_avg = n_sum + 3, n_avg + 5
ddprt.barrier()
print("rank %d of %d ok (sum %d, average %d%s)" % (R, W, n_sum, n_avg, "" if torch is not None else ", no torch"))
sys.stdout.flush()
ddprt.finalize()
