"""What each Horovod rank check (hvd_*_check.py, under ddprt-launch with 2 or more ranks)
starts with: hvd.init(), the rank R and size W, one thread, and expect(), which counts
its checks for the closing line ("rank R of W ... ok (N checks)", done())."""
import torch

import ddprt.torch as hvd

hvd.init()
R, W = hvd.rank(), hvd.size()
assert W >= 2, "run under ddprt-launch with 2 or more ranks"
torch.set_num_threads(1)
_checks = [0]


def expect(ok, what):
    _checks[0] += 1
    if not ok:
        raise AssertionError("rank %d: %s" % (R, what))


def done(name):
    print("rank %d of %d %s ok (%d checks)" % (R, W, name, _checks[0]), flush=True)
