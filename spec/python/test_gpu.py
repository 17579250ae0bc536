"""test_gpu.py — on a CUDA device the package's sessions answer as the CPU does (skipped without a usable GPU or in a CPU-only build).

The package is CPU-only unless built with an nvcc: on a GPU machine run
    WISP_PY_NVCC=/usr/local/cuda/bin/nvcc WISP_BUILD=build sh spec/python/run.sh
"""
import numpy as np
import pytest
import scipy.sparse as sp

import wisp
from conftest import NUM_FEATURES, make_rows

_gpus = [d for d in wisp.devices() if d["device"] != "cpu" and d["usable"]]
pytestmark = pytest.mark.skipif(not _gpus, reason="no usable CUDA device (%s)" % wisp.devices()[0]["gpu_status"])


@pytest.mark.parametrize("device", ["gpu", "gpus"])
def test_gpu_agrees_with_cpu(model_path, device):
    m = wisp.load(model_path)
    indptr, indices, values = make_rows(20000, seed=21)
    X = sp.csr_matrix((values, indices, indptr), shape=(20000, NUM_FEATURES + 50))
    want = m.session("cpu").score(X)
    s = m.session(device)
    got = s.score(X)
    assert s.last_device.startswith("gpu"), s.last_device
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert s.stats()["fallbacks"] == 0
    assert s.stats()["out_of_range"] == int(np.sum(indices >= NUM_FEATURES + 1))


def test_gpu_bad_rows_as_on_cpu(model_path):
    m = wisp.load(model_path)
    indptr = np.array([0, 2, 3, 5, 6], dtype=np.int32)
    indices = np.array([1, 2, -5, 7, 8, 9], dtype=np.int32)   # -5: read in place, found by the counter
    values = np.array([1, 1, 1, np.nan, 1, 1], dtype=np.float32)
    cpu, gpu = m.session("cpu"), m.session("gpu")
    pc, pg = cpu.score((indptr, indices, values)), gpu.score((indptr, indices, values))
    assert gpu.last_device.startswith("gpu")
    assert [r for r, _ in gpu.last_errors] == [r for r, _ in cpu.last_errors] == [1, 2]
    np.testing.assert_array_equal(np.isnan(pg), np.isnan(pc))
    np.testing.assert_allclose(pg[[0, 3]], pc[[0, 3]], rtol=0, atol=1e-6)


# ---- GPU-resident inputs: CuPy arrays, PyTorch CUDA tensors (issue 15) -----------------------

def _hostile_rows(n, seed):
    """Random CSR with the device path's bad rows: a negative id, a NaN value, a broken indptr range."""
    indptr, indices, values = make_rows(n, seed=seed)
    indptr, indices, values = indptr.copy(), indices.copy(), values.copy()
    if indptr[4] > indptr[3]:
        indices[indptr[3]] = -7
    if indptr[6] > indptr[5]:
        values[indptr[5]] = np.nan
    return indptr, indices, values


def _cpu_reference(m, indptr, indices, values):
    s = m.session("cpu")
    return s.score((indptr, indices, values)), [r for r, _ in s.last_errors]


@pytest.mark.parametrize("lib", ["cupy", "torch"])
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_gpu_arrays_agree_with_host(model_path, lib, device):
    mod = pytest.importorskip(lib)
    m = wisp.load(model_path)
    indptr, indices, values = _hostile_rows(5000, seed=41)
    want, want_bad = _cpu_reference(m, indptr, indices, values)
    if lib == "cupy":
        X = tuple(mod.asarray(a) for a in (indptr, indices, values))
        to_host = mod.asnumpy
        from_dl = mod.from_dlpack
    else:
        X = tuple(mod.from_numpy(a).cuda() for a in (indptr, indices, values))
        to_host = lambda t: t.cpu().numpy()          # noqa: E731
        from_dl = mod.from_dlpack
    s = m.session(device)
    got = s.score(X)
    assert s.last_device.startswith("gpu") == (device == "gpu"), s.last_device
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=1e-6)
    assert [r for r, _ in s.last_errors] == want_bad and want_bad
    d = s.score(X, out="device")
    assert isinstance(d, wisp.DeviceArray) and d.shape == (5000,)
    back = to_host(from_dl(d))
    np.testing.assert_array_equal(np.isnan(back), np.isnan(want))
    np.testing.assert_allclose(back[ok], want[ok], rtol=0, atol=1e-6)
    assert s.stats()["fallbacks"] == 0


def test_gpu_cupy_streams_and_dtypes(model_path):
    cp = pytest.importorskip("cupy")
    m = wisp.load(model_path)
    indptr, indices, values = make_rows(20000, seed=42)
    want, _ = _cpu_reference(m, indptr, indices, values)
    s = m.session("gpu")
    st = cp.cuda.Stream(non_blocking=True)
    with st:                                          # produced on a stream of the caller's
        X = (cp.asarray(indptr), cp.asarray(indices), cp.asarray(values))
        got = s.score(X, stream=st)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    # int64 everywhere and float64 values: converted on the device by CuPy
    X64 = (cp.asarray(indptr, dtype=cp.int64), cp.asarray(indices, dtype=cp.int64), cp.asarray(values, dtype=cp.float64))
    np.testing.assert_allclose(s.score(X64), want, rtol=0, atol=1e-6)
    # a cupyx CSR matrix, and its slice (indptr[0] > 0)
    import cupyx.scipy.sparse as csp
    M = csp.csr_matrix((X[2], X[1], X[0]), shape=(20000, NUM_FEATURES + 50))
    np.testing.assert_allclose(s.score(M), want, rtol=0, atol=1e-6)
    part = (X[0][100:201], X[1], X[2])
    np.testing.assert_allclose(s.score(part), want[100:200], rtol=0, atol=1e-6)
    # binary features
    wb, _ = _cpu_reference(m, indptr, indices, None)
    np.testing.assert_allclose(s.score((X[0], X[1])), wb, rtol=0, atol=1e-6)
    # the ids' length bounds the reads: indptr past the end of indices is refused
    with pytest.raises(ValueError, match="ids has"):
        s.score((X[0], X[1][:10], X[2]))


def test_gpu_torch_sparse_csr_and_lifetime(model_path):
    torch = pytest.importorskip("torch")
    m = wisp.load(model_path)
    indptr, indices, values = make_rows(3000, seed=43)
    want, _ = _cpu_reference(m, indptr, indices, values)
    s = m.session("gpu")
    T = torch.sparse_csr_tensor(torch.from_numpy(indptr.astype(np.int64)), torch.from_numpy(indices.astype(np.int64)),
                                torch.from_numpy(values), size=(3000, NUM_FEATURES + 50)).cuda()
    np.testing.assert_allclose(s.score(T), want, rtol=0, atol=1e-6)
    d = s.score(T, out="device")
    t = torch.from_dlpack(d)
    del d                                             # the tensor keeps the memory alive
    torch.cuda.synchronize()
    np.testing.assert_allclose(t.cpu().numpy(), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("lib", ["cupy", "torch"])
@pytest.mark.parametrize("how", ["stream=", "dlpack protocol"])
def test_gpu_producer_stream_is_respected(model_path, lib, how):
    """The ids are written on a non-blocking stream behind ~tens of ms of matmuls: read in
    stream order they give the host path's answers, read too early they would be zeros."""
    mod = pytest.importorskip(lib)
    m = wisp.load(model_path)
    indptr, indices, values = make_rows(20000, seed=44)
    want, _ = _cpu_reference(m, indptr, indices, values)
    s = m.session("gpu")
    if lib == "cupy":
        cp = mod
        src, rp, vs = cp.asarray(indices), cp.asarray(indptr), cp.asarray(values)
        cp.cuda.Device().synchronize()
        st = cp.cuda.Stream(non_blocking=True)
        with st:
            dst = cp.zeros_like(src)
            a = cp.ones((4096, 4096), dtype=cp.float32)
            for _ in range(30):
                a = (a @ a) * 1e-4
            dst[...] = src
            got = s.score((rp, dst, vs), stream=st) if how == "stream=" else s.score((rp, dst, vs))
    else:
        torch = mod
        src, rp, vs = (torch.from_numpy(x).cuda() for x in (indices, indptr, values))
        torch.cuda.synchronize()
        st = torch.cuda.Stream()
        with torch.cuda.stream(st):
            dst = torch.zeros_like(src)
            a = torch.ones((4096, 4096), device="cuda")
            for _ in range(30):
                a = (a @ a) * 1e-4
            dst.copy_(src)
            got = s.score((rp, dst, vs), stream=st) if how == "stream=" else s.score((rp, dst, vs))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


# ---- the output pools (_wisp_dlpack.c): no cudaMalloc/cudaFree a call, a block reused only once gone ----

@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_gpu_device_out_pool_reuses_only_what_is_gone(model_path, lib):
    mod = pytest.importorskip(lib)
    from wisp import _wisp
    m = wisp.load(model_path)
    n = 40000 if lib == "cupy" else 160000          # block sizes no other spec's blocks are reused for
    a, b = make_rows(n, seed=45), make_rows(n, seed=46)
    want_a, _ = _cpu_reference(m, *a)
    want_b, _ = _cpu_reference(m, *b)
    if lib == "cupy":
        Xa, Xb = (tuple(mod.asarray(x) for x in r) for r in (a, b))
        to_host = lambda d: mod.asnumpy(mod.from_dlpack(d))               # noqa: E731
        sync = mod.cuda.Device().synchronize
    else:
        Xa, Xb = (tuple(mod.from_numpy(x).cuda() for x in r) for r in (a, b))
        to_host = lambda d: mod.from_dlpack(d).cpu().numpy()             # noqa: E731
        sync = mod.cuda.synchronize
    s = m.session("gpu")
    d = s.score(Xa, out="device")
    del d                                           # never exported: back to the pool, no sync needed
    st0 = _wisp.pool_stats()
    d = s.score(Xb, out="device")
    st1 = _wisp.pool_stats()
    assert st1["device_taken"] == st0["device_taken"] + 1 and st1["device_synced"] == st0["device_synced"], (st0, st1)
    np.testing.assert_allclose(to_host(d), want_b, rtol=0, atol=1e-6)   # exports it
    del d                                           # exported: reused only after a device sync
    d = s.score(Xa, out="device")
    st2 = _wisp.pool_stats()
    assert st2["device_taken"] == st1["device_taken"] + 1 and st2["device_synced"] == st1["device_synced"] + 1, (st1, st2)
    np.testing.assert_allclose(to_host(d), want_a, rtol=0, atol=1e-6)
    # a consumer holding the memory keeps it out of the pool: the next call gets other memory
    held = mod.from_dlpack(d)
    del d
    for X in (Xb, Xa, Xb):
        e = s.score(X, out="device")
        assert e.ptr != (held.data.ptr if lib == "cupy" else held.data_ptr())
        del e
    sync()
    np.testing.assert_allclose(mod.asnumpy(held) if lib == "cupy" else held.cpu().numpy(), want_a, rtol=0, atol=1e-6)
    assert _wisp.pool_stats()["device_blocks"] <= 8


def test_gpu_host_out_is_pinned_and_pooled(model_path):
    cp = pytest.importorskip("cupy")
    from wisp import _wisp
    m = wisp.load(model_path)
    a, b = make_rows(70000, seed=47), make_rows(70000, seed=48)
    want_a, _ = _cpu_reference(m, *a)
    want_b, _ = _cpu_reference(m, *b)
    Xa, Xb = (tuple(cp.asarray(x) for x in r) for r in (a, b))
    s = m.session("gpu")
    r1 = s.score(Xa)
    assert type(r1.base) is _wisp.HostBlock, type(r1.base)          # 70k rows: pinned memory
    np.testing.assert_allclose(r1, want_a, rtol=0, atol=1e-6)
    r2 = s.score(Xb)                                                  # r1 alive: other memory
    assert not np.shares_memory(r1, r2)
    np.testing.assert_allclose(r1, want_a, rtol=0, atol=1e-6)
    np.testing.assert_allclose(r2, want_b, rtol=0, atol=1e-6)
    a1 = r1.ctypes.data
    st0 = _wisp.pool_stats()
    del r1                                                            # its block back to the pool...
    r4 = s.score(Xb)                                                  # ...handed out again, after a sync
    st1 = _wisp.pool_stats()
    assert r4.ctypes.data == a1 and st1["host_taken"] == st0["host_taken"] + 1, (st0, st1)
    assert st1["host_synced"] == st0["host_synced"] + 1, (st0, st1)
    np.testing.assert_allclose(r4, want_b, rtol=0, atol=1e-6)
    # an asynchronous copy from the pinned array to the GPU, then the array dropped: a call that
    # reuses the block does so only after the device is synchronized (the copy reads want_b)
    st = cp.cuda.Stream(non_blocking=True)
    dst = cp.empty(70000, dtype=cp.float32)
    with st:
        big = cp.ones((4096, 4096), dtype=cp.float32)
        for _ in range(20):
            big = (big @ big) * 1e-4
        dst.set(r2, stream=st)
    a2 = r2.ctypes.data
    st0 = _wisp.pool_stats()
    del r2
    r3 = s.score(Xa)
    if r3.ctypes.data == a2:                                          # reused (unless CuPy held r2)
        assert _wisp.pool_stats()["host_synced"] == st0["host_synced"] + 1
    st.synchronize()
    np.testing.assert_allclose(cp.asnumpy(dst), want_b, rtol=0, atol=1e-6)
    np.testing.assert_allclose(r3, want_a, rtol=0, atol=1e-6)
    small = s.score(tuple(cp.asarray(x) for x in make_rows(100, seed=49)))
    assert small.base is None                                         # small batches: numpy's memory
