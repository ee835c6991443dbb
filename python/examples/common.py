"""What the example scripts share, so that each script shows only how it trains in
parallel (gloo, gloo with ddprt's hook, the Horovod API): the seed 001 MNIST script's
options (its flags, defaults and help), LeNet, data, training and test functions, as that
script wrote them; and the ResNet-18 scripts' options and timed loop. Data: fmnist.py."""
from __future__ import print_function
import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data.distributed
from fmnist import FashionMNIST


def init_gloo(args, threads):
    """torch on `threads` threads, and the gloo process group: at args.tcp (the seed's
    --tcp, --rank, --world-size), else from the launcher's variables."""
    torch.set_num_threads(threads)
    if args.tcp:
        dist.init_process_group(init_method=args.tcp, backend="gloo", rank=args.rank, world_size=args.world_size)
    else:
        dist.init_process_group(backend="gloo")


def rendezvous_args(parser):
    """The seed's multi-host options: one process per host, started by hand."""
    parser.add_argument('--tcp', type=str, default='', metavar='URL',
                        help='tcp://IP:PORT of rank 0 (default: the launcher\'s variables)')
    parser.add_argument('--rank', type=int, default=0, metavar='N', help='pytorch distributed rank')
    parser.add_argument('--world-size', type=int, default=2, metavar='N')
    return parser


# --- MNIST LeNet (seed 001) ---

def mnist_parser(description):
    parser = argparse.ArgumentParser(description=description)
    # The seed's options and help texts, each default written once (argparse prints it).
    for flag, kind, default, metavar, text in (
            ('--batch-size', int, 64, 'N', 'input batch size for training'),
            ('--test-batch-size', int, 1000, 'N', 'input batch size for testing'),
            ('--epochs', int, 10, 'N', 'number of epochs to train'),
            ('--lr', float, 0.01, 'LR', 'learning rate'),
            ('--momentum', float, 0.5, 'M', 'SGD momentum'),
            ('--seed', int, 1, 'S', 'random seed')):
        parser.add_argument(flag, type=kind, default=default, metavar=metavar, help=text + ' (default: %(default)s)')
    parser.add_argument('--log-interval', type=int, default=10, metavar='N',
                        help='how many batches to wait before logging training status')
    parser.add_argument('--data', type=str, default=None, help='Fashion-MNIST folder, or "synthetic"')
    parser.add_argument('--max-steps', type=int, default=0, help='stop each epoch after N batches (0: all)')
    return parser


def mnist_loaders(args, **sampler_args):
    """(train_loader, train_sampler, test_loader); sampler_args: the DistributedSampler's
    num_replicas and rank where no process group gives them."""
    train_dataset = FashionMNIST(args.data, train=True)
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset, **sampler_args)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = torch.utils.data.DataLoader(FashionMNIST(args.data, train=False),
                                              batch_size=args.test_batch_size, shuffle=True)
    return train_loader, train_sampler, test_loader


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


def mnist_train(args, model, optimizer, train_loader, train_sampler, epoch):
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


def mnist_test(model, test_loader, average=None):
    """average(value, name): the mean over the ranks (Horovod's metric_average), if given."""
    model.eval()
    test_loss = 0.
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.data.max(1, keepdim=True)[1]  # get the index of the max log-probability
            correct += pred.eq(target.data.view_as(pred)).cpu().sum()
    test_loss /= len(test_loader.dataset)
    if average:
        test_loss = average(test_loss, 'avg_loss')
    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))


def mnist_run(args, model, optimizer, train_loader, train_sampler, test_loader, average=None):
    """The seed's epochs: train, time, test."""
    tot_time = 0
    for epoch in range(1, args.epochs + 1):
        train_sampler.set_epoch(epoch)
        start_cpu_secs = time.time()
        mnist_train(args, model, optimizer, train_loader, train_sampler, epoch)
        end_cpu_secs = time.time()
        print("Epoch {} of {} took {:.3f}s".format(epoch, args.epochs, end_cpu_secs - start_cpu_secs))
        tot_time += end_cpu_secs - start_cpu_secs
        mnist_test(model, test_loader, average)
    print("Total time= {:.3f}s".format(tot_time))


# --- ResNet-18 step time ---

def resnet18_parser():
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
    return rendezvous_args(parser)


def resnet18_loader(args):
    """(loader, sampler): CIFAR-sized Fashion-MNIST, a DistributedSampler of the process group."""
    train_set = FashionMNIST(args.data, train=True, size=32, channels=3)
    sampler = torch.utils.data.distributed.DistributedSampler(train_set, seed=args.seed)
    return torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler,
                                       drop_last=True), sampler


def resnet18_run(args, model, optimizer, loader, sampler, rank, world):
    """args.steps timed steps; rank 0 prints the losses, the step times and the test set's
    accuracy (model: the DDP wrapper)."""
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
    if rank != 0:
        return
    print("loss: first %.6f last %.6f" % (losses[0], losses[-1]))
    print("step time: median %.4f s, mean %.4f s over %d steps (batch %d per rank, %d ranks, %d threads)" % (
        statistics.median(timed), statistics.mean(timed), len(timed), args.batch_size, world, args.threads))
    if not args.test_batches:
        return
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
