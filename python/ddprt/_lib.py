"""Finds and loads libddprt.so and declares the C API of include/ddprt.h to ctypes.

Where the library is looked for, first match wins: $DDPRT_LIB (a path), the package's
own folder (what `make python` / `pip install ./python` put there), the checkout's
build folder (running from a git checkout after `make`), then the system's loader
(`make install`).

Everything here mirrors include/ddprt.h by hand: the struct, the enums, the calls.
python/tests/abi_check.py (run by `make test`) compares them with the C compiler's
sizeof/offsetof and values, and get() refuses a library whose ddprt_api_version()
is not API_VERSION."""
import ctypes
import ctypes.util
import os

c_int, c_size_t, c_double, c_char_p, c_void_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_double, ctypes.c_char_p, ctypes.c_void_p
SONAME = "libddprt.so.0"
API_VERSION = 3  # include/ddprt.h's DDPRT_API_VERSION that this file mirrors

# include/ddprt.h's enum constants, by their C names.
ENUMS = {
    "DDPRT_FLOAT32": 0, "DDPRT_FLOAT64": 1, "DDPRT_FLOAT16": 2, "DDPRT_BFLOAT16": 3, "DDPRT_INT32": 4,
    "DDPRT_INT64": 5, "DDPRT_UINT8": 6,
    "DDPRT_SUM": 0, "DDPRT_PROD": 1, "DDPRT_MIN": 2, "DDPRT_MAX": 3, "DDPRT_AVG": 4,
    "DDPRT_OK": 0, "DDPRT_EIO": -1, "DDPRT_ETIMEOUT": -2, "DDPRT_ECLOSED": -3, "DDPRT_EINVAL": -4,
    "DDPRT_ENOMEM": -5, "DDPRT_EBUSY": -6,
}


class Opts(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t), ("init_method", c_char_p), ("rank", c_int), ("world_size", c_int),
        ("local_rank", c_int), ("timeout_s", c_double), ("backend", c_char_p), ("token", c_char_p),
        ("port_offset", c_int), ("log_level", c_int), ("max_requests", c_int),
    ]


def _candidates():
    env = os.environ.get("DDPRT_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, n) for n in (SONAME, "libddprt.so")]
    checkout = os.path.dirname(os.path.dirname(here))
    out.append(os.path.join(checkout, os.environ.get("DDPRT_BUILD") or "build", "libddprt.so"))
    found = ctypes.util.find_library("ddprt")
    out += [found] if found else []
    out.append(SONAME)  # LD_LIBRARY_PATH, ld.so.cache
    return out


def signatures():
    """{name: (restype, argtypes)} of every call of include/ddprt.h."""
    P = ctypes.POINTER
    sigs = {
        "ddprt_opts_default": (None, [P(Opts)]),
        "ddprt_init": (c_int, [P(c_void_p), P(Opts)]),
        "ddprt_finalize": (None, [c_void_p]),
        "ddprt_abort": (None, [c_void_p, c_char_p]),
        "ddprt_rank": (c_int, [c_void_p]),
        "ddprt_size": (c_int, [c_void_p]),
        "ddprt_local_rank": (c_int, [c_void_p]),
        "ddprt_local_size": (c_int, [c_void_p]),
        "ddprt_last_error": (c_char_p, []),
        "ddprt_comm_error": (c_char_p, [c_void_p]),
        "ddprt_version": (c_char_p, []),
        "ddprt_api_version": (c_int, []),
        "ddprt_dtype_size": (c_size_t, [c_int]),
        "ddprt_mem_alloc": (c_void_p, [c_void_p, c_size_t]),
        "ddprt_mem_free": (None, [c_void_p, c_void_p]),
        "ddprt_allreduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "ddprt_broadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "ddprt_allgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int]),
        "ddprt_allgatherv": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, P(c_size_t), P(c_size_t), c_int]),
        "ddprt_reduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "ddprt_alltoallv": (c_int, [c_void_p, c_void_p, P(c_size_t), P(c_size_t), c_void_p, P(c_size_t), P(c_size_t),
                                    c_int]),
        "ddprt_barrier": (c_int, [c_void_p]),
        "ddprt_iallreduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, P(c_void_p)]),
        "ddprt_ibroadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, P(c_void_p)]),
        "ddprt_iallgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, P(c_void_p)]),
        "ddprt_ireduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, P(c_void_p)]),
        "ddprt_wait": (c_int, [c_void_p]),
        "ddprt_test": (c_int, [P(c_void_p), P(c_int)]),
    }
    return sigs


def _declare(lib):
    for name, (res, args) in signatures().items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args


def _api_version(lib):
    """The library's API (1 for libraries that predate ddprt_api_version)."""
    try:
        f = lib.ddprt_api_version
    except AttributeError:
        return 1
    f.restype, f.argtypes = c_int, []
    return f()


_lib = None
path = None


def get():
    """The loaded library (ctypes.CDLL: every call releases the GIL while it runs)."""
    global _lib, path
    if _lib is not None:
        return _lib
    tried = []
    for cand in _candidates():
        if os.sep in cand and not os.path.exists(cand):
            tried.append(cand + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            tried.append("%s (%s)" % (cand, e))
            continue
        have = _api_version(lib)
        if have != API_VERSION:
            # Its calls' signatures differ from the ones declared here: calling them
            # would pass arguments in the wrong places.
            raise ImportError("ddprt: %s implements the C API version %d, this package needs version %d: "
                              "rebuild the library (make) or the package (make python), or set DDPRT_LIB"
                              % (cand, have, API_VERSION))
        _declare(lib)
        _lib, path = lib, cand
        return lib
    raise ImportError("ddprt: libddprt.so not found; build it with `make` (then run from the checkout, or "
                      "`make python`), install it with `make install`, or set DDPRT_LIB=/path/to/libddprt.so. "
                      "Tried: " + "; ".join(tried))
