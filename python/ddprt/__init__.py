"""ddprt for Python: the collectives of libddprt.so on numpy arrays and CPU torch
tensors (ctypes: no compiled extension; numpy and torch are optional).

    import ddprt
    ddprt.init()                      # torchrun / ddprt-launch / Slurm / mpirun variables
    ddprt.allreduce_(grads, op=ddprt.Average)
    h = ddprt.allreduce_async_(buf)   # ... h.wait()

ddprt.allreduce sums by default (MPI, NCCL); ddprt.torch, a DDP communication hook and
the Horovod API, averages by default as Horovod does (docs/python.md, "Sum or average?")."""
from ._core import (Average, DdprtError, Handle, PeerError, Max, Min, Product, Sum, abort, allgather, allgather_async,
                    allreduce, allreduce_, allreduce_async, allreduce_async_, barrier, broadcast, broadcast_,
                    broadcast_async_, empty, finalize, init, is_initialized, local_rank, local_size, rank,
                    reduce_scatter, shutdown, size)

__version__ = "0.1.0"
__all__ = ["Average", "DdprtError", "Handle", "PeerError", "Max", "Min", "Product", "Sum", "abort", "allgather",
           "allgather_async", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "barrier",
           "broadcast", "broadcast_", "broadcast_async_", "empty", "finalize", "init", "is_initialized",
           "local_rank", "local_size", "rank", "reduce_scatter", "shutdown", "size"]
