#!/usr/bin/python3
"""PyTorch TextCNN on a ddprt text folder (DIR/train.tsv, DIR/test.tsv), the reference for
ddprt --model textcnn: same architecture (embedding 128, Conv1d 3/4/5 x 100, ReLU, max over
time, concat, dropout 0.5, linear), same tokens (lowercase, runs of letters/digits, first
SEQ_LEN tokens, <pad>=0 after them, <unk>=1), same vocabulary (ddprt's CKPT.vocab, one word
per line, id = line; without --vocab it is rebuilt by ddprt's rule and compared when both
are given), labels sorted by name, SGD, shuffled batches, 1 thread. Prints per epoch the
wall and process CPU time, samples/s and test accuracy.
  bench/ref_textcnn.py DIR [--vocab FILE] [--epochs 5] [--batch 64] [--lr 0.1]
                      [--momentum 0.9] [--seq-len 64] [--seed 1] [--threads 1]
"""
import argparse, collections, re, sys, time
import torch
import torch.nn.functional as F
sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tools")  # torch_check.py
from torch_check import TextCNN

TOK = re.compile(r"[^\W_]+")  # letters and digits (Unicode), as ddprt's iswalnum in C.UTF-8

def read(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            lab, txt = line.rstrip("\n").split("\t", 1)
            rows.append((lab, TOK.findall(txt.lower())))
    return rows

def build_vocab(rows):  # ddprt's rule: <pad>, <unk>, then count desc, then bytes
    c = collections.Counter(w for _, ws in rows for w in ws)
    return ["<pad>", "<unk>"] + sorted(c, key=lambda w: (-c[w], w.encode()))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir"); ap.add_argument("--vocab")
    ap.add_argument("--epochs", type=int, default=5); ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1); ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seq-len", type=int, default=64); ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tr, te = read(a.dir + "/train.tsv"), read(a.dir + "/test.tsv")
    mine = build_vocab(tr)
    if a.vocab:
        with open(a.vocab, encoding="utf-8") as f:
            vocab = f.read().split("\n")[:-1]
        same = vocab == mine
        print(f"vocabulary: {len(vocab)} words from {a.vocab}; rebuilt here: {len(mine)}, "
              f"{'identical' if same else 'DIFFERENT'}", file=sys.stderr)
    else:
        vocab = mine
    ids = {w: i for i, w in enumerate(vocab)}
    labels = sorted({l for l, _ in tr})
    lid = {l: i for i, l in enumerate(labels)}
    def tensor(rows):
        x = torch.zeros(len(rows), a.seq_len, dtype=torch.long)
        for i, (_, ws) in enumerate(rows):
            t = [ids.get(w, 1) for w in ws[:a.seq_len]]
            x[i, :len(t)] = torch.tensor(t, dtype=torch.long)
        return x, torch.tensor([lid[l] for l, _ in rows])
    xtr, ytr = tensor(tr); xte, yte = tensor(te)
    net = TextCNN(len(vocab), len(labels))
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    g = torch.Generator().manual_seed(a.seed)
    for ep in range(1, a.epochs + 1):
        net.train()
        t0, c0 = time.perf_counter(), time.process_time()
        perm = torch.randperm(len(tr), generator=g)
        for s in range(0, len(tr), a.batch):
            b = perm[s:s + a.batch]
            opt.zero_grad()
            F.cross_entropy(net(xtr[b]), ytr[b]).backward()
            opt.step()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        net.eval()
        with torch.no_grad():
            correct = (net(xte).argmax(1) == yte).sum().item()
        print(f"epoch {ep}: {dt:.3f} s wall, {cpu:.3f} s CPU, {len(tr) / dt:.0f} samples/s wall, {len(tr) / cpu:.0f} per CPU s, test accuracy {correct}/{len(te)} "
              f"({100.0 * correct / len(te):.2f}%)")

if __name__ == "__main__":
    main()
