"""Fashion-MNIST for the examples (the seed script copied torchvision's MNIST class for
its data; this is that part): the IDX files of `apt-get install dataset-fashion-mnist`
(/usr/share/datasets/fashion-mnist), of $DDPRT_DATA, or of the folder given. root
"synthetic" (or a folder without the files) gives a small learnable stand-in, so the
examples run anywhere. size=32, channels=3: CIFAR-sized input (zero-padded, repeated)."""
import gzip
import os

import numpy as np
import torch

DEFAULT = os.environ.get("DDPRT_DATA") or "/usr/share/datasets/fashion-mnist"


def _idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def _synthetic(train):
    # Ten fixed patterns plus noise: learnable, deterministic, small.
    g = np.random.default_rng(0 if train else 1)
    n = 2048 if train else 512
    labels = g.integers(0, 10, n).astype(np.uint8)
    protos = np.random.default_rng(42).integers(0, 256, (10, 28, 28))
    images = np.clip(protos[labels] * 0.6 + g.integers(0, 100, (n, 28, 28)), 0, 255).astype(np.uint8)
    return images, labels


class FashionMNIST(torch.utils.data.Dataset):
    def __init__(self, root=None, train=True, size=28, channels=1):
        root = root or DEFAULT
        prefix = "train" if train else "t10k"
        img = os.path.join(root, prefix + "-images-idx3-ubyte.gz")
        if root != "synthetic" and os.path.exists(img):
            self.images = _idx(img)
            self.labels = _idx(os.path.join(root, prefix + "-labels-idx1-ubyte.gz"))
        else:
            self.images, self.labels = _synthetic(train)
        self.size, self.channels, self.pad = size, channels, (size - 28) // 2

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = (torch.from_numpy(self.images[i].astype(np.float32)) / 255.0 - 0.1307) / 0.3081
        if self.pad:
            x = torch.nn.functional.pad(x, (self.pad,) * 4, value=-0.1307 / 0.3081)
        return x.unsqueeze(0).expand(self.channels, -1, -1).contiguous(), int(self.labels[i])
