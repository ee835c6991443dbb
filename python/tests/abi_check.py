"""The ctypes mirror of include/ddprt.h (python/ddprt/_lib.py) against the C compiler.

usage: abi_check.py LAYOUT HEADER [load]
LAYOUT: what the C compiler says, one fact a line (test/test_api_abi.c writes it):
    api_version 3 / sizeof ddprt_opts 72 / offsetof ddprt_opts.rank 16 / enum DDPRT_SUM 0
HEADER: include/ddprt.h, read for what LAYOUT must cover (every enum constant, every
field of ddprt_opts) and for the calls (every DDPRT_API function declared to ctypes,
each argument and the result of the same kind: pointer, size_t, int or enum, double).
load: also load the library and check that get() refuses another API version with one
line naming both versions and the library's path.
Prints "abi ok (N checks)", or every mismatch and exits 1."""
import ctypes
import re
import sys

from ddprt import _lib

bad = []
checks = 0


def expect(cond, msg):
    global checks
    checks += 1
    if not cond:
        bad.append(msg)


def c_kind(decl):
    """The kind of a C parameter or return type: "ptr", "size", "int", "double", "void"."""
    if "*" in decl:
        return "ptr"
    words = decl.replace("const", " ").split()
    base = words[0] if words else "void"
    return {"size_t": "size", "int": "int", "ddprt_dtype": "int", "ddprt_op": "int", "double": "double",
            "void": "void"}.get(base, "unknown " + base)


def ctypes_kind(t):
    if t is None:
        return "void"
    if t in (ctypes.c_void_p, ctypes.c_char_p) or issubclass(t, ctypes._Pointer):
        return "ptr"
    return {ctypes.c_size_t: "size", ctypes.c_int: "int", ctypes.c_double: "double"}.get(t, "unknown " + t.__name__)


def header_facts(text):
    """(enum constant names, ddprt_opts field names, {function: (result kind, [argument kinds])})."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    enums = []
    for body in re.findall(r"\benum\b[^{;]*\{([^}]*)\}", text):
        enums += re.findall(r"\b(DDPRT_\w+)\s*=", body)
    m = re.search(r"typedef\s+struct\s+ddprt_opts\s*\{(.*?)\}\s*ddprt_opts\s*;", text, flags=re.S)
    fields = []
    for decl in (m.group(1).split(";") if m else []):
        decl = decl.strip()
        if decl:
            # "int rank, world_size" / "const char *init_method": the names after the type.
            parts = decl.split(",")
            fields.append(re.findall(r"(\w+)\s*$", parts[0])[0])
            fields += [p.strip().lstrip("*").strip() for p in parts[1:]]
    calls = {}
    for ret, name, args in re.findall(r"DDPRT_API\s+([\w\s\*]*?)\b(ddprt_\w+)\s*\(([^)]*)\)\s*;", text):
        args = args.strip()
        calls[name] = (c_kind(ret), [] if args in ("", "void") else [c_kind(a) for a in args.split(",")])
    return enums, fields, calls


def main():
    layout, header = sys.argv[1], sys.argv[2]
    c = {}
    for line in open(layout):
        key, _, val = line.rpartition(" ")
        c[key] = int(val)
    enums, fields, calls = header_facts(open(header).read())
    expect(len(enums) >= 19 and len(fields) >= 11 and len(calls) >= 25,
           "%s: parsed only %d enum constants, %d fields, %d calls" % (header, len(enums), len(fields), len(calls)))

    expect(c.get("api_version") == _lib.API_VERSION,
           "DDPRT_API_VERSION is %s in C, _lib.API_VERSION %d" % (c.get("api_version"), _lib.API_VERSION))

    # The struct: every field of the header, at C's offset, and C's size.
    ct = {f[0]: getattr(_lib.Opts, f[0]) for f in _lib.Opts._fields_}
    expect([f[0] for f in _lib.Opts._fields_] == fields,
           "ddprt_opts fields: the header has %s, _lib.Opts %s" % (fields, [f[0] for f in _lib.Opts._fields_]))
    for f in fields:
        key = "offsetof ddprt_opts." + f
        expect(key in c, "%s: not in the C layout (test/test_api_abi.c lists the fields)" % key)
        if key in c and f in ct:
            expect(ct[f].offset == c[key] and ct[f].size == c["sizeof ddprt_opts." + f],
                   "ddprt_opts.%s: C offset %d size %d, ctypes offset %d size %d" % (
                       f, c[key], c["sizeof ddprt_opts." + f], ct[f].offset, ct[f].size))
    expect(ctypes.sizeof(_lib.Opts) == c.get("sizeof ddprt_opts"),
           "sizeof ddprt_opts: C %s, ctypes %d" % (c.get("sizeof ddprt_opts"), ctypes.sizeof(_lib.Opts)))
    expect(ctypes.alignment(_lib.Opts) == c.get("alignof ddprt_opts"),
           "alignof ddprt_opts: C %s, ctypes %d" % (c.get("alignof ddprt_opts"), ctypes.alignment(_lib.Opts)))

    # The enums: every constant of the header, with C's value, in _lib.ENUMS.
    for e in enums:
        expect(("enum " + e) in c, "%s: not in the C layout (test/test_api_abi.c lists the constants)" % e)
        expect(_lib.ENUMS.get(e) == c.get("enum " + e), "%s: C %s, _lib.ENUMS %s" % (e, c.get("enum " + e),
                                                                                  _lib.ENUMS.get(e)))
    expect(sorted(_lib.ENUMS) == sorted(enums), "_lib.ENUMS has %s beyond the header" % sorted(set(_lib.ENUMS) - set(enums)))

    # The calls: every one declared, with as many arguments.
    sigs = _lib.signatures()
    for name, want in sorted(calls.items()):
        got = (ctypes_kind(sigs[name][0]), [ctypes_kind(t) for t in sigs[name][1]]) if name in sigs else None
        expect(got == want, "%s: the header has %s %s, _lib declares %s" % (name, want[0], want[1], got))
    expect(sorted(sigs) == sorted(calls), "_lib declares calls the header lacks: %s" % sorted(set(sigs) - set(calls)))

    if len(sys.argv) > 3 and sys.argv[3] == "load":
        try:
            lib = _lib.get()
        except ImportError as e:
            expect(False, str(e))
            finish()
        expect(lib.ddprt_api_version() == _lib.API_VERSION, "the library says API %d" % lib.ddprt_api_version())
        path, want = _lib.path, _lib.API_VERSION
        _lib._lib = None
        _lib.API_VERSION = want + 1
        try:
            _lib.get()
            expect(False, "get() loaded %s for a package of API %d" % (path, want + 1))
        except ImportError as e:
            line = str(e)
            expect("version %d" % want in line and "version %d" % (want + 1) in line and path in line
                   and "\n" not in line, "the refusal line: %r" % line)
        _lib.API_VERSION = want
    finish()


def finish():
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print("abi ok (%d checks)" % checks)
    sys.exit(0)


main()
