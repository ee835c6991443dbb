"""Models and data for the Horovod example copies when torchvision is missing (Debian's
torch 1.13 has no python3-torchvision): models.NAME() is torchvision's when it can be
imported, else "tiny_resnet" (a 2-block ResNet for 3x32x32 input) stands in; and a
deterministic synthetic image set in place of an ImageFolder."""
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import torchvision.models as _tv
except ImportError:  # Debian: no torchvision
    _tv = None


class Block(nn.Module):
    """ResNet's basic block (two 3x3 convs with BN, the shortcut a 1x1 conv where the shape changes)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.skip(x))


class TinyResNet(nn.Module):
    """conv 16 -> block 16 -> block 32 (stride 2) -> average pool -> fc: 24 k parameters."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layers = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def model(name, num_classes=1000):
    """torchvision's models.NAME(num_classes=...), or TinyResNet for "tiny_resnet"."""
    if name == "tiny_resnet":
        return TinyResNet(num_classes)
    if _tv is None:
        raise SystemExit("model %s needs torchvision (not installed): use --model tiny_resnet" % name)
    return getattr(_tv, name)(num_classes=num_classes)


def synthetic_images(n, classes, size, seed):
    """n images 3 x size x size with labels, the same on every rank (an ImageFolder stand-in)."""
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.randn(n, 3, size, size, generator=g),
                                          torch.randint(0, classes, (n,), generator=g))
