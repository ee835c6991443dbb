"""One rank of the SyncBatchNorm check (ddprt-launch, 2 or 3 ranks): hvd.SyncBatchNorm on
this rank's slice of a batch (uneven: rank r has r + 2 rows, one case an empty rank)
against torch's batch norm of the whole batch in one process (torch.nn.SyncBatchNorm's
math on the concatenated batch): the forward output, the input gradient, the weight and
bias gradients summed over the ranks, the running statistics after several steps, and
eval mode's output; all within 1e-6 (relative above 1). Prints "rank R of W sbn ok (N checks)" and, on rank
0, the largest differences."""
import sys

import torch

import ddprt.torch as hvd

hvd.init()
R, W = hvd.rank(), hvd.size()
assert W >= 2, "run under ddprt-launch with 2 or more ranks"
checks = 0
worst = {}


def close(got, want, what):
    global checks
    checks += 1
    got, want = got.detach().double(), want.detach().double()
    if got.shape != want.shape:
        raise AssertionError("rank %d: %s: shape %s, want %s" % (R, what, tuple(got.shape), tuple(want.shape)))
    # Within 1e-6, relative where the value passes 1 (a sum of 60 products rounds at
    # 2e-6 in float32, torch's reference included).
    d = float((got - want).abs().max()) if got.numel() else 0.0
    rel = float(((got - want).abs() / want.abs().clamp(min=1)).max()) if got.numel() else 0.0
    kind = what.split(" step ")[-1].split(" ", 1)[-1] if " step " in what else what.split(" ", 1)[-1]
    worst[kind] = max(worst.get(kind, (0.0, 0.0)), (d, rel))
    if not rel <= 1e-6:
        raise AssertionError("rank %d: %s: max difference %.3g (relative %.3g) > 1e-6" % (R, what, d, rel))


def case(name, ref_cls, shape_tail, rows, momentum=0.1, steps=3, affine=True):
    """rows[r]: rank r's batch size. The same seeds on every rank: each builds the whole
    batch and takes its own rows."""
    c = shape_tail[0]
    g = torch.Generator().manual_seed(7)
    sbn = hvd.SyncBatchNorm(c, momentum=momentum, affine=affine)
    ref = ref_cls(c, momentum=momentum, affine=affine)
    if affine:
        with torch.no_grad():
            w, b = torch.randn(c, generator=g), torch.randn(c, generator=g)
            sbn.weight.copy_(w), sbn.bias.copy_(b), ref.weight.copy_(w), ref.bias.copy_(b)
    lo, hi = sum(rows[:R]), sum(rows[:R + 1])
    for step in range(steps):
        full = torch.randn((sum(rows),) + shape_tail, generator=g) * 3 + 1.5
        up = torch.randn((sum(rows),) + shape_tail, generator=g)
        x = full[lo:hi].clone().requires_grad_()
        xr = full.clone().requires_grad_()
        y = sbn(x)
        yr = ref(xr)
        (y * up[lo:hi]).sum().backward()
        (yr * up).sum().backward()
        what = "%s step %d" % (name, step)
        close(y, yr[lo:hi], what + " forward")
        close(x.grad, xr.grad[lo:hi], what + " input grad")
        if affine:
            close(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), ref.weight.grad, what + " weight grad (summed)")
            close(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), ref.bias.grad, what + " bias grad (summed)")
            # The gradients stay this rank's own, as torch's and Horovod's.
            sbn.weight.grad = sbn.bias.grad = ref.weight.grad = ref.bias.grad = None
        close(sbn.running_mean, ref.running_mean, name + " running mean")
        close(sbn.running_var, ref.running_var, name + " running var")
    assert int(sbn.num_batches_tracked) == steps
    sbn.eval(), ref.eval()
    xe = torch.randn((3,) + shape_tail, generator=g)
    close(sbn(xe), ref(xe), name + " eval forward")


def main():
    rows = [r + 2 for r in range(W)]
    case("BatchNorm2d", torch.nn.BatchNorm2d, (4, 5, 3), rows)
    case("BatchNorm1d (N,C,L) momentum=None", torch.nn.BatchNorm1d, (3, 7), rows, momentum=None)
    case("BatchNorm1d (N,C) no affine", torch.nn.BatchNorm1d, (6,), [5 + 3 * r for r in range(W)], affine=False)
    empty = [0 if r == 1 else 4 for r in range(W)]  # rank 1 has no rows this step
    case("BatchNorm2d(rank-1-empty)", torch.nn.BatchNorm2d, (2, 3, 3), empty, steps=2)
    # A differing-rank-count sanity: the statistics must differ from this rank's alone.
    x = torch.full((2, 2), float(R))
    m = hvd.SyncBatchNorm(2, affine=False)
    m(x)
    close(m.running_mean, torch.full((2,), 0.1 * (W - 1) / 2), "running mean of rank-constant batches")
    if R == 0:
        for k in sorted(worst):
            print("  max |diff| %.3g (relative %.3g)  %s" % (worst[k] + (k,)))
        print("largest difference over every check: %.3g absolute, %.3g relative"
              % (max(v[0] for v in worst.values()), max(v[1] for v in worst.values())))
    print("rank %d of %d sbn ok (%d checks)" % (R, W, checks))
    sys.stdout.flush()


main()
