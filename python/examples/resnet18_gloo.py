"""ResNet-18 step time under DistributedDataParallel on gloo; resnet18_ddprt.py is it with
ddprt plugged in. What it measures, and how to run both: README.md."""
import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from common import init_gloo, resnet18_loader, resnet18_parser, resnet18_run

parser = resnet18_parser()
args = parser.parse_args()

init_gloo(args, args.threads)
torch.manual_seed(args.seed)
loader, sampler = resnet18_loader(args)

model = DDP(torchvision.models.resnet18(num_classes=10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

resnet18_run(args, model, optimizer, loader, sampler, dist.get_rank(), dist.get_world_size())
dist.barrier()
dist.destroy_process_group()
