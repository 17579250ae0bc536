"""test_dlpack.py — arrays through DLPack and __cuda_array_interface__, on any machine: host producers scored as numpy's arrays are, the capsule protocol (renamed, deleter called once, the stream asked for), the parsing and the refusals of GPU-typed inputs without a GPU, wisp.DeviceArray.

Host DLPack producers are real (numpy's __dlpack__ behind an object that is not an
ndarray); GPU ones are faked: ctypes builds DLManagedTensor(Versioned) capsules of
kDLCUDA type over host memory, and dicts stand in for __cuda_array_interface__. With no
GPU (or no CUDA backend) the engine refuses them (NoDeviceError) after everything this
side checks; their scoring on a GPU is test_gpu.py's.
"""
import ctypes
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import wisp
from conftest import NUM_FEATURES, make_rows

_gpus = [d for d in wisp.devices() if d["device"] != "cpu" and d["usable"]]
no_gpu = pytest.mark.skipif(bool(_gpus), reason="expected on a GPU machine: these fakes are CUDA-typed capsules over host "
                            "memory, for an engine with no GPU (it refuses them before reading); test_gpu.py scores real "
                            "GPU arrays")


class Host:
    """A host producer that is not a numpy array: only __dlpack__ / __dlpack_device__."""

    def __init__(self, a):
        self.a = a
        self.calls = []

    def __len__(self):
        return len(self.a)

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.fixture(scope="module")
def model(model_path):
    return wisp.load(model_path)


@pytest.mark.parametrize("ptr_dtype,idx_dtype,val_dtype", [
    (np.int32, np.int32, np.float32), (np.int64, np.int64, np.float64), (np.uint32, np.uint32, np.float32),
    (np.int64, np.int32, None)])
def test_host_dlpack_equals_numpy(model, ptr_dtype, idx_dtype, val_dtype):
    indptr, indices, values = make_rows(500, seed=31)
    arrs = [indptr.astype(ptr_dtype), indices.astype(idx_dtype)]
    if val_dtype is not None:
        arrs.append(values.astype(val_dtype))
    s = model.session("cpu")
    want = s.score(tuple(arrs))
    wrapped = tuple(Host(a) for a in arrs)
    got = s.score(wrapped)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32 and got.shape == (500,)
    assert all(w.calls == [{}] for w in wrapped)         # a host array is asked for no stream


def test_host_dlpack_bad_rows_and_errors(model):
    indptr = np.array([0, 2, 3, 5], dtype=np.int32)
    indices = np.array([1, 2, -4, 7, 8], dtype=np.int32)
    values = np.array([1, 1, 1, np.nan, 1], dtype=np.float32)
    s = model.session("cpu")
    want = s.score((indptr, indices, values))
    want_errors = s.last_errors
    got = s.score((Host(indptr), Host(indices), Host(values)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert s.last_errors == want_errors and [r for r, _ in want_errors] == [1, 2]
    with pytest.raises(wisp.BadRowError):
        s.score((Host(indptr), Host(indices), Host(values)), errors="raise")
    with pytest.raises(ValueError, match="indices has 5 entries"):
        s.score((Host(np.array([0, 9], np.int32)), Host(indices)))
    with pytest.raises(ValueError, match="1-D"):
        s.score((Host(np.zeros((2, 2), np.int32)), Host(indices)))


def test_host_dlpack_releases_what_it_takes(model):
    """Each capsule's deleter runs once: the producer's array is not kept alive."""
    indptr, indices, values = make_rows(50, seed=32)
    s = model.session("cpu")
    before = [sys.getrefcount(a) for a in (indptr, indices, values)]
    for _ in range(200):
        s.score((Host(indptr), Host(indices), Host(values)))
    assert [sys.getrefcount(a) for a in (indptr, indices, values)] == before


def test_out_device_needs_gpu_arrays(model):
    indptr, indices, values = make_rows(5, seed=33)
    s = model.session("cpu")
    with pytest.raises(ValueError, match="GPU arrays"):
        s.score((indptr, indices, values), out="device")
    with pytest.raises(ValueError, match="needs GPU arrays"):
        s.score((Host(indptr), Host(indices), Host(values)), out="device")
    with pytest.raises(ValueError, match="out must be"):
        s.score((Host(indptr), Host(indices)), out="host")
    with pytest.raises(TypeError, match="stream must be"):
        s.score((Host(indptr), Host(indices)), stream="now")
    with pytest.raises(TypeError):
        wisp.DeviceArray()


# ---- fakes of GPU producers -----------------------------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_CODES = {"i": 0, "u": 1, "f": 2}


class FakeGPU:
    """A DLPack producer that says its array is on CUDA device `dev` (the memory is host memory:
    only an engine without a GPU, which refuses before reading, may be handed it)."""

    def __init__(self, a, dev=0, versioned=False, strides=None, dev_type=2):
        self.a, self.dev, self.versioned, self.strides = a, dev, versioned, strides
        self.dev_type = dev_type
        self.streams, self.deleted = [], 0
        self._keep = []

    def __len__(self):
        return self.a.shape[0]

    def __dlpack_device__(self):
        return (self.dev_type, self.dev)

    def __dlpack__(self, stream=None, **kw):
        self.streams.append(stream)
        a = self.a
        shape = (ctypes.c_int64 * 1)(a.shape[0])
        t = DLTensor(a.ctypes.data, DLDevice(self.dev_type, self.dev), 1, DLDataType(_CODES[a.dtype.kind], a.dtype.itemsize * 8, 1),
                     shape, None, 0)
        if self.strides is not None:
            st = (ctypes.c_int64 * 1)(self.strides)
            t.strides = st
            self._keep.append(st)

        def deleter(_p):
            self.deleted += 1
        cb = DELETER(deleter)
        if self.versioned:
            m = DLManagedTensorVersioned(DLPackVersion(1, 0), None, cb, 0, t)
            name = b"dltensor_versioned"
        else:
            m = DLManagedTensor(t, None, cb)
            name = b"dltensor"
        self._keep += [shape, cb, m]
        return _capsule_new(ctypes.addressof(m), name, None)


class FakeCAI:
    def __init__(self, a, typestr=None, shape=None, strides=None, stream=None, mask=None, device=None):
        self.a = a
        self.__cuda_array_interface__ = {
            "shape": shape if shape is not None else a.shape, "typestr": typestr or a.dtype.str,
            "data": (a.ctypes.data, False), "strides": strides, "version": 3, "stream": stream}
        if mask is not None:
            self.__cuda_array_interface__["mask"] = mask
        if device is not None:
            self.device = device


def _arrays(rows=20):
    return make_rows(rows, seed=34)


@no_gpu
@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_fake_gpu_capsules_are_taken_and_released(model, versioned, device):
    indptr, indices, values = _arrays()
    fakes = [FakeGPU(a, versioned=versioned) for a in (indptr, indices, values)]
    s = model.session(device)
    with pytest.raises(wisp.NoDeviceError):
        s.score(tuple(fakes))
    assert [f.streams for f in fakes] == [[1], [1], [1]]     # the legacy default stream, asked of each producer
    assert [f.deleted for f in fakes] == [1, 1, 1]           # each capsule's deleter, once
    fakes = [FakeGPU(a) for a in (indptr, indices)]
    with pytest.raises(wisp.NoDeviceError):
        s.score(tuple(fakes), stream=12345)
    assert [f.streams for f in fakes] == [[12345], [12345]] and [f.deleted for f in fakes] == [1, 1]
    with pytest.raises(wisp.NoDeviceError):
        s.score((FakeGPU(indptr), FakeGPU(indices)), out="device")   # wisp_device_alloc: no usable GPU


@no_gpu
def test_fake_gpu_refusals(model):
    indptr, indices, values = _arrays()
    s = model.session("gpu")
    cases = [
        ((FakeGPU(indptr), FakeGPU(indices.astype(np.int64))), TypeError, "indices must be int32"),
        ((FakeGPU(indptr.astype(np.uint32)), FakeGPU(indices)), TypeError, "indptr must be int32 or int64"),
        ((FakeGPU(indptr), FakeGPU(indices), FakeGPU(values.astype(np.float64))), TypeError, "values must be float32"),
        ((FakeGPU(indptr), FakeGPU(indices, dev=1)), ValueError, "different GPUs"),
        ((FakeGPU(indptr), indices), ValueError, "different devices"),
        ((FakeGPU(indptr), FakeGPU(indices, strides=2)), ValueError, "not contiguous"),
        ((FakeGPU(indptr[:0]), FakeGPU(indices)), ValueError, "indptr is empty"),
        ((FakeGPU(indptr, dev_type=10), FakeGPU(indices, dev_type=10)), TypeError, "device type 10 are not read"),
    ]
    for X, exc, words in cases:
        with pytest.raises(exc, match=words):
            s.score(X)
        assert all(f.deleted == len(f.streams) for f in X if isinstance(f, FakeGPU))


@no_gpu
def test_fake_cuda_array_interface(model):
    indptr, indices, values = _arrays()
    s = model.session("gpu")
    ok = (FakeCAI(indptr), FakeCAI(indices), FakeCAI(values))
    with pytest.raises(wisp.NoDeviceError):
        s.score(ok)
    with pytest.raises(wisp.NoDeviceError):                  # the producers' stream, the same on all three
        s.score((FakeCAI(indptr, stream=7), FakeCAI(indices, stream=7)))
    cases = [
        ((FakeCAI(indptr, stream=7), FakeCAI(indices, stream=8)), ValueError, "different CUDA streams"),
        ((FakeCAI(indptr, stream=0), FakeCAI(indices)), ValueError, "stream 0"),
        ((FakeCAI(indptr, typestr=">i4"), FakeCAI(indices)), TypeError, "little-endian"),
        ((FakeCAI(indptr, typestr="<c8"), FakeCAI(indices)), TypeError, "unsupported element type"),
        ((FakeCAI(indptr, shape=(3, 7)), FakeCAI(indices)), ValueError, "1-D"),
        ((FakeCAI(indptr, strides=(8,)), FakeCAI(indices)), ValueError, "not contiguous"),
        ((FakeCAI(indptr, mask=1), FakeCAI(indices)), TypeError, "masked"),
        ((FakeCAI(indptr), FakeCAI(indices.astype(np.int64))), TypeError, "indices must be int32"),
    ]
    for X, exc, words in cases:
        with pytest.raises(exc, match=words):
            s.score(X)
    with pytest.raises(ValueError, match="GPU is not known"):
        s.score((FakeCAI(indptr), FakeCAI(indices)), out="device")
    with pytest.raises(wisp.NoDeviceError):
        s.score((FakeCAI(indptr, device=0), FakeCAI(indices)), out="device")


def test_scipy_and_numpy_paths_unchanged(model):
    """The host fast paths do not go through DLPack (numpy arrays have __dlpack__ too)."""
    indptr, indices, values = make_rows(300, seed=35)
    X = sp.csr_matrix((values, indices, indptr), shape=(300, NUM_FEATURES + 50))
    s = model.session("cpu")
    np.testing.assert_array_equal(s.score(X), s.score((indptr, indices, values)))


def test_torch_cpu_tensors(model):
    torch = pytest.importorskip("torch")
    indptr, indices, values = make_rows(200, seed=36)
    s = model.session("cpu")
    want = s.score((indptr, indices, values))
    got = s.score((torch.from_numpy(indptr), torch.from_numpy(indices), torch.from_numpy(values)))
    np.testing.assert_array_equal(got, want)


_POOL_SCRIPT = r"""
import sys
import numpy as np
import wisp
from wisp import _wisp


class Host:
    def __init__(self, a):
        self.a = a

    def __len__(self):
        return len(self.a)

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


s = wisp.load(sys.argv[1]).session("cpu")
rng = np.random.default_rng(37)
n, k = 70000, 7
ip = np.arange(0, n * k + 1, k, dtype=np.int32)
ix = rng.integers(-3, 1 << 12, n * k).astype(np.int32)
v = (rng.random(n * k) + 0.5).astype(np.float32)
want = s.score((ip, ix, v))
bad = s.last_errors
assert bad, "the rows should hold negative ids"
X = (Host(ip), Host(ix), Host(v))
addr = lambda a: a.__array_interface__["data"][0]          # noqa: E731
r1 = s.score(X)
assert type(r1.base) is _wisp.HostBlock and r1.flags.writeable and r1.shape == (n,)
np.testing.assert_array_equal(r1, want)
assert s.last_errors == bad
st = _wisp.pool_stats()
assert st["host_taken"] == 0 and st["pinned_out_live"] >= 4 * n, st
r2 = s.score(X)                         # r1 alive: fresh memory, r1 untouched
assert addr(r2) != addr(r1)
np.testing.assert_array_equal(r1, want)
a1 = addr(r1)
r1[:] = 0
del r1                                  # its block goes to the pool...
r3 = s.score(X)                         # ...and is handed out again (after the device sync)
assert addr(r3) == a1
np.testing.assert_array_equal(r3, want)
st = _wisp.pool_stats()
assert st["host_taken"] == 1 and st["host_synced"] == 1 and st["host_kept"] == 1, st
small = s.score((Host(ip[:101]), Host(ix[:ip[100]]), Host(v[:ip[100]])))
assert small.base is None               # under 64k rows: numpy's own memory
np.testing.assert_array_equal(small, want[:100])
del r2, r3
for _ in range(50):                     # bounded: blocks come back, none piles up
    s.score(X)
st = _wisp.pool_stats()
assert st["host_blocks"] <= 8 and st["pinned_out_live"] <= 3 * 4 * n * 2, st
print("ok")
"""


def test_host_out_pool_hands_blocks_out_again_only_when_gone(model_path):
    """The host outputs of GPU batches (pinned there) come from a pool: a block is handed out
    again only once its array is gone. WISP_PY_POOL_ANY_MEMORY=1 lets a CPU-only run pool
    plain memory (a DLPack host producer takes the same path), so this runs everywhere."""
    import os
    import subprocess
    env = dict(os.environ, WISP_PY_POOL_ANY_MEMORY="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", _POOL_SCRIPT, model_path], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
