#!/usr/bin/env python3
"""Where a start-up probe's two results differ, and which simple bug explains it.

The probes (DDPRT_PROBE_DUMP=DIR, set by bench/gpu_device.sh) leave NAME.got.f32 (the
path under test) and NAME.want.f32 (the path it replaces) when they disagree on a GPU.
For each pair this prints the count beyond the bound, the mismatches by row mod 16 and
column mod 8 (fragment layouts repeat there), and tests the bugs a layout error makes:
got a multiple of want (a scale), rows or columns permuted inside 64-row / 64-column
blocks by an XOR or a shift (a fragment index, a swizzle), only some rows or columns
wrong (an edge tile, a box), got the transpose of want.

    python3 bench/probe_diff.py DIR [--tol 1e-4]      (or one NAME.got.f32)
"""
import glob
import os
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        head = f.read(16)
        if len(head) != 16 or head[:8] != b"DDPRTF32":
            sys.exit(f"{path}: not a probe dump (no DDPRTF32 header)")
        rows, cols = np.frombuffer(head[8:], dtype="<u4")
        v = np.fromfile(f, dtype="<f4")
    if v.size != int(rows) * int(cols):
        sys.exit(f"{path}: {v.size} floats, the header says {rows} x {cols}")
    return v.reshape(int(rows), int(cols)).astype(np.float64)


def close(a, b, bound):
    return np.abs(a - b) <= bound


def block_map(got, want, bound, axis):
    """The XOR mask or shift (inside 64-blocks along axis) that maps want onto got, if one does."""
    n = got.shape[axis]
    idx = np.arange(n)
    best = None
    cands = [("^", m) for m in range(1, 64)] + [("+", d) for d in range(-63, 64) if d]
    for op, k in cands:
        src = (idx ^ k) if op == "^" else (idx // 64 * 64 + (idx % 64 + k) % 64)
        ok = src < n
        if not ok.all():
            src = np.where(ok, src, idx)
        w = np.take(want, src, axis=axis)
        frac = close(got, w, bound).mean()
        if best is None or frac > best[0]:
            best = (frac, op, k)
    return best


def report(gp, tol):
    wp = gp[: -len(".got.f32")] + ".want.f32"
    got, want = load(gp), load(wp)
    name = os.path.basename(gp)[: -len(".got.f32")]
    if got.shape != want.shape:
        print(f"{name}: got {got.shape}, want {want.shape}")
        return
    big = np.nanmax(np.abs(want)) if want.size else 0.0
    bound = tol * big
    bad = ~close(got, want, bound)
    r, c = got.shape
    print(f"{name}: {r} x {c}, {int(bad.sum())} of {bad.size} beyond {tol:g} of {big:.4g}")
    if not bad.any():
        return
    grid = np.zeros((16, 8), dtype=int)
    for i, j in zip(*np.nonzero(bad)):
        grid[i % 16, j % 8] += 1
    print("  mismatches by row mod 16 (lines) x column mod 8:")
    for i in range(16):
        print("   %2d " % i + " ".join("%5d" % x for x in grid[i]))
    rows_bad, cols_bad = np.nonzero(bad.any(axis=1))[0], np.nonzero(bad.any(axis=0))[0]
    if len(rows_bad) < r:
        print(f"  only rows {ranges(rows_bad)} differ")
    if len(cols_bad) < c:
        print(f"  only columns {ranges(cols_bad)} differ")
    s = np.dot(got.ravel(), want.ravel()) / max(np.dot(want.ravel(), want.ravel()), 1e-300)
    if abs(s - 1) > 1e-6 and close(got, s * want, 4 * bound + 1e-6 * abs(s) * big).all():
        print(f"  got = {s:.6g} x want (a scale: alpha, a loss scale, a k range counted twice or half)")
    for axis, what in ((0, "row"), (1, "column")):
        frac, op, k = block_map(got, want, bound, axis)
        if frac == 1.0:
            f = f"{what} ^ {k}" if op == "^" else f"{what} {'+' if k > 0 else '-'} {abs(k)} (mod 64)"
            print(f"  got {what} i = want {what} {f.replace(what, 'i')}: all match (a fragment index or swizzle)")
        elif frac > 0.9:
            print(f"  closest {what} map: i {op} {k} matches {frac:.1%}")
    if r == c and close(got, want.T, bound).all():
        print("  got = want transposed (a transpose immediate or an operand's major)")


def ranges(ix):
    out, i = [], 0
    while i < len(ix):
        j = i
        while j + 1 < len(ix) and ix[j + 1] == ix[j] + 1:
            j += 1
        out.append(str(ix[i]) if i == j else f"{ix[i]}-{ix[j]}")
        i = j + 1
    return ",".join(out[:40]) + (",..." if len(out) > 40 else "")


def main(argv):
    tol = 1e-4
    if "--tol" in argv:
        i = argv.index("--tol")
        tol = float(argv[i + 1])
        del argv[i : i + 2]
    if len(argv) != 1:
        sys.exit(__doc__)
    p = argv[0]
    files = sorted(glob.glob(os.path.join(p, "*.got.f32"))) if os.path.isdir(p) else [p]
    if not files:
        sys.exit(f"{p}: no *.got.f32 (the probes agreed, or DDPRT_PROBE_DUMP was not set)")
    for gp in files:
        report(gp, tol)


if __name__ == "__main__":
    main(sys.argv[1:])
