#!/usr/bin/python3
"""PyTorch reference for bench/issue10_resnet20.sh: the same ResNet20 (tools/torch_check.py)
trained on Fashion-MNIST IDX with ddprt's recipe (normalised with 0.1307/0.3081, shuffled
batches, SGD with momentum and weight decay, cross entropy), then the test accuracy; the
sample order differs from ddprt's, so only the level is comparable, not the digits.
  bench/ref_resnet20.py [DATA] [--epochs 1] [--batch 128] [--lr 0.1] [--momentum 0.9]
                       [--wd 5e-4] [--seed 1] [--threads 1]
"""
import argparse, sys, time
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, __file__.rsplit("/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tools")  # torch_check.py
from torch_check import ResNet20, idx

ap = argparse.ArgumentParser()
ap.add_argument("data", nargs="?", default="/usr/share/datasets/fashion-mnist")
ap.add_argument("--epochs", type=int, default=1); ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--lr", type=float, default=0.1); ap.add_argument("--momentum", type=float, default=0.9)
ap.add_argument("--wd", type=float, default=5e-4); ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--threads", type=int, default=1)
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
def load(split):
    x = idx(f"{a.data}/{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = idx(f"{a.data}/{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy((x - 0.1307) / 0.3081).unsqueeze(1), torch.from_numpy(y)
xtr, ytr = load("train"); xte, yte = load("t10k")
net = ResNet20(1, 10)
opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.wd)
for ep in range(1, a.epochs + 1):
    net.train()
    t0, c0 = time.perf_counter(), time.process_time()
    for s, b in enumerate(torch.randperm(len(ytr)).split(a.batch)):
        opt.zero_grad()
        loss = F.cross_entropy(net(xtr[b]), ytr[b])
        loss.backward()
        opt.step()
        if s % 50 == 0:
            print(f"step {s}: loss {loss.item():.4f}", flush=True)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    net.eval()
    with torch.no_grad():
        correct = sum((net(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item() for i in range(0, 10000, 1000))
    print(f"epoch {ep}: {dt:.1f} s wall, {cpu:.1f} s CPU, test accuracy {correct}/10000 ({correct / 100:.2f}%)", flush=True)
