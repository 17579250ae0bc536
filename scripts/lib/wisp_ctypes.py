"""wisp_ctypes.py — the one ctypes binding of libwisp.so for the Python scripts (benchmarks, importers, parity tests), and cpu_model() for their results.

    import wisp_ctypes
    L = wisp_ctypes.load()              # $WISP_LIB, else build/libwisp.so; or load(path)
    L.wisp_engine_new(1, ctypes.byref(eng))
    if wisp_ctypes.has(L, "wisp_cuda_units_read"): ...

Every function the scripts call gets its argument and result types here, once (the
declarations are in engine/include/wisp.h). Data pointers are c_void_p, which takes a
numpy array's .ctypes.data, a ctypes pointer or None alike. The benchmark hooks of
engine/cuda_hooks.c (declared in wisp_test.h, not wisp.h; see TEST_HOOKS in the Makefile) are bound when the library
has them: a build without CUDA lacks most of them.
"""
import ctypes as C
import os
import platform

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_vp, _sz, _i32, _u64, _u32 = C.c_void_p, C.c_size_t, C.c_int, C.c_uint64, C.c_uint32
_str, _P = C.c_char_p, C.POINTER

# name: (result, arguments)
SIGNATURES = {
    "wisp_errmsg": (_str, []),
    "wisp_stat_name": (_str, [_i32]),
    "wisp_engine_new": (_i32, [_i32, _P(_vp)]),
    "wisp_engine_free": (None, [_vp]),
    "wisp_engine_gpu_count": (_i32, [_vp]),
    "wisp_engine_gpu_status": (_str, [_vp]),
    "wisp_engine_gpu_name": (_str, [_vp, _i32]),
    "wisp_engine_gpu_memory": (_u64, [_vp, _i32]),
    "wisp_engine_last_log": (_sz, [_vp, _str, _sz]),
    "wisp_model_write": (_i32, [_str, _vp, _u64, C.c_double, _i32, _str, _str]),
    "wisp_model_load": (_i32, [_vp, _str, _P(_vp)]),
    "wisp_model_free": (None, [_vp]),
    "wisp_columns_parse": (_i32, [_str, _sz, _P(_vp)]),
    "wisp_columns_free": (None, [_vp]),
    "wisp_raw_new": (_i32, [_vp, _vp, _P(_vp)]),
    "wisp_raw_free": (None, [_vp]),
    "wisp_raw_clear": (None, [_vp]),
    "wisp_raw_set_schema": (_i32, [_vp, _str, _i32]),
    "wisp_raw_rows": (_sz, [_vp]),
    "wisp_raw_bad_count": (_sz, [_vp]),
    "wisp_raw_parse_tsv": (_i32, [_vp, _str, _sz, _i32, _sz, _P(_u64), _P(_sz)]),
    "wisp_batch_new": (_i32, [_vp, _P(_vp)]),
    "wisp_batch_wrap": (_i32, [_vp, _sz, _vp, _vp, _vp, _vp, _P(_vp)]),
    "wisp_batch_add_row_mixed": (_i32, [_vp, _vp, _vp, _sz, _vp, _sz]),
    "wisp_batch_free": (None, [_vp]),
    "wisp_batch_clear": (None, [_vp]),
    "wisp_batch_rows": (_sz, [_vp]),
    "wisp_batch_nnz": (_sz, [_vp]),
    "wisp_batch_bad_count": (_sz, [_vp]),
    "wisp_batch_row_ptr": (_P(_u32), [_vp]),
    "wisp_batch_ids": (_P(_u32), [_vp]),
    "wisp_batch_val_ptr": (_P(_u32), [_vp]),
    "wisp_batch_vals": (_P(C.c_float), [_vp]),
    "wisp_transform": (_i32, [_vp, _vp]),
    "wisp_session_new": (_i32, [_vp, _vp, _str, _P(_vp)]),
    "wisp_session_free": (None, [_vp]),
    "wisp_session_score": (_i32, [_vp, _vp, _vp]),
    "wisp_session_submit": (_i32, [_vp, _vp, _vp]),
    "wisp_session_wait": (_i32, [_vp, _P(_vp)]),
    "wisp_session_transform": (_i32, [_vp, _vp, _vp]),
    "wisp_session_score_raw": (_i32, [_vp, _vp, _vp]),
    "wisp_session_stat": (_u64, [_vp, _i32]),
    "wisp_session_reset_stats": (None, [_vp]),
    "wisp_session_last_device": (_str, [_vp]),
}

# the benchmark hooks: bound where the library exports them
HOOKS = {
    "wisp_cuda_time_resident": (_i32, [_vp, _vp, _i32, _i32, _i32, _vp, _vp]),
    "wisp_cuda_timeline_start": (_i32, [_vp, _sz]),
    "wisp_cuda_timeline_read": (_i32, [_vp, _vp, _sz]),
    "wisp_cuda_units_read": (_i32, [_vp, _vp, _sz]),
}


def find_lib(path=None):
    """path, else $WISP_LIB, else build/libwisp.so: the first that exists (None if none)."""
    for c in (path, os.environ.get("WISP_LIB"), os.path.join(ROOT, "build", "libwisp.so")):
        if c and os.path.exists(c):
            return os.path.abspath(c)
    return None


def load(path=None):
    """libwisp.so as a ctypes.CDLL with every signature above applied."""
    found = find_lib(path)
    if not found:
        raise SystemExit("wisp_ctypes: libwisp.so not found (%s; run make, or set WISP_LIB)"
                         % (path or os.environ.get("WISP_LIB") or os.path.join(ROOT, "build", "libwisp.so")))
    lib = C.CDLL(found)
    missing = []
    for name, (res, args) in SIGNATURES.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        f.restype, f.argtypes = res, args
    if missing:
        raise SystemExit("wisp_ctypes: %s does not export %s (an older build? run make)" % (found, ", ".join(missing)))
    lib._wisp_hooks = set()
    for name, (res, args) in HOOKS.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            continue
        f.restype, f.argtypes = res, args
        lib._wisp_hooks.add(name)
    return lib


def has(lib, name):
    """Whether lib (from load) exports the hook or function name."""
    return name in SIGNATURES or name in getattr(lib, "_wisp_hooks", ())


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), for a results file's machine facts."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
