"""test_score.py — every input form of Session.score gives the probabilities `wisp score -d cpu` prints, bit for bit."""
import numpy as np
import pytest
import scipy.sparse as sp

import wisp
from conftest import NUM_FEATURES, cli_format, libsvm_text, make_rows


@pytest.fixture(scope="module")
def rows():
    return make_rows(400, seed=1)


@pytest.fixture(scope="module")
def expected(rows, cli_score):
    indptr, indices, values = rows
    return cli_score(libsvm_text(indptr, indices, values))


@pytest.fixture(scope="module")
def session(model_path):
    return wisp.load(model_path).session("cpu")


def same(got, want):
    """got (float32 probabilities) prints exactly as `wisp score` printed want."""
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(cli_format(got), want)


def test_model_facts(model_path):
    m = wisp.load(model_path)
    assert m.num_features == NUM_FEATURES + 1
    assert m.dtype == "f32"
    assert m.meta["source"] == "liblinear" and m.meta["labels"] == "1 -1"
    assert m.columns is None
    assert list(m.classes_) == [-1, 1]
    assert isinstance(m.bias, float) and m.bias != 0.0


def test_reference_is_not_trivial(expected):
    p = expected.astype(np.float64)
    assert len(p) == 400 and np.all(np.isfinite(p))
    assert p.min() < 0.2 and p.max() > 0.8


def test_libsvm_text(session, rows, expected):
    text = libsvm_text(*rows)
    same(session.score(text), expected)
    same(session.score(text.encode()), expected)
    assert session.last_errors == []


def test_csr_in_place(session, rows, expected):
    indptr, indices, values = rows
    X = sp.csr_matrix((values, indices, indptr), shape=(400, NUM_FEATURES + 50))
    assert X.indices.dtype == np.int32 and X.data.dtype == np.float32
    same(session.score(X), expected)
    if hasattr(sp, "csr_array"):
        same(session.score(sp.csr_array(X)), expected)


def test_other_sparse_formats_and_dtypes(session, rows, expected):
    indptr, indices, values = rows
    X = sp.csr_matrix((values, indices, indptr), shape=(400, NUM_FEATURES + 50))
    same(session.score(X.tocoo()), expected)
    same(session.score(X.tocsc()), expected)
    X64 = sp.csr_matrix((values.astype(np.float64), indices, indptr), shape=X.shape)
    X64.indptr = X64.indptr.astype(np.int64)        # scipy picks int32 itself; force its int64 form
    X64.indices = X64.indices.astype(np.int64)
    assert X64.indptr.dtype == np.int64
    same(session.score(X64), expected)


@pytest.mark.parametrize("ptr_t", [np.int32, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("idx_t", [np.int32, np.uint32, np.int64, np.uint16])
@pytest.mark.parametrize("val_t", [np.float32, np.float64])
def test_tuple_dtypes(session, rows, expected, ptr_t, idx_t, val_t):
    indptr, indices, values = rows
    same(session.score((indptr.astype(ptr_t), indices.astype(idx_t), values.astype(val_t))), expected)


def test_tuple_binary(session, rows, cli_score):
    indptr, indices, _ = rows
    want = cli_score(libsvm_text(indptr, indices))
    same(session.score((indptr, indices)), want)


def test_tuple_slice_of_larger_csr(session, rows, expected):
    # a window of rows 100..199, given as scipy gives it (X[100:200]: indptr from 0, the window's
    # indices and values); the raw window (indptr from indptr[100], every index) breaks scipy's
    # rules and is refused, naming the arrays
    indptr, indices, values = rows
    a, z = indptr[100], indptr[200]
    same(session.score((indptr[100:201] - a, indices[a:z], values[a:z])), expected[100:200])
    X = sp.csr_matrix((values, indices, indptr), shape=(400, NUM_FEATURES + 50))
    same(session.score(X[100:200]), expected[100:200])
    with pytest.raises(wisp.InvalidArgumentError, match=r"indptr\[0\] = %d, must be 0" % a):
        session.score((indptr[100:201], indices, values))


def test_non_contiguous_arrays(session, rows, expected):
    indptr, indices, values = rows
    idx2 = np.empty(2 * len(indices), dtype=np.int32)
    idx2[::2] = indices
    same(session.score((indptr, idx2[::2], values)), expected)


def test_dense(session, rows, expected):
    indptr, indices, values = rows
    X = sp.csr_matrix((values, indices, indptr), shape=(400, NUM_FEATURES + 50)).toarray()
    same(session.score(X), expected)
    same(session.score(X.astype(np.float64)), expected)
    same(session.score(np.asfortranarray(X)), expected)


def test_dense_integers_and_bool(session, cli_score):
    X = np.zeros((3, 20), dtype=np.int64)
    X[0, [1, 5]] = [2, -3]
    X[2, 19] = 7
    want = cli_score("0 1:2 5:-3\n0\n0 19:7\n")
    same(session.score(X), want)
    same(session.score(X != 0), cli_score("0 1 5\n0\n0 19\n"))


def test_empty_inputs(session):
    assert session.score("").shape == (0,)
    assert session.score(np.zeros((0, 5), dtype=np.float32)).shape == (0,)
    assert session.score((np.zeros(1, np.int32), np.zeros(0, np.int32))).shape == (0,)


def test_model_score_predict_proba_predict(model_path, rows, expected):
    m = wisp.load(model_path)
    indptr, indices, values = rows
    X = sp.csr_matrix((values, indices, indptr), shape=(400, NUM_FEATURES + 50))
    same(m.score(X, device="cpu"), expected)
    P = m.predict_proba(X, device="cpu")
    assert P.shape == (400, 2)
    # LIBLINEAR's score is the probability of label 1 (its first label); classes_ = [-1, 1]
    p = m.score(X, device="cpu")
    np.testing.assert_array_equal(P[:, 1], p.astype(np.float64))
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    y = m.predict(X, device="cpu")
    np.testing.assert_array_equal(y, np.where(p > 0.5, 1, -1))


def test_stats_count_rows_and_out_of_range(model_path, rows):
    s = wisp.load(model_path).session("cpu")
    indptr, indices, values = rows
    s.score((indptr, indices, values))
    st = s.stats()
    assert st["batches"] == 1 and st["rows"] == 400 and st["nnz"] == len(indices)
    assert st["out_of_range"] == int(np.sum(indices >= NUM_FEATURES + 1)) > 0
    assert st["ns_total"] > 0
    s.reset_stats()
    assert s.stats()["rows"] == 0


def test_device_grammar(model_path):
    m = wisp.load(model_path)
    s = m.session("auto")
    assert s.device == "auto"
    s.score("0 1:1\n")
    assert s.last_device in ("cpu",) or s.last_device.startswith("gpu")
    with pytest.raises(wisp.InvalidArgumentError, match="unknown device 'tpu'"):
        m.session("tpu")
    devs = wisp.devices()
    assert devs[0]["device"] == "cpu" and devs[0]["threads"] >= 1


def test_submit_and_score_async(model_path, rows, expected):
    import asyncio
    s = wisp.load(model_path).session("cpu")
    indptr, indices, values = rows
    futs = [s.submit((indptr, indices, values)) for _ in range(4)]
    for f in futs:
        same(f.result(timeout=60), expected)

    async def main():
        return await s.score_async(libsvm_text(indptr, indices, values))
    same(asyncio.run(main()), expected)
    s.close()


def test_lists_and_odd_layouts(session, rows, expected):
    indptr, indices, values = rows
    # Python lists, big-endian and float16 arrays are converted by numpy first
    same(session.score((indptr.tolist(), indices.tolist(), values.tolist())), expected)
    same(session.score((indptr.astype(">i4"), indices.astype(">i8"), values.astype(">f4"))), expected)
    v16 = values.astype(np.float16)
    want = session.score((indptr, indices, v16.astype(np.float32)))
    np.testing.assert_array_equal(session.score((indptr, indices, v16)), want)


# the engine's worker threads exist at the fork; that is the case under test
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_child_scores(model_path, rows, expected):
    import os
    m = wisp.load(model_path)
    s = m.session("cpu")
    same(s.score(rows), expected)             # the engine's threads run in the parent
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                              # child: the same session, after fork
        try:
            ok = np.array_equal(cli_format(s.score(rows)), expected)
            os.write(w, b"ok" if ok else b"mismatch")
        except BaseException as e:            # noqa: BLE001 - reported to the parent
            os.write(w, repr(e).encode()[:200])
        finally:
            os._exit(0)
    os.close(w)
    msg = os.read(r, 256)
    os.close(r)
    os.waitpid(pid, 0)
    assert msg == b"ok"


def test_set_threads_after_start(model_path):
    wisp.load(model_path)
    with pytest.raises(wisp.StateError, match="already runs with"):
        wisp.set_threads(1)
