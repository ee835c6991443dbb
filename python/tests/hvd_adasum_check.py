"""One rank of the Adasum check (ddprt-launch, 2 or 3 ranks):
  - hvd.allreduce(op=hvd.Adasum) (and allreduce_, allreduce_async with pre/postscale)
    against a reference written here from the formula (float64, Horovod's pair tree),
    bitwise; equal vectors give themselves, orthogonal ones their sum;
  - refusals: an integer tensor, a tensor needing a gradient, other calls with Adasum;
  - DistributedOptimizer(op=Adasum) with SGD: each parameter is its start plus the
    Adasum of the ranks' local deltas (a replay here), bitwise.
Prints "rank R of W adasum ok (N checks)"."""
import torch

import ddprt.torch as hvd

from hvd_rank import R, W, done, expect


def ref(vs):
    """Horovod's tree: (0,1), (2,3), ... then their results; an odd one goes up as is."""
    vs = [v.double().reshape(-1) for v in vs]
    while len(vs) > 1:
        out = []
        for i in range(0, len(vs) - 1, 2):
            a, b = vs[i], vs[i + 1]
            d = torch.dot(a, b).item()
            na, nb = torch.dot(a, a).item(), torch.dot(b, b).item()
            out.append((1 - d / na / 2 if na >= 1e-8 else 1) * a + (1 - d / nb / 2 if nb >= 1e-8 else 1) * b)
        vs = out + ([vs[-1]] if len(vs) % 2 else [])
    return vs[0]


def mine(r, shape=(5, 3), dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(7 + r)).to(dtype)


for dtype in (torch.float32, torch.float64):
    t = mine(R, dtype=dtype)
    want = ref([mine(r, dtype=dtype) for r in range(W)]).to(dtype).view(5, 3)
    expect(torch.equal(hvd.allreduce(t, op=hvd.Adasum), want), "allreduce Adasum %s" % dtype)
    expect(torch.equal(t, mine(R, dtype=dtype)), "allreduce changed its input")
    x = t.clone()
    hvd.allreduce_(x, op=hvd.Adasum, name="x")
    expect(torch.equal(x, want), "allreduce_ Adasum")
    h = hvd.allreduce_async(t, op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.5)
    want2 = (ref([mine(r, dtype=dtype) * 2 for r in range(W)]).to(dtype).view(5, 3)) * 0.5
    expect(torch.equal(hvd.synchronize(h), want2), "allreduce_async Adasum with scale factors")
same = torch.arange(6.0)
expect(torch.equal(hvd.allreduce(same, op=hvd.Adasum), same), "Adasum of equal vectors")
orth = torch.zeros(W)
orth[R] = R + 1.0
expect(torch.equal(hvd.allreduce(orth, op=hvd.Adasum), torch.arange(1.0, W + 1)), "Adasum of orthogonal vectors")
for bad, msg in ((lambda: hvd.allreduce(torch.ones(3, dtype=torch.int64), op=hvd.Adasum), "floating-point"),
                 (lambda: hvd.allreduce(torch.ones(3, requires_grad=True), op=hvd.Adasum), "no gradient"),
                 (lambda: hvd.reducescatter(torch.ones(W), op=hvd.Adasum), "allreduce and DistributedOptimizer")):
    try:
        bad()
        expect(False, "not refused: " + msg)
    except ValueError as e:
        expect(msg in str(e), "message: %s" % e)


def model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


def batch(r, k):
    g = torch.Generator().manual_seed(50 * r + k)
    return torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)


net = model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=net.named_parameters(), op=hvd.Adasum)
replicas = [model() for _ in range(W)]  # every rank's model and optimizer, replayed here
ropts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in replicas]
for k in range(3):
    opt.zero_grad()
    x, y = batch(R, k)
    torch.nn.functional.mse_loss(net(x), y).backward()
    opt.step()
    starts = [[p.detach().clone() for p in replicas[0].parameters()]]
    deltas = []
    for r in range(W):
        ropts[r].zero_grad()
        x, y = batch(r, k)
        torch.nn.functional.mse_loss(replicas[r](x), y).backward()
        ropts[r].step()
        deltas.append([p.detach() - s for p, s in zip(replicas[r].parameters(), starts[0])])
    with torch.no_grad():
        for i, ps in enumerate(zip(*[m.parameters() for m in replicas])):
            new = starts[0][i] + ref([d[i] for d in deltas]).to(torch.float32).view(ps[0].shape)
            for p in ps:
                p.copy_(new)
    for (name, p), q in zip(net.named_parameters(), replicas[0].parameters()):
        expect(torch.equal(p, q), "step %d: %s differs from the replay by %g" % (k, name, (p - q).abs().max()))
done("adasum")
