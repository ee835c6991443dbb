#!/usr/bin/python3
"""PyTorch reference for bench/bench_gpt.sh: training tokens/s and peak RSS of a GPT-2
(test/py/gpt_torch.py's module: Hugging Face's layout, tied classifier, naive stored
attention as GPT2LMHeadModel computes it) on random tokens, 1 thread, AdamW. Prints one
line: tokens/s peak_rss_mib. AMP=bf16 in the environment runs forward and loss under
torch.autocast("cpu", torch.bfloat16) (PyTorch's CPU mixed precision, fp32 weights), the
counterpart of ddprt's --amp bf16.

    bench/ref_gpt.py LAYERS DIM HEADS VOCAB T BATCH STEPS
"""
import os
import sys

# torch.set_num_threads(1) does not reach Debian's OpenBLAS (libopenblas0-pthread), which
# then runs the linear layers on every core: a one-thread comparison that was not one
# (GPT small: 1461 tok/s on a quiet machine, 140-190 beside another process).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/test/py")
import gpt_torch as g  # noqa: E402
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ref_timing import timed  # noqa: E402


def main():
    g.L, g.C, g.H, g.V, T, B, steps = (int(a) for a in sys.argv[1:8])
    g.CTX = max(T, 1024 if g.V > 256 else T)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    m = g.GPT()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1)
    x = torch.randint(0, g.V, (B, T))
    y = torch.randint(0, g.V, (B, T))

    amp = os.environ.get("AMP", "none") == "bf16"

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = m(x, y)
        loss.backward()
        opt.step()
    dt, rss = timed(step, steps)
    print("%.1f %.0f" % (B * T * steps / dt, rss))


main()
