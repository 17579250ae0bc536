"""test_raw.py — raw rows for a model with feature columns: dicts of columns, pandas DataFrames, pyarrow Tables and
RecordBatches give exactly what `wisp score -d cpu --format jsonl` prints for the same rows."""
import json
import subprocess

import numpy as np
import pytest

import wisp

from conftest import cli_format

DESCRIPTION = {
    "format": "wisp-columns", "version": 1,
    "inputs": [
        {"name": "age", "dtype": "float32"},
        {"name": "city", "dtype": "string"},
        {"name": "uid", "dtype": "int64"},
        {"name": "tags", "dtype": "string", "sparse": True},
        {"name": "score", "dtype": "float32", "default": 0.5},
    ],
    "columns": [
        {"name": "age", "type": "numeric", "key": "age", "offset": 0},
        {"name": "age_b", "type": "bucketized", "source": {"type": "numeric", "key": "age"},
         "boundaries": [18, 25, 35, 50, 65], "offset": 1},
        {"name": "city", "type": "hash_bucket", "key": "city", "buckets": 1000, "offset": 7},
        {"name": "city_v", "type": "vocabulary_list", "key": "city", "vocabulary": ["paris", "rome", "oslo"],
         "num_oov_buckets": 2, "offset": 1007},
        {"name": "city_x_uid", "type": "crossed", "keys": ["city", "uid"], "buckets": 5000, "offset": 1012},
        {"name": "tags", "type": "hash_bucket", "key": "tags", "buckets": 500, "offset": 6012},
        {"name": "score", "type": "numeric", "key": "score", "offset": 6512},
    ],
}
NUM = 6513
CITIES = ["paris", "rome", "oslo", "lima", "", "Zürich", "a,b"]


@pytest.fixture(scope="module")
def col_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("raw")
    rng = np.random.default_rng(7)
    path = str(d / "cols.wisp")
    wisp.write_model(path, rng.normal(0, 0.5, NUM).astype(np.float32), 0.25, columns=DESCRIPTION)
    return path


def make_rows(n, seed):
    """n rows as a list of dicts (None: missing) with every kind of value."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        r = {"age": float(np.float32(rng.uniform(0, 90))),
             "city": CITIES[int(rng.integers(0, len(CITIES)))],
             "uid": int(rng.integers(-1, 10**12)),
             "tags": ["t%d" % int(rng.integers(0, 40)) for _ in range(int(rng.integers(0, 4)))]}
        if i % 5 == 1:
            r["score"] = float(np.float32(rng.normal()))
        if i % 7 == 3:
            r["city"] = None
        rows.append(r)
    return rows


def cli_scores(cli, model, rows, tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in rows))
    res = subprocess.run([cli, "score", "-d", "cpu", "-m", model, "--format", "jsonl", str(f)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return np.array(res.stdout.split())


def as_dict(rows, with_score=True):
    d = {"age": np.array([r["age"] for r in rows], dtype=np.float32),
         "city": [r["city"] for r in rows],
         "uid": np.array([r["uid"] for r in rows], dtype=np.int64),
         "tags": [r["tags"] for r in rows]}
    if with_score:
        d["score"] = [r.get("score") for r in rows]
    return d


def test_dict_of_columns_matches_cli(cli, col_model, tmp_path):
    rows = make_rows(300, 1)
    expect = cli_scores(cli, col_model, rows, tmp_path)
    s = wisp.load(col_model).session("cpu")
    got = s.score(as_dict(rows))
    assert got.dtype == np.float32 and got.shape == (300,)
    assert list(cli_format(got)) == list(expect)
    assert s.last_errors == []


def test_dict_of_plain_lists_and_extra_columns(cli, col_model, tmp_path):
    rows = make_rows(50, 2)
    expect = cli_scores(cli, col_model, rows, tmp_path)
    d = {k: list(v) if isinstance(v, np.ndarray) else v for k, v in as_dict(rows).items()}
    d["label"] = [1] * 50                       # not an input: skipped
    d["age"] = [float(x) for x in d["age"]]     # Python floats (rounded to float32, as numpy does)
    got = wisp.load(col_model).session("cpu").score(d)
    assert list(cli_format(got)) == list(expect)


def test_dataframe_matches_cli(cli, col_model, tmp_path):
    pd = pytest.importorskip("pandas")
    rows = make_rows(200, 3)
    expect = cli_scores(cli, col_model, rows, tmp_path)
    df = pd.DataFrame(as_dict(rows))
    assert df["score"].hasnans                  # pandas's missing (NaN) is missing: the default 0.5
    got = wisp.load(col_model).score(df, device="cpu")
    assert list(cli_format(got)) == list(expect)
    # categorical and pyarrow-backed strings read the same
    df2 = df.copy()
    df2["city"] = df2["city"].astype("category")
    assert list(cli_format(wisp.load(col_model).score(df2, device="cpu"))) == list(expect)


def test_arrow_table_and_record_batch_match_cli(cli, col_model, tmp_path):
    pa = pytest.importorskip("pyarrow")
    rows = make_rows(400, 4)
    expect = cli_scores(cli, col_model, rows, tmp_path)
    d = as_dict(rows)
    t = pa.table({"age": pa.array(d["age"]), "city": pa.array(d["city"], pa.string()),
                  "uid": pa.array(d["uid"]), "tags": pa.array(d["tags"], pa.list_(pa.string())),
                  "score": pa.array(d["score"], pa.float64())})
    m = wisp.load(col_model)
    assert list(cli_format(m.score(t, device="cpu"))) == list(expect)
    # several chunks, slices (offsets into the buffers), large strings, dictionaries
    t2 = pa.concat_tables([t.slice(0, 123), t.slice(123, 1), t.slice(124)])
    assert t2.column("city").num_chunks == 3
    t2 = t2.set_column(1, "city", pa.chunked_array([c.cast(pa.large_string()) for c in t2.column("city").chunks]))
    assert list(cli_format(m.score(t2, device="cpu"))) == list(expect)
    t3 = t.set_column(1, "city", t.column("city").dictionary_encode())
    assert list(cli_format(m.score(t3, device="cpu"))) == list(expect)
    rb = t.to_batches()[0]
    assert list(cli_format(m.score(rb, device="cpu"))) == list(expect)


def test_arrow_int32_and_bool_numbers(cli, col_model, tmp_path):
    pa = pytest.importorskip("pyarrow")
    rows = make_rows(60, 5)
    for r in rows:
        r["age"] = float(int(r["age"]))
        r["uid"] = r["uid"] % 1000
    expect = cli_scores(cli, col_model, rows, tmp_path)
    d = as_dict(rows)
    t = pa.table({"age": pa.array(d["age"].astype(np.int32)), "city": pa.array(d["city"], pa.string()),
                  "uid": pa.array(d["uid"].astype(np.uint16)), "tags": pa.array(d["tags"]),
                  "score": pa.array(d["score"], pa.float32())})
    assert list(cli_format(wisp.load(col_model).score(t, device="cpu"))) == list(expect)


def test_bad_rows_are_nan_and_listed(col_model):
    s = wisp.load(col_model).session("cpu")
    d = {"age": [30.0, float("nan"), None, 40.0, "x"], "city": ["paris", "rome", "oslo", 5, "lima"],
         "uid": [1, 2, 3, 4, 5], "tags": [[], ["a"], None, ["b", "c"], []]}
    p = s.score(d)
    assert np.isfinite(p[0]) and all(np.isnan(p[1:]))
    rows = [r for r, _ in s.last_errors]
    assert rows == [1, 2, 3, 4]
    reasons = dict(s.last_errors)
    assert "age" in reasons[2] and "default" in reasons[2]        # a dense float32 input missing, no default
    assert "city" in reasons[3]                                    # a number for a string input
    with pytest.raises(wisp.BadRowError) as e:
        s.score(d, errors="raise")
    assert e.value.row == 1


def test_refusals(col_model, model_path):
    m = wisp.load(col_model)
    with pytest.raises(ValueError, match="'age'"):
        m.score({"city": ["a"], "uid": [1]})                     # a dense float32 input without default
    with pytest.raises(ValueError, match="values"):
        m.score({"age": np.zeros(3, np.float32), "city": ["a", "b"]})
    with pytest.raises(TypeError, match="string"):
        m.score({"age": np.zeros(2, np.float32), "city": np.zeros(2)})
    with pytest.raises(TypeError, match="no feature-column description"):
        wisp.load(model_path).score({"age": [1.0]})


def test_numpy_nan_is_a_value_and_defaults_apply(col_model):
    m = wisp.load(col_model)
    base = {"age": np.array([20.0, np.nan], np.float32), "city": ["rome", "rome"], "uid": np.array([3, 3])}
    p = m.score(base, device="cpu")                 # tags absent (sparse: no values), score absent (default)
    assert np.isfinite(p[0]) and np.isnan(p[1])
    with_default = dict(base, score=[0.5, 0.5])
    assert m.score(with_default, device="cpu")[0] == p[0]


def test_transform_refusals_carry_the_engine_message(tmp_path):
    desc = {"format": "wisp-columns", "version": 1, "inputs": [{"name": "k", "dtype": "int64"}],
            "columns": [{"name": "k", "type": "identity", "key": "k", "buckets": 10, "offset": 0}]}
    path = str(tmp_path / "id.wisp")
    wisp.write_model(path, np.ones(10, np.float32), 0.0, columns=desc)
    s = wisp.load(path).session("cpu")
    p = s.score({"k": np.array([3, 12, 4])})
    assert np.isnan(p[1]) and np.isfinite(p[0]) and np.isfinite(p[2])
    assert [r for r, _ in s.last_errors] == [1]
    assert "NaN" not in s.last_errors[0][1] and "12" in s.last_errors[0][1]


def test_no_reference_leaks_in_raw_rows(col_model):
    import sys
    s = wisp.load(col_model).session("cpu")
    d = as_dict(make_rows(20, 9))
    bad = {"age": [1.0, "x"], "city": [3, "a"], "uid": [1, 2 ** 70], "tags": [[None, 5], "ab"]}
    objs = [d["age"], d["uid"], d["city"], d["tags"]] + d["city"][:3] + bad["uid"] + bad["age"]
    pa = None
    try:
        import pyarrow as pa
    except ImportError:
        pass
    t = pa.table({"age": pa.array(d["age"]), "city": pa.array(d["city"], pa.string())}) if pa else None
    before = [sys.getrefcount(o) for o in objs]       # (the Arrow array holds d["age"]'s buffer: counted before)
    for _ in range(300):
        s.score(d)
        s.score(bad)
        if t is not None:
            s.score(t)
        with pytest.raises(ValueError):
            s.score({"age": d["age"][:3], "city": d["city"]})
    assert [sys.getrefcount(o) for o in objs] == before


def test_gil_released_for_buffer_columns(col_model):
    # numpy and Arrow columns are built into the raw batch and scored without
    # the GIL: a watcher thread sees the session busy inside the engine
    import threading
    pa = pytest.importorskip("pyarrow")
    s = wisp.load(col_model).session("cpu")
    n = 300_000
    rng = np.random.default_rng(5)
    city = pa.array(np.array(CITIES[:4], dtype=object)[rng.integers(0, 4, n)].tolist(), pa.string())
    X = {"age": rng.uniform(0, 90, n).astype(np.float32), "city": city, "uid": rng.integers(0, 1000, n)}
    seen = {"busy": 0}
    done = threading.Event()

    def watch():
        while not done.is_set():
            if s._s.in_use():
                seen["busy"] += 1

    t = threading.Thread(target=watch)
    t.start()
    try:
        for _ in range(3):
            p = s.score(X)
            if seen["busy"] > 100:
                break
    finally:
        done.set()
        t.join()
    assert p.shape == (n,) and np.all(np.isfinite(p))
    assert seen["busy"] > 100, seen
