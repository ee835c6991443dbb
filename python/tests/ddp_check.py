"""2 ranks (torchrun or ddprt-launch): one script calls torch.distributed's
init_process_group("gloo") and ddprt.init() on the same environment, then trains three
copies of one model for 20 steps from the same seeds:
  - DDP on gloo (no hook),
  - DDP with ddprt.torch.allreduce_hook,
  - the model with ddprt.torch.DistributedOptimizer (the Horovod API).
The parameters must be bitwise equal across the three (2 ranks: a + b is the same float
whichever way round, and x/2 is exact), the losses too. The fp16/bf16 hooks train the
same model close to float32. Overlap: in some step, a bucket's future completes before
backward reaches the last bucket. Early start (HookState(model)): a fourth copy, with
two passes of gradient accumulation under no_sync() beside gloo's, bitwise equal to
gloo's, some pieces sent before DDP handed their bucket over; the fp16 hook early
equals the fp16 hook whole. Prints "rank R ok (...)"."""
import copy
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddprt
import ddprt.torch as hvd

STEPS = 20
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, padding=1)
        self.f1 = nn.Linear(32 * 8 * 8, 128)
        self.f2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.relu(self.c3(x))
        return F.log_softmax(self.f2(F.relu(self.f1(x.flatten(1)))), dim=1)


def batches(rank):
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(16, 3, 16, 16, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(STEPS)]


def train(model, opt, data, record=None, accumulate=()):
    """accumulate: steps whose gradients are only accumulated (DDP's no_sync())."""
    losses = []
    for s, (x, y) in enumerate(data):
        if s - 1 not in accumulate:
            opt.zero_grad()
        if s in accumulate:
            with model.no_sync():
                loss = F.nll_loss(model(x), y)
                loss.backward()
            losses.append(loss.item())
            continue
        loss = F.nll_loss(model(x), y)
        loss.backward()
        if record is not None:
            record["backward_end"].append(time.perf_counter())
        opt.step()
        losses.append(loss.item())
    return losses


def params(model):
    m = model.module if hasattr(model, "module") else model
    return [p.detach().clone() for p in m.parameters()]


def main():
    dist.init_process_group("gloo")
    ddprt.init()
    r, w = dist.get_rank(), dist.get_world_size()
    assert (ddprt.rank(), ddprt.size()) == (r, w), (ddprt.rank(), ddprt.size(), r, w)
    torch.manual_seed(0)
    base = Net()
    data = batches(r)
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

    g = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    lg = train(g, sgd(g), data)

    d = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    rec = {"calls": [], "done": [], "backward_end": []}

    def timed_hook(state, bucket):
        rec["calls"].append((bucket.index(), time.perf_counter()))
        fut = ddprt.torch.allreduce_hook(state, bucket)
        fut.add_done_callback(lambda f: rec["done"].append((bucket.index(), time.perf_counter())))
        return fut

    state = hvd.HookState()
    d.register_comm_hook(state, timed_hook)
    ld = train(d, sgd(d), data, rec)

    h = copy.deepcopy(base)
    hvd.broadcast_parameters(h.state_dict(), root_rank=0)
    ho = hvd.DistributedOptimizer(sgd(h), named_parameters=h.named_parameters())
    hvd.broadcast_optimizer_state(ho, root_rank=0)
    lh = train(h, ho, data)

    pg, pd, ph = params(g), params(d), params(h)
    bad = [i for i, (a, b) in enumerate(zip(pg, pd)) if not torch.equal(a, b)]
    assert not bad, "rank %d: hook vs gloo: parameters %s differ (max %g)" % (
        r, bad, max((pg[i] - pd[i]).abs().max().item() for i in bad))
    assert lg == ld, "rank %d: losses differ: gloo %s hook %s" % (r, lg[-3:], ld[-3:])
    bad = [i for i, (a, b) in enumerate(zip(pd, ph)) if not torch.equal(a, b)]
    assert not bad and ld == lh, "rank %d: Horovod API vs hook: parameters %s differ, losses %s vs %s" % (
        r, bad, lh[-3:], ld[-3:])
    assert state.staged > 0, "rank %d: no bucket went through the registered staging (%d direct)" % (r, state.direct)

    # Early start, beside gloo with the same accumulation steps.
    acc = {6, 7, 12}
    g2 = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    lg2 = train(g2, sgd(g2), data, accumulate=acc)
    e = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
    es = hvd.HookState(e, piece_bytes=4096)
    e.register_comm_hook(es, hvd.allreduce_hook)
    le = train(e, sgd(e), data, accumulate=acc)
    pg2, pe = params(g2), params(e)
    bad = [i for i, (a, b) in enumerate(zip(pg2, pe)) if not torch.equal(a, b)]
    assert not bad and lg2 == le, "rank %d: early start vs gloo: parameters %s differ, losses %s vs %s" % (
        r, bad, le[-3:], lg2[-3:])
    assert es.plan is not None and es.early > 0 and es.ahead > 0, \
        "rank %d: early start never ran (plan %s, %d buckets, %d pieces ahead)" % (r, es.plan, es.early, es.ahead)

    # Overlap: a bucket's allreduce finished while backward still ran (before the last
    # bucket of that pass was handed to the hook), in at least one step.
    nb = max(i for i, _ in rec["calls"]) + 1
    overlapped = 0
    for s in range(STEPS):
        calls = rec["calls"][s * nb:(s + 1) * nb]
        dones = rec["done"][s * nb:(s + 1) * nb]
        if dones and calls and min(t for _, t in dones) < max(t for _, t in calls):
            overlapped += 1
    assert nb > 2 and overlapped > 0, "rank %d: %d buckets, no future completed during backward" % (r, nb)

    # The compressed hooks against the float32 hook, 5 steps: close, not equal.
    comp = {}
    ref = None
    for name, hook in (("fp32", hvd.allreduce_hook), ("fp16", hvd.fp16_compress_hook),
                       ("bf16", hvd.bf16_compress_hook)):
        m = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
        m.register_comm_hook(hvd.HookState(), hook)
        train(m, sgd(m), data[:5])
        if ref is None:
            ref = params(m)
            continue
        err = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(params(m), ref))
        assert err < 5e-2, "rank %d: %s hook: relative parameter error %g" % (r, name, err)
        comp[name] = err
    # The fp16 hook early equals it whole (8 steps: the pieces start at the 4th).
    fp = []
    for st in (lambda m: hvd.HookState(), lambda m: hvd.HookState(m, piece_bytes=4096)):
        m = DDP(copy.deepcopy(base), bucket_cap_mb=0.05)
        m.register_comm_hook(st(m), hvd.fp16_compress_hook)
        train(m, sgd(m), data[:8])
        fp.append(params(m))
    assert all(torch.equal(a, b) for a, b in zip(*fp)), "rank %d: fp16 hook early differs from whole" % r
    print("rank %d ok (%d steps bitwise equal: gloo, hook, Horovod API, early start (%d pieces ahead); %d buckets, "
          "overlap in %d steps; fp16 err %.1e, bf16 err %.1e)" % (r, STEPS, es.ahead, nb, overlapped, comp["fp16"],
                                                                 comp["bf16"]))
    sys.stdout.flush()
    dist.destroy_process_group()
    ddprt.finalize()


if __name__ == "__main__":
    main()
