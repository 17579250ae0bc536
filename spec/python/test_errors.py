"""test_errors.py — bad rows score NaN and are listed (or raise BadRowError); bad files and arguments raise WispError subclasses."""
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

import wisp
from conftest import NUM_FEATURES


@pytest.fixture(scope="module")
def session(model_path):
    return wisp.load(model_path).session("cpu")


def check_bad(session, X, bad_rows, reason, n):
    p = session.score(X)
    assert p.shape == (n,)
    assert [r for r, _ in session.last_errors] == bad_rows
    for _, why in session.last_errors:
        assert reason in why
    assert np.all(np.isnan(p[bad_rows]))
    good = np.setdiff1d(np.arange(n), bad_rows)
    assert np.all(np.isfinite(p[good]))
    with pytest.raises(wisp.BadRowError) as e:
        session.score(X, errors="raise")
    assert e.value.row == bad_rows[0] and reason in e.value.reason
    assert "row %d" % bad_rows[0] in str(e.value)
    assert [r for r, _ in e.value.errors] == bad_rows
    return p


def test_libsvm_bad_lines(session):
    text = "0 1:1 2:2\n0 3:x\n\n0 4:1\n1 5:nan\n"
    p = check_bad(session, text, [1, 3], "line", 4)
    assert "line 2" in session.last_errors[0][1] and "line 5" in session.last_errors[1][1]
    assert isinstance(p, np.ndarray)


def test_negative_index_int32_in_place(session):
    # int32 indices are read in place as uint32: -5 reads as 2^32-5, so the
    # package must still find it (through the out-of-range counter) and call the row bad
    indptr = np.array([0, 2, 3, 5], dtype=np.int32)
    indices = np.array([1, 2, -5, 7, 8], dtype=np.int32)
    values = np.ones(5, dtype=np.float32)
    check_bad(session, (indptr, indices, values), [1], "negative feature index (-5)", 3)


def test_negative_index_int64(session):
    indptr = np.array([0, 2, 3, 5], dtype=np.int64)
    indices = np.array([1, -2, 3, 7, -9], dtype=np.int64)
    check_bad(session, (indptr, indices), [0, 2], "negative feature index", 3)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_non_finite_values(session, bad, dt):
    indptr = np.array([0, 1, 3, 4], dtype=np.int32)
    indices = np.array([1, 2, 3, 4], dtype=np.int32)
    values = np.array([1.0, 2.0, bad, 0.5], dtype=dt)
    check_bad(session, (indptr, indices, values), [1], "feature #2 (id 3): value %s is not a finite float32"
              % ("nan" if np.isnan(bad) else "inf" if bad > 0 else "-inf"), 3)


def test_float64_overflowing_float32(session):
    # 1e39 is finite in float64 but not in float32: the row is bad (the engine's values rule)
    p = check_bad(session, (np.array([0, 1, 2]), np.array([1, 2]), np.array([1e39, 1.0])), [0],
                  "not a finite float32", 2)
    assert np.isfinite(p[1])


def test_dense_nan(session):
    X = np.ones((4, 10), dtype=np.float64)
    X[2, 7] = np.nan
    check_bad(session, X, [2], "(id 7): value nan is not a finite float32", 4)


def test_out_of_range_ids_are_not_bad(session):
    # ids beyond the table are ignored, as LIBLINEAR and `wisp score` do
    p = session.score((np.array([0, 1], np.int32), np.array([NUM_FEATURES + 10], np.int64)))
    assert session.last_errors == [] and np.isfinite(p[0])
    assert p[0] == session.score("0\n")[0]


@pytest.mark.parametrize("indptr, indices, what", [
    ([0, 3, 2], [1, 2, 3], "decreases at row 1"),
    ([0, 2, 9], [1, 2, 3], "indices has 3 entries"),
    ([-1, 2], [1, 2, 3], "negative"),
])
def test_malformed_csr_raises(session, indptr, indices, what):
    for t in (np.int32, np.int64):
        with pytest.raises(ValueError, match=what):
            session.score((np.array(indptr, dtype=t), np.array(indices, dtype=np.int32)))


@pytest.mark.parametrize("t", [np.int32, np.int64, np.uint32])
def test_indptr_offset_and_trailing_indices_are_refused(session, t):
    # scipy's rules (wisp_batch_from_csr's WISP_CSR_STRICT): indptr starts at 0 and ends at
    # len(indices); an offset or trailing entries are refused, naming the arrays, on every path
    indices, values = np.array([1, 2, 3], np.int32), np.ones(3, np.float32)
    cases = [
        ((np.array([1, 2, 3], t), indices), r"indptr\[0\] = 1, must be 0"),
        ((np.array([0, 1, 2], t), indices, values), r"indptr\[-1\] = 2 but indices has 3 entries"),
    ]
    for X, words in cases:
        for form in (X, tuple(list(a) for a in X)):          # arrays the engine reads, and lists numpy converts
            with pytest.raises(wisp.InvalidArgumentError, match=words):
                session.score(form)
        with pytest.raises(wisp.InvalidArgumentError, match=words):
            session._s.score_csr(X[0], X[1], X[2] if len(X) == 3 else None, np.empty(len(X[0]) - 1, np.float32))
    # a scipy matrix whose arrays were set by hand is held to the same rules
    M = sp.csr_matrix((values, indices, np.array([0, 1, 3])), shape=(2, 10))
    M.indptr = np.array([0, 1, 2], M.indptr.dtype)
    with pytest.raises(wisp.InvalidArgumentError, match="indptr\\[-1\\] = 2 but indices has 3 entries"):
        session.score(M)
    # the session still scores afterwards
    assert np.isfinite(session.score((np.array([0, 3], t), indices, values))).all()


def test_bad_rows_and_its_alias_last_errors(session):
    indptr = np.array([0, 1, 2, 3], np.int32)
    p = session.score((indptr, np.array([1, -2, 3], np.int32)))
    assert np.isnan(p[1]) and not np.isnan(p[0])
    assert session.bad_rows == [(1, "feature #1: a negative feature index (-2)")]
    assert session.last_errors == session.bad_rows
    session.score((indptr, np.array([1, 2, 3], np.int32)))
    assert session.bad_rows == [] and session.last_errors == []


def test_values_shorter_than_indices(session):
    with pytest.raises(ValueError, match="values has 2 entries"):
        session.score((np.array([0, 3]), np.array([1, 2, 3]), np.ones(2, np.float32)))


def test_bad_arguments(session):
    with pytest.raises(ValueError, match="1-D array"):
        session.score(np.ones(5))
    with pytest.raises(ValueError, match='errors must be "nan" or "raise"'):
        session.score("0 1:1\n", errors="ignore")
    with pytest.raises(TypeError):
        session.score((np.array([0, 1]), np.array(["a"])))
    with pytest.raises(ValueError):
        session.score((np.array([0, 1]),))


def test_missing_file():
    with pytest.raises(wisp.WispIOError) as e:
        wisp.load("/nonexistent/dir/model.wisp")
    assert "/nonexistent/dir/model.wisp" in str(e.value)
    assert e.value.status == wisp._wisp.EIO
    assert isinstance(e.value, wisp.WispError) and isinstance(e.value, OSError)


def test_corrupt_files(model_path, tmp_path):
    data = open(model_path, "rb").read()
    flipped = bytearray(data)
    flipped[-8] ^= 0x40                      # inside the last section: its checksum no longer matches
    cases = {
        "flipped.wisp": (bytes(flipped), wisp.FormatError),
        "truncated.wisp": (data[: len(data) // 2], wisp.FormatError),
        "garbage.wisp": (b"not a model at all\n" * 10, wisp.FormatError),
        "empty.wisp": (b"", wisp.WispError),
    }
    for name, (content, cls) in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(cls) as e:
            wisp.load(str(p))
        assert str(p) in str(e.value), (name, str(e.value))
        assert e.value.status < 0


def test_checksum_error_class(model_path, tmp_path):
    data = bytearray(open(model_path, "rb").read())
    data[-8] ^= 0x40
    p = tmp_path / "c.wisp"
    p.write_bytes(bytes(data))
    with pytest.raises(wisp.ChecksumError, match="checksum"):
        wisp.load(str(p))


def test_closed_session(model_path):
    s = wisp.load(model_path).session("cpu")
    s.close()
    with pytest.raises(wisp.StateError, match="closed"):
        s.score("0 1:1\n")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_everywhere(session, bad):
    # float32 values are read in place and checked after scoring; a
    # non-finite value must make its row bad wherever it sits: on id 0
    # (weight 0: inf * 0 is NaN), on an id beyond the table (not summed at
    # all), and next to rows that saturate to 0.0 or 1.0 legitimately
    indptr = np.array([0, 1, 2, 3, 4, 5], dtype=np.int32)
    indices = np.array([0, NUM_FEATURES + 5, 3, 3, 3], dtype=np.int32)
    values = np.array([bad, bad, 1e30, -1e30, 1.0], dtype=np.float32)
    p = session.score((indptr, indices, values))
    assert [r for r, _ in session.last_errors] == [0, 1]
    assert np.isnan(p[0]) and np.isnan(p[1])
    assert sorted([p[2], p[3]]) == [0.0, 1.0] and 0.0 < p[4] < 1.0


def test_limits_raise_limit_error(session):
    n = (1 << 20) + 1                          # one more than WISP_MAX_ROW_FEATURES
    # CSR rows go through wisp_batch_from_csr: a row that wide is a bad row (as on the GPU), the others score
    p = check_bad(session, (np.array([0, n, n + 1], np.int32), np.zeros(n + 1, np.int32)), [0],
                  "1048577 features, more than WISP_MAX_ROW_FEATURES (1048576)", 2)
    assert np.isfinite(p[1])
    X = np.ones((2, n), dtype=np.float32)
    with pytest.raises(wisp.LimitError, match="row 0 has 1048577 non-zero columns"):
        session.score(X)
    # the session still works afterwards
    assert np.isfinite(session.score("0 1:1\n")[0])
