"""test_capi.py — wisp._capi, the benchmarks' binding of a built libwisp.so: every prototype of wisp.h and wisp_test.h
is read (no function skipped or mistyped), the types follow the documented rules, and calls through it work."""
import ctypes as C
import os
import re
import subprocess

import numpy as np
import pytest

import wisp._capi as capi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADERS = [os.path.join(ROOT, "engine", "include", "wisp.h"), os.path.join(ROOT, "engine", "core", "wisp_test.h")]


@pytest.fixture(scope="module")
def lib(cli):
    path = os.path.join(os.path.dirname(cli), "libwisp.so")
    if not os.path.exists(path):
        pytest.skip("%s is not built (make BUILD=... builds it beside the CLI)" % path)
    return capi.load(path, headers=HEADERS)


def test_every_declared_function_is_read():
    texts = [open(h).read() for h in HEADERS]
    protos = capi.prototypes(*texts)
    # every "wisp_xxx(" that starts a declaration in the public header (outside comments) is a prototype read
    body = capi._strip(texts[0])
    declared = set(re.findall(r"\b(wisp_\w+)\s*\(", body)) - {"wisp_task_fn"}
    assert declared and declared <= set(protos), sorted(declared - set(protos))
    assert protos["wisp_errmsg"] == (C.c_char_p, [])
    assert protos["wisp_engine_new"] == (C.c_int, [C.c_int, C.POINTER(C.c_void_p)])
    assert protos["wisp_batch_indptr"][0] == C.POINTER(C.c_uint32)
    assert protos["wisp_batch_vals"][0] == C.POINTER(C.c_float)
    assert protos["wisp_model_write"][1][0] is C.c_char_p and protos["wisp_model_write"][1][1] is C.c_void_p
    assert protos["wisp_cuda_time_resident"][1][-2:] == [C.c_void_p, C.c_void_p]


def test_exported_symbols_are_bound(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib.path], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("nm is not available")
    exported = set(re.findall(r"\sT\s(wisp_\w+)$", out.stdout, re.M))
    public = set(capi.prototypes(open(HEADERS[0]).read()))
    assert public <= exported, sorted(public - exported)          # the library exports all wisp.h declares
    assert all(lib.has(n) for n in public)
    assert not lib.has("wisp_no_such_function")
    with pytest.raises(AttributeError, match="not a function the headers"):
        lib.wisp_no_such_function


def test_calls_through_the_binding(lib, model_path):
    eng, m, s, b = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p()
    assert lib.wisp_engine_new(1, C.byref(eng)) == 0
    assert lib.wisp_model_load(eng, model_path.encode(), C.byref(m)) == 0
    assert lib.wisp_model_load(eng, b"/nonexistent.wisp", C.byref(C.c_void_p())) != 0
    assert b"nonexistent" in lib.wisp_errmsg()
    assert lib.wisp_session_new(eng, m, b"cpu", C.byref(s)) == 0
    indptr = np.array([0, 2, 2, 3], np.uint32)
    ids = np.array([1, 7, 1000], np.uint32)
    vals = np.array([0.5, -1.0, 2.0], np.float32)
    assert lib.wisp_batch_wrap(eng, 3, indptr.ctypes.data, ids.ctypes.data, None, vals.ctypes.data, C.byref(b)) == 0
    assert lib.wisp_batch_rows(b) == 3 and lib.wisp_batch_indptr(b)[3] == 3
    out = np.zeros(3, np.float32)
    assert lib.wisp_session_score(s, b, out.ctypes.data) == 0
    ref = wisp_load_score(model_path, indptr, ids, vals)
    assert np.array_equal(out, ref)
    assert lib.wisp_session_last_device(s) == b"cpu"
    lib.wisp_batch_free(b)
    lib.wisp_session_free(s)
    lib.wisp_model_free(m)
    lib.wisp_engine_free(eng)


def wisp_load_score(path, indptr, ids, vals):
    import wisp
    return wisp.load(path).score((indptr.astype(np.int32), ids.astype(np.int32), vals), device="cpu")


def test_missing_library_is_named(tmp_path):
    with pytest.raises(SystemExit, match="not found"):
        capi.load(str(tmp_path / "libwisp.so"))
