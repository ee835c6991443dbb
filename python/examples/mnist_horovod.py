"""The seed's MNIST LeNet written the Horovod way (as Horovod's pytorch_mnist.py example),
on ddprt: the only change from a Horovod script is the import line. With the same seed
and data it prints the same loss curve as mnist_ddprt.py (2 ranks: bitwise equal).
Horovod's example scales the learning rate by hvd.size(); the DDP script does not, so
neither does this one. The options, model, train() and test() are the DDP script's
(common.py); here is how it trains in parallel.

    ddprt-launch --nproc-per-node 2 -- python3 mnist_horovod.py     # or torchrun, mpirun, srun
"""
from __future__ import print_function
import torch
import torch.optim as optim
import ddprt.torch as hvd  # was: import horovod.torch as hvd
from common import Net, mnist_loaders, mnist_parser, mnist_run

parser = mnist_parser('PyTorch MNIST Example (Horovod API)')
parser.add_argument('--fp16-allreduce', action='store_true', default=False,
                    help='use fp16 compression during allreduce')
parser.add_argument('--batches-per-allreduce', type=int, default=1,
                    help='number of batches processed locally before executing allreduce across workers')
args = parser.parse_args()

# Horovod: initialize library.
hvd.init()
torch.set_num_threads(1)
torch.manual_seed(args.seed)

# Horovod: use DistributedSampler to partition the training data.
train_loader, train_sampler, test_loader = mnist_loaders(args, num_replicas=hvd.size(), rank=hvd.rank())

model = Net()
optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

# Horovod: broadcast parameters & optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Horovod: (optional) compression algorithm.
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

# Horovod: wrap optimizer with DistributedOptimizer.
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression,
                                     backward_passes_per_step=args.batches_per_allreduce)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


# Horovod: every rank evaluates the whole test set; the averages are the same.
mnist_run(args, model, optimizer, train_loader, train_sampler, test_loader, average=metric_average)
