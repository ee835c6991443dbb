"""One rank of the process-set check (ddprt-launch, 3 ranks): set [0, 1] added by
hvd.init(process_sets=), then hvd.add_process_set([0, 2]) on every rank; ranks 0 and 2 then run allreduce (Sum, Average, gradient), allgather,
broadcast (root_rank global), alltoall, reducescatter, grouped_allreduce, the object
calls, SyncBatchNorm, DistributedOptimizer and join (uneven batches) among themselves against numpy references over their own data,
while rank 1 runs none of it and is refused (a clear message) when it calls with the
set; a second set [1, 2] used right after by its members; an unregistered set and sets
asked differently by the ranks refused; the global communicator unharmed throughout;
remove_process_set. Prints "rank R of W sets ok (N checks)"."""
import sys

import numpy as np
import torch

import ddprt.torch as hvd

first = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[first])  # added at init, as Horovod's static sets
R, W = hvd.rank(), hvd.size()
assert W == 3, "run under ddprt-launch with 3 ranks"
checks = 0


def same(got, want, what):
    global checks
    checks += 1
    g = got.detach().numpy() if torch.is_tensor(got) else np.asarray(got)
    w = np.asarray(want)
    if g.shape != w.shape or not np.allclose(g, w, rtol=1e-6, atol=1e-6):
        raise AssertionError("rank %d: %s: got %s, want %s" % (R, what, g.reshape(-1)[:8], w.reshape(-1)[:8]))


def refused(fn, words, what):
    global checks
    checks += 1
    try:
        fn()
    except ValueError as e:
        for w in words:
            if w not in str(e):
                raise AssertionError("rank %d: %s: message %r lacks %r" % (R, what, str(e), w))
        return
    raise AssertionError("rank %d: %s: not refused" % (R, what))


def data(r, rows, cols=3):
    return np.random.default_rng(r).integers(-8, 9, (rows, cols)).astype(np.float32)


same(first.process_set_id, 1, "the set added at init")
if R in (0, 1):
    same(hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, process_set=first), [1.0], "init's set allreduce")
ps = hvd.add_process_set([2, 0])  # any order: kept sorted, as Horovod's
same(ps.process_set_id, 2, "id"), same(ps.ranks, [0, 2], "ranks"), same(ps.size(), 2, "size")
same(ps.rank(), {0: 0, 1: -1, 2: 1}[R], "rank in the set"), same(ps.included(), R != 1, "included")
members = [0, 2]
if R in members:
    same(hvd.allreduce(torch.tensor([float(R), 1.0]), op=hvd.Sum, process_set=ps), [2.0, 2.0], "allreduce Sum")
    same(hvd.allreduce(torch.tensor([float(R)]), process_set=ps), [1.0], "allreduce Average")
    x = torch.ones(4, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum, process_set=ps).sum().backward()
    same(x.grad, np.full(4, 2.0), "allreduce Sum gradient: the set's size")
    rows = {0: 1, 2: 3}
    y = hvd.allgather(torch.tensor(data(R, rows[R])), process_set=ps)
    same(y, np.concatenate([data(0, 1), data(2, 3)]), "allgather (uneven rows)")
    same(hvd.broadcast(torch.full((2,), float(R)), root_rank=2, process_set=ps), [2.0, 2.0], "broadcast root 2")
    t = torch.full((2,), float(R))
    hvd.broadcast_(t, root_rank=0, process_set=ps)
    same(t, [0.0, 0.0], "broadcast_ root 0")
    me = ps.rank()
    out = hvd.alltoall(torch.tensor([[10.0 * R + 0], [10.0 * R + 1]]), process_set=ps)
    same(out, [[0.0 + me], [20.0 + me]], "alltoall")
    rs = hvd.reducescatter(torch.arange(4, dtype=torch.float32) * (R + 1), op=hvd.Sum, process_set=ps)
    same(rs, (np.arange(4, dtype=np.float32) * 4)[2 * me:2 * me + 2], "reducescatter Sum")
    g = hvd.grouped_allreduce([torch.tensor([float(R)]), torch.tensor([2.0 * R])], op=hvd.Sum, process_set=ps)
    same(g[0], [2.0], "grouped_allreduce 0"), same(g[1], [4.0], "grouped_allreduce 1")
    same(hvd.allgather_object(R, process_set=ps), [0, 2], "allgather_object")
    same(hvd.broadcast_object("from %d" % R, root_rank=2, process_set=ps) == "from 2", True, "broadcast_object")
    h = hvd.allreduce_async(torch.tensor([float(R)]), op=hvd.Sum, process_set=ps)
    same(hvd.synchronize(h), [2.0], "allreduce_async")
    # SyncBatchNorm over the set: ranks 0 and 2's batches together.
    full = torch.tensor(np.concatenate([data(0, 2, 4), data(2, 5, 4)])).view(7, 2, 2)
    mine = full[:2] if R == 0 else full[2:]
    bn, ref = hvd.SyncBatchNorm(2, process_set=ps), torch.nn.BatchNorm1d(2)
    same(bn(mine), (ref(full)[:2] if R == 0 else ref(full)[2:]).detach(), "SyncBatchNorm over the set")
    same(bn.running_var, ref.running_var.detach(), "SyncBatchNorm running var over the set")
    # DistributedOptimizer over the set: the members' gradients averaged (rank 1 has none).
    def model():
        torch.manual_seed(5)
        return torch.nn.Linear(3, 2)

    def batch(r, step):
        return torch.tensor(data(10 * step + r, 4))

    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters(),
                                   process_set=ps)
    # The references step through SGD too: PyTorch's p + alpha g may be one fused multiply-add
    # (its vector kernel) or two roundings, and the weights grow to thousands here.
    refs = {r: model() for r in members}
    ref_opts = {r: torch.optim.SGD(refs[r].parameters(), lr=0.1) for r in members}
    for step in range(3):
        opt.zero_grad()
        net(batch(R, step)).pow(2).sum().backward()
        opt.step()
        for r in members:
            refs[r].zero_grad()
            refs[r](batch(r, step)).pow(2).sum().backward()
        with torch.no_grad():
            for name, p in net.named_parameters():
                g = sum(dict(refs[r].named_parameters())[name].grad for r in members) / 2
                for r in members:
                    dict(refs[r].named_parameters())[name].grad = g.clone()
        for r in members:
            ref_opts[r].step()
        for name, p in net.named_parameters():
            same(p, dict(refs[0].named_parameters())[name].detach(), "DistributedOptimizer over the set, step %d %s"
                 % (step, name))
    # join within the set: rank 0 has 1 batch, rank 2 has 3; Horovod's rule (the joined
    # rank gives zeros, Average divides by the set's size) on rank 2; both answer 2.
    net, ref = model(), model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.01), named_parameters=net.named_parameters(),
                                   process_set=ps)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    for step in range(1 if R == 0 else 3):
        opt.zero_grad()
        net(batch(R, step)).pow(2).sum().backward()
        opt.step()
    for step in range(3):
        gs = []
        for r in members if step == 0 else [2]:
            ref.zero_grad()
            ref(batch(r, step)).pow(2).sum().backward()
            gs.append([p.grad.clone() for p in ref.parameters()])
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in gs) / 2
        ref_opt.step()
    same(hvd.join(process_set=ps), 2, "join in the set answers the last rank (global rank 2)")
    if R == 2:
        for (name, p), q in zip(net.named_parameters(), ref.parameters()):
            same(p, q.detach(), "join in the set: rank 2's %s after Horovod's rule" % name)
else:
    refused(lambda: hvd.allreduce(torch.ones(2), process_set=ps), ["process set 2", "[0, 2]", "rank 1",
                                                                   "not in it"], "a non-member's allreduce")
    refused(lambda: hvd.allgather(torch.ones(2), process_set=ps), ["not in it"], "a non-member's allgather")
    refused(lambda: hvd.broadcast_(torch.ones(2), 0, process_set=ps), ["not in it"], "a non-member's broadcast")
    refused(lambda: hvd.DistributedOptimizer(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1),
                                             process_set=ps), ["not in it"], "a non-member's DistributedOptimizer")

# The global communicator is unharmed, and a second set works right after.
same(hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum), [3.0], "global allreduce after the set's calls")
ps2 = hvd.add_process_set(hvd.ProcessSet([1, 2]))
same(ps2.process_set_id, 3, "third id")
if R in (1, 2):
    same(hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, process_set=ps2), [3.0], "second set allreduce")
if R in members:
    same(hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, process_set=ps), [2.0], "first set still there")

if R == 1:
    refused(lambda: hvd.join(process_set=ps), ["join with process set", "not in it"], "a non-member's join")
refused(lambda: hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0, 1, 2])), ["not registered"],
        "an unregistered set")
refused(lambda: hvd.add_process_set([0, 1] if R != 2 else [0, 2]), ["different sets", "rank 0: [0, 1]",
                                                                    "rank 2: [0, 2]"], "sets asked differently")
refused(lambda: hvd.add_process_set([0, 2]), ["process set 2 already"], "the same ranks twice")

same(hvd.remove_process_set(ps), True, "remove")
same(hvd.remove_process_set(ps), False, "remove again")
same(hvd.remove_process_set(hvd.global_process_set), False, "remove the global set")
refused(lambda: hvd.allreduce(torch.ones(1), process_set=ps), ["not registered"], "a removed set")
same(hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, process_set=hvd.global_process_set), [3.0],
     "global_process_set")
print("rank %d of %d sets ok (%d checks)" % (R, W, checks))
sys.stdout.flush()
