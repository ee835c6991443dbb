"""Horovod's elastic API (hvd.elastic) over ddprt-launch's elastic jobs.

Horovod re-forms its ring inside the running processes; ddprt cannot (a communicator's
world is fixed at init), so the launcher restarts the processes instead and the state
travels through a file (docs/python.md, "Elastic"):
  - run(func): state.sync() first: if a committed state file exists, every rank that
    sees it loads it, then rank 0's state is broadcast (so only rank 0's file matters);
  - state.commit(): the state saved in memory and, by rank 0, to the state file (tmp +
    rename: a crash leaves the previous commit), then one small allreduce agrees whether
    the launcher's DDPRT_ELASTIC file exists on any rank (a node waits to join): if so
    HostsUpdatedInterrupt, and run() exits with 75, the launcher's restart point;
  - a collective failing on a peer (HorovodInternalError) inside func: the last commit
    is restored and the process exits 1; the launcher restarts the survivors (a lost
    node) or all (--max-restarts), and they resume from the file.
A restarted process calls the state's reset callbacks after loading the file (Horovod
calls them after every reset). func returning ends the job: rank 0 removes the file."""
import copy
import math
import os
import random
import sys

import torch

from . import _core as core
from ._core import PeerError as HorovodInternalError
from ._horovod import broadcast_object, broadcast_parameters, allgather_object
from ._hvd_opt import broadcast_optimizer_state

EXIT_RESTART_POINT = 75  # ddprt-launch's code for "stopped at a restart point"


class HostsUpdatedInterrupt(RuntimeError):
    """The job's hosts changed (a node waits to join): raised by commit() on every rank."""

    def __init__(self, skip_sync=False):
        super().__init__("ddprt.elastic: hosts updated (a node waits to join)")
        self.skip_sync = skip_sync


def _state_path(path):
    """The state file: the path given, else $DDPRT_ELASTIC_STATE, else next to the
    launcher's DDPRT_ELASTIC file (node 0's launcher keeps it across rounds), else none."""
    if path:
        return path
    env = os.environ.get("DDPRT_ELASTIC_STATE")
    if env:
        return env
    grow = os.environ.get("DDPRT_ELASTIC")
    return grow + ".state" if grow else None


def _grow_requested():
    grow = os.environ.get("DDPRT_ELASTIC")
    return bool(grow) and os.path.exists(grow)


class State:
    """Horovod's elastic State: commit(), check_host_updates(), reset callbacks."""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._reset_callbacks:
            cb()

    def commit(self):
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when any rank's DDPRT_ELASTIC file
        exists (one allreduce: the ranks must agree, or some would go on alone)."""
        flag = torch.tensor([1 if _grow_requested() else 0], dtype=torch.int32)
        if core.size() > 1:
            core.allreduce_(flag, op=core.Max)
        if int(flag[0]):
            raise HostsUpdatedInterrupt(False)

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


def _has_state_dict(v):
    return hasattr(v, "state_dict") and hasattr(v, "load_state_dict")


class TorchState(State):
    """TorchState(model, optimizer, epoch=0, batch=0, ...): the model's and optimizer's
    state and any other attributes (plain values, or objects with state_dict() and
    load_state_dict(): an ElasticSampler, an lr scheduler), as Horovod's. state_file:
    where commits go (else $DDPRT_ELASTIC_STATE, or beside the launcher's DDPRT_ELASTIC
    file; with none, commits stay in memory and a restart starts afresh)."""

    def __init__(self, model=None, optimizer=None, state_file=None, **kwargs):
        super().__init__()
        kwargs.update(model=model, optimizer=optimizer)
        self._names = [k for k, v in kwargs.items() if v is not None]
        for k in self._names:
            setattr(self, k, kwargs[k])
        self._path = _state_path(state_file)
        self._loaded = False  # a file was loaded at the first sync (this process resumes)
        self.commits = 0
        self._saved = self._snapshot()

    def _snapshot(self):
        out = {}
        for k in self._names:
            v = getattr(self, k)
            out[k] = copy.deepcopy(v.state_dict() if _has_state_dict(v) else v)
        return out

    def _apply(self, saved):
        for k in self._names:
            v = getattr(self, k)
            if _has_state_dict(v):
                v.load_state_dict(copy.deepcopy(saved[k]))
            else:
                setattr(self, k, copy.deepcopy(saved[k]))

    def save(self):
        """In memory, and by rank 0 to the state file (atomically)."""
        self._saved = self._snapshot()
        self.commits += 1
        if self._path and core.rank() == 0:
            tmp = "%s.tmp.%d" % (self._path, os.getpid())
            with open(tmp, "wb") as f:
                torch.save({"state": self._saved, "size": core.size(), "commits": self.commits}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path)

    def restore(self):
        """The last commit (or the state at construction / the last sync)."""
        self._apply(self._saved)

    def sync(self):
        """Rank 0's state on every rank; at a process's first sync a committed state
        file is loaded first (every rank that sees it; rank 0's is broadcast)."""
        if not self._loaded and self._path and os.path.exists(self._path):
            blob = torch.load(self._path)
            self._saved, self.commits = blob["state"], blob["commits"]
            self._apply(self._saved)
            self._loaded = True
            self.on_reset()  # a restart is a reset (Horovod: rescale the lr, ...)
        for k in self._names:
            v = getattr(self, k)
            if isinstance(v, torch.nn.Module):
                broadcast_parameters(v.state_dict(), root_rank=0)
            elif isinstance(v, torch.optim.Optimizer):
                broadcast_optimizer_state(v, root_rank=0)
            elif isinstance(v, ElasticSampler):
                v.sync()
            elif _has_state_dict(v):
                v.load_state_dict(broadcast_object(v.state_dict(), 0))
            else:
                setattr(self, k, broadcast_object(v, 0))
        self.commits = broadcast_object(self.commits, 0)
        self._saved = self._snapshot()

    def remove_file(self):
        if self._path and core.rank() == 0 and os.path.exists(self._path):
            os.remove(self._path)


def run(func):
    """Decorator: func(state, ...) runs after state.sync(); HostsUpdatedInterrupt exits
    75 (after the commit that raised it), HorovodInternalError restores the last commit
    and exits 1: ddprt-launch restarts the job and the state resumes from its file."""
    def wrapper(state, *args, **kwargs):
        state.sync()
        try:
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            sys.stderr.write("ddprt.elastic: rank %d: hosts updated; stopping at commit %d for the launcher's "
                             "restart\n" % (core.rank(), state.commits))
            sys.stderr.flush()
            sys.exit(EXIT_RESTART_POINT)
        except HorovodInternalError as e:
            state.restore()
            sys.stderr.write("ddprt.elastic: rank %d: %s; restored commit %d, exiting for the launcher to restart "
                             "from it\n" % (core.rank(), str(e).splitlines()[0] if str(e) else e, state.commits))
            sys.stderr.flush()
            os._exit(1)  # no finalize: the communicator is failed, and its peers are gone
        if isinstance(state, TorchState):
            state.remove_file()
        return result
    wrapper.__wrapped__ = func
    wrapper.__name__ = getattr(func, "__name__", "run")
    return wrapper


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: this rank's share of the dataset's indices not yet
    processed this epoch (the epoch's order shuffled by seed + epoch, padded to a
    multiple of the ranks).
    record_batch(i, batch_size) marks batch i of every rank processed (the ranks step
    together, so each knows the others' indices: no communication); set_epoch() starts
    afresh; state_dict() goes into TorchState, and after a restart the rest of the epoch
    is split among the new world's ranks."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def reset(self):
        self.num_replicas, self.rank = core.size(), core.rank()
        # Shuffled whole, then the processed ones taken out: with the same world the
        # rest is split exactly as an uninterrupted epoch goes on (Horovod reshuffles
        # the rest, so a resumed epoch sees another order).
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        left = [i for i in order if i not in self.processed_indices]
        self.remaining_indices = left
        self.num_samples = int(math.ceil(len(left) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        padded = left + left[:self.total_size - len(left)]
        self._all = padded
        self.indices = padded[self.rank:self.total_size:self.num_replicas]

    def get_indices(self, batch_idx, batch_size):
        return self.indices[batch_idx * batch_size:(batch_idx + 1) * batch_size]

    def record_batch(self, batch_idx, batch_size):
        for r in range(self.num_replicas):
            mine = self._all[r:self.total_size:self.num_replicas]
            self.processed_indices.update(mine[batch_idx * batch_size:(batch_idx + 1) * batch_size])

    def record_indices(self, indices):
        self.processed_indices.update(indices)

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_indices = set(state["processed_indices"])
        self.reset()

    def sync(self):
        """Rank 0's epoch, every rank's processed indices (record_indices marks only
        this rank's)."""
        epoch = broadcast_object(self.epoch, 0)
        done = set()
        for s in allgather_object(sorted(self.processed_indices)):
            done.update(s)
        self.epoch, self.processed_indices = epoch, done
        self.reset()

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples
