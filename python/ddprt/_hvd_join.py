"""hvd.join(): ranks with fewer batches stop early without a hang, as with Horovod.

Horovod's rule (docs/python.md, "Uneven data: join"): a rank that called join()
contributes zeros to every allreduce the others still issue, and Average still divides
by the whole size, so the others' averages are (sum of their gradients) / size. join()
returns on every rank once all have joined; it answers the rank that joined last.

ddprt has no coordinator, so the ranks agree once per optimizer step: at the step's
first gradient (or at step() if none came) every DistributedOptimizer takes part in
one small allreduce, the handshake, of (joined?, optimizer id, rank 0 proposes a new
gradient order (_hvd_opt), per-rank joined flags).
While nobody has joined, the step goes on as before. Once some rank has, that step's
gradients are all reduced at step() in parameter-name order, and each joined rank,
waiting in join(), reduces zeros of the same shapes in the same order with the same
optimizer's settings. Covered: DistributedOptimizer steps, of the global set or of a
process set (join(process_set=ps): the handshake runs on the set's communicator). Other collectives issued
by some ranks while another waits in join() are not served: they fail at the op's
deadline naming the joined rank (Horovod refuses allgather and alltoall after a join
too)."""
import weakref

import torch

from . import _core as core
from ._hvd_sets import resolve

_optimizers = []     # weak references to every DistributedOptimizer, in creation order
_prev = {}           # per communicator (a process set's optimizer shakes hands on its own):
                     # the flags of its last handshake, rank r had joined


def register(opt):
    """This optimizer's id: the same on every rank that builds the same optimizers."""
    _optimizers.append(weakref.ref(opt))
    return len(_optimizers) - 1


def _issue(joined, opt_id, propose=False):
    """A handshake in flight: (handle, vector) of (joined?, the steppers' optimizer id,
    rank 0 proposes a new order, per-rank joined flags)."""
    w, me = core.size(), core.rank()
    v = torch.zeros(w + 3, dtype=torch.int64)
    v[0] = 1 if joined else 0
    v[1] = 0 if joined else opt_id + 1
    v[2] = 1 if propose and me == 0 and not joined else 0
    v[3 + me] = 1 if joined else 0
    return core.allreduce_async_(v), v


def _finish(pending):
    """(how many ranks have joined, the steppers' optimizer id, flags, the flags
    before, take rank 0's order)."""
    h, v = pending
    h.wait()
    w = core.size()
    n = int(v[0])
    flags = v[3:].tolist()
    key = core._c().value
    prev, _prev[key] = _prev.get(key) or [0] * w, flags
    ids = int(v[1]) // (w - n) - 1 if n < w else -1
    if n < w and int(v[1]) != (ids + 1) * (w - n):
        raise core.DdprtError("ddprt: ranks stepped different DistributedOptimizers in one step (ids sum %d over "
                              "%d ranks)" % (int(v[1]), w - n))
    return n, ids, flags, prev, n == 0 and int(v[2]) > 0


class StepHandshake:
    """A stepping rank's handshake, once per step, issued at the step's first gradient
    and not waited for there: backward goes on, and gradients wait (queued) until it is
    done, since a join changes how they are sent."""

    def __init__(self, opt_id, propose):
        self.pending, self.result = _issue(False, opt_id, propose), None

    def done(self, block):
        """None while in flight (block: wait); else (some rank has joined, every rank
        takes rank 0's order of gradients at the end of this step: _hvd_opt)."""
        if self.result is None:
            if not block and not self.pending[0].test():
                return None
            n, _, _, _, reagree = _finish(self.pending)
            self.result = (n > 0, reagree)
        return self.result


def join(device=-1, process_set=None):
    """Blocks until every rank (of process_set) has called join(), serving the others'
    optimizer steps with zero gradients meanwhile; returns the (global) rank that
    joined last (the highest of those that joined in the last round). device: accepted
    for Horovod's signature (ddprt's tensors are CPU tensors)."""
    ps = resolve(process_set)
    with ps.scope("join"):
        last = _join(ps)
    return last if ps.ranks is None else ps.ranks[last]


def _join(ps):
    """join() on the communicator in scope: the last rank, as this communicator's rank."""
    w = core.size()
    if w == 1:
        return core.rank()
    while True:
        n, opt_id, flags, prev, _ = _finish(_issue(True, 0))
        if n == w:
            newly = [r for r in range(w) if flags[r] and not prev[r]]
            _prev.pop(core._c().value, None)  # all joined: the next epoch starts afresh
            return max(newly) if newly else w - 1
        opt = _optimizers[opt_id]() if 0 <= opt_id < len(_optimizers) else None
        if opt is None or opt._ps.ranks != ps.ranks:
            raise core.DdprtError("ddprt.join: the other ranks stepped DistributedOptimizer #%d, which this rank "
                                  "does not have%s" % (opt_id, "" if opt is None else " in this process set"))
        opt._serve_joined()
