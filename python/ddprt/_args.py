"""Argument checks of the Python package, done before any C call: a C int or enum
would silently truncate or reinterpret what it is given (2**40 -> 0, 1.9 -> 1)."""
import numbers
import operator


def _int(v, what, lo=0, hi=(1 << 31) - 1):
    """v as an int in [lo, hi]: integers only (1.9 is not an op, 2**40 is not a rank)."""
    # numpy.bool_ and a bool tensor index as 0/1 too (root=numpy.True_ was rank 1).
    if isinstance(v, bool) or "bool" in str(getattr(v, "dtype", type(v).__name__)):
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
    # numbers.Real: numpy.float32(30) is a number of seconds too (it is not a float).
    if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 <= t < 1e9 or t != t:
        raise ValueError("ddprt.init: timeout=%r is not a number of seconds >= 0" % (t,))
    return float(t)


def _text(v, what):
    """A string for a C char *: a NUL would cut it short there, a lone surrogate would
    fail to encode with a message that does not name the argument."""
    if v is not None and not isinstance(v, (str, bytes)):
        raise TypeError("ddprt.init: %s must be a string, got %s" % (what, type(v).__name__))
    if isinstance(v, str):
        try:
            v.encode()
        except UnicodeEncodeError as e:
            raise ValueError("ddprt.init: %s=%r is not valid UTF-8 text (%s)" % (what, v, e.reason)) from None
    if v is not None and ("\0" in v if isinstance(v, str) else b"\0" in v):
        raise ValueError("ddprt.init: %s=%r contains a NUL character" % (what, v))
    return v


def _np_dtype(numpy, dtype, names):
    """numpy.dtype(dtype) for ddprt.empty: one of names in native byte order, else a
    TypeError naming the dtype (numpy's own says "data type 'bfloat16' not understood")."""
    try:
        dt = numpy.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.name not in names or not dt.isnative:
        raise TypeError("ddprt.empty: dtype %s is not one of %s in native byte order"
                        % ("%s (%r)" % (dt.name, dt.str) if dt is not None else repr(dtype), ", ".join(names)))
    return dt
