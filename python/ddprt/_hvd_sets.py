"""Horovod's process sets (hvd.ProcessSet, add_process_set, remove_process_set, the
process_set= keyword): a collective among some of the ranks, which only they call.

The C API has no sub-communicator, but a process can hold several: add_process_set
(called by every rank, as Horovod's) has the set's first rank pick a free port and tell
every rank over the global communicator; the members then meet there (ddprt_init,
tcp://HOST:PORT, ranks 0..k-1 in the set's order) and hold a communicator of their own.
A call with process_set= runs on it: core._using makes this thread's calls, rank() and
size() go to it, so every collective, its pairing check and its autograd backward work
unchanged. root_rank= stays a global rank, as in Horovod."""
import atexit
import ctypes
import os
import socket

from . import _core as core
from . import _lib


class ProcessSet:
    """Some ranks (global ranks, any order: kept sorted) that run collectives among
    themselves. Usable once registered: hvd.add_process_set(ps), or hvd.init(process_sets=
    [...]). global_process_set is every rank."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted({int(r) for r in ranks})
        self.process_set_id = 0 if ranks is None else None
        self._comm = self._info = None

    @property
    def _ddprt_global(self):
        return self.ranks is None

    def size(self):
        return core.size() if self.ranks is None else len(self.ranks)

    def rank(self):
        """This rank's index in the set; -1 when it is not a member."""
        if self.ranks is None:
            return core.rank()
        r = core._info[0] if core._info else core.rank()
        return self.ranks.index(r) if r in self.ranks else -1

    def included(self):
        return self.ranks is None or self.rank() >= 0

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id,
                                                           "all" if self.ranks is None else self.ranks)

    # ---- how the collectives use it ----
    def scope(self, what="a collective"):
        """The context a call with process_set=self runs in (refused for a non-member)."""
        if self.ranks is None:
            return _NOOP
        if self.process_set_id is None or self._comm is None and self.rank() >= 0:
            raise ValueError("ddprt: %s with process set %s, which is not registered (hvd.add_process_set "
                             "first, on every rank)" % (what, self.ranks))
        if self._comm is None:
            raise ValueError("ddprt: %s with process set %d (ranks %s) called on rank %d, which is not in it"
                             % (what, self.process_set_id, self.ranks, core._info[0]))
        return core._using(self._comm, self._info)

    def root(self, root_rank):
        """A global root rank as this set's rank (the set's communicator's)."""
        if self.ranks is None:
            return root_rank
        if root_rank not in self.ranks:
            raise ValueError("ddprt: root_rank %d is not in process set %d (ranks %s)"
                             % (root_rank, self.process_set_id, self.ranks))
        return self.ranks.index(root_rank)

    def _allgather(self, t):
        with self.scope("allgather"):
            return core.allgather(t)

    def _allreduce_(self, t, op):
        with self.scope("allreduce"):
            return core.allreduce_(t, op=op)


class _Noop:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NOOP = _Noop()
global_process_set = ProcessSet()
_sets = {0: global_process_set}
_next_id = [1]


def resolve(process_set):
    return global_process_set if process_set is None else process_set


def current():
    """The set whose communicator this thread's calls go to now (autograd functions
    keep it for their backward)."""
    sub = getattr(core._tls, "sub", None)
    if sub is None:
        return global_process_set
    for ps in _sets.values():
        if ps._comm is sub[0]:
            return ps
    return global_process_set


def _my_address():
    """A host name or address the other ranks reach this one at."""
    if core.local_size() == core.size():
        return "127.0.0.1"
    master = os.environ.get("MASTER_ADDR")
    if master:
        try:  # the interface that routes towards the master (no packet is sent)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.connect((master, 9))
            ip = s.getsockname()[0]
            s.close()
            return ip
        except OSError:
            pass
    return socket.gethostname()


def _free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks); every rank calls it, with the same
    ranks. Returns the ProcessSet, with its process_set_id."""
    from ._horovod import allgather_object, broadcast_object
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.ranks is None:
        raise ValueError("ddprt.add_process_set: the global process set is always there")
    if ps.process_set_id is not None:
        raise ValueError("ddprt.add_process_set: %r is registered already" % (ps,))
    w = core.size()
    every = allgather_object(ps.ranks)
    if any(e != ps.ranks for e in every):
        raise ValueError("ddprt.add_process_set: the ranks asked for different sets: " +
                         "; ".join("rank %d: %s" % (r, e) for r, e in enumerate(every)))
    if not ps.ranks or ps.ranks[0] < 0 or ps.ranks[-1] >= w:
        raise ValueError("ddprt.add_process_set: ranks %s are not within 0..%d" % (ps.ranks, w - 1))
    for other in _sets.values():
        if other.ranks == ps.ranks:
            raise ValueError("ddprt.add_process_set: ranks %s are process set %d already"
                             % (ps.ranks, other.process_set_id))
    lead = ps.ranks[0]
    where = broadcast_object("%s:%d" % (_my_address(), _free_port()) if core.rank() == lead else None, lead)
    if core.rank() in ps.ranks:
        ps._comm = _open("tcp://" + where, ps.ranks.index(core.rank()), len(ps.ranks))
        lib = _lib.get()
        ps._info = (lib.ddprt_rank(ps._comm), lib.ddprt_size(ps._comm), lib.ddprt_local_rank(ps._comm),
                    lib.ddprt_local_size(ps._comm))
    ps.process_set_id = _next_id[0]
    _next_id[0] += 1
    _sets[ps.process_set_id] = ps
    return ps


def _open(url, rank, size):
    lib = _lib.get()
    o = _lib.Opts()
    lib.ddprt_opts_default(ctypes.byref(o))
    o.init_method = url.encode()
    o.rank, o.world_size, o.port_offset = rank, size, 0
    o.timeout_s = core._timeout
    o.log_level = -1 if os.environ.get("DDPRT_LOG") else 1
    c = ctypes.c_void_p()
    core._check(lib.ddprt_init(ctypes.byref(c), ctypes.byref(o)))
    return c


def remove_process_set(process_set):
    """Unregisters a set (every rank calls it): its members close its communicator.
    False for the global set or one not registered."""
    ps = process_set
    if ps.ranks is None or _sets.get(ps.process_set_id) is not ps:
        return False
    core.barrier()  # no member still uses it
    del _sets[ps.process_set_id]
    c, ps._comm, ps.process_set_id = ps._comm, None, None
    if c is not None:
        _lib.get().ddprt_finalize(c)
    return True


def _close_all():
    for ps in list(_sets.values()):
        c, ps._comm = ps._comm, None
        if c is not None:
            _lib.get().ddprt_finalize(c)


atexit.register(_close_all)  # after core's in registration order: runs before it
