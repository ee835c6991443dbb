"""One rank of the DDP-hook order check (ddprt-launch, 2 or 3 ranks). The hooks are
called as DDP calls them, with stand-in buckets (index(), buffer()), so that the order
can be chosen per rank: the same order gives the averages (through the direct path,
then the learned staging, and the fp16 hook); two buckets of equal size issued in
swapped orders on rank 1 fail on every rank with a message naming each rank's bucket
index and size, and the communicator stays usable; buckets of different sizes fail
naming this rank's bucket and ddprt's mismatch line. Prints "rank R of W order ok"."""
import sys

import torch

import ddprt.torch as dt

dt.init()
R, W = dt.rank(), dt.size()
assert W >= 2, "run under ddprt-launch with 2 or more ranks"
checks = 0


class Bucket:
    """What the hooks read of torch's GradBucket."""

    def __init__(self, index, buf):
        self._i, self._b = index, buf

    def index(self):
        return self._i

    def buffer(self):
        return self._b


def grads(r, n, k):
    """Rank r's bucket k: exact small values (any summation order gives the same)."""
    return (torch.arange(n, dtype=torch.float32) % 7 + 1) * (k + 1) * (r + 1)


def average(n, k):
    return sum(grads(r, n, k) for r in range(W)) / W


def run(state, hook, order, n):
    """Hooks in `order`, then every future: results by bucket index, or the errors."""
    futs = {k: hook(state, Bucket(k, grads(R, n[k], k))) for k in order}
    out, errs = {}, []
    for k in sorted(futs):
        try:
            out[k] = futs[k].wait()
        except Exception as e:  # noqa: BLE001: the futures carry ddprt's errors
            errs.append(str(e))
    return out, errs


def ok(cond, what):
    global checks
    checks += 1
    if not cond:
        raise AssertionError("rank %d: %s" % (R, what))


# Same order: the averages, direct for two passes, then through the learned staging.
st = dt.HookState()
for p in range(4):
    out, errs = run(st, dt.allreduce_hook, [0, 1], {0: 1000, 1: 300})
    ok(not errs, "same order failed: %s" % errs)
    for k, n in ((0, 1000), (1, 300)):
        ok(torch.equal(out[k], average(n, k)), "pass %d bucket %d: not the average" % (p, k))
ok(st.staged > 0 and st.direct > 0, "staged %d direct %d: both paths should have run" % (st.staged, st.direct))
out, errs = run(dt.HookState(), dt.fp16_compress_hook, [0, 1], {0: 500, 1: 500})
ok(not errs and torch.equal(out[1], average(500, 1)), "fp16 hook, same order: %s" % errs)

# Swapped on rank 1, equal sizes: every rank's two futures fail, naming both buckets.
for hook in (dt.allreduce_hook, dt.bf16_compress_hook):
    order = [1, 0] if R == 1 else [0, 1]
    out, errs = run(dt.HookState(), hook, order, {0: 1000, 1: 1000})
    ok(len(errs) == 2 and not out, "%s swapped: %d errors, %d results" % (hook.__name__, len(errs), len(out)))
    first = [e for e in errs if "rank 0: bucket 0 (1000 elements)" in e]
    ok(first and "rank 1: bucket 1 (1000 elements)" in first[0] and "do not pair" in first[0],
       "%s swapped: the message should name both ranks' buckets: %s" % (hook.__name__, errs))
    if W > 2:
        ok("rank 2: bucket 0 (1000 elements)" in first[0], "the third rank's bucket: %s" % first[0])
# The communicator is still usable.
ok(float(dt.allreduce(torch.tensor([1.0]), op=dt.Sum)) == W, "allreduce after the swapped buckets")

# Different sizes (the last case: ddprt's own check fails the communicator).
out, errs = run(dt.HookState(), dt.allreduce_hook, [0], {0: 1000 + 100 * R})
ok(len(errs) == 1 and "bucket 0 (%d elements) on rank %d" % (1000 + 100 * R, R) in errs[0] and "mismatch" in errs[0],
   "different sizes: %s" % errs)
if R == 0:
    print("swapped buckets, as rank 0 saw them: " + first[0])
    print("different sizes, as rank 0 saw them: " + errs[0])
print("rank %d of %d order ok (%d checks)" % (R, W, checks))
sys.stdout.flush()
