"""The Python package under misuse, in one process (test/test_python.c): arrays from
ddprt.empty() and handles that outlive finalize(); big-endian arrays, out-of-range
integers and unknown enums refused before any C call; 2200 async handles dropped
without wait() (the default 1024 request slots) do not exhaust the slots. In one
process or under ddprt-launch: prints "rank R of W misuse ok"; any failure is an
exception (exit 1)."""
import gc
import sys

import numpy as np

import ddprt


def refused(fn, exc, words):
    try:
        fn()
    except exc as e:
        assert words in str(e), "%s: %r lacks %r" % (fn, str(e), words)
        return
    except Exception as e:  # the wrong kind (KeyError, OverflowError, ...)
        raise AssertionError("%s raised %s: %s, not %s" % (fn, type(e).__name__, e, exc.__name__))
    raise AssertionError("%s was accepted" % fn)


# Checked before init: nothing reaches the library.
refused(lambda: ddprt.init(timeout=-1), ValueError, "timeout=-1")
refused(lambda: ddprt.init(backend="carrier-pigeon"), ValueError, "backend 'carrier-pigeon'")
refused(lambda: ddprt.init(max_requests=-5), ValueError, "max_requests=-5")
refused(lambda: ddprt.init(log_level="loud"), ValueError, "log_level 'loud'")
refused(lambda: ddprt.init(rank=2 ** 40), ValueError, "rank=1099511627776")
refused(lambda: ddprt.init(rank=0.5), TypeError, "rank must be an integer")
refused(lambda: ddprt.init(port_offset=None), TypeError, "port_offset must be an integer")
refused(lambda: ddprt.init(timeout=float("nan")), ValueError, "timeout=nan")
refused(lambda: ddprt.init(token="a\0b"), ValueError, "NUL")  # C would read "a"
refused(lambda: ddprt.init(init_method="\udcff"), ValueError, "init_method='\\udcff' is not valid UTF-8")
refused(lambda: ddprt.init(rank=np.True_), TypeError, "rank must be an integer, not a bool")
assert not ddprt.is_initialized()
# empty() before init: the error, and no "Exception ignored in _Block.__del__" after it.
unraisable = []
sys.unraisablehook = unraisable.append
refused(lambda: ddprt.empty(4), ddprt.DdprtError, "not initialized")
gc.collect()
assert not unraisable, unraisable[0].exc_value

ddprt.init()
W, R = ddprt.size(), ddprt.rank()
x = np.array([1.5, 2.0], np.float32)
sx = [1.5 * W, 2.0 * W]
refused(lambda: ddprt.allreduce(x.astype(">f4")), ValueError, "byte order")
refused(lambda: ddprt.allreduce_(x.astype(">f4")), ValueError, "byte order")
refused(lambda: ddprt.broadcast_(x, root=2 ** 40), ValueError, "root=1099511627776")
refused(lambda: ddprt.broadcast_(x, root=0.0), TypeError, "root must be an integer")
refused(lambda: ddprt.allreduce(x, op=1.9), ValueError, "op 1.9")
refused(lambda: ddprt.allreduce(x, op=7), ValueError, "op 7")
refused(lambda: ddprt.empty(4, "complex128"), TypeError, "complex128")
refused(lambda: ddprt.empty(4, ">f4"), TypeError, ">f4")
refused(lambda: ddprt.empty(-1), ValueError, "out of range")
refused(lambda: ddprt.empty(4, "bfloat16"), TypeError, "ddprt.empty: dtype 'bfloat16' is not one of")
refused(lambda: ddprt.broadcast_(x, root=np.True_), TypeError, "root must be an integer, not a bool")
assert ddprt.allreduce(np.array(2.0, np.float32)).shape == ()  # 0-d stays 0-d
assert ddprt.broadcast(np.float32(2.0)) == 2.0  # a numpy scalar (its copy() is read-only)
assert list(ddprt.allreduce(x, op=np.int64(0))) == sx
assert list(ddprt.allreduce(x.astype("<f4"))) == sx

# Dropped handles give their slots back: 2200 > 1024 slots.
for i in range(1100):
    ddprt.allreduce_async(x)
    ddprt.allreduce_async_(np.ones(3, np.float32))
gc.collect()
assert list(ddprt.allreduce_async(x).wait()) == sx
try:
    import torch
except ImportError:
    torch = None
if torch is not None:  # the Horovod API's handles are ddprt handles underneath
    import ddprt.torch as hvd
    t = torch.ones(3)
    for i in range(1100):
        hvd.allreduce_async(t)
    gc.collect()
    assert hvd.allreduce(t, op=hvd.Sum).tolist() == [float(W)] * 3
ddprt.finalize()

# Outliving finalize: arrays stay writable, a pending handle raises.
ddprt.init()
a = ddprt.empty(1000)
b = ddprt.empty((2, 3), "int64")
a[:] = 1
ddprt.allreduce_(a)
assert a[999] == W
h = ddprt.allreduce_async(x)
ddprt.finalize()
ddprt.finalize()
a[0] = 2
a[999] = 7
b[1, 2] = 5
assert a[0] == 2 and a[999] == 7 and b[1, 2] == 5
refused(h.wait, ddprt.DdprtError, "finalized")
refused(lambda: ddprt.allreduce(x), ddprt.DdprtError, "not initialized")
del a, b
gc.collect()
assert not unraisable, unraisable[0].exc_value
print("rank %d of %d misuse ok" % (R, W), flush=True)
