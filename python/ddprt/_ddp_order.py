"""The DDP hook's order protection: a bucket's allreduce carries, after the data, every
rank's (bucket index, size), so buckets reduced in different orders on two ranks fail,
naming each rank's bucket, instead of pairing silently.

Why in the data: ddprt pairs ops by order, and its own check (tp_watch) compares only
kind, dtype and bytes: two buckets of equal size issued in swapped orders would be
summed into each other. A separate check op would cost a round trip per bucket; a tail
of DIGITS elements per rank in the same message costs nothing measurable (48 elements
at 3 ranks, against megabytes of gradients).

Encoding: rank r writes its digits into its own slot of the tail (zeros elsewhere);
the Sum then hands every rank every slot. Digits are 0..15 (and a marker 1), so each
element is one digit plus zeros: exact in float32, float16 and bfloat16, and after the
1/size scaling, which the tail skips. Sizes that differ are refused by ddprt itself
(a "collective mismatch" error, to which the hook adds its bucket)."""
import torch

DIGITS = 16  # the marker 1, the index in 4 hex digits, the size in 11 (< 2^44 elements)


def tail(w):
    """Elements after a bucket's data: none in one process."""
    return DIGITS * w if w > 1 else 0


def _digits(index, n):
    d = [1]
    for v, k in ((index, 4), (n, 11)):
        d += [(v >> (4 * j)) & 15 for j in reversed(range(k))]
    return d


def _decode(row):
    d = [int(x) for x in row]
    if d[0] != 1 or any(not 0 <= x < 16 for x in d):
        return None
    num = lambda ds: sum(x << (4 * j) for j, x in enumerate(reversed(ds)))  # noqa: E731
    return num(d[1:5]), num(d[5:])


class Stamps:
    """Per (index, size, dtype): this rank's digits as a tensor, made once."""

    def __init__(self):
        self.cache = {}

    def mine(self, index, n, dtype):
        key = (index, n, dtype)
        t = self.cache.get(key)
        if t is None:
            t = self.cache[key] = torch.tensor(_digits(index, n), dtype=dtype)
        return t

    def write(self, work, n, index, rank, w):
        """Fills work[n:] (the tail): this rank's slot, zeros elsewhere."""
        if w < 2:
            return
        t = work[n:]
        t.zero_()
        t[rank * DIGITS:(rank + 1) * DIGITS].copy_(self.mine(index, n, work.dtype))

    def check(self, work, n, index, rank, w):
        """None when every rank reduced this bucket here; else the error line."""
        if w < 2:
            return None
        mine = self.mine(index, n, work.dtype)
        slots = work[n:].view(w, DIGITS)
        if torch.equal(slots, mine.expand(w, DIGITS)):
            return None
        calls = []
        for q in range(w):
            got = _decode(slots[q].double().round().tolist())
            calls.append("rank %d: %s" % (q, "bucket %d (%d elements)" % got if got else "unreadable"))
        return ("ddprt DDP hook: the ranks' buckets do not pair (each rank must reduce DDP's buckets in the same "
                "order; ddprt pairs them by order): " + "; ".join(calls) + " (seen on rank %d)" % rank)
