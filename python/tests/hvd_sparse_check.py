"""One rank of the sparse allreduce check (ddprt-launch, 2 or 3 ranks):
  - hvd.sparse_allreduce_async on sparse COO tensors (hybrid (10, 3) with sparse_dim 1,
    and (6, 5) with sparse_dim 2), different numbers of nonzeros per rank, duplicate
    indices, one rank empty: equal, bitwise, to torch's coalesce of the ranks'
    concatenation (divided by the size for Average); Sum; integer Average truncates;
    a dense tensor and op Max refused; mismatched names refused naming each rank's call.
  - allgather_async with first dimensions differing between ranks (and equal ones).
  - DistributedOptimizer with nn.Embedding(sparse=True) and a Linear, each rank its own
    batch, rank 1 not using the embedding in two steps (its gradient None, then zero_()ed): the embedding's gradient is the
    sparse average (bitwise the local replay's), the Linear's the dense average, and the
    parameters after SGD equal the replay's (the embedding bitwise).
Prints "rank R of W sparse ok (N checks)"."""
import torch
import torch.nn as nn

import ddprt.torch as hvd

from hvd_rank import R, W, done, expect


def rank_sparse(r, shape, sparse_dim, dtype=torch.float32, empty_rank=-1):
    """Rank r's sparse tensor: 3 + 2r nonzeros (duplicates likely), none on empty_rank."""
    g = torch.Generator().manual_seed(10 + r)
    n = 0 if r == empty_rank else 3 + 2 * r
    idx = torch.stack([torch.randint(0, shape[d], (n,), generator=g) for d in range(sparse_dim)])
    val = torch.randn((n,) + tuple(shape[sparse_dim:]), generator=g)
    val = (val * 10).to(dtype) if not dtype.is_floating_point else val.to(dtype)
    return torch.sparse_coo_tensor(idx, val, shape)


def reference(ts, avg):
    cat = torch.sparse_coo_tensor(torch.cat([t._indices() for t in ts], 1), torch.cat([t._values() for t in ts]),
                                  ts[0].shape).coalesce()
    if not avg:
        return cat
    v = cat.values()
    v = v / W if v.dtype.is_floating_point else torch.div(v, W, rounding_mode="trunc")
    return torch.sparse_coo_tensor(cat.indices(), v, cat.shape).coalesce()


def same(a, b):
    return (a.is_sparse and a.is_coalesced() and a.shape == b.shape and a.dtype == b.dtype and
            torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values()))


for shape, sd in (((10, 3), 1), ((6, 5), 2)):
    for empty in (-1, 1):
        ts = [rank_sparse(r, shape, sd, empty_rank=empty) for r in range(W)]
        for op, avg in ((hvd.Average, True), (hvd.Sum, False)):
            out = hvd.synchronize(hvd.sparse_allreduce_async(ts[R], name="s", op=op))
            expect(same(out, reference(ts, avg)), "shape %s empty %d op %s: %s" % (shape, empty, op, out))
ts = [rank_sparse(r, (8, 2), 1, dtype=torch.int64) for r in range(W)]
out = hvd.synchronize(hvd.sparse_allreduce_async(ts[R], name="i", op=hvd.Average))
expect(same(out, reference(ts, True)), "int64 Average: %s" % out)
for bad, msg in ((lambda: hvd.sparse_allreduce_async(torch.ones(3), name="d", op=hvd.Average), "sparse COO"),
                 (lambda: hvd.sparse_allreduce_async(ts[R], name="m", op=hvd.Max), "op Sum or Average")):
    try:
        bad()
        expect(False, "not refused: " + msg)
    except ValueError as e:
        expect(msg in str(e), "message: %s" % e)
try:
    hvd.sparse_allreduce_async(ts[R], name="n%d" % R, op=hvd.Average)
    expect(False, "mismatched names paired")
except hvd.DdprtError as e:
    expect("rank 0: n0 [8, 2] int64 Average; rank 1: n1" in str(e), "message: %s" % e)

# allgather_async with first dimensions differing by rank (the sparse path's shape), as Horovod's.
got = hvd.synchronize(hvd.allgather_async(torch.full((R + 1, 2), float(R))))
expect(torch.equal(got, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(W)])), "uneven allgather_async: %s"
       % got)
got = hvd.synchronize(hvd.allgather_async(torch.full((2, 2), float(R))))
expect(torch.equal(got, torch.cat([torch.full((2, 2), float(r)) for r in range(W)])), "allgather_async: %s" % got)

# ---- DistributedOptimizer: Embedding(sparse=True) + Linear ----------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(12, 4, sparse=True)
        self.fc = nn.Linear(4, 1)

    def forward(self, ids, x, use_emb):
        h = self.emb(ids).sum(1) if use_emb else x
        return self.fc(h).sum()


def batch(r, k):
    g = torch.Generator().manual_seed(100 * r + k)
    return torch.randint(0, 12, (3, 2), generator=g), torch.randn(3, 4, generator=g), not (r == 1 and k in (1, 2))


net = Net()
opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters())
ref = Net()
for k in range(4):
    opt.zero_grad(set_to_none=(k == 1))  # rank 1's unused gradient: None at step 1, zero_()ed at 2
    net(*batch(R, k)).backward()
    opt.synchronize()
    # The replay: every rank's gradients, computed here on a copy, averaged.
    embs, fcs = [], []
    for r in range(W):
        ref.zero_grad(set_to_none=True)
        ref(*batch(r, k)).backward()
        g = ref.emb.weight.grad
        embs.append(g.clone() if g is not None else torch.sparse_coo_tensor(torch.empty(1, 0, dtype=torch.int64),
                                                                     torch.empty(0, 4), (12, 4)))
        fcs.append([p.grad.clone() for p in ref.fc.parameters()])
    want = reference(embs, True)
    got = net.emb.weight.grad
    expect(same(got, want), "step %d: embedding gradient %s, want %s" % (k, got, want))
    for i, p in enumerate(net.fc.parameters()):
        d = sum(f[i] for f in fcs) / W
        expect(torch.allclose(p.grad, d, rtol=1e-6, atol=1e-7), "step %d: fc gradient %s, want %s" % (k, p.grad, d))
    opt.step()
    with torch.no_grad():
        ref.emb.weight.add_(want.to_dense(), alpha=-0.1)
        for i, p in enumerate(ref.fc.parameters()):
            p.copy_(net.fc.state_dict()[["weight", "bias"][i]])  # the dense part is checked above
    expect(torch.equal(net.emb.weight, ref.emb.weight), "step %d: embedding weights differ from the replay" % k)
done("sparse")
