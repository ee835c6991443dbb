"""One rank of a job whose rank VICTIM SIGKILLs itself mid-training; started with
torchrun's variables by test/test_python.c.
usage: fail_check.py MODE VICTIM TIMEOUT
  MODE ddp:   DDP with ddprt.torch.allreduce_hook (the hook's future fails inside
              loss.backward()); numpy: ddprt.allreduce_ in a loop; stop: as numpy, but
              the victim stops (SIGSTOP) instead of dying: a stalled peer.
The victim prints "killed at T" (wall clock) and kills (stops) itself before its 4th
step; the others must raise an exception naming it and print "raised at T: MESSAGE",
exit 3."""
import os
import signal
import sys
import time

import numpy as np

import ddprt

mode, victim, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])


def die_if_victim(step):
    if ddprt.rank() == victim and step == 3:
        print("killed at %.6f" % time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP if mode == "stop" else signal.SIGKILL)


def run_numpy():
    ddprt.init(timeout=timeout)
    x = np.ones(1 << 20, np.float32)
    for step in range(1000000):
        die_if_victim(step)
        ddprt.allreduce_(x, op=ddprt.Average)


def run_ddp():
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ddprt.torch
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ddprt.init(timeout=timeout)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    model.register_comm_hook(None, ddprt.torch.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
    for step in range(1000000):
        die_if_victim(step)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


try:
    run_ddp() if mode == "ddp" else run_numpy()
except Exception as e:  # DdprtError, or the RuntimeError DDP wraps it in
    print("raised at %.6f: %s: %s" % (time.time(), type(e).__name__, str(e).splitlines()[0] if str(e) else e),
          flush=True)
    os._exit(3)
