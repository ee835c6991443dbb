"""Seed 001's MNIST LeNet DDP script (PyTorch 1.2+, multi-host, one process per host),
made to run on CPU here: backend gloo instead of nccl, Fashion-MNIST from fmnist.py
instead of the copied torchvision MNIST class, the DistributedSampler actually given to
the DataLoader (the seed built one and left it unused: every rank trained on the whole
set), --world-size and --max-steps added. Its options, model, train() and test() are in
common.py (shared with mnist_horovod.py); here is how it trains in parallel.
mnist_ddprt.py is this script with ddprt plugged in (`diff mnist_gloo.py mnist_ddprt.py`).

    python3 mnist_gloo.py --tcp tcp://10.0.0.1:23456 --rank 0     # one shell per host
    python3 mnist_gloo.py --tcp tcp://10.0.0.1:23456 --rank 1
    ddprt-launch --nproc-per-node 2 -- python3 mnist_gloo.py      # or torchrun
"""
from __future__ import print_function
import torch
import torch.nn.parallel
import torch.distributed as dist
import torch.optim as optim
from common import Net, mnist_loaders, mnist_parser, mnist_run, rendezvous_args

args = rendezvous_args(mnist_parser('PyTorch MNIST Example')).parse_args()

torch.set_num_threads(1)
if args.tcp:
    dist.init_process_group(init_method=args.tcp, backend="gloo", rank=args.rank, world_size=args.world_size)
else:
    dist.init_process_group(backend="gloo")
torch.manual_seed(args.seed)

train_loader, train_sampler, test_loader = mnist_loaders(args)

model = Net()
model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

mnist_run(args, model, optimizer, train_loader, train_sampler, test_loader)
