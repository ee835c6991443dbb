"""Horovod's examples/pytorch/pytorch_imagenet_resnet50.py logic (our own copy), on CPU:
the only change a Horovod user makes is the import line. It keeps the example's
checkpoint and resume (rank 0 saves after each epoch; a restart resumes from the newest
checkpoint, rank 0 loading it and broadcasting), its learning-rate warm-up and schedule,
sub-batches with --batches-per-allreduce, and Metric averaging with hvd.allreduce.
Small defaults so that a test runs it in seconds: without --train-dir a synthetic image
set (64 images 3x32x32, 10 classes) and --model tiny_resnet (Horovod's: ImageFolder
directories and resnet50, which need torchvision).

    ddprt-launch --nproc-per-node 2 -- python3 hvd_imagenet_resnet50.py --epochs 2
"""
import argparse
import math
import os

import torch
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import ddprt.torch as hvd  # was: import horovod.torch as hvd
import hvd_models

# Training settings
parser = argparse.ArgumentParser(description='PyTorch ImageNet Example',
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--train-dir', default='', help='ImageFolder training directory (default: synthetic images)')
parser.add_argument('--val-dir', default='', help='ImageFolder validation directory (default: synthetic images)')
parser.add_argument('--checkpoint-format', default='./checkpoint-{epoch}.pth.tar', help='checkpoint file format')
parser.add_argument('--fp16-allreduce', action='store_true', default=False, help='use fp16 compression during allreduce')
parser.add_argument('--batches-per-allreduce', type=int, default=1,
                    help='number of batches processed locally before executing allreduce across workers; it '
                         'multiplies total batch size.')
parser.add_argument('--use-adasum', action='store_true', default=False, help='use adasum algorithm to do reduction')
parser.add_argument('--gradient-predivide-factor', type=float, default=1.0,
                    help='apply gradient predivide factor in optimizer (default: 1.0)')
parser.add_argument('--model', default='tiny_resnet', help='model (torchvision name, or tiny_resnet)')
parser.add_argument('--synthetic', type=int, default=64, help='synthetic training images without --train-dir')
parser.add_argument('--image-size', type=int, default=32, help='synthetic images\' height and width')
parser.add_argument('--batch-size', type=int, default=8, help='input batch size for training')
parser.add_argument('--val-batch-size', type=int, default=8, help='input batch size for validation')
parser.add_argument('--epochs', type=int, default=2, help='number of epochs to train')
parser.add_argument('--base-lr', type=float, default=0.0125, help='learning rate for a single GPU')
parser.add_argument('--warmup-epochs', type=float, default=1, help='number of warmup epochs')
parser.add_argument('--momentum', type=float, default=0.9, help='SGD momentum')
parser.add_argument('--wd', type=float, default=0.00005, help='weight decay')
parser.add_argument('--seed', type=int, default=42, help='random seed')
parser.add_argument('--threads', type=int, default=1, help='torch threads per rank')


def train(epoch):
    model.train()
    train_sampler.set_epoch(epoch)
    train_loss = Metric('train_loss')
    train_accuracy = Metric('train_accuracy')
    for batch_idx, (data, target) in enumerate(train_loader):
        adjust_learning_rate(epoch, batch_idx)
        optimizer.zero_grad()
        # Split data into sub-batches of size batch_size
        for i in range(0, len(data), args.batch_size):
            data_batch = data[i:i + args.batch_size]
            target_batch = target[i:i + args.batch_size]
            output = model(data_batch)
            train_accuracy.update(accuracy(output, target_batch))
            loss = F.cross_entropy(output, target_batch)
            train_loss.update(loss)
            # Average gradients among sub-batches
            loss.div_(math.ceil(float(len(data)) / args.batch_size))
            loss.backward()
        # Gradient is applied across all ranks
        optimizer.step()
    if verbose:
        print('Train Epoch #%d: loss %.6f accuracy %.2f%%' % (epoch + 1, train_loss.avg.item(),
                                                               100. * train_accuracy.avg.item()), flush=True)


def validate(epoch):
    model.eval()
    val_loss = Metric('val_loss')
    val_accuracy = Metric('val_accuracy')
    with torch.no_grad():
        for data, target in val_loader:
            output = model(data)
            val_loss.update(F.cross_entropy(output, target))
            val_accuracy.update(accuracy(output, target))
    if verbose:
        print('Validate Epoch #%d: loss %.6f accuracy %.2f%%' % (epoch + 1, val_loss.avg.item(),
                                                                  100. * val_accuracy.avg.item()), flush=True)


# Horovod: using `lr = base_lr * hvd.size()` from the very beginning leads to worse final
# accuracy. Scale the learning rate `lr = base_lr` ---> `lr = base_lr * hvd.size()` during
# the first five epochs. See https://arxiv.org/abs/1706.02677 for details.
# After the warmup reduce learning rate by 10 on the 30th, 60th and 80th epochs.
def adjust_learning_rate(epoch, batch_idx):
    if epoch < args.warmup_epochs:
        epoch += float(batch_idx + 1) / len(train_loader)
        lr_adj = 1. / hvd.size() * (epoch * (hvd.size() - 1) / args.warmup_epochs + 1)
    elif epoch < 30:
        lr_adj = 1.
    elif epoch < 60:
        lr_adj = 1e-1
    elif epoch < 80:
        lr_adj = 1e-2
    else:
        lr_adj = 1e-3
    for param_group in optimizer.param_groups:
        param_group['lr'] = args.base_lr * hvd.size() * args.batches_per_allreduce * lr_adj


def accuracy(output, target):
    # get the index of the max log-probability
    pred = output.max(1, keepdim=True)[1]
    return pred.eq(target.view_as(pred)).cpu().float().mean()


def save_checkpoint(epoch):
    if hvd.rank() == 0:
        filepath = args.checkpoint_format.format(epoch=epoch + 1)
        state = {'model': model.state_dict(), 'optimizer': optimizer.state_dict()}
        torch.save(state, filepath)


# Horovod: average metrics from distributed training.
class Metric(object):
    def __init__(self, name):
        self.name = name
        self.sum = torch.tensor(0.)
        self.n = torch.tensor(0.)

    def update(self, val):
        self.sum += hvd.allreduce(val.detach().cpu(), name=self.name)
        self.n += 1

    @property
    def avg(self):
        return self.sum / self.n


def dataset(directory, n, seed):
    if directory:
        from torchvision import datasets, transforms  # ImageFolder needs torchvision
        return datasets.ImageFolder(directory, transform=transforms.Compose([
            transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])]))
    return hvd_models.synthetic_images(n, 10, args.image_size, seed)


if __name__ == '__main__':
    args = parser.parse_args()
    allreduce_batch_size = args.batch_size * args.batches_per_allreduce

    hvd.init()
    torch.manual_seed(args.seed)

    # If set > 0, will resume training from a given checkpoint.
    resume_from_epoch = 0
    for try_epoch in range(args.epochs, 0, -1):
        if os.path.exists(args.checkpoint_format.format(epoch=try_epoch)):
            resume_from_epoch = try_epoch
            break

    # Horovod: broadcast resume_from_epoch from rank 0 (which will have
    # checkpoints) to other ranks.
    resume_from_epoch = hvd.broadcast(torch.tensor(resume_from_epoch), root_rank=0,
                                      name='resume_from_epoch').item()

    # Horovod: print logs on the first worker.
    verbose = 1 if hvd.rank() == 0 else 0
    if verbose and resume_from_epoch:
        print('Resuming from epoch %d' % resume_from_epoch, flush=True)

    torch.set_num_threads(args.threads)

    train_dataset = dataset(args.train_dir, args.synthetic, 1)
    # Horovod: use DistributedSampler to partition data among workers. Manually specify
    # `num_replicas=hvd.size()` and `rank=hvd.rank()`.
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset, num_replicas=hvd.size(),
                                                                    rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=allreduce_batch_size,
                                               sampler=train_sampler)

    val_dataset = dataset(args.val_dir, args.synthetic // 2, 2)
    val_sampler = torch.utils.data.distributed.DistributedSampler(val_dataset, num_replicas=hvd.size(),
                                                                  rank=hvd.rank())
    val_loader = torch.utils.data.DataLoader(val_dataset, batch_size=args.val_batch_size, sampler=val_sampler)

    # Set up standard ResNet-50 model (here: args.model).
    model = hvd_models.model(args.model, 10 if not args.train_dir else 1000)

    # By default, Adasum doesn't need scaling up learning rate.
    # For sum/average with gradient Accumulation: scale learning rate by batches_per_allreduce
    lr_scaler = args.batches_per_allreduce * hvd.size() if not args.use_adasum else 1

    # Horovod: scale learning rate by the number of GPUs.
    optimizer = optim.SGD(model.parameters(), lr=(args.base_lr * lr_scaler), momentum=args.momentum,
                          weight_decay=args.wd)

    # Horovod: (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression,
        backward_passes_per_step=args.batches_per_allreduce, op=hvd.Adasum if args.use_adasum else hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor)

    # Restore from a previous checkpoint, if initial_epoch is specified.
    # Horovod: restore on the first worker which will broadcast weights to other workers.
    if resume_from_epoch > 0 and hvd.rank() == 0:
        filepath = args.checkpoint_format.format(epoch=resume_from_epoch)
        checkpoint = torch.load(filepath)
        model.load_state_dict(checkpoint['model'])
        optimizer.load_state_dict(checkpoint['optimizer'])

    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(resume_from_epoch, args.epochs):
        train(epoch)
        validate(epoch)
        save_checkpoint(epoch)
