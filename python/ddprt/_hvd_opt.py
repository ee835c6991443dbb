"""Horovod's DistributedOptimizer and broadcast_optimizer_state over ddprt.

Horovod pairs gradients across ranks by name (its coordinator agrees which are ready).
ddprt has no coordinator; instead every rank sends the gradients in one agreed order,
the same everywhere, so a gradient is always reduced with the same parameter's gradient
on the other ranks, whatever order autograd produced them in:
  - the order starts as the parameters' reverse order (autograd's usual order, the same
    on every rank with no exchange);
  - backward sends the agreed order's longest ready prefix as gradients arrive (overlap
    where the ranks' orders agree), and step() sends the rest, with zeros for a gradient
    this rank did not produce (a branch not taken, a frozen layer): Horovod's rule, so
    the averages are exact;
  - when rank 0's own order is no longer a subsequence of the agreed one (its graph
    changed), it says so in the next step's handshake (_hvd_join: one small allreduce
    per step, which join needs anyway, issued at the step's first gradient and not
    waited for: gradients queue behind it) and every rank takes rank 0's order at the
    end of that step (one broadcast). Steady state: nothing beyond the handshake.
groups / num_groups (Horovod's): a group goes out together once all of it is ready."""
import torch

from . import _core as core
from . import _hvd_join as _join
from ._core import Average
from ._horovod import Adasum, Compression, _iallreduce_, broadcast_object, synchronize
from ._hvd_sets import resolve
from ._hvd_sparse import sparse_reduce_grad
from ._hvd_adasum import DistributedAdasumOptimizer


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Rank root_rank's optimizer state (moments, step counts, hyper-parameters). As
    Horovod does, a fresh optimizer's state is first made by one step of the wrapped
    optimizer on zero gradients (Adam: zero moments, step 1), so that every rank has
    the same keys to receive; unlike Horovod's, that step leaves the parameters as they
    were (weight decay would move them, on some ranks only after a resume)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: cannot broadcast torch.optim.LBFGS state (as Horovod)")
    if not optimizer.state_dict()["state"]:
        kept = []
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
                    kept.append((p, p.detach().clone()))
        if hasattr(optimizer, "_units"):  # a DistributedOptimizer: the wrapped step, no allreduce
            super(optimizer.__class__, optimizer).step()
        else:
            optimizer.step()
        # Horovod's zero step moves parameters where weight decay applies, and only on
        # the ranks whose state was empty (after a resume: all but root_rank, whose
        # parameters were broadcast already): their models then differ. Not here.
        with torch.no_grad():
            for p, v in kept:
                p.copy_(v)
    state = broadcast_object(optimizer.state_dict(), root_rank)
    if core.rank() != root_rank:
        optimizer.load_state_dict(state)


def _split_list(items, n):
    """Horovod's split of the parameters into num_groups consecutive groups."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def _subsequence(seq, order):
    it = iter(order)
    return all(any(u == v for v in it) for u in seq)


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods of the class DistributedOptimizer derives from the wrapped optimizer's."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False, process_set=None):
        super(self.__class__, self).__init__(params)
        self._ps = resolve(process_set)  # every reduction, handshake and agreement runs on it
        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%d.%d" % (g, i), v) for g, group in enumerate(self.param_groups)
                                for i, v in enumerate(group["params"])]
        names = [k for k, _ in named_parameters]
        if len(set(names)) != len(names):
            raise ValueError("DistributedOptimizer: parameter names are not unique")
        ids = {id(v) for _, v in named_parameters}
        unnamed = [v for g in self.param_groups for v in g["params"] if id(v) not in ids]
        if unnamed:
            raise ValueError("DistributedOptimizer: named_parameters lacks %d of the optimizer's parameters"
                             % len(unnamed))
        self._names = {id(v): k for k, v in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._op, self._predivide, self._sparse_as_dense = op, gradient_predivide_factor, sparse_as_dense
        self._sparse = set()  # ids of the parameters whose gradients came sparse (_hvd_sparse)
        self._delay, self._handles, self._grad_accs, self._requires_update = {}, {}, [], []
        self._should_synchronize, self._synchronized = True, False
        for g in self.param_groups:
            for p in g["params"]:
                if p.requires_grad:
                    self._requires_update.append(p)
                    self._delay[p] = backward_passes_per_step
                    if self._ps.size() > 1:
                        # The accumulation node's hook runs once p.grad holds this pass.
                        acc = p.expand_as(p).grad_fn.next_functions[0][0]
                        acc.register_hook(self._make_hook(p))
                        self._grad_accs.append(acc)
        self._units = self._make_units(groups)  # what goes out together: a group, or one parameter
        self._unit_of = {id(p): k for k, u in enumerate(self._units) for p in u}
        self._order = list(range(len(self._units)))  # the agreed order of units
        self._id = _join.register(self)
        self._begin_step()
        self._proposal = None  # rank 0: its own order, to be agreed at the next handshake
        self.reagreed = 0      # times the ranks took rank 0's order (tests, figures)

    def _make_units(self, groups):
        """Units in reverse parameter order (autograd's usual order)."""
        rev = list(reversed(self._requires_update))
        if groups is None:
            return [(p,) for p in rev]
        if isinstance(groups, int):
            groups = _split_list(self._requires_update, groups)
        member, mine = {}, {id(p) for p in rev}
        for k, grp in enumerate(groups):
            for p in grp:
                if not torch.is_tensor(p):
                    raise ValueError("DistributedOptimizer: groups must consist of torch.Tensor")
                if id(p) in member:
                    raise ValueError("DistributedOptimizer: a parameter can only appear once in groups")
                member[id(p)] = k
        units, seen = [], set()
        for p in rev:
            k = member.get(id(p))
            if k is None:
                units.append((p,))
            elif k not in seen:
                seen.add(k)
                units.append(tuple(q for q in groups[k] if id(q) in mine))
        return units

    def _begin_step(self):
        self._shake = None         # this step's handshake (_hvd_join.StepHandshake)
        self._joined_step = False  # some rank has joined: everything at step(), by name
        self._reagree = False      # rank 0 asked: take its order at the end of this step
        self._next = 0             # the agreed order's units [0, _next) are sent
        self._ready, self._fired = set(), []

    def _reduce_async(self, p):
        pre = post = 1.0
        if self._op == Average and self._predivide != 1.0:
            pre, post = 1.0 / self._predivide, self._predivide
        if p.grad is None:
            # Not produced on this rank: zeros, as Horovod (empty, where it was sparse before).
            p.grad = (torch.sparse_coo_tensor(torch.empty(1, 0, dtype=torch.int64), torch.empty(0, *p.shape[1:]),
                                              p.shape, dtype=p.dtype) if id(p) in self._sparse else torch.zeros_like(p))
        if p.grad.is_sparse:
            if self._sparse_as_dense or self._joined_step:  # a joined rank serves dense zeros
                p.grad = p.grad.to_dense()
            else:
                self._sparse.add(id(p))
                return sparse_reduce_grad(p.grad, self._op), None
        t, ctx = self._compression.compress(p.grad)
        return _iallreduce_(t, self._op, pre, post), ctx

    def _handshake(self, block):
        """Issues this step's handshake once; True when its answer is in."""
        if self._shake is None:
            self._shake = _join.StepHandshake(self._id, self._proposal is not None)
        r = self._shake.done(block)
        if r is None:
            return False
        self._joined_step, self._reagree = r
        return True

    def _send_ready(self, flush=False):
        """The agreed order's ready prefix (flush: all the rest)."""
        while self._next < len(self._order):
            u = self._units[self._order[self._next]]
            if not flush and not all(id(p) in self._ready for p in u):
                return
            for p in u:
                self._handles[p] = self._reduce_async(p)
            self._next += 1

    def _make_hook(self, p):
        def hook(*_):
            with self._ps.scope("DistributedOptimizer"):
                self._grad_ready(p)
        return hook

    def _grad_ready(self, p):
        if self._delay[p] <= 0:
            raise AssertionError("gradients were computed more than backward_passes_per_step times before "
                                 "step(); raise backward_passes_per_step to accumulate them locally")
        self._delay[p] -= 1
        if p not in self._handles:
            self._handles[p] = (None, None)
        if self._delay[p] != 0:
            return
        self._fired.append(self._unit_of[id(p)])
        self._ready.add(id(p))
        if self._handshake(block=False) and not self._joined_step:
            self._send_ready()

    def synchronize(self):
        with self._ps.scope("DistributedOptimizer"):
            self._synchronize()

    def _synchronize(self):
        if core.size() > 1:
            self._handshake(block=True)
            if self._joined_step:
                # As the joined ranks serve it (_serve_joined): every gradient, by name.
                for p in sorted(self._requires_update, key=lambda q: self._names[id(q)]):
                    self._handles[p] = self._reduce_async(p)
            else:
                self._send_ready(flush=True)
            for p, (h, ctx) in self._handles.items():
                out = synchronize(h)
                self._delay[p] = self.backward_passes_per_step
                if out.is_sparse:
                    p.grad = out  # Horovod: p.grad.set_(output), a new sparse tensor
                elif ctx is not None or out.data_ptr() != p.grad.data_ptr():
                    p.grad.copy_(self._compression.decompress(out, ctx))
            self._agree()
        self._handles.clear()
        self._begin_step()
        self._synchronized = True

    def _agree(self):
        """Rank 0's order: proposed when its graph's order changed, taken by all when asked."""
        if self._joined_step:
            return
        if self._reagree:
            order = broadcast_object(self._proposal, 0)
            self._order, self._proposal = order, None
            self.reagreed += 1
        if core.rank() == 0 and self._fired:
            fired = list(dict.fromkeys(self._fired))
            if not _subsequence(fired, self._order):
                self._proposal = fired + [u for u in self._order if u not in set(fired)]

    def _serve_joined(self):
        """On a rank waiting in join(): this optimizer's step, with zero gradients."""
        for p in sorted(self._requires_update, key=lambda q: self._names[id(q)]):
            p.grad = torch.zeros_like(p)
            self._handles[p] = self._reduce_async(p)
        for h, _ in self._handles.values():
            synchronize(h)
        self._handles.clear()

    def skip_synchronize(self):
        class _Skip:
            def __enter__(s):
                self._should_synchronize = False

            def __exit__(s, *a):
                self._should_synchronize = True
        return _Skip()

    def step(self, closure=None):
        if self._should_synchronize:
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("zero_grad() while gradients are being reduced: call step() or synchronize() "
                                 "first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=None):
    """optimizer, wrapped: gradients are averaged over the ranks in one agreed order as
    backward produces them (overlapping the rest of backward), and step() waits for them
    first. groups (lists of parameters) or num_groups (consecutive groups): a group's
    gradients go out together, as Horovod's; sparse_as_dense: sparse gradients are made
    dense (without it a sparse gradient takes the sparse allreduce: _hvd_sparse)."""
    if op is Adasum:  # Horovod's Adasum optimizer: local step, then the Adasum of the deltas
        if process_set is not None and not resolve(process_set).included():
            raise ValueError("ddprt: DistributedOptimizer with process set %s on rank %d, which is not in it"
                             % (process_set.ranks, core.rank()))
        return DistributedAdasumOptimizer(optimizer, named_parameters, compression, process_set)
    if process_set is not None and not resolve(process_set).included():
        raise ValueError("ddprt: DistributedOptimizer with process set %s on rank %d, which is not in it"
                         % (process_set.ranks, core.rank()))
    if num_groups and groups is None:
        groups = int(num_groups)
    if groups is not None and not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError("DistributedOptimizer: groups should be a positive integer or a list of lists of tensors")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)
