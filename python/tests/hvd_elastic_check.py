"""hvd.elastic over ddprt: a job stopped at a restart point, or by a dead peer, resumes
from its state file and ends with the parameters of an uninterrupted run, bit for bit.

  hvd_elastic_check.py drive [W]       the scenarios below, W ranks (default 2), each
                                       rank a process started with torchrun's variables
  hvd_elastic_check.py launch LAUNCHER  two ddprt-launch --nnodes 1:2 nodes (launched())
  hvd_elastic_check.py worker OUT ...  one rank (the driver starts them)

Scenarios (one state file each; DDPRT_ELASTIC names a file that nobody creates unless
said):
  A  uninterrupted: the reference parameters; the state file is removed at the end.
  B  rank 1 creates the DDPRT_ELASTIC file after commit 10: every rank stops at commit
     11 with exit 75 and the file holds commit 11; the rerun resumes there (epoch and
     batch from the file) and ends with A's parameters.
  C  rank 1 dies (SIGKILL) before its step after commit 7: the others get
     HorovodInternalError, restore commit 7 and exit 1; the rerun ends with A's
     parameters.
Prints "elastic ok: ..." when all hold."""
import os
import signal
import socket
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

EPOCHS, N, B = 3, 64, 4  # N divisible by B * ranks: no padded samples


def worker(out, grow_at, kill_at, wait_at):
    import ddprt.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(N, 8, generator=g), torch.randn(N, 4, generator=g))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    loader = torch.utils.data.DataLoader(data, batch_size=B, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, batch=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(1)])

    @hvd.elastic.run
    def train(state):
        print("rank %d start: epoch %d batch %d commit %d resets %d" % (hvd.rank(), state.epoch, state.batch,
                                                                       state.commits, len(resets)), flush=True)
        while state.epoch < EPOCHS:
            for i, (x, y) in enumerate(loader):
                if hvd.rank() == 1 and state.commits == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                opt.zero_grad()
                F.mse_loss(model(x), y).backward()
                opt.step()
                state.sampler.record_batch(i, B)
                state.batch += 1
                state.commit()
                if hvd.rank() == 1 and state.commits == grow_at:
                    open(os.environ["DDPRT_ELASTIC"], "w").close()  # the launcher's GROW, faked
                if state.commits == wait_at and hvd.size() == 1:
                    print("rank 0 waits for a node to join", flush=True)
                    for _ in range(2400):  # the launcher's GROW: its DDPRT_ELASTIC file
                        if os.path.exists(os.environ["DDPRT_ELASTIC"]):
                            break
                        time.sleep(0.05)
            state.epoch, state.batch = state.epoch + 1, 0
            state.sampler.set_epoch(state.epoch)
            state.commit()
        return state.commits

    n = train(state)
    if hvd.rank() == 0:
        torch.save(model.state_dict(), out)
    print("rank %d of %d elastic done: %d commits" % (hvd.rank(), hvd.size(), n), flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def job(d, tag, w, extra=()):
    """Runs W ranks; [(exit status, stdout + stderr)] per rank."""
    port = free_port()
    procs = []
    for r in range(w):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(w),
                   LOCAL_RANK=str(r), DDPRT_ELASTIC=os.path.join(d, tag + ".grow"),
                   DDPRT_ELASTIC_STATE=os.path.join(d, tag + ".state"), DDPRT_TIMEOUT="60")
        procs.append(subprocess.Popen([sys.executable, __file__, "worker", os.path.join(d, tag + ".pt")] +
                                      list(extra), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    res = []
    for p in procs:
        o, _ = p.communicate(timeout=240)
        res.append((p.returncode, o.decode(errors="replace")))
    return res


def expect(cond, what, res):
    if not cond:
        sys.exit("elastic FAILED: %s\n%s" % (what, "\n".join("--- rank %d (exit %d)\n%s" % (r, c, o)
                                                             for r, (c, o) in enumerate(res))))


def same(a, b):
    x, y = torch.load(a), torch.load(b)
    return list(x) == list(y) and all(torch.equal(x[k], y[k]) for k in x)


def drive(w):
    import tempfile
    d = tempfile.mkdtemp(prefix="hvd-elastic-")
    a = job(d, "a", w)
    expect(all(c == 0 for c, _ in a), "A: exit", a)
    expect(not os.path.exists(os.path.join(d, "a.state")), "A: the state file is left after the end", a)
    # B: stopped at the restart point after commit 11, then resumed.
    b = job(d, "b", w, ["--grow-at", "10"])
    expect(all(c == 75 for c, _ in b), "B: not every rank exited 75", b)
    expect(all("stopping at commit 11" in o for _, o in b), "B: not at commit 11", b)
    expect(os.path.exists(os.path.join(d, "b.state")) and not os.path.exists(os.path.join(d, "b.pt")),
           "B: no state file (or it finished)", b)
    saved = torch.load(os.path.join(d, "b.state"))
    expect(saved["commits"] == 11 and saved["state"]["epoch"] == 1 and saved["state"]["batch"] == 2,
           "B: the state file holds commit %d epoch %d batch %d" % (saved["commits"], saved["state"]["epoch"],
                                                                     saved["state"]["batch"]), b)
    os.remove(os.path.join(d, "b.grow"))  # the launcher removes it once served
    b2 = job(d, "b", w)
    expect(all(c == 0 for c, _ in b2), "B rerun: exit", b2)
    expect(all("start: epoch 1 batch 2 commit 11 resets 1" in o for _, o in b2), "B rerun: did not resume", b2)
    expect(same(os.path.join(d, "a.pt"), os.path.join(d, "b.pt")), "B: parameters differ from A's", b2)
    # C: rank 1 dies before its step after commit 7.
    c = job(d, "c", w, ["--kill-at", "7"])
    expect(c[1][0] == -signal.SIGKILL and all(c[r][0] == 1 for r in range(w) if r != 1), "C: exits", c)
    expect(all("HorovodInternalError" in o or "restored commit 7" in o for r, (_, o) in enumerate(c) if r != 1),
           "C: no restore", c)
    c2 = job(d, "c", w)
    expect(all(x == 0 for x, _ in c2) and "commit 7 resets 1" in c2[0][1], "C rerun", c2)
    expect(same(os.path.join(d, "a.pt"), os.path.join(d, "c.pt")), "C: parameters differ from A's", c2)
    print("elastic ok: %d ranks: stopped at commit 11 (exit 75), resumed at epoch 1 batch 2; a dead peer: restored "
          "commit 7, resumed; parameters bitwise equal to the uninterrupted run's" % w)


def launched(launch):
    """ddprt-launch --nnodes 1:2, one rank per node: node 0 starts alone and waits after
    commit 3 for node 1, whose arrival makes node 0's launcher create the DDPRT_ELASTIC
    file; rank 0 stops at commit 4 (exit 75), and round 1 runs both nodes, resuming from
    the state file beside node 0's DDPRT_ELASTIC file (node 1 has none: rank 0's state is
    broadcast)."""
    import tempfile
    d = tempfile.mkdtemp(prefix="hvd-elastic-launch-")
    port = free_port()
    env = dict(os.environ, TMPDIR=d, DDPRT_ELASTIC_WAIT="1", DDPRT_TIMEOUT="120")
    env.pop("DDPRT_ELASTIC_STATE", None)
    nodes = []
    for n in (0, 1):
        out = open(os.path.join(d, "node%d.log" % n), "wb")
        cmd = [launch, "--nnodes", "1:2", "--node-rank", str(n), "--nproc-per-node", "1", "--master-addr",
               "127.0.0.1", "--master-port", str(port), "--", sys.executable, __file__, "worker",
               os.path.join(d, "e%d.pt" % n), "--wait-at", "3"]
        nodes.append((subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True),
                      out.name))
        if n == 0:
            for _ in range(2400):  # node 0 runs alone: then node 1 comes
                if "rank 0 waits for a node" in open(out.name, errors="replace").read():
                    break
                time.sleep(0.05)
    res = []
    for p, name in nodes:
        try:
            p.wait(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # this node's launcher and its rank
            p.wait()
        res.append((p.returncode, open(name, errors="replace").read()))
    expect(all(c == 0 for c, _ in res), "launched: exits", res)
    o0, o1 = res[0][1], res[1][1]
    expect("round 1: 2 node(s), ranks 0..0 of 2" in o0 and "stopping at commit 4" in o0, "launched: no round 1", res)
    expect("rank 0 start: epoch 0 batch 4 commit 4 resets 1" in o0 and "rank 0 of 2 elastic done" in o0,
           "launched: rank 0 did not resume at commit 4 on 2 ranks", res)
    expect("rank 1 start: epoch 0 batch 4 commit 4 resets 0" in o1 and "rank 1 of 2 elastic done" in o1,
           "launched: rank 1 did not get rank 0's state", res)
    expect(not [f for f in os.listdir(d) if f.endswith(".state")], "launched: a state file is left", res)
    print("elastic launch ok: ddprt-launch --nnodes 1:2: 1 rank to commit 4, exit 75, 2 ranks resumed at commit 4")


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        launched(sys.argv[2])
    elif sys.argv[1] == "drive":
        drive(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
    else:
        args = sys.argv[3:]
        opt = {args[i]: int(args[i + 1]) for i in range(0, len(args), 2)}
        worker(sys.argv[2], opt.get("--grow-at", -1), opt.get("--kill-at", -1), opt.get("--wait-at", -1))
