"""Argument checks of the Python package, done before any C call: a C int or enum
would silently truncate or reinterpret what it is given (2**40 -> 0, 1.9 -> 1)."""
import operator


def _int(v, what, lo=0, hi=(1 << 31) - 1):
    """v as an int in [lo, hi]: integers only (1.9 is not an op, 2**40 is not a rank)."""
    if isinstance(v, bool):
        raise TypeError("ddprt: %s must be an integer, not a bool" % what)
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError("ddprt: %s must be an integer, got %r" % (what, v)) from None
    if not lo <= i <= hi:
        raise ValueError("ddprt: %s=%d is out of range [%d, %d]" % (what, i, lo, hi))
    return i


def _seconds(t):
    if t is None:
        return 0.0
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < 1e9 or t != t:
        raise ValueError("ddprt.init: timeout=%r is not a number of seconds >= 0" % (t,))
    return float(t)


def _text(v, what):
    if v is not None and not isinstance(v, (str, bytes)):
        raise TypeError("ddprt.init: %s must be a string, got %s" % (what, type(v).__name__))
    return v
