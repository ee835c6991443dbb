"""ResNet-18 step time under DistributedDataParallel on gloo; resnet18_ddprt.py is it with
ddprt plugged in. What it measures, and how to run both: README.md."""
import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from common import init_gloo, resnet18_loader, resnet18_parser, resnet18_run
import ddprt.torch  # ddprt

parser = resnet18_parser()
parser.add_argument("--compress", choices=["none", "fp16", "bf16"], default="none")  # ddprt: gradients on the wire
args = parser.parse_args()

init_gloo(args, args.threads)
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
