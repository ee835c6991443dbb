"""A Horovod-semantics reference on torch.distributed's gloo, for the example copies'
test (hvd_examples_check.py): the calls those scripts make, each done the plain way
(gradients summed by gloo at step() and divided by the size; metrics likewise), so that
`import hvd_gloo as hvd` in place of `import ddprt.torch as hvd` gives the reference
run. broadcast_optimizer_state follows ddprt's rule (Horovod's zero-gradient step to
create the state, parameters left as they were)."""
import atexit

import torch
import torch.distributed as dist

Average, Sum, Adasum = "Average", "Sum", "Adasum"


class Compression:
    none = "none"
    fp16 = "fp16"


def init():
    dist.init_process_group("gloo")
    atexit.register(_shutdown)


def _shutdown():
    # torch 1.13's gloo group, left to the interpreter's teardown, can abort the process
    # at exit ("terminate called without an active exception", seen once in CI): end it
    # while Python still runs, as the seed scripts do with destroy_process_group()
    if dist.is_initialized():
        dist.destroy_process_group()


def rank():
    return dist.get_rank()


def size():
    return dist.get_world_size()


def allreduce(t, name=None, op=Average):
    x = t.detach().clone()
    dist.all_reduce(x)
    return x / size() if op == Average else x


def broadcast(t, root_rank, name=None):
    x = t.detach().clone()
    dist.broadcast(x, root_rank)
    return x


def broadcast_parameters(params, root_rank=0):
    for _, p in sorted(params.items()):
        dist.broadcast(p.data, root_rank)


def broadcast_optimizer_state(optimizer, root_rank=0):
    if not optimizer.state_dict()["state"]:
        kept = [(p, p.detach().clone()) for g in optimizer.param_groups for p in g["params"]]
        for p, _ in kept:
            p.grad = torch.zeros_like(p)
        if hasattr(optimizer, "_gloo"):  # the wrapped optimizer's own step: no allreduce
            type(optimizer).__mro__[1].step(optimizer)
        else:
            optimizer.step()
        with torch.no_grad():
            for p, v in kept:
                p.copy_(v)
    obj = [optimizer.state_dict()]
    dist.broadcast_object_list(obj, root_rank)
    if rank() != root_rank:
        optimizer.load_state_dict(obj[0])


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0):
    assert op == Average and compression == Compression.none and gradient_predivide_factor == 1.0

    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad.div_(size())
        return super(cls, self).step(closure)

    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), {"step": step, "_gloo": True})
    optimizer.__class__ = cls
    return optimizer
