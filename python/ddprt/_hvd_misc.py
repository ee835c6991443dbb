"""Horovod's queries (cross_rank, is_homogeneous, *_built, *_enabled), init, and the
timeline (start_timeline / stop_timeline: a Chrome trace of the Horovod calls)."""
import json
import os
import threading
import time

import torch

from . import _core as core
from ._horovod import _Hvd
from ._hvd_sets import ProcessSet, add_process_set, global_process_set  # noqa: F401 (re-exported)


_topo = None  # (cross_rank, cross_size, is_homogeneous)


def init(comm=None, process_sets=None, **kwargs):
    """hvd.init(): ddprt.init(**kwargs) (the launcher's variables), then one small
    allgather of each rank's (local_rank, local_size) for cross_rank / cross_size /
    is_homogeneous; then process_sets (a list of ProcessSet) are added, as
    add_process_set would ("dynamic": added later with it). comm (an MPI communicator)
    is refused."""
    if comm is not None:
        raise NotImplementedError("ddprt.torch.init: comm= (an MPI communicator) is not supported; ddprt meets "
                                  "through the launcher's variables")
    core.init(**kwargs)
    _topology()
    if process_sets not in (None, "dynamic"):
        for ps in process_sets:
            add_process_set(ps)


def _topology():
    """Once per communicator; a collective (every rank must ask, as hvd.init does)."""
    global _topo
    if _topo is not None and _topo[3] == core._gen:
        return _topo
    mine = torch.tensor([core.local_rank(), core.local_size()], dtype=torch.int64)
    every = core.allgather(mine).view(-1, 2).tolist()
    me, lr = core.rank(), core.local_rank()
    same = [r for r, (l, _) in enumerate(every) if l == lr]
    _topo = (same.index(me), len(same), len({s for _, s in every}) == 1, core._gen)
    return _topo


def cross_rank():
    """This rank's index among the ranks with its local rank (its node's index)."""
    return _topology()[0]


def cross_size():
    """How many ranks share this rank's local rank (the number of nodes)."""
    return _topology()[1]


def is_homogeneous():
    """Every node runs the same number of ranks."""
    return _topology()[2]


# Horovod's build queries, answered as a Horovod built without MPI, Gloo, NCCL, DDL,
# oneCCL, CUDA and ROCm answers them (ddprt's own transports do the work).
def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    raise ValueError("Horovod MPI is not enabled (ddprt runs without MPI)")


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return 0  # Horovod: NCCL_VERSION_CODE when built with NCCL, else 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


# ---- timeline ---------------------------------------------------------------------------------

class _Span:
    __slots__ = ("tl", "what", "nbytes", "t0")

    def __init__(self, tl, what, nbytes):
        self.tl, self.what, self.nbytes, self.t0 = tl, what, nbytes, time.perf_counter()

    def end(self):
        self.tl._add(self.what, self.nbytes, self.t0, time.perf_counter())


class _Timeline:
    def __init__(self, path, mark_cycles):
        self.path, self.mark_cycles = path, mark_cycles
        self.events, self.t0, self.lock = [], time.perf_counter(), threading.Lock()

    def begin(self, what, nbytes):
        return _Span(self, what, nbytes)

    def _add(self, what, nbytes, t0, t1):
        ev = {"name": what, "ph": "X", "pid": core.rank(), "tid": 0, "ts": round((t0 - self.t0) * 1e6, 3),
              "dur": round((t1 - t0) * 1e6, 3), "args": {"bytes": nbytes}}
        with self.lock:
            self.events.append(ev)

    def write(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"traceEvents": self.events, "displayTimeUnit": "ms"}, f)
        os.replace(tmp, self.path)


def start_timeline(file_path, mark_cycles=False):
    """Records every Horovod call of this process (issue to synchronize) until
    stop_timeline(), which writes them to file_path as a Chrome trace (chrome://tracing,
    Perfetto). As Horovod's, only rank 0 writes; each rank may call it."""
    if not file_path:
        raise ValueError("start_timeline: file_path is empty")
    _Hvd.timeline = _Timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    tl, _Hvd.timeline = _Hvd.timeline, None
    if tl is not None and core.rank() == 0:
        tl.write()


class span:
    """A timeline span around a call that completes at issue (alltoall, uneven shapes)."""

    def __init__(self, what, nbytes):
        tl = _Hvd.timeline
        self.s = tl.begin(what, nbytes) if tl is not None else None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        if self.s is not None:
            self.s.end()
