"""Python-level allreduce: torch.distributed on gloo against ddprt (the package's
allreduce_ on a plain torch tensor, and on a registered one from ddprt.torch.empty), in
one job so both see the same machine: every round times each size with each of them in
turn (the order rotating per round); the table has the medians over the rounds of rank
0's time per op, and busbw = bytes / time * 2 (n - 1) / n (nccl-tests' definition).
Run by bench/python_bench.sh (same host) and test/cluster.sh --python (two namespace
hosts); any launcher works (one process per rank).
  python_allreduce.py [--min 4K] [--max 64M] [--factor 4] [--rounds 5] [--budget 256M]"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ddprt
import ddprt.torch


def nbytes(s):
    s = str(s).upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s.rstrip("KMG")) * mult)


p = argparse.ArgumentParser()
p.add_argument("--min", default="4K")
p.add_argument("--max", default="64M")
p.add_argument("--factor", type=int, default=4)
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--budget", default="256M", help="bytes per measurement (iterations = budget / size, 3..200)")
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()
torch.set_num_threads(args.threads)

dist.init_process_group("gloo")
ddprt.init()
R, W = ddprt.rank(), ddprt.size()
sizes = []
s = nbytes(args.min)
while s <= nbytes(args.max):
    sizes.append(s)
    s *= args.factor
budget = nbytes(args.budget)
plain = {n: torch.ones(n // 4) for n in sizes}
reg = {}
for n in sizes:
    reg[n] = ddprt.torch.empty(n // 4)
    reg[n].fill_(1.0)


def gloo(t, k):
    for _ in range(k):
        dist.all_reduce(t)


def ddprt_op(t, k):
    for _ in range(k):
        ddprt.allreduce_(t)


kinds = [("gloo", gloo, plain), ("ddprt", ddprt_op, plain), ("ddprt-reg", ddprt_op, reg)]
res = {(k[0], n): [] for k in kinds for n in sizes}
load0 = os.getloadavg()[0]
for rnd in range(args.rounds):
    for n in sizes:
        k = max(3, min(200, budget // n))
        order = kinds[rnd % 3:] + kinds[:rnd % 3]
        for name, fn, bufs in order:
            fn(bufs[n], 2)  # warm-up (and a sync point)
            dist.barrier()
            t0 = time.perf_counter()
            fn(bufs[n], k)
            res[(name, n)].append((time.perf_counter() - t0) / k)
load1 = os.getloadavg()[0]


def busbw(n, t):
    return n / t * 2 * (W - 1) / W / 1e9


if R == 0:
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print("# python allreduce float32 sum: %d ranks (%d on this host), torch %s gloo vs ddprt %s; %d rounds, "
          "medians of rank 0's time per op; cpu %s, %d cpus; load %.2f -> %.2f" % (
              W, ddprt.local_size(), torch.__version__, ddprt.__version__, args.rounds, cpu, os.cpu_count(),
              load0, load1))
    print("| size | gloo (us) | gloo busbw (GB/s) | ddprt (us) | ddprt busbw (GB/s) | ddprt / gloo | "
          "ddprt registered (us) | busbw (GB/s) | registered / gloo |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        tg, td, tr = (statistics.median(res[(k, n)]) for k in ("gloo", "ddprt", "ddprt-reg"))
        label = "%d KiB" % (n >> 10) if n < 1 << 20 else "%d MiB" % (n >> 20)
        print("| %s | %.1f | %.3f | %.1f | %.3f | %.2fx | %.1f | %.3f | %.2fx |" % (
            label, tg * 1e6, busbw(n, tg), td * 1e6, busbw(n, td), tg / td, tr * 1e6, busbw(n, tr), tg / tr))
    sys.stdout.flush()
dist.barrier()
ddprt.finalize()
dist.destroy_process_group()
