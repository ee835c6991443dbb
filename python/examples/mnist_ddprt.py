"""Seed 001's MNIST LeNet DDP script, on CPU with gloo; mnist_ddprt.py is it with ddprt
plugged in. What changed from the seed, and how to run both: README.md."""
from __future__ import print_function
import torch
import torch.nn.parallel
import torch.optim as optim
import ddprt.torch  # ddprt
from common import Net, init_gloo, mnist_loaders, mnist_parser, mnist_run, rendezvous_args

args = rendezvous_args(mnist_parser('PyTorch MNIST Example')).parse_args()

init_gloo(args, 1)
ddprt.init(args.tcp, args.rank, args.world_size) if args.tcp else ddprt.init()  # ddprt: the same address, port + 2
torch.manual_seed(args.seed)

train_loader, train_sampler, test_loader = mnist_loaders(args)

model = Net()
model = torch.nn.parallel.DistributedDataParallel(model)
model.register_comm_hook(None, ddprt.torch.allreduce_hook)  # ddprt: gradients averaged by ddprt
optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

mnist_run(args, model, optimizer, train_loader, train_sampler, test_loader)
