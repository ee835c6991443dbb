#!/usr/bin/python3
"""Loads a ddprt checkpoint into the equivalent PyTorch module with
load_state_dict(strict=True) and evaluates it on the Fashion-MNIST test set, so the
figures can be compared with ddprt's "Test set:" line. Not part of make test (it needs
Debian's python3-torch, and python3-torchvision for resnet18).

    tools/torch_check.py CKPT.safetensors MODEL [DATA_DIR]
    MODEL: lenet | resnet20 | resnet18 (resnet18: 3 input channels, the image is repeated)
"""
import gzip, json, struct, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

def load_safetensors(path):
    # safetensors without the package: 8-byte header length, JSON header, raw data.
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    hdr = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[v["dtype"]]
        out[k] = torch.from_numpy(np.frombuffer(data[a:b], dtype=dt).reshape(v["shape"]).copy())
    return out

class Net(nn.Module):  # the seed script's LeNet
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, classes)
    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        return F.log_softmax(self.fc2(F.dropout(x, training=self.training)), dim=1)

def resnet18(classes):
    # Imported here: the tests import this file for LeNet, ResNet-20 and TextCNN, and CI
    # installs python3-torch without python3-torchvision (deps/debian.txt: bench only).
    import torchvision
    return torchvision.models.resnet18(num_classes=classes)

class Block(nn.Module):  # torchvision's BasicBlock with a 1x1 projection shortcut
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))

class ResNet20(nn.Module):
    def __init__(self, cin=1, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        c = 16
        for s, w in enumerate([16, 32, 64]):
            blocks = []
            for b in range(3):
                blocks.append(Block(c, w, 2 if b == 0 and s > 0 else 1))
                c = w
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*blocks))
        self.fc = nn.Linear(64, classes)
    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

class TextCNN(nn.Module):  # Kim 2014, as ddprt's textcnn (bench/ref_models.py, ref_textcnn.py)
    def __init__(self, vocab, classes=2, dim=128):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.convs = nn.ModuleList([nn.Conv1d(dim, 100, k) for k in (3, 4, 5)])
        self.fc = nn.Linear(300, classes)
    def forward(self, x):
        e = self.embedding(x).transpose(1, 2)
        h = torch.cat([F.relu(c(e)).max(2)[0] for c in self.convs], 1)
        return self.fc(F.dropout(h, 0.5, self.training))

def idx(path):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b[4 + 4 * nd:], dtype=np.uint8).reshape(dims)

def main():
    ckpt, model = sys.argv[1], sys.argv[2]
    data = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist"
    # The trainer's checkpoints also hold the optimizer state (optim.*), which is no
    # part of the module's state_dict.
    sd = {k: v for k, v in load_safetensors(ckpt).items() if not k.startswith("optim.")}
    classes = sd["fc2.bias" if model == "lenet" else "fc.bias"].shape[0]
    net = {"lenet": lambda: Net(classes), "resnet20": lambda: ResNet20(sd["conv1.weight"].shape[1], classes),
           "resnet18": lambda: resnet18(classes)}[model]()
    net.load_state_dict(sd, strict=True)
    net.eval()
    torch.set_num_threads(1)
    x = idx(data + "/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = torch.from_numpy(idx(data + "/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    x = torch.from_numpy((x - 0.1307) / 0.3081).unsqueeze(1)
    if model == "resnet18":
        x = x.repeat(1, 3, 1, 1)
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(y), 500):
            out = net(x[i:i + 500])
            lp = out if model == "lenet" else F.log_softmax(out, 1)
            loss += F.nll_loss(lp, y[i:i + 500], reduction="sum").item()
            correct += (lp.argmax(1) == y[i:i + 500]).sum().item()
    print("PyTorch %s: load_state_dict(strict=True) ok; Test set: Average loss: %.4f, Accuracy: %d/%d" %
          (model, loss / len(y), correct, len(y)))

if __name__ == "__main__":
    main()
