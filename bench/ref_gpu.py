#!/usr/bin/python3
"""PyTorch reference for bench/gpu_bench.sh: training samples/s (GPT: tokens/s) of the
zoo models and a small GPT on one CUDA GPU, synthetic data of the model's shape, SGD with
momentum (OPT=adamw in the environment: AdamW, weight decay 0.1, as bench/gpu_bench.sh's),
fp32 with TF32 off (ddprt's CUDA kernels are plain fp32 FMA), cuDNN's autotuner on;
PREC=bf16 / fp16 in the environment: torch.autocast at that type (fp16 with a GradScaler),
channels_last for the convolutional nets; PREC=tf32: TF32 on (ddprt's --matmul-precision
high). Two untimed steps, then `steps` timed to a device
synchronize. Prints one line: MODEL rate.

    bench/ref_gpu.py MODEL BATCH STEPS      (MODEL: lenet resnet20 textcnn resnet18 gpt gpt2)
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

DEV = os.environ.get("DEV", "cuda")  # DEV=cpu: a check of the script here
root = __file__.rsplit("/", 2)[0]
sys.path.insert(0, root + "/tools")
sys.path.insert(0, root + "/test/py")


def build(name):
    import torch_check as tc
    if name == "lenet":
        return tc.Net(), (1, 28, 28), 10
    if name == "resnet20":
        return tc.ResNet20(1, 10), (1, 28, 28), 10
    if name == "textcnn":
        return tc.TextCNN(20000), None, 2
    if name in ("gpt", "gpt2"):
        import gpt_torch as g
        torch.set_default_device(DEV)  # its forward makes its positions and mask
        # GPT small (6x384, T 256) or GPT-2 124M (12x768, vocab 50257, T 1024)
        g.L, g.C, g.H, g.V, g.CTX = (6, 384, 6, 256, 256) if name == "gpt" else (12, 768, 12, 50257, 1024)
        return g.GPT(), "gpt", g.V
    import torchvision
    return getattr(torchvision.models, name)(num_classes=1000), (3, 224, 224), 1000


def main():
    name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    prec = os.environ.get("PREC", "fp32")
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    torch.backends.cudnn.allow_tf32 = prec == "tf32"
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    dev = torch.device(DEV)
    sync = torch.cuda.synchronize if DEV == "cuda" else (lambda: None)
    net, shape, classes = build(name)
    net = net.to(dev).train()
    if amp is not None and name.startswith("resnet") and name != "resnet20":  # torchvision nets
        net = net.to(memory_format=torch.channels_last)
    scaler = torch.cuda.amp.GradScaler() if prec == "fp16" else None
    if os.environ.get("OPT", "sgd") == "adamw":
        opt = torch.optim.AdamW(net.parameters(), lr=3e-4, weight_decay=0.1)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    T = (1024 if name == "gpt2" else 256) if shape == "gpt" else 1
    if shape == "gpt":
        x = torch.randint(0, classes, (batch, T), device=dev)
        y = torch.randint(0, classes, (batch, T), device=dev)
    elif shape is None:
        x = torch.randint(0, 20000, (batch, 64), device=dev)
        y = torch.randint(0, classes, (batch,), device=dev)
    else:
        x = torch.randn(batch, *shape, device=dev)
        y = torch.randint(0, classes, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEV, dtype=amp, enabled=amp is not None):
            if shape == "gpt":
                loss = net(x, y)
            else:
                out = net(x)
                loss = F.nll_loss(out, y) if name == "lenet" else F.cross_entropy(out, y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    for _ in range(2):
        step()
    sync()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    dt = time.perf_counter() - t
    print("%s %.1f" % (name, batch * T * steps / dt))


main()
