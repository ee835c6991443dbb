"""The cost of the Horovod optimizer's per-step agreement (join handshake and gradient
order, python/ddprt/_hvd_opt.py) on a ResNet-18 step: run it under ddprt-launch with
the package to measure on PYTHONPATH, e.g. this checkout's and an older one's, and
compare rank 0's median step time (a ResNet-18 written out here: no torchvision).

    ddprt-launch --nproc-per-node 2 -- python3 python/examples/hvd_overhead.py --steps 30
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import ddprt.torch as hvd
from hvd_models import Block


def resnet18(classes=10):
    layers, cin = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()
torch.set_num_threads(a.threads)
hvd.init()
torch.manual_seed(0)
model = resnet18()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
g = torch.Generator().manual_seed(hvd.rank())
x, y = torch.randn(a.batch, 3, 32, 32, generator=g), torch.randint(0, 10, (a.batch,), generator=g)
times = []
for s in range(a.steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
    times.append(time.perf_counter() - t0)
times = sorted(times[3:])
if hvd.rank() == 0:
    print("median step %.1f ms (min %.1f, %d steps, %d ranks); order re-agreed %s"
          % (1e3 * times[len(times) // 2], 1e3 * times[0], len(times), hvd.size(), getattr(opt, "reagreed", "-")))
