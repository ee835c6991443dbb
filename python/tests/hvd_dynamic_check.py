"""One rank of the dynamic-graph probe (ddprt-launch, 2 or 3 ranks): ranks use
different parameters, in different orders, in one step (a branch taken on one rank
only, layers applied in another order, a layer left out), with equal-sized layers so
that a wrong pairing would go unnoticed. Horovod pairs gradients by name and counts a
missing one as zeros; ddprt.torch.DistributedOptimizer must give the same averages:
each reduced gradient must equal, bitwise, the exact average (every rank's local
gradient, zeros where unused, summed in rank order, divided by the size). Rank 0's
order changes between steps, so the agreed order is renegotiated.
Prints "rank R of W dynamic ok (max diff D, reagreed N)"; with --report, the max
difference only, without failing (to measure another version)."""
import sys

import numpy as np
import torch
import torch.nn as nn

import ddprt
import ddprt.torch as hvd

hvd.init()
R, W = hvd.rank(), hvd.size()
report = "--report" in sys.argv
torch.manual_seed(0)
torch.set_num_threads(1)
layers = nn.ModuleDict({k: nn.Linear(4, 4) for k in "abc"})
head = nn.Linear(4, 1)
params = list(layers.named_parameters()) + [("head." + n, p) for n, p in head.named_parameters()]
opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=0.05), named_parameters=params)


def route(k):
    """The layers rank R applies at step k."""
    if R == 0:
        return "ab" if k % 3 else "ba"  # rank 0's order changes: a new agreed order
    if R == 1:
        return "bac"
    return "c"


worst = 0.0
for k in range(6):
    g = torch.Generator().manual_seed(10 * k + R)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
    h = x
    for name in route(k):
        h = torch.tanh(layers[name](h))
    loss = ((head(h) - y) ** 2).mean()
    local = torch.autograd.grad(loss, [p for _, p in params], retain_graph=True, allow_unused=True)
    local = [torch.zeros_like(p) if gr is None else gr for gr, (_, p) in zip(local, params)]
    opt.zero_grad()
    loss.backward()
    opt.synchronize()
    # The exact average: every rank's local gradients, in rank order.
    flat = torch.cat([gr.reshape(-1) for gr in local])
    every = ddprt.allgather(flat.numpy().reshape(1, -1))
    acc = every[0].copy()
    for r in range(1, W):
        acc = (acc + every[r]).astype(np.float32)
    exact = (acc / np.float32(W)).astype(np.float32)
    got = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for _, p in params]).numpy()
    d = float(np.abs(got - exact).max())
    worst = max(worst, d)
    if not report and not np.array_equal(got, exact):
        at = int(np.abs(got - exact).argmax())
        raise AssertionError("rank %d step %d: reduced gradients differ from the exact average by %g (element %d: "
                             "%g vs %g)" % (R, k, d, at, got[at], exact[at]))
    opt.step()
n = getattr(opt, "reagreed", -1)
if not report and n < 1:
    raise AssertionError("rank %d: rank 0's order changed but the ranks never took it" % R)
print("rank %d of %d dynamic ok (max diff %g, reagreed %d)" % (R, W, worst, n))
sys.stdout.flush()
