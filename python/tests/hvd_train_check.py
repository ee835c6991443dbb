"""One rank of the Horovod-optimizer check (ddprt-launch, 2 or 3 ranks):
  - join: rank r has r + 2 batches; each calls hvd.join() after its last. No hang; the
    last rank's parameters equal a local replay of Horovod's rule (a joined rank gives
    zeros, Average still divides by size); join() answers the last rank everywhere;
    then a second epoch with join again (the state resets).
  - broadcast_optimizer_state on a fresh Adam: the state made (zero moments, step 1,
    as Horovod's) and rank 0's hyper-parameters everywhere.
  - sparse_as_dense: an Embedding(sparse=True) reduced densely; without it, by the
    sparse allreduce (a coalesced sparse average).
  - num_groups / groups: the same gradients as without (Horovod groups only batch).
Prints "rank R of W train ok (N checks)"."""
import sys

import torch
import torch.nn as nn

import ddprt.torch as hvd

from hvd_rank import R, W, done, expect


def batch(r, k):
    g = torch.Generator().manual_seed(100 * r + k)
    return torch.randn(4, 5, generator=g), torch.randn(4, 2, generator=g)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 3), nn.Tanh(), nn.Linear(3, 2))


def loss_of(m, r, k):
    x, y = batch(r, k)
    return ((m(x) - y) ** 2).mean()


# ---- join -------------------------------------------------------------------------------------
def replay(nb, lr):
    """Horovod's rule, replayed here: each step, the ranks still training give their
    gradients, joined ranks zeros, summed in rank order and divided by W."""
    m = model()
    for k in range(max(nb)):
        grads = []
        for r in range(W):
            m.zero_grad()
            if k < nb[r]:
                loss_of(m, r, k).backward()
                grads.append([p.grad.clone() for p in m.parameters()])
            else:
                grads.append([torch.zeros_like(p) for p in m.parameters()])
        with torch.no_grad():
            for i, p in enumerate(m.parameters()):
                acc = grads[0][i].clone()
                for r in range(1, W):
                    acc += grads[r][i]
                p -= lr * (acc / W)
    return m


nb = [r + 2 for r in range(W)]
for epoch in range(2):
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters())
    for k in range(nb[R]):
        opt.zero_grad()
        loss_of(m, R, k).backward()
        opt.step()
    last = hvd.join()
    expect(last == W - 1, "epoch %d: join() answered %d, want %d" % (epoch, last, W - 1))
    if R == W - 1:
        ref = replay(nb, 0.1)
        for (n, p), q in zip(m.named_parameters(), ref.parameters()):
            d = (p - q).abs().max().item()
            expect(d <= 1e-6, "epoch %d: %s differs from Horovod's rule by %g" % (epoch, n, d))
            if epoch == 0:
                print("join: %s max |ddprt - replay| = %g" % (n, d))

# ---- broadcast_optimizer_state on a fresh Adam ---------------------------------------------------
m = model()
adam = torch.optim.Adam(m.parameters(), lr=0.01 * (R + 1))
opt = hvd.DistributedOptimizer(adam, named_parameters=m.named_parameters())
before = [p.detach().clone() for p in m.parameters()]
hvd.broadcast_optimizer_state(opt, root_rank=0)
st = opt.state_dict()
expect(len(st["state"]) == len(before), "fresh Adam: %d states after the broadcast, want %d"
       % (len(st["state"]), len(before)))
for s in st["state"].values():
    expect(float(s["step"]) == 1.0 and s["exp_avg"].abs().max().item() == 0.0
           and s["exp_avg_sq"].abs().max().item() == 0.0, "fresh Adam: state %s" % s)
expect(st["param_groups"][0]["lr"] == 0.01, "lr from rank 0: %s" % st["param_groups"][0]["lr"])
expect(all(torch.equal(a, p) for a, p in zip(before, m.parameters())), "zero-gradient step moved parameters")

# ---- sparse_as_dense -------------------------------------------------------------------------------
emb = nn.Embedding(6, 2, sparse=True)
with torch.no_grad():
    emb.weight.copy_(torch.arange(12.0).view(6, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0), named_parameters=emb.named_parameters(),
                               sparse_as_dense=True)
emb(torch.tensor([R % 6])).sum().backward()
opt.synchronize()
want = torch.zeros(6, 2)
for r in range(W):
    want[r % 6] += 1.0 / W
expect(torch.equal(opt.param_groups[0]["params"][0].grad, want), "sparse_as_dense: %s" % emb.weight.grad)
opt.step()
emb2 = nn.Embedding(6, 2, sparse=True)
opt = hvd.DistributedOptimizer(torch.optim.SGD(emb2.parameters(), lr=1.0), named_parameters=[("emb2.w", emb2.weight)])
emb2(torch.tensor([R % 6])).sum().backward()
opt.synchronize()  # without sparse_as_dense: the sparse path (hvd_sparse_check.py checks it in depth)
g2 = emb2.weight.grad
expect(g2.is_sparse and g2.is_coalesced() and torch.equal(g2.to_dense(), want), "sparse path: %s" % g2)
opt.step()

# ---- num_groups / groups -------------------------------------------------------------------------
grads = []
for kw in ({}, {"num_groups": 2}, {"groups": 1}):
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                   **kw)
    loss_of(m, R, 0).backward()
    opt.synchronize()
    grads.append([p.grad.clone() for p in m.parameters()])
    opt.step()
for k in (1, 2):
    expect(all(torch.equal(a, b) for a, b in zip(grads[0], grads[k])), "groups case %d differs" % k)
try:
    hvd.DistributedOptimizer(torch.optim.SGD(model().parameters(), lr=0.1), groups=-1)
    expect(False, "groups=-1 accepted")
except ValueError as e:
    expect("groups" in str(e), "message: %s" % e)

done("train")
sys.stdout.flush()
