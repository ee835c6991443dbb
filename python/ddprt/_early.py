"""Early start for the DDP hooks: a bucket's gradients go on the wire in pieces as
backward produces them, instead of when DDP hands the whole bucket to the hook.

Why: DDP calls a comm hook only once every gradient of a bucket is in (25 MB buckets
by default). ResNet-18's 44.7 MB make three buckets; the middle one (26 MB) is complete
only near the end of backward, so over a 1 Gbit/s link most of the wire time came after
backward (measured: the link idle for a third of backward, the step = compute + wire).

How: HookState(model) learns DDP's (rebuilt) bucket layout, then cuts each bucket into
pieces of about piece_bytes at parameter boundaries. A post-hook on every parameter's
gradient accumulator (it runs after DDP's own, which has copied the gradient into the
bucket) counts the pieces' missing gradients; complete pieces are scaled into the
staging buffer and allreduced at once, strictly in (bucket, piece) order, so every rank
issues the same ops in the same order whatever the timing. The comm hook of bucket i
then sends what is left of it and returns a future that completes with its last piece.
Each element is reduced exactly as the whole bucket would be (a + b, then x / size
before): the same bits.

When it runs: only on passes DDP synchronises (a forward pre-hook on the model reads
require_backward_grad_sync, so no_sync() passes send nothing), and only once the layout
has been seen the same on two passes from the second on (DDP rebuilds its buckets once,
before the second pass). Until then the hook reduces whole buckets."""
import threading

import torch

from . import _core as core
from ._progress import progress


def layout(bucket):
    """What the plan depends on: the bucket's buffer and, per parameter, its range in it."""
    buf = bucket.buffer()
    base = buf.storage_offset()
    params = tuple((p, g.storage_offset() - base, g.numel()) for p, g in zip(bucket.parameters(), bucket.gradients()))
    return buf, params


def same(a, b):
    """Layouts a and b (dicts index -> layout) describe the same buckets over the same memory."""
    if a.keys() != b.keys():
        return False
    for i in a:
        (ba, pa), (bb, pb) = a[i], b[i]
        if ba.data_ptr() != bb.data_ptr() or ba.numel() != bb.numel() or ba.dtype != bb.dtype or len(pa) != len(pb):
            return False
        if any(x[0] is not y[0] or x[1:] != y[1:] for x, y in zip(pa, pb)):
            return False
    return True


class Plan:
    """Pieces of every bucket: pieces[k] = (bucket, start, end); owner[param] = the
    index of the piece holding it; first[i] = bucket i's first piece."""

    def __init__(self, lay, staging, piece_bytes, cdtype):
        self.nb = len(lay)
        self.bufs = [lay[i][0] for i in range(self.nb)]
        self.staging = [staging[i] for i in range(self.nb)]
        self.cdtype = cdtype
        self.pieces, self.first, self.owner, self.need = [], [], {}, []
        for i in range(self.nb):
            buf, params = lay[i]
            self.first.append(len(self.pieces))
            start = nparams = 0
            order = sorted(params, key=lambda x: x[1])
            for j, (p, off, n) in enumerate(order):
                self.owner.setdefault(p, []).append(len(self.pieces))
                nparams += 1
                end = off + n
                last = j == len(order) - 1
                if last or (end - start) * buf.element_size() >= piece_bytes:
                    # The last piece runs to the buffer's end (DDP may pad it).
                    self.pieces.append((i, start, buf.numel() if last else end))
                    self.need.append(nparams)
                    start, nparams = end, 0
            if not order:
                self.pieces.append((i, 0, buf.numel()))
                self.need.append(0)
        self.first.append(len(self.pieces))


class Pass:
    """One synchronised backward pass over a plan: what is launched, what is done."""

    def __init__(self, plan, stats):
        self.plan, self.stats = plan, stats  # stats.ahead: pieces sent before their bucket was handed over
        self.need = list(plan.need)
        self.seen = set()
        self.next = 0  # the next piece to launch
        self.left = [plan.first[i + 1] - plan.first[i] for i in range(plan.nb)]
        self.err = [None] * plan.nb
        self.futs = [torch.futures.Future() for _ in range(plan.nb)]
        self.lock = threading.Lock()
        self.w = core.size()

    def grad_ready(self, p):
        """Post-hook of p's gradient accumulator: DDP has copied its gradient in."""
        if p in self.seen:
            return
        self.seen.add(p)
        for k in self.plan.owner.get(p, ()):
            self.need[k] -= 1
        n = self.next
        self._launch(len(self.plan.pieces))
        self.stats.ahead += self.next - n

    def bucket(self, i, buf):
        """DDP's comm hook for bucket i: the rest of the bucket goes out now."""
        if i >= self.plan.nb or buf.data_ptr() != self.plan.bufs[i].data_ptr() or buf.numel() != self.plan.bufs[i].numel():
            fut = torch.futures.Future()
            fut.set_exception(core.DdprtError(
                "ddprt hook: DDP's bucket %d changed after its layout was learned (DDP rebuilt its buckets "
                "again?); pass a new HookState" % i))
            return fut
        for k in range(self.plan.first[i], self.plan.first[i + 1]):
            self.need[k] = 0
        self._launch(self.plan.first[i + 1])
        return self.futs[i]

    def _launch(self, upto):
        pl = self.plan
        while self.next < upto and self.need[self.next] <= 0:
            k, self.next = self.next, self.next + 1
            i, a, b = pl.pieces[k]
            src, work = pl.bufs[i][a:b], pl.staging[i][a:b]
            try:
                if self.w > 1:
                    torch.mul(src, 1.0 / self.w, out=work)
                else:
                    work.copy_(src)
                h = core.allreduce_async_(work, op=core.Sum)
            except core.DdprtError as e:
                self._piece_done(i, a, b, e)
                continue
            progress.submit(h, lambda err, i=i, a=a, b=b: self._piece_done(i, a, b, err))

    def _piece_done(self, i, a, b, err):
        pl = self.plan
        if err is None and pl.cdtype is not None:
            pl.bufs[i][a:b].copy_(pl.staging[i][a:b])
        with self.lock:
            if err is not None and self.err[i] is None:
                self.err[i] = err
            self.left[i] -= 1
            last = self.left[i] == 0
        if not last:
            return
        if self.err[i] is not None:
            self.futs[i].set_exception(self.err[i])
        else:
            self.futs[i].set_result(pl.bufs[i] if pl.cdtype is not None else pl.staging[i])


def accumulators(model):
    """(param, its gradient accumulator) of every parameter that takes a gradient."""
    out = []
    for p in model.parameters():
        if p.requires_grad:
            out.append((p, p.expand_as(p).grad_fn.next_functions[0][0]))
    return out
