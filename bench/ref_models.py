#!/usr/bin/python3
"""PyTorch reference for bench/bench_models.sh: training samples/s and peak RSS of the
zoo models on synthetic data, 1 thread, SGD with momentum (Debian's python3-torch,
OpenBLAS). Prints one line: MODEL samples/s peak_rss_mib.

    bench/ref_models.py MODEL BATCH STEPS
"""
import os
import sys

# torch.set_num_threads(1) does not reach Debian's OpenBLAS (libopenblas0-pthread), which
# then runs the linear layers on every core: a one-thread comparison that was not one
# (GPT small: 1461 tok/s on a quiet machine, 140-190 beside another process).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ref_timing import timed  # noqa: E402
sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tools")  # torch_check.py

def build(name):
    if name == "lenet":
        from torch_check import Net
        return Net(), (1, 28, 28), 10
    if name == "resnet20":
        from torch_check import ResNet20
        return ResNet20(1, 10), (1, 28, 28), 10
    if name == "textcnn":
        from torch_check import TextCNN
        return TextCNN(20000), None, 2
    return getattr(torchvision.models, name)(num_classes=1000), (3, 224, 224), 1000

def main():
    name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net, shape, classes = build(name)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randint(0, 20000, (batch, 64)) if shape is None else torch.randn(batch, *shape)
    y = torch.randint(0, classes, (batch,))
    net.train()
    def step():
        opt.zero_grad()
        out = net(x)
        loss = F.nll_loss(out, y) if name == "lenet" else F.cross_entropy(out, y)
        loss.backward()
        opt.step()
    dt, rss = timed(step, steps)
    print("%s %.1f %.0f" % (name, batch * steps / dt, rss))

main()
