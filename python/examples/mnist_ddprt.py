"""Seed 001's MNIST LeNet DDP script (PyTorch 1.2+, multi-host, one process per host),
made to run on CPU here: backend gloo instead of nccl, Fashion-MNIST from fmnist.py
instead of the copied torchvision MNIST class, the DistributedSampler actually given to
the DataLoader (the seed built one and left it unused: every rank trained on the whole
set), --world-size and --max-steps added. mnist_ddprt.py is this script with ddprt
plugged in (`diff mnist_gloo.py mnist_ddprt.py`).

    python3 mnist_gloo.py --tcp tcp://10.0.0.1:23456 --rank 0     # one shell per host
    python3 mnist_gloo.py --tcp tcp://10.0.0.1:23456 --rank 1
    ddprt-launch --nproc-per-node 2 -- python3 mnist_gloo.py      # or torchrun
"""
from __future__ import print_function
import argparse
import torch
import torch.nn as nn
import time
import torch.nn.parallel
import torch.nn.functional as F
import torch.distributed as dist
import torch.utils.data
import torch.utils.data.distributed
import torch.optim as optim
import ddprt.torch  # ddprt
from fmnist import FashionMNIST

# Training settings
parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
parser.add_argument('--batch-size', type=int, default=64, metavar='N',
                    help='input batch size for training (default: 64)')
parser.add_argument('--test-batch-size', type=int, default=1000, metavar='N',
                    help='input batch size for testing (default: 1000)')
parser.add_argument('--epochs', type=int, default=10, metavar='N',
                    help='number of epochs to train (default: 10)')
parser.add_argument('--lr', type=float, default=0.01, metavar='LR',
                    help='learning rate (default: 0.01)')
parser.add_argument('--momentum', type=float, default=0.5, metavar='M',
                    help='SGD momentum (default: 0.5)')
parser.add_argument('--seed', type=int, default=1, metavar='S',
                    help='random seed (default: 1)')
parser.add_argument('--log-interval', type=int, default=10, metavar='N',
                    help='how many batches to wait before logging training status')
parser.add_argument('--tcp', type=str, default='', metavar='URL',
                    help='tcp://IP:PORT of rank 0 (default: the launcher\'s variables)')
parser.add_argument('--rank', type=int, default=0, metavar='N',
                    help='pytorch distribued rank')
parser.add_argument('--world-size', type=int, default=2, metavar='N')
parser.add_argument('--data', type=str, default=None, help='Fashion-MNIST folder, or "synthetic"')
parser.add_argument('--max-steps', type=int, default=0, help='stop each epoch after N batches (0: all)')
args = parser.parse_args()

torch.set_num_threads(1)
if args.tcp:
    dist.init_process_group(init_method=args.tcp, backend="gloo", rank=args.rank, world_size=args.world_size)
else:
    dist.init_process_group(backend="gloo")
ddprt.init(args.tcp, args.rank, args.world_size) if args.tcp else ddprt.init()  # ddprt: the same address, port + 2
torch.manual_seed(args.seed)

train_dataset = FashionMNIST(args.data, train=True)
train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
test_loader = torch.utils.data.DataLoader(FashionMNIST(args.data, train=False),
                                          batch_size=args.test_batch_size, shuffle=True)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


model = Net()
model = torch.nn.parallel.DistributedDataParallel(model)
model.register_comm_hook(None, ddprt.torch.allreduce_hook)  # ddprt: gradients averaged by ddprt
optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)


def train(epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        if args.max_steps and batch_idx == args.max_steps:
            break
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_sampler),
                100. * batch_idx / len(train_loader), loss.item()))


def test():
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.data.max(1, keepdim=True)[1]  # get the index of the max log-probability
            correct += pred.eq(target.data.view_as(pred)).cpu().sum()
    test_loss /= len(test_loader.dataset)
    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))


tot_time = 0
for epoch in range(1, args.epochs + 1):
    train_sampler.set_epoch(epoch)
    start_cpu_secs = time.time()
    train(epoch)
    end_cpu_secs = time.time()
    print("Epoch {} of {} took {:.3f}s".format(
        epoch, args.epochs, end_cpu_secs - start_cpu_secs))
    tot_time += end_cpu_secs - start_cpu_secs
    test()

print("Total time= {:.3f}s".format(tot_time))
