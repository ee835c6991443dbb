"""PyTorch 1.13 side of test/test_gpt.c: a GPT-2 module with Hugging Face's
GPT2LMHeadModel names and layouts (Conv1D weights [in, out], lm_head tied to wte).

  gpt_torch.py prep DIR     initial weights DIR/init.st (safetensors, no lm_head: it is
                            wte) and token shards DIR/data/p_{train,val}.bin
  gpt_torch.py check DIR LOSSES VAL
                            10 AdamW steps on the same windows; prints the largest
                            relative loss difference, the largest parameter difference
                            against ddprt's DIR/out.st (loaded with strict=True), and the
                            validation loss of ddprt's checkpoint against VAL
Exit 0 when within the tolerances (loss 1e-5 relative, parameters 1e-4, validation
1e-4 + the 4 printed decimals)."""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

L, C, H, CTX, V, T, B = 2, 32, 4, 16, 64, 16, 4
LR, WD, STEPS = 1e-3, 0.1, 10


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(C, 3 * C)
        self.attn.c_proj = Conv1D(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(C, 4 * C)
        self.mlp.c_proj = Conv1D(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(C // H)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        a = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, C)
        x = x + self.attn.c_proj(a)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class Conv1D(nn.Module):
    def __init__(self, nin, nout):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nin, nout) * 0.02)
        self.bias = nn.Parameter(torch.randn(nout) * 0.02)

    def forward(self, x):
        return x @ self.weight + self.bias


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(V, C)
        self.transformer.wpe = nn.Embedding(CTX, C)
        self.transformer.h = nn.ModuleList([Block() for _ in range(L)])
        self.transformer.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx, targets):
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.shape[1]))
        for blk in tr.h:
            x = blk(x)
        logits = self.lm_head(tr.ln_f(x))
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))


def save_st(path, tensors):
    head, off, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().astype("<f4").tobytes()
        head[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, d in head.items():
        if name == "__metadata__" or d["dtype"] != "F32":
            continue
        a, b = d["data_offsets"]
        buf = bytearray(raw[8 + n + a:8 + n + b])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(d["shape"]).clone()
    return out


def write_shard(path, toks):
    hdr = [20240520, 1, len(toks), V] + [0] * 252
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks))


def windows(toks, n):
    t = torch.tensor(toks, dtype=torch.long)
    x = torch.stack([t[i * T:i * T + T] for i in range(n)])
    y = torch.stack([t[i * T + 1:i * T + T + 1] for i in range(n)])
    return x, y


def tokens(seed, n):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (n,), generator=g).tolist()


def main():
    mode, d = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if mode == "prep":
        m = GPT()
        sd = {k: v for k, v in m.state_dict().items() if k != "lm_head.weight"}
        save_st(d + "/init.st", sd)
        write_shard(d + "/data/p_train.bin", tokens(1, B * T + 1))
        write_shard(d + "/data/p_val.bin", tokens(2, 2 * T + 1))
        return 0
    want = [float(v) for v in sys.argv[3].split(",")]
    val_ddprt = float(sys.argv[4])
    m = GPT()
    m.load_state_dict(load_st(d + "/init.st"), strict=False)
    decay = [p for n, p in m.named_parameters() if p.dim() >= 2]
    other = [p for n, p in m.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": other, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.999), eps=1e-8)
    x, y = windows(tokens(1, B * T + 1), B)
    worst = 0.0
    for step in range(STEPS):
        opt.zero_grad()
        loss = m(x, y)
        loss.backward()
        opt.step()
        worst = max(worst, abs(loss.item() - want[step]) / abs(loss.item()))
        print("step %d: torch %.6f ddprt %.6f" % (step + 1, loss.item(), want[step]))
    m2 = GPT()
    sd = {k: v for k, v in load_st(d + "/out.st").items() if not k.startswith("optim.")}  # ddprt's optimizer state
    m2.load_state_dict(sd, strict=True)
    pdiff = max((a - b).abs().max().item() for a, b in zip(m.state_dict().values(), m2.state_dict().values()))
    xv, yv = windows(tokens(2, 2 * T + 1), 2)
    with torch.no_grad():
        val = m2(xv, yv).item()
    print("loss rel diff %.3g, param max diff %.3g, val loss of ddprt's checkpoint %.6f (ddprt %.4f)"
          % (worst, pdiff, val, val_ddprt))
    ok = worst <= 1e-5 and pdiff <= 1e-4 and abs(val - val_ddprt) <= 1.5e-4
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
