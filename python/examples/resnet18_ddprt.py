"""ResNet-18 (torchvision, 10 classes: 11.2 M parameters, 44.7 MB of float32 gradients
per step) trained with DistributedDataParallel on gloo, CIFAR-sized input (Fashion-MNIST
padded to 3x32x32, or synthetic), batch 32 per rank. Prints the median step time after
the warm-up steps and the test accuracy of the short run (the options, data and timed
loop: common.py). resnet18_ddprt.py is this script with ddprt plugged in
(`diff resnet18_gloo.py resnet18_ddprt.py`).

    ddprt-launch --nproc-per-node 2 -- python3 resnet18_gloo.py --steps 50
    torchrun --nproc_per_node 2 resnet18_gloo.py                       # or one shell per host:
    python3 resnet18_gloo.py --tcp tcp://10.0.0.1:23456 --rank 0 --world-size 2
"""
import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from common import resnet18_loader, resnet18_parser, resnet18_run
import ddprt.torch  # ddprt

parser = resnet18_parser()
parser.add_argument("--compress", choices=["none", "fp16", "bf16"], default="none")  # ddprt: gradients on the wire
args = parser.parse_args()

torch.set_num_threads(args.threads)
if args.tcp:
    dist.init_process_group("gloo", init_method=args.tcp, rank=args.rank, world_size=args.world_size)
else:
    dist.init_process_group("gloo")
ddprt.init(args.tcp, args.rank, args.world_size) if args.tcp else ddprt.init()  # ddprt: the same address, port + 2
torch.manual_seed(args.seed)
loader, sampler = resnet18_loader(args)

model = DDP(torchvision.models.resnet18(num_classes=10))
model.register_comm_hook(ddprt.torch.HookState(model), {"none": ddprt.torch.allreduce_hook,  # ddprt: buckets start early
                         "fp16": ddprt.torch.fp16_compress_hook, "bf16": ddprt.torch.bf16_compress_hook}[args.compress])
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

resnet18_run(args, model, optimizer, loader, sampler, dist.get_rank(), dist.get_world_size())
dist.barrier()
dist.destroy_process_group()
