"""One rank of the Horovod-collectives check (ddprt-launch, 2 or 3 ranks): alltoall
(splits), reducescatter (even and uneven rows, Sum and Average, scale factors), the
grouped calls (+ async, in place) against numpy references built from every rank's
data; gradients through allreduce, broadcast, allgather, alltoall and reducescatter
against Horovod's backward rules computed by hand; integer Average (truncated toward
zero, as Horovod's sum * (1 / size) stored into an integer); allreduces issued in
different orders or sizes refused on every rank, naming each rank's call; the queries;
the timeline. Prints "rank R of W hvd ok (N checks)" and, on rank 0, the gradient table."""
import json
import os
import sys

import numpy as np
import torch

import ddprt.torch as hvd

hvd.init()
R, W = hvd.rank(), hvd.size()
assert W >= 2, "run under ddprt-launch with 2 or more ranks"
checks = 0
table = []


def same(got, want, what, exact=True):
    global checks
    checks += 1
    g = got.detach().numpy() if torch.is_tensor(got) else np.asarray(got)
    w = np.asarray(want)
    ok = g.shape == w.shape and (np.array_equal(g, w) if exact else np.allclose(g, w, rtol=1e-6, atol=1e-6))
    if not ok:
        raise AssertionError("rank %d: %s: got %s %s, want %s %s" % (R, what, g.shape, g.reshape(-1)[:8], w.shape,
                                                                     w.reshape(-1)[:8]))


def data(r, rows, cols=3, seed=0):
    """Rank r's tensor: exact small values (sums in any order are exact)."""
    g = np.random.default_rng(seed * 97 + r)
    return g.integers(-8, 9, (rows, cols)).astype(np.float32)


# ---- autograd: Horovod's rules ----------------------------------------------------------------

# allreduce Sum: [1,1,1,1] -> the upstream ones summed over the ranks: [W]*4.
x = torch.ones(4, requires_grad=True)
hvd.allreduce(x, op=hvd.Sum).sum().backward()
same(x.grad, np.full(4, W, np.float32), "allreduce Sum grad")
table.append("allreduce Sum, upstream 1: grad %s (Horovod: [%d]*4)" % (x.grad.tolist(), W))
# allreduce Average with a rank-dependent upstream (r + 1): its average (W + 1) / 2, times
# the scale factors.
x = torch.ones(3, requires_grad=True)
(hvd.allreduce(x, prescale_factor=2.0, postscale_factor=0.5) * (R + 1)).sum().backward()
same(x.grad, np.full(3, (W + 1) / 2, np.float32), "allreduce Average grad with scales")
table.append("allreduce Average, upstream r+1: grad %s (Horovod: %g)" % (x.grad.tolist(), (W + 1) / 2))
# Max: the summed upstream on the rank holding the maximum, zero elsewhere.
x = torch.tensor([float(R), float(-R)], requires_grad=True)
(hvd.allreduce(x, op=hvd.Max) * (R + 1)).sum().backward()
tot = W * (W + 1) / 2
same(x.grad, np.array([tot if R == W - 1 else 0, tot if R == 0 else 0], np.float32), "allreduce Max grad")
# Min on integers with a prescale: the product truncated before the reduction.
same(hvd.allreduce(torch.tensor([3 + R, -3 - R]), op=hvd.Min, prescale_factor=0.5), np.array([1, -1 - W // 2]),
     "int64 Min with prescale 0.5")
# broadcast from the last rank: upstream r + 1 averaged onto the root, zero elsewhere.
root = W - 1
x = torch.full((2, 2), float(R), requires_grad=True)
y = hvd.broadcast(x, root)
same(y, np.full((2, 2), root, np.float32), "broadcast forward")
(y * (R + 1)).sum().backward()
same(x.grad, np.full((2, 2), (W + 1) / 2 if R == root else 0, np.float32), "broadcast grad")
table.append("broadcast root %d, upstream r+1: grad %g on rank %d (Horovod: %g on the root, 0 elsewhere)"
             % (root, x.grad[0, 0], R, (W + 1) / 2))
# allgather with rank r giving r + 1 rows: upstream position i weighted by (r + 1) * i;
# the average over the ranks is (W + 1) / 2 * i, and rank r takes its own rows.
rows = [r + 1 for r in range(W)]
x = torch.tensor(data(R, rows[R]), requires_grad=True)
y = hvd.allgather(x)
same(y, np.concatenate([data(r, rows[r]) for r in range(W)]), "allgather forward")
wt = torch.arange(y.numel(), dtype=torch.float32).view(y.shape)
(y * wt * (R + 1)).sum().backward()
off = sum(rows[:R])
want = (wt.numpy() * (W + 1) / 2)[off:off + rows[R]]
same(x.grad, want, "allgather grad")
table.append("allgather, upstream (r+1)*i: rank %d grad rows %s (Horovod: the average, rows %d..%d)"
             % (R, x.grad[:, 0].tolist(), off, off + rows[R] - 1))
# A scalar through allgather: its gradient keeps the scalar's shape.
x = torch.tensor(2.0, requires_grad=True)
hvd.allgather(x).sum().backward()
same(x.grad, np.float32(1.0), "allgather scalar grad")


# ---- alltoall -----------------------------------------------------------------------------

def splits_of(r):
    """Rank r sends (r + q) % 3 rows to rank q."""
    return [(r + q) % 3 for q in range(W)]


def a2a_ref(me):
    """What rank me receives: every rank's rows for it, in rank order."""
    parts = []
    for r in range(W):
        d, sp = data(r, sum(splits_of(r)), seed=5), splits_of(r)
        parts.append(d[sum(sp[:me]):sum(sp[:me + 1])])
    return np.concatenate(parts)


x = torch.tensor(data(R, sum(splits_of(R)), seed=5), requires_grad=True)
out, got = hvd.alltoall(x, splits=torch.tensor(splits_of(R), dtype=torch.int32))
same(out, a2a_ref(R), "alltoall forward")
same(got, np.array([splits_of(r)[R] for r in range(W)], np.int32), "alltoall received splits")
# Backward: the upstream (this rank's weights (R + 1) * position) sent back: rank r's
# row for q gets q's weight at the row's place in q's output.
wts = [np.arange(a2a_ref(q).size, dtype=np.float32).reshape(a2a_ref(q).shape) * (q + 1) for q in range(W)]
(out * torch.tensor(wts[R])).sum().backward()
sp, back = splits_of(R), []
for q in range(W):
    at = sum(splits_of(r)[q] for r in range(R))  # where my rows sit in q's output
    back.append(wts[q][at:at + sp[q]])
same(x.grad, np.concatenate(back), "alltoall grad")
# Equal splits by default; async form gives (output, received splits).
x = torch.tensor(data(R, 2 * W, seed=6))
out = hvd.alltoall(x)
same(out, np.concatenate([data(r, 2 * W, seed=6)[2 * R:2 * R + 2] for r in range(W)]), "alltoall equal splits")
o2, s2 = hvd.synchronize(hvd.alltoall_async(x))
same(o2, out.numpy(), "alltoall_async")
same(s2, np.full(W, 2, np.int32), "alltoall_async splits")

# ---- reducescatter ------------------------------------------------------------------------


def rs_rows(d0):
    return [d0 // W + (1 if r < d0 % W else 0) for r in range(W)]


for d0 in (2 * W, 2 * W + 1):  # even, then uneven (the first ranks one row more)
    every = [data(r, d0, seed=7) for r in range(W)]
    tot = np.sum(every, axis=0)
    rr = rs_rows(d0)
    mine = slice(sum(rr[:R]), sum(rr[:R + 1]))
    same(hvd.reducescatter(torch.tensor(every[R]), op=hvd.Sum), tot[mine], "reducescatter Sum rows %d" % d0)
    same(hvd.reducescatter(torch.tensor(every[R])), (tot / np.float32(W)).astype(np.float32)[mine],
         "reducescatter Average rows %d" % d0)
    same(hvd.reducescatter(torch.tensor(every[R]), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25),
         (tot * 2 * 0.25)[mine], "reducescatter scaled rows %d" % d0)
    h = hvd.reducescatter_async(torch.tensor(every[R]), op=hvd.Sum)
    same(hvd.synchronize(h), tot[mine], "reducescatter_async rows %d" % d0)
    # Backward (Horovod): the upstream times size for Sum, allgathered.
    x = torch.tensor(every[R], requires_grad=True)
    y = hvd.reducescatter(x, op=hvd.Sum)
    (y * (R + 1)).sum().backward()
    same(x.grad, np.concatenate([np.full((rr[r], 3), (r + 1) * W, np.float32) for r in range(W)]),
         "reducescatter Sum grad rows %d" % d0)
    if d0 % W:
        table.append("reducescatter Sum, %d rows, upstream r+1: rank %d grad %s (Horovod: (r+1)*size on rank r's rows)"
                     % (d0, R, x.grad[:, 0].tolist()))
    x = torch.tensor(every[R], requires_grad=True)
    (hvd.reducescatter(x) * (R + 1)).sum().backward()
    same(x.grad, np.concatenate([np.full((rr[r], 3), r + 1, np.float32) for r in range(W)]),
         "reducescatter Average grad rows %d" % d0)
# ---- grouped calls ------------------------------------------------------------------------
ts = [torch.tensor(data(R, k + 1, seed=8 + k)) for k in range(3)]
sums = [np.sum([data(r, k + 1, seed=8 + k) for r in range(W)], axis=0) for k in range(3)]
for k, o in enumerate(hvd.grouped_allreduce(ts, op=hvd.Sum)):
    same(o, sums[k], "grouped_allreduce %d" % k)
for k, o in enumerate(hvd.synchronize(hvd.grouped_allreduce_async(ts, op=hvd.Sum))):
    same(o, sums[k], "grouped_allreduce_async %d" % k)
cp = [t.clone() for t in ts]
hvd.grouped_allreduce_(cp, op=hvd.Sum)
for k in range(3):
    same(cp[k], sums[k], "grouped_allreduce_ %d" % k)
cp = [t.clone() for t in ts]
hvd.synchronize(hvd.grouped_allreduce_async_(cp, op=hvd.Sum))
for k in range(3):
    same(cp[k], sums[k], "grouped_allreduce_async_ %d" % k)
g = [torch.tensor(data(R, R + 1 + k, seed=9)) for k in range(2)]
for k, o in enumerate(hvd.grouped_allgather(g)):
    same(o, np.concatenate([data(r, r + 1 + k, seed=9) for r in range(W)]), "grouped_allgather %d" % k)
for k, o in enumerate(hvd.synchronize(hvd.grouped_allgather_async(g))):
    same(o, np.concatenate([data(r, r + 1 + k, seed=9) for r in range(W)]), "grouped_allgather_async %d" % k)
rs = [torch.tensor(data(R, W + k, seed=10 + k)) for k in range(2)]
for k, o in enumerate(hvd.grouped_reducescatter(rs, op=hvd.Sum)):
    tot, rr = np.sum([data(r, W + k, seed=10 + k) for r in range(W)], axis=0), rs_rows(W + k)
    same(o, tot[sum(rr[:R]):sum(rr[:R + 1])], "grouped_reducescatter %d" % k)
    same(hvd.synchronize(hvd.grouped_reducescatter_async(rs, op=hvd.Sum))[k], o.numpy(),
         "grouped_reducescatter_async %d" % k)
x = [torch.ones(2, requires_grad=True) for _ in range(2)]
sum(o.sum() for o in hvd.grouped_allreduce(x, op=hvd.Sum)).backward()
same(x[1].grad, np.full(2, W, np.float32), "grouped_allreduce grad")

# ---- integer Average: sum * (1 / size), truncated toward zero -----------------------------
vals = [np.array([2 + r, 4 + 2 * r, -5 - r, 7 * r], np.int64) for r in range(W)]
s = np.sum(vals, axis=0)
same(hvd.allreduce(torch.tensor(vals[R])), (np.sign(s) * (np.abs(s) // W)).astype(np.int64), "int64 Average")
if W == 2:
    same(hvd.allreduce(torch.tensor([2 + R, 4 + 2 * R], dtype=torch.int32)), np.array([2, 5], np.int32),
         "int32 Average [2.5, 5] -> [2, 5]")
same(hvd.allreduce(torch.tensor(vals[R]), op=hvd.Sum, postscale_factor=0.5),
     np.trunc(s * 0.5).astype(np.int64), "int64 postscale truncated")

# ---- raw allreduces issued in different orders: refused on every rank, naming each call -----
def refused(calls, want):
    global checks
    try:
        for c in calls:
            c()
    except hvd.DdprtError as e:
        checks += 1
        for w in want:
            if w not in str(e):
                raise AssertionError("rank %d: %r not in: %s" % (R, w, e))
        return
    raise AssertionError("rank %d: mispaired calls %s were not refused" % (R, want))


a, b = (lambda: hvd.allreduce(torch.ones(4), name="loss")), (lambda: hvd.allreduce(torch.ones(4), name="acc"))
refused([a, b] if R == 0 else [b, a], ["rank 0: loss [4] float32 Average", "rank 1: acc [4] float32 Average"])
refused([lambda: hvd.allreduce_(torch.ones(3 + (R == 1), dtype=torch.float64), op=hvd.Sum)],
        ["rank 0: (unnamed) [3] float64 Sum", "rank 1: (unnamed) [4] float64 Sum"])
refused([lambda: hvd.synchronize(hvd.allreduce_async(torch.ones(2), op=hvd.Max if R else hvd.Min))],
        ["rank 0: (unnamed) [2] float32 Min", "rank 1: (unnamed) [2] float32 Max"])
same(hvd.allreduce(torch.ones(2), op=hvd.Sum), np.full(2, W, np.float32), "allreduce after a refused pairing")

# Shapes that differ beyond the first dimension: every rank raises the same line (the lower
# rank first), so the ranks' logs agree on who had which shape.
for what, call in (("allgather", lambda: hvd.allgather(torch.ones(2, 3 + R))),
                   ("alltoall", lambda: hvd.alltoall(torch.ones(W, 3 + R)))):
    try:
        call()
        raise AssertionError("rank %d: %s of differing shapes was accepted" % (R, what))
    except ValueError as e:
        lines = hvd.allgather_object(str(e))
    checks += 1
    if len(set(lines)) != 1 or "rank 0's" not in lines[0] or lines[0].index("rank 0's") > lines[0].index("rank 1's"):
        raise AssertionError("rank %d: %s: the ranks' lines differ or are not in rank order: %s" % (R, what, lines))

# ---- queries, timeline ----------------------------------------------------------------------
same(np.array([hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()]), np.array([0, 1, True]),
     "cross_rank, cross_size, is_homogeneous on one host")
same(np.array([hvd.nccl_built(), hvd.mpi_built(), hvd.gloo_built(), hvd.mpi_enabled(), hvd.gloo_enabled(),
               hvd.cuda_built(), hvd.rocm_built(), hvd.ddl_built(), hvd.ccl_built()]), np.zeros(9, bool),
     "the *_built / *_enabled queries")
path = os.path.join(os.environ.get("DDPRT_TRACE_DIR", "/tmp"), "hvd_timeline_%d.json" % W)
hvd.start_timeline(path)
hvd.allreduce(torch.ones(10))
hvd.synchronize(hvd.allreduce_async(torch.ones(10)))
hvd.alltoall(torch.ones(W))
hvd.stop_timeline()
hvd.barrier()
if R == 0:
    ev = json.load(open(path))["traceEvents"]
    names = [e["name"] for e in ev]
    same(np.array([names.count("allreduce"), names.count("alltoall"), all(e["dur"] >= 0 for e in ev)]),
         np.array([2, 1, 1]), "timeline events")
    for line in table:
        print("grad: " + line)
print("rank %d of %d hvd ok (%d checks)" % (R, W, checks))
sys.stdout.flush()
