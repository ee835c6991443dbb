"""The Horovod example copies (python/examples/hvd_synthetic_benchmark.py,
hvd_imagenet_resnet50.py) at 2 ranks under ddprt-launch, each against the same script
with its one import line changed to a gloo reference of Horovod's semantics
(hvd_gloo.py), bitwise:
  - synthetic benchmark: prints img/sec per CPU and the total as Horovod's does; the
    final parameters equal the reference's;
  - imagenet: 2 epochs (sub-batches with --batches-per-allreduce 2, lr warm-up, Metric
    averages): the printed losses and accuracies and the epoch-2 checkpoint (model and
    optimizer state) equal the reference's; a run stopped after epoch 1 and restarted
    resumes from its checkpoint ("Resuming from epoch 1") and ends in the same checkpoint.
usage: hvd_examples_check.py LAUNCHER. Prints "examples ok: ..."."""
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
EX = os.path.join(os.path.dirname(HERE), "examples")
IMPORT = "import ddprt.torch as hvd  # was: import horovod.torch as hvd\n"


def run(launch, script, args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), EX, HERE]))
    p = subprocess.run([launch, "--nproc-per-node", "2", "--", sys.executable, script] + args, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
    out = p.stdout.decode(errors="replace")
    if p.returncode:
        sys.exit("examples FAILED: %s %s: exit %d\n%s" % (os.path.basename(script), " ".join(args), p.returncode, out))
    return out


def gloo_copy(d, name):
    """The example with its one import line changed."""
    src = open(os.path.join(EX, name)).read()
    if src.count(IMPORT) != 1:
        sys.exit("examples FAILED: %s lacks its import line %r" % (name, IMPORT))
    path = os.path.join(d, name.replace(".py", "_gloo.py"))
    with open(path, "w") as f:
        f.write(src.replace(IMPORT, "import hvd_gloo as hvd\n"))
    return path


def same_state(a, b):
    x, y = torch.load(a), torch.load(b)

    def flat(o, pre=""):
        if isinstance(o, dict):
            for k in sorted(o, key=str):
                yield from flat(o[k], "%s/%s" % (pre, k))
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                yield from flat(v, "%s/%d" % (pre, i))
        else:
            yield pre, o
    fx, fy = list(flat(x)), list(flat(y))
    if [k for k, _ in fx] != [k for k, _ in fy]:
        return "different keys"
    for (k, u), (_, v) in zip(fx, fy):
        if torch.is_tensor(u):
            if not torch.equal(u, v):
                return "%s differs (max %g)" % (k, (u.double() - v.double()).abs().max())
        elif u != v:
            return "%s: %r vs %r" % (k, u, v)
    return None


def lines(out, words):
    return [l for l in out.splitlines() if any(w in l for w in words)]


def main(launch):
    d = tempfile.mkdtemp(prefix="hvd-examples-")
    syn = os.path.join(EX, "hvd_synthetic_benchmark.py")
    out = run(launch, syn, ["--save-model", os.path.join(d, "s.pt")])
    for want in ("Model: tiny_resnet", "Number of CPUs: 2", "Iter #2: ", "Img/sec per CPU: ", "Total img/sec on 2 CPU(s): "):
        if want not in out:
            sys.exit("examples FAILED: synthetic benchmark: no %r in:\n%s" % (want, out))
    run(launch, gloo_copy(d, "hvd_synthetic_benchmark.py"), ["--save-model", os.path.join(d, "sg.pt")])
    bad = same_state(os.path.join(d, "s.pt"), os.path.join(d, "sg.pt"))
    if bad:
        sys.exit("examples FAILED: synthetic benchmark vs the gloo reference: %s" % bad)

    img = os.path.join(EX, "hvd_imagenet_resnet50.py")
    common = ["--batches-per-allreduce", "2", "--epochs", "2"]
    for sub in ("a", "b", "g"):
        os.mkdir(os.path.join(d, sub))
    fmt = lambda sub: ["--checkpoint-format", os.path.join(d, sub, "checkpoint-{epoch}.pth.tar")]
    oa = run(launch, img, common + fmt("a"))
    og = run(launch, gloo_copy(d, "hvd_imagenet_resnet50.py"), common + fmt("g"))
    la, lg = lines(oa, ("Train Epoch", "Validate Epoch")), lines(og, ("Train Epoch", "Validate Epoch"))
    if len(la) != 4 or la != lg:
        sys.exit("examples FAILED: imagenet metrics, ddprt vs gloo:\n%s\n---\n%s" % ("\n".join(la), "\n".join(lg)))
    ck = lambda sub: os.path.join(d, sub, "checkpoint-2.pth.tar")
    bad = same_state(ck("a"), ck("g"))
    if bad:
        sys.exit("examples FAILED: imagenet checkpoint vs the gloo reference: %s" % bad)
    run(launch, img, ["--batches-per-allreduce", "2", "--epochs", "1"] + fmt("b"))
    ob = run(launch, img, common + fmt("b"))
    if "Resuming from epoch 1" not in ob or "Train Epoch #1" in ob:
        sys.exit("examples FAILED: imagenet did not resume from epoch 1:\n%s" % ob)
    bad = same_state(ck("a"), ck("b"))
    if bad:
        sys.exit("examples FAILED: imagenet resumed vs uninterrupted: %s" % bad)
    print("examples ok: synthetic benchmark and imagenet (2 epochs, resumed after 1) bitwise equal to the gloo "
          "reference of Horovod's semantics: %s" % la[-1].split("] ")[-1])


if __name__ == "__main__":
    main(sys.argv[1])
