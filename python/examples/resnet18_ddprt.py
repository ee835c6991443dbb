"""ResNet-18 (torchvision, 10 classes: 11.2 M parameters, 44.7 MB of float32 gradients
per step) trained with DistributedDataParallel on gloo, CIFAR-sized input (Fashion-MNIST
padded to 3x32x32, or synthetic), batch 32 per rank. Prints the median step time after
the warm-up steps and the test accuracy of the short run. resnet18_ddprt.py is this
script with ddprt plugged in (`diff resnet18_gloo.py resnet18_ddprt.py`).

    ddprt-launch --nproc-per-node 2 -- python3 resnet18_gloo.py --steps 50
    torchrun --nproc_per_node 2 resnet18_gloo.py                       # or one shell per host:
    python3 resnet18_gloo.py --tcp tcp://10.0.0.1:23456 --rank 0 --world-size 2
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from fmnist import FashionMNIST
import ddprt.torch  # ddprt

parser = argparse.ArgumentParser(description="ResNet-18 DDP step time")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--warmup", type=int, default=5, help="steps not timed (DDP rebuilds its buckets)")
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
parser.add_argument("--test-batches", type=int, default=4, help="test batches of 250 after the run (0: none)")
parser.add_argument("--data", type=str, default=None, help='Fashion-MNIST folder, or "synthetic"')
parser.add_argument("--tcp", type=str, default="", help="tcp://IP:PORT (default: the launcher's variables)")
parser.add_argument("--rank", type=int, default=0)
parser.add_argument("--world-size", type=int, default=2)
parser.add_argument("--compress", choices=["none", "fp16", "bf16"], default="none")  # ddprt: gradients on the wire
args = parser.parse_args()

torch.set_num_threads(args.threads)
if args.tcp:
    dist.init_process_group("gloo", init_method=args.tcp, rank=args.rank, world_size=args.world_size)
else:
    dist.init_process_group("gloo")
ddprt.init(args.tcp, args.rank, args.world_size) if args.tcp else ddprt.init()  # ddprt: the same address, port + 2
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(args.seed)

train_set = FashionMNIST(args.data, train=True, size=32, channels=3)
sampler = torch.utils.data.distributed.DistributedSampler(train_set, seed=args.seed)
loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)

model = DDP(torchvision.models.resnet18(num_classes=10))
model.register_comm_hook(None, {"none": ddprt.torch.allreduce_hook, "fp16": ddprt.torch.fp16_compress_hook,  # ddprt
                                "bf16": ddprt.torch.bf16_compress_hook}[args.compress])
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

times, losses, step = [], [], 0
while step < args.steps:
    sampler.set_epoch(step)
    for x, y in loader:
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        step += 1
        if step == args.steps:
            break

timed = times[args.warmup:] or times
if rank == 0:
    print("loss: first %.6f last %.6f" % (losses[0], losses[-1]))
    print("step time: median %.4f s, mean %.4f s over %d steps (batch %d per rank, %d ranks, %d threads)" % (
        statistics.median(timed), statistics.mean(timed), len(timed), args.batch_size, world, args.threads))

if args.test_batches and rank == 0:
    model.eval()
    test = torch.utils.data.DataLoader(FashionMNIST(args.data, train=False, size=32, channels=3), batch_size=250)
    correct = total = 0
    loss_sum = 0.0
    with torch.no_grad():
        for i, (x, y) in enumerate(test):
            if i == args.test_batches:
                break
            out = model.module(x)
            loss_sum += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
    print("Test set: Average loss: %.4f, Accuracy: %d/%d (%.2f%%)" % (loss_sum / total, correct, total,
                                                                     100.0 * correct / total))
dist.barrier()
dist.destroy_process_group()
