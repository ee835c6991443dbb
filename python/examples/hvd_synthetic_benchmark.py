"""Horovod's examples/pytorch/pytorch_synthetic_benchmark.py logic (our own copy), on CPU:
the only change a Horovod user makes is the import line. Small defaults so that a test
runs it in seconds (--model tiny_resnet at 32x32; Horovod's: resnet50 at 224x224, which
needs torchvision: --model resnet50 --image-size 224 --num-classes 1000).

    ddprt-launch --nproc-per-node 2 -- python3 hvd_synthetic_benchmark.py
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim

import ddprt.torch as hvd  # was: import horovod.torch as hvd
import hvd_models

parser = argparse.ArgumentParser(description='PyTorch Synthetic Benchmark',
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--fp16-allreduce', action='store_true', default=False, help='use fp16 compression during allreduce')
parser.add_argument('--model', type=str, default='tiny_resnet', help='model to benchmark')
parser.add_argument('--batch-size', type=int, default=8, help='input batch size')
parser.add_argument('--image-size', type=int, default=32, help='input height and width')
parser.add_argument('--num-classes', type=int, default=10, help='classes of the model output')
parser.add_argument('--num-warmup-batches', type=int, default=2, help='number of warm-up batches that don\'t count towards benchmark')
parser.add_argument('--num-batches-per-iter', type=int, default=2, help='number of batches per benchmark iteration')
parser.add_argument('--num-iters', type=int, default=3, help='number of benchmark iterations')
parser.add_argument('--use-adasum', action='store_true', default=False, help='use adasum algorithm to do reduction')
parser.add_argument('--threads', type=int, default=1, help='torch threads per rank')
parser.add_argument('--save-model', type=str, default='', help='rank 0 saves the final state_dict here (tests)')
args = parser.parse_args()

hvd.init()
torch.set_num_threads(args.threads)
torch.manual_seed(42)  # every rank builds the same model and data (rank 0's are broadcast anyway)

model = hvd_models.model(args.model, args.num_classes)

# By default, Adasum doesn't need scaling up learning rate.
lr_scaler = hvd.size() if not args.use_adasum else 1
optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)

# Horovod: (optional) compression algorithm.
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

# Horovod: wrap optimizer with DistributedOptimizer.
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), compression=compression,
                                     op=hvd.Adasum if args.use_adasum else hvd.Average)

# Horovod: broadcast parameters & optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Set up fixed fake data (each rank its own)
torch.manual_seed(1000 + hvd.rank())
data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.LongTensor(args.batch_size).random_() % args.num_classes


def benchmark_step():
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end='\n' if nl else '', flush=True)


log('Model: %s' % args.model)
log('Batch size: %d' % args.batch_size)
device = 'CPU'
log('Number of %ss: %d' % (device, hvd.size()))

# Warm-up
log('Running warmup...')
timeit.timeit(benchmark_step, number=args.num_warmup_batches)

# Benchmark
log('Running benchmark...')
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log('Iter #%d: %.1f img/sec per %s' % (x, img_sec, device))
    img_secs.append(img_sec)

# Results
img_sec_mean = np.mean(img_secs)
img_sec_conf = 1.96 * np.std(img_secs)
log('Img/sec per %s: %.1f +-%.1f' % (device, img_sec_mean, img_sec_conf))
log('Total img/sec on %d %s(s): %.1f +-%.1f' %
    (hvd.size(), device, hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))
if args.save_model and hvd.rank() == 0:
    torch.save(model.state_dict(), args.save_model)
