"""The Horovod API shape (horovod.torch) over ddprt, re-exported by ddprt.torch: a
Horovod script runs after `import horovod.torch as hvd` becomes `import ddprt.torch as
hvd`.

Horovod negotiates the order of ops by tensor name; ddprt has no coordinator, so every
rank must issue the same ops in the same order. DistributedOptimizer does: gradients
are reduced as autograd produces them (the same order on every rank for the same
model), and the ones a pass did not produce are reduced in name order at step()."""
import pickle

import torch

from . import _core as core
from . import _hvd_join as _join
from ._core import Average, Sum

Adasum = object()  # named for scripts that mention it; ddprt refuses it


def _op(op, average):
    if op is Adasum:
        raise ValueError("ddprt: Adasum is not supported (use Average)")
    if op is None:
        return Average if average is None or average else Sum
    return op


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _Cast(Compressor):
    dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.dtype:
            return tensor.to(cls.dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_Cast):
    dtype = torch.float16


class BF16Compressor(_Cast):
    dtype = torch.bfloat16


class Compression:
    none = Compressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


class _Hvd:
    """A Horovod handle: the ddprt handle and what to do with its result; tl: its span
    on the running timeline (start_timeline)."""
    __slots__ = ("h", "fin", "tl")
    timeline = None

    def __init__(self, h, fin=None, what=None, nbytes=0):
        self.h, self.fin = h, fin
        tl = _Hvd.timeline
        self.tl = tl.begin(what or "op", nbytes) if tl is not None else None


def _scale(t, f):
    if f == 1.0:
        return t
    if t.dtype.is_floating_point:
        return t.mul_(f)
    # Horovod scales integers in double and stores the product truncated toward zero.
    return t.copy_(t.double().mul_(f))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None):
    _scale(tensor, prescale_factor)
    h = core.allreduce_async_(tensor, op=_op(op, average))
    return _Hvd(h, (lambda out: _scale(out, postscale_factor)) if postscale_factor != 1.0 else None, "allreduce",
                tensor.numel() * tensor.element_size())


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None):
    return allreduce_async_(tensor.clone(memory_format=torch.contiguous_format), average, name, op,
                            prescale_factor, postscale_factor)


def synchronize(handle):
    out = handle.h.wait()
    out = handle.fin(out) if handle.fin else out
    if handle.tl is not None:
        handle.tl.end()
        handle.tl = None
    return out


def poll(handle):
    return handle.h.test()


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    """In place; averaged by default, as allreduce."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor))


def allgather_async(tensor, name=None, process_set=None):
    return _Hvd(core.allgather_async(tensor), None, "allgather", tensor.numel() * tensor.element_size())


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return _Hvd(core.broadcast_async_(tensor, root_rank), None, "broadcast", tensor.numel() * tensor.element_size())


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor.clone(memory_format=torch.contiguous_format), root_rank)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank))


def broadcast_parameters(params, root_rank=0):
    """Rank root_rank's parameters into every rank's: a state_dict, or named_parameters()."""
    if isinstance(params, dict):
        params = sorted(params.items())
    else:
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    hs = []
    for name, p in params:
        if not torch.is_tensor(p):
            raise ValueError("broadcast_parameters: %s is not a tensor" % (name,))
        hs.append(broadcast_async_(p.data if p.requires_grad else p, root_rank))
    for h in hs:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Any picklable object from root_rank, on every rank."""
    n = torch.zeros(1, dtype=torch.int64)
    if core.rank() == root_rank:
        data = pickle.dumps(obj)
        n[0] = len(data)
    core.broadcast_(n, root_rank)
    buf = torch.empty(int(n[0]), dtype=torch.uint8)
    if core.rank() == root_rank:
        buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    core.broadcast_(buf, root_rank)
    return obj if core.rank() == root_rank else pickle.loads(buf.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = core.allgather(torch.tensor([data.numel()], dtype=torch.int64)).tolist()
    allb = core.allgather(data)
    out, at = [], 0
    for s in sizes:
        out.append(pickle.loads(allb[at:at + s].numpy().tobytes()))
        at += s
    return out


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Rank root_rank's optimizer state (moments, step counts, hyper-parameters). As
    Horovod does, a fresh optimizer's state is first made by one step of the wrapped
    optimizer on zero gradients (Adam: zero moments, step 1), so that every rank has
    the same keys to receive."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: cannot broadcast torch.optim.LBFGS state (as Horovod)")
    if not optimizer.state_dict()["state"]:
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        if hasattr(optimizer, "_requires_update"):  # a DistributedOptimizer
            super(optimizer.__class__, optimizer).step()  # the wrapped step: no allreduce
        else:
            optimizer.step()
    state = broadcast_object(optimizer.state_dict(), root_rank)
    if core.rank() != root_rank:
        optimizer.load_state_dict(state)


def _split_list(items, n):
    """Horovod's split of the parameters into num_groups consecutive groups."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


class _DistributedOptimizer(torch.optim.Optimizer):
    """Methods of the class DistributedOptimizer derives from the wrapped optimizer's."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False):
        super(self.__class__, self).__init__(params)
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
        self._op = op
        self._predivide = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self._delay = {}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = []
        self._should_synchronize = True
        self._synchronized = False
        self._shaken = False     # this step's join handshake is done
        self._joined_step = False  # some rank has joined: reduce everything at step()
        self._id = _join.register(self)
        for g in self.param_groups:
            for p in g["params"]:
                if p.requires_grad:
                    self._requires_update.append(p)
                    self._delay[p] = backward_passes_per_step
                    if core.size() > 1:
                        # The accumulation node's hook runs once p.grad holds this pass.
                        acc = p.expand_as(p).grad_fn.next_functions[0][0]
                        acc.register_hook(self._make_hook(p))
                        self._grad_accs.append(acc)
        # Horovod's groups: a group's gradients go out together, once all are ready.
        self._group_of, self._ready = {}, {}
        if groups is not None:
            if isinstance(groups, int):
                groups = _split_list(self._requires_update, groups)
            for k, grp in enumerate(groups):
                for p in grp:
                    if not torch.is_tensor(p):
                        raise ValueError("DistributedOptimizer: groups must consist of torch.Tensor")
                    if p in self._group_of:
                        raise ValueError("DistributedOptimizer: a parameter can only appear once in groups")
                    self._group_of[p] = tuple(grp)

    def _reduce_async(self, p):
        pre = post = 1.0
        if self._op == Average and self._predivide != 1.0:
            pre, post = 1.0 / self._predivide, self._predivide
        if p.grad.is_sparse:
            if not self._sparse_as_dense:
                raise ValueError("DistributedOptimizer: %s has a sparse gradient; ddprt reduces dense tensors: pass "
                                 "sparse_as_dense=True" % self._names[id(p)])
            p.grad = p.grad.to_dense()
        t, ctx = self._compression.compress(p.grad)
        return allreduce_async_(t, op=self._op, prescale_factor=pre, postscale_factor=post), ctx

    def _handshake(self):
        if not self._shaken:
            self._shaken = True
            self._joined_step = _join.step_handshake(self._id)

    def _make_hook(self, p):
        def hook(*_):
            if self._handles.get(p, (None,))[0] is not None and self._delay[p] <= 0:
                raise AssertionError("gradients were computed more than backward_passes_per_step times before "
                                     "step(); raise backward_passes_per_step to accumulate them locally")
            self._delay[p] -= 1
            self._handles[p] = (None, None)
            if self._delay[p] != 0:
                return
            self._handshake()
            if self._joined_step:
                return  # reduced at step(), in name order, as the joined ranks do
            grp = self._group_of.get(p)
            if grp is None:
                self._handles[p] = self._reduce_async(p)
                return
            ready = self._ready.setdefault(grp, set())
            ready.add(p)
            if len(ready) == len(grp):
                for q in grp:
                    self._handles[q] = self._reduce_async(q)
                del self._ready[grp]
        return hook

    def synchronize(self):
        if core.size() > 1:
            self._handshake()
            missing = [p for p in self._requires_update if p not in self._handles or self._handles[p][0] is None]
            for p in sorted(missing, key=lambda q: self._names[id(q)]):
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                self._handles[p] = self._reduce_async(p)
            for p, (h, ctx) in self._handles.items():
                out = synchronize(h)
                self._delay[p] = self.backward_passes_per_step
                if ctx is not None or out.data_ptr() != p.grad.data_ptr():
                    p.grad.copy_(self._compression.decompress(out, ctx))
        self._handles.clear()
        self._ready.clear()
        self._shaken = self._joined_step = False
        self._synchronized = True

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
    """optimizer, wrapped: each gradient is averaged over the ranks as soon as backward
    produces it (overlapping the rest of backward), and step() waits for them first.
    groups (lists of parameters) or num_groups (consecutive groups): a group's
    gradients are sent together once all are ready, as Horovod does; sparse_as_dense:
    sparse gradients are made dense (without it a sparse gradient is refused)."""
    if op is Adasum:
        raise ValueError("ddprt: Adasum is not supported (use Average)")
    if process_set is not None and not getattr(process_set, "_ddprt_global", False):
        raise NotImplementedError("ddprt: process sets other than the global one are not supported")
    if num_groups and groups is None:
        groups = int(num_groups)
    if groups is not None and not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError("DistributedOptimizer: groups should be a positive integer or a list of lists of tensors")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense)
