"""test_runtime.py — the GIL is released while the engine works, and repeated calls keep references and memory flat."""
import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp

import wisp
from conftest import NUM_FEATURES, libsvm_text, make_rows


def test_gil_released_during_score(model_path):
    # A second thread watches the session: in_use() is True only while the
    # scoring thread is inside the engine. If the GIL were held there, the
    # watcher could never run at such a moment and would see it False only.
    s = wisp.load(model_path).session("cpu")
    rng = np.random.default_rng(3)
    rows, per = 400_000, 32
    indptr = np.arange(0, rows * per + 1, per, dtype=np.int32)
    indices = rng.integers(0, NUM_FEATURES, size=rows * per, dtype=np.int32)
    values = np.ones(rows * per, dtype=np.float64)    # float64: converted in C, without the GIL too
    seen = {"busy": 0, "loops": 0}
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen["loops"] += 1
            if s._s.in_use():
                seen["busy"] += 1

    t = threading.Thread(target=watch)
    t.start()
    try:
        for _ in range(3):
            p = s.score((indptr, indices, values))
            if seen["busy"] > 100:
                break
    finally:
        done.set()
        t.join()
    assert p.shape == (rows,) and np.all(np.isfinite(p))
    assert seen["busy"] > 100, seen


def test_concurrent_callers_get_their_own_answers(model_path):
    s = wisp.load(model_path).session("cpu")
    inputs = [make_rows(200, seed=k) for k in range(4)]
    want = [s.score(x) for x in inputs]
    errs = []

    def worker(k):
        for _ in range(50):
            got = s.score(inputs[k])
            if not np.array_equal(got, want[k]):
                errs.append(k)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errs == []


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_no_reference_leaks(model_path):
    s = wisp.load(model_path).session("cpu")
    indptr, indices, values = make_rows(10, seed=7)
    X = sp.csr_matrix((values, indices, indptr), shape=(10, NUM_FEATURES + 50))
    D = X.toarray()
    text = libsvm_text(indptr, indices, values).encode()
    objs = [indptr, indices, values, X.indptr, X.indices, X.data, D, text]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(200):
        s.score((indptr, indices, values))
        s.score(X)
        s.score(D)
        s.score(text)
        s.score((indptr, indices.astype(np.int64), values.astype(np.float64)))
        with pytest.raises(ValueError):
            s.score((indptr[::-1].copy(), indices))
    assert [sys.getrefcount(o) for o in objs] == before


def test_memory_flat_over_many_calls(model_path):
    s = wisp.load(model_path).session("cpu")
    indptr, indices, values = make_rows(10, seed=8)
    bad = libsvm_text(indptr, indices, values) + "0 1:x\n"
    negs = (indptr, np.where(np.arange(len(indices)) == 3, -1, indices).astype(np.int32), values)
    forms = [(indptr, indices, values), (indptr.astype(np.int64), indices.astype(np.int64), values.astype(np.float64)),
             bad, negs, np.ones((10, 40))]

    def loop(n):
        for _ in range(n):
            for x in forms:
                s.score(x)
    loop(2000)                               # warm up: allocators and caches reach their size
    r0 = rss_bytes()
    loop(20000)                              # 100,000 calls
    grown = rss_bytes() - r0
    # a leak of one small object per call (>= 32 bytes) would grow RSS by >= 3 MB
    assert grown < 1 << 20, "RSS grew by %d bytes over 100,000 calls" % grown
