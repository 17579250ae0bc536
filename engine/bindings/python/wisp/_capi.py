"""_capi.py — wisp._capi.load(lib): a libwisp.so as a ctypes library whose signatures are read from the C headers
(engine/include/wisp.h, engine/core/wisp_test.h), for the benchmarks that time one built library's C API and its test hooks.

    import wisp
    L = wisp._capi.load("build/libwisp.so")     # or $WISP_LIB; the headers: beside the build, or $WISP_INCLUDE
    L.wisp_engine_new(1, ctypes.byref(eng))
    if L.has("wisp_cuda_units_read"): ...

The package scores through its own extension (wisp._wisp, the engine linked
in); this module is for the scripts that measure what the extension does
not expose (the transform alone, batch internals, submit/wait streams, the
CUDA benchmark hooks) on a library built by `make`. Nothing here is typed
by hand: every function the headers declare gets its argument and result
types from its prototype, so the binding cannot drift from the headers.
Types: a pointer argument is c_void_p (a numpy array's .ctypes.data, a
ctypes byref(), a buffer or None) except `const char *` (c_char_p: bytes)
and `T **` (POINTER(c_void_p): byref of a c_void_p); a returned `const char *`
is c_char_p, a returned pointer to a number a POINTER of it (indexable), any
other returned pointer c_void_p. Functions the library does not export (the
hooks of a build without CUDA, the newer functions for an older build's
library) are left out: L.has(name) says which are bound, and calling one
that is not raises AttributeError saying why.
"""
import ctypes as C
import os
import re

_SCALARS = {
    "void": None, "int": C.c_int, "unsigned": C.c_uint, "unsigned int": C.c_uint, "long": C.c_long,
    "unsigned long": C.c_ulong, "long long": C.c_longlong, "unsigned long long": C.c_ulonglong,
    "size_t": C.c_size_t, "ssize_t": C.c_ssize_t, "int8_t": C.c_int8, "uint8_t": C.c_uint8,
    "int16_t": C.c_int16, "uint16_t": C.c_uint16, "int32_t": C.c_int32, "uint32_t": C.c_uint32,
    "int64_t": C.c_int64, "uint64_t": C.c_uint64, "double": C.c_double, "float": C.c_float,
    "bool": C.c_bool, "_Bool": C.c_bool, "char": C.c_char,
}
_PROTO = re.compile(r"^(?:extern\s+)?(?:WISP_API\s+)?(?P<ret>[A-Za-z_][\w\s\*]*?)\s*\b(?P<name>wisp_\w+)\s*"
                    r"\((?P<args>.*)\)\s*(?:__attribute__\s*\(\(.*\)\))?$", re.S)


def _strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'extern\s+"C"\s*\{', " ", text)          # C++ guards: their braces are no declaration's
    return "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))


def _split_args(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [a.strip() for a in out]


class _Types:
    """The headers' typedefs: enums are ints, structs opaque, function pointers void *."""

    def __init__(self):
        self.ints, self.opaque, self.fnptr = set(), set(), set()

    def read(self, text):
        for m in re.finditer(r"typedef\s+enum\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text):
            self.ints.add(m.group(1))
        for m in re.finditer(r"typedef\s+struct\s+\w+\s+(\w+)\s*;", text):
            self.opaque.add(m.group(1))
        for m in re.finditer(r"typedef\s+[^;{]*\(\s*\*\s*(\w+)\s*\)\s*\([^;]*\)\s*;", text):
            self.fnptr.add(m.group(1))

    def base(self, t, where):
        t = re.sub(r"\b(const|volatile|restrict|struct|enum)\b", " ", t)
        t = " ".join(t.split())
        if t in _SCALARS:
            return _SCALARS[t]
        if t in self.ints:
            return C.c_int
        if t in self.fnptr:
            return C.c_void_p
        if t in self.opaque:
            return "opaque"
        raise ValueError("wisp._capi: %s: the type %r is not one the binding knows" % (where, t))

    def arg(self, decl, where):
        if "(" in decl:                                  # a function pointer argument
            return C.c_void_p
        toks = re.findall(r"[A-Za-z_]\w*|\*|\[", decl)
        stars = sum(1 for t in toks if t in ("*", "["))
        words = [t for t in toks if t not in ("*", "[")]
        quals = {"const", "volatile", "restrict", "struct", "enum"}
        typ = [w for w in words if w not in quals]
        known = {w for k in _SCALARS for w in k.split()} | {"signed", "short"} | self.ints | self.opaque | self.fnptr
        if len(typ) >= 2 and typ[-1] not in known:
            typ = typ[:-1]                               # the argument's name
        const = "const" in words
        base = " ".join(typ)
        if stars == 0:
            b = self.base(base, where)
            return C.c_void_p if b == "opaque" else b
        self.base(base, where)                           # known, or refused
        if stars >= 2:
            return C.POINTER(C.c_void_p)
        if base == "char" and const:
            return C.c_char_p
        return C.c_void_p

    def ret(self, t, where):
        stars = t.count("*")
        bare = t.replace("*", " ")
        if stars == 0:
            b = self.base(bare, where)
            return C.c_int if b == "opaque" else b
        b = self.base(bare, where)
        if stars == 1 and b is C.c_char:
            return C.c_char_p
        if stars == 1 and b not in (None, "opaque"):
            return C.POINTER(b)
        return C.c_void_p


def prototypes(*texts):
    """{name: (result type, [argument types])} of every wisp_* function the header texts declare."""
    types = _Types()
    clean = [_strip(t) for t in texts]
    for t in clean:
        types.read(t)
    out = {}
    for t in clean:
        for stmt in t.split(";"):
            stmt = " ".join(stmt.split())
            if not stmt or stmt.startswith("typedef") or "(*" in stmt.split("(")[0] + "(":
                continue
            m = _PROTO.match(stmt)
            if not m or "{" in stmt or "(*" in stmt[:stmt.find(m.group("name"))]:
                continue
            name = m.group("name")
            args = m.group("args").strip()
            argv = [] if args in ("", "void") else [types.arg(a, name) for a in _split_args(args)]
            out[name] = (types.ret(m.group("ret"), name), argv)
    return out


def _find_headers(lib_path):
    env = os.environ.get("WISP_INCLUDE")
    cands = []
    if env:
        cands.append(env)
    d = os.path.dirname(os.path.abspath(lib_path))
    for _ in range(4):                  # build/libwisp.so, build/c/libwisp.so: the checkout above
        cands.append(os.path.join(d, "engine", "include"))
        d = os.path.dirname(d)
    for inc in cands:
        h = os.path.join(inc, "wisp.h")
        if os.path.exists(h):
            test = os.path.join(os.path.dirname(inc), "core", "wisp_test.h")
            return [h] + ([test] if os.path.exists(test) else [])
    raise SystemExit("wisp._capi: cannot find wisp.h for %s (looked in %s); set WISP_INCLUDE to engine/include"
                     % (lib_path, ", ".join(cands)))


class Library:
    """A loaded libwisp.so: its functions as attributes (ctypes functions with the headers' types)."""

    def __init__(self, path, headers=None):
        self.path = os.path.abspath(path)
        self._lib = C.CDLL(self.path)
        self.headers = headers or _find_headers(path)
        texts = []
        for h in self.headers:
            with open(h) as f:
                texts.append(f.read())
        self._bound = {}
        self._missing = []
        public = set(prototypes(texts[0]))
        for name, (res, args) in prototypes(*texts).items():
            try:
                f = getattr(self._lib, name)
            except AttributeError:
                if name in public:
                    self._missing.append(name)
                continue
            f.restype, f.argtypes = res, args
            self._bound[name] = f

    def has(self, name):
        """Whether the library exports the function or hook `name` (and the headers declare it)."""
        return name in self._bound

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._bound[name]
        except KeyError:
            why = ("declared by %s but not exported by %s (a build older than the headers? run make)"
                   % (self.headers[0], self.path)) if name in self._missing else \
                "not a function the headers (%s) declare and %s exports" % (", ".join(self.headers), self.path)
            raise AttributeError("wisp._capi: %s is %s" % (name, why)) from None


def find_lib(path=None, root=None):
    """path when given (None if it does not exist: never another library than the one asked for), else
    $WISP_LIB, else ROOT/build/libwisp.so: the first that exists (None if none)."""
    if path:
        return os.path.abspath(path) if os.path.exists(path) else None
    for c in (os.environ.get("WISP_LIB"), os.path.join(root, "build", "libwisp.so") if root else None):
        if c and os.path.exists(c):
            return os.path.abspath(c)
    return None


def load(path=None, root=None, headers=None):
    """libwisp.so (path, $WISP_LIB or ROOT/build/libwisp.so) as a Library; SystemExit with the reason when missing."""
    found = find_lib(path, root)
    if not found:
        raise SystemExit("wisp._capi: libwisp.so not found (%s; run make, or set WISP_LIB)"
                         % (path or os.environ.get("WISP_LIB") or (root and os.path.join(root, "build", "libwisp.so"))))
    return Library(found, headers)
