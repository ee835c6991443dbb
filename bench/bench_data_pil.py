#!/usr/bin/python3
"""Reference for `ddprt-data bench`: decode + transform throughput of Pillow +
torchvision on the same image folder, one thread (torch.set_num_threads(1)), the
ImageNet training recipe (RandomResizedCrop + RandomHorizontalFlip + ToTensor +
Normalize), the evaluation one, or decode + plain Resize. Usage: bench_data_pil.py DIR [N] [train|eval|decode] [SIZE]"""
import os, sys, time
import torch
from PIL import Image
from torchvision import transforms as T

root = os.path.join(sys.argv[1], "train")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
mode = sys.argv[3] if len(sys.argv) > 3 else "train"
size = int(sys.argv[4]) if len(sys.argv) > 4 else 224
torch.set_num_threads(1)
files = sorted(os.path.join(root, c, f) for c in sorted(os.listdir(root)) for f in sorted(os.listdir(os.path.join(root, c))))
norm = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
tf = (T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), norm]) if mode == "train"
      else T.Compose([T.Resize(size * 256 // 224), T.CenterCrop(size), T.ToTensor(), norm]) if mode == "eval"
      else T.Compose([T.Resize((size, size)), T.ToTensor()]))  # "decode": decode + a plain resize only

def load(p):
    with open(p, "rb") as f:
        return tf(Image.open(f).convert("RGB"))

for p in files[:n]:  # warm the page cache, as ddprt-data bench does
    load(p)
t0, c0 = time.perf_counter(), time.process_time()
for i in range(n):
    x = load(files[i % len(files)])
dt, wall = time.process_time() - c0, time.perf_counter() - t0  # CPU time of all threads: the machine may be shared
assert tuple(x.shape) == (3, size, size)
print("| Pillow+torchvision | %s | %d | 1 | %dx%d %s | %.1f | %.2f | %.1f |" % (
    sys.argv[1], len(files), size, size, {"train": "imagenet"}.get(mode, mode), n / dt, 1000 * dt / n, n / wall))
