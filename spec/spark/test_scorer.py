"""test_scorer.py — the batched JVM path (wisp.spark.WispScorer, WispModel(engine="jvm")) against `wisp score -d cpu`,
Session.score and the Python path's reasons; and WispScorer.floor, the Spark floors bench_spark.py measures."""
import os
import shutil

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql import DataFrame, types as T

import wisp
from wisp.spark import WispModel

from conftest import NUM, assert_cli, libsvm, make_rows, run_cli


@pytest.fixture(scope="module")
def scorer(spark):
    try:
        s = spark._jvm.wisp.spark.WispScorer
        s.opens("x")
    except Exception as e:
        pytest.fail("wisp.spark.WispScorer is not on the driver's class path (WISP_SPARK_JARS=%r): %s"
                    % (os.environ.get("WISP_SPARK_JARS"), e))
    return s


def jvm_transform(spark, scorer, df, path, col="features", out="p", **opts):
    m = spark._jvm.java.util.HashMap()
    for k, v in opts.items():
        m.put(k, str(v))
    return DataFrame(scorer.transform(df._jdf, path, col, out, m), spark)


def collect(df, col):
    rows = df.orderBy("row").collect()
    return np.array([np.nan if r[col] is None else r[col] for r in rows], dtype=np.float32), rows


def csr(rows):
    indptr = np.cumsum([0] + [len(ids) for ids, _ in rows]).astype(np.int32)
    ids = np.array([i for r, _ in rows for i in r], dtype=np.int32)
    vals = np.array([v for _, r in rows for v in r], dtype=np.float32)
    return indptr, ids, vals


@pytest.mark.parametrize("batch_rows", [7, 0])          # 7: many batches, short last ones; 0: the default, 4096
def test_sparse_vectors_equal_cli_and_session(spark, cli, model_path, scorer, batch_rows):
    rows = make_rows(1500, 61)
    data = [(i, Vectors.sparse(NUM + 40, ids, [float(v) for v in vals])) for i, (ids, vals) in enumerate(rows)]
    df = spark.createDataFrame(data, ["row", "features"]).repartition(5, "row")
    p, out = collect(jvm_transform(spark, scorer, df, model_path, batchRows=batch_rows), "p")
    assert_cli(p, run_cli(cli, model_path, libsvm(rows)))
    np.testing.assert_array_equal(p, wisp.load(model_path).session("cpu").score(csr(rows)))     # bit for bit
    assert all(r["p_error"] is None for r in out)
    assert out[3]["features"] == data[3][1]                                 # the input column passes through


def test_dense_and_mixed_vectors_equal_cli(spark, cli, model_path, scorer):
    rng = np.random.default_rng(63)
    data, ref = [], []
    for i in range(500):
        if i % 3 == 0:
            ids = np.flatnonzero(rng.random(NUM + 20) < 0.02)
            vals = rng.normal(0, 1, len(ids)).astype(np.float32)
            data.append((i, Vectors.sparse(NUM + 20, ids.tolist(), vals.astype(float).tolist())))
            ref.append((ids.tolist(), vals.tolist()))
        else:
            d = rng.normal(0, 1, int(rng.integers(0, 80))).astype(np.float32)
            d[rng.random(len(d)) < 0.4] = 0.0               # zero entries skipped
            nz = np.flatnonzero(d)
            data.append((i, Vectors.dense(d.astype(float).tolist())))
            ref.append((nz.tolist(), d[nz].tolist()))
    df = spark.createDataFrame(data, ["row", "features"]).repartition(3, "row")
    p, _ = collect(jvm_transform(spark, scorer, df, model_path, batchRows=13), "p")
    assert_cli(p, run_cli(cli, model_path, libsvm(ref)))


@pytest.mark.parametrize("id_type,val_type", [(T.IntegerType(), None), (T.LongType(), T.DoubleType()),
                                              (T.IntegerType(), T.FloatType()), (T.ShortType(), T.FloatType())])
def test_id_arrays_equal_cli(spark, cli, model_path, scorer, id_type, val_type):
    rng = np.random.default_rng(65)
    rows = []
    for i in range(600):
        k = 0 if i % 17 == 0 else int(rng.integers(1, 30))
        ids = rng.integers(0, NUM + 30, size=k).tolist()          # unsorted, duplicates: each entry counts
        if i % 9 == 2:
            ids += [0, NUM - 1, NUM, ids[0] if ids else 5]
        rows.append((ids, rng.normal(0, 1.5, len(ids)).astype(np.float32).tolist()))
    fields = [T.StructField("row", T.IntegerType()), T.StructField("ids", T.ArrayType(id_type))]
    if val_type is None:
        data = [(i, ids) for i, (ids, _) in enumerate(rows)]
        opts = {}
    else:
        fields.append(T.StructField("vals", T.ArrayType(val_type)))
        data = [(i, ids, [float(v) for v in vals]) for i, (ids, vals) in enumerate(rows)]
        opts = {"valuesCol": "vals"}
    df = spark.createDataFrame(data, T.StructType(fields)).repartition(4, "row")
    p, _ = collect(jvm_transform(spark, scorer, df, model_path, col="ids", batchRows=50, **opts), "p")
    assert_cli(p, run_cli(cli, model_path, libsvm(rows, binary=val_type is None)))
    indptr, ids, vals = csr(rows)
    s = wisp.load(model_path).session("cpu")
    np.testing.assert_array_equal(p, s.score((indptr, ids)) if val_type is None else s.score((indptr, ids, vals)))


def test_bad_rows_same_reasons_as_the_python_path(spark, cli, model_path, scorer):
    good = make_rows(200, 67)
    size = NUM + 40
    data = [(i, Vectors.sparse(size, ids, [float(v) for v in vals])) for i, (ids, vals) in enumerate(good)]
    for r, v in {5: float("nan"), 77: float("inf"), 150: 1e39, 151: -float("inf")}.items():
        ids = good[r][0] or [3]
        data[r] = (r, Vectors.sparse(size, ids, [1.0] * (len(ids) - 1) + [v]))
    for r in (0, 9, 10, 199):
        data[r] = (r, None)
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("features", VectorUDT())])
    df = spark.createDataFrame(data, schema).repartition(3, "row")
    p, out = collect(jvm_transform(spark, scorer, df, model_path, out="probability", batchRows=16), "probability")
    q, ref_out = collect(WispModel(modelPath=model_path).transform(df), "probability")
    assert [r["probability_error"] for r in out] == [r["probability_error"] for r in ref_out]
    np.testing.assert_array_equal(p, q)
    bad = {0, 9, 10, 199, 5, 77, 150, 151}
    assert all(out[r]["probability"] is None for r in bad)
    assert all(out[r]["probability_error"] == "null vector" for r in (0, 9, 10, 199))
    assert all("finite float32" in out[r]["probability_error"] for r in (5, 77, 150, 151))
    ok = [r for r in range(200) if r not in bad]
    assert_cli(p[ok], run_cli(cli, model_path, libsvm([good[r] for r in ok])))   # neighbours untouched


def test_bad_id_arrays_same_reasons_as_the_python_path(spark, cli, model_path, scorer):
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("ids", T.ArrayType(T.LongType())),
                           T.StructField("vals", T.ArrayType(T.DoubleType()))])
    data = [(0, [1, 2], [0.5, 1.5]), (1, None, None), (2, [3, None], [1.0, 1.0]), (3, [4, 5], [1.0]),
            (4, [6], None), (5, [7, 8], [1.0, None]), (6, [-1, 2], [1.0, 1.0]), (7, [], []),
            (8, [9, 10], [2.0, 0.25]), (9, [1 << 40, 3], [1.0, 2.0]), (10, [-(1 << 40)], [1.0])]
    df = spark.createDataFrame(data, schema).coalesce(1)
    p, out = collect(jvm_transform(spark, scorer, df, model_path, col="ids", valuesCol="vals", batchRows=4), "p")
    why = {r["row"]: r["p_error"] for r in out}
    assert why[1] == "null ids" and why[2] == "a null id" and why[3] == "2 ids but 1 values"
    assert why[4] == "null values" and why[5] == "a null value" and "negative" in why[6] and "negative" in why[10]
    assert_cli(p[[0, 7, 8, 9]], run_cli(cli, model_path, "0 1:0.5 2:1.5\n0\n0 9:2 10:0.25\n0 3:2\n"))  # 2^40: ignored
    assert np.isnan(p[[1, 2, 3, 4, 5, 6, 10]]).all()
    _, ref = collect(WispModel(modelPath=model_path, inputCol="ids", valuesCol="vals", outputCol="p").transform(
        df.filter("row < 9")), "p")
    assert [why[r["row"]] for r in ref] == [r["p_error"] for r in ref]


def test_errors_raise_fails_the_task(spark, model_path, scorer):
    df = spark.createDataFrame([(0, Vectors.sparse(10, [1], [1.0])), (1, Vectors.sparse(10, [2], [float("nan")]))],
                               ["row", "features"]).coalesce(1)
    with pytest.raises(Exception) as e:
        jvm_transform(spark, scorer, df, model_path, errors="raise").collect()
    assert "bad row 1 of partition 0" in str(e.value) and "finite float32" in str(e.value)


def test_model_opened_once_per_jvm(spark, cli, model_path, scorer, tmp_path):
    path = str(tmp_path / "jvm-once.wisp")
    shutil.copyfile(model_path, path)
    rows = make_rows(2000, 69)
    df = spark.createDataFrame([(i, Vectors.sparse(NUM + 40, ids, [float(v) for v in vals]))
                                for i, (ids, vals) in enumerate(rows)], ["row", "features"]).repartition(8, "row")
    for _ in range(2):
        assert jvm_transform(spark, scorer, df, path, batchRows=64).filter("p is not null").count() == 2000
    assert scorer.opens(path) == 1          # local mode: one executor JVM; 16 tasks on 2 threads, ~32 batches each


def test_new_file_at_the_same_path(spark, cli, model_path, scorer, tmp_path):
    path = str(tmp_path / "jvm-swap.wisp")
    rows = make_rows(200, 71)
    df = spark.createDataFrame([(i, Vectors.sparse(NUM + 40, ids, [float(v) for v in vals]))
                                for i, (ids, vals) in enumerate(rows)], ["row", "features"]).repartition(2, "row")
    rng = np.random.default_rng(73)
    for version in range(2):
        wisp.write_model(path, rng.normal(0, 1, NUM).astype(np.float32), 0.1 * version)
        os.utime(path, (1000 + version, 1000 + version))      # a new mtime even within the file system's tick
        p, _ = collect(jvm_transform(spark, scorer, df, path), "p")
        assert_cli(p, run_cli(cli, path, libsvm(rows)))
        p2, _ = collect(jvm_transform(spark, scorer, df, path, ship="false"), "p")
        np.testing.assert_array_equal(p, p2)


def test_wispmodel_engine_jvm(spark, cli, model_path, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel
    rows = make_rows(700, 75)
    df = spark.createDataFrame([(i, Vectors.sparse(NUM + 40, ids, [float(v) for v in vals]))
                                for i, (ids, vals) in enumerate(rows)], ["row", "features"]).repartition(3, "row")
    m = WispModel(modelPath=model_path, engine="jvm", batchRows=100, errorCol="why", device="cpu")
    out = m.transform(df)
    assert out.columns == ["row", "features", "probability", "why"]
    assert out.schema["probability"].dataType == T.FloatType() and out.schema["why"].dataType == T.StringType()
    p, _ = collect(out, "probability")
    q, _ = collect(WispModel(modelPath=model_path).transform(df), "probability")
    np.testing.assert_array_equal(p, q)
    assert_cli(p, run_cli(cli, model_path, libsvm(rows)))
    pipe = Pipeline(stages=[m]).fit(df)
    pipe.write().overwrite().save(str(tmp_path / "jvm-pipe"))
    loaded = PipelineModel.load(str(tmp_path / "jvm-pipe"))
    assert loaded.stages[0].getOrDefault("engine") == "jvm"
    np.testing.assert_array_equal(collect(loaded.transform(df), "probability")[0], p)


def test_refusals(spark, model_path, scorer, tmp_path):
    from pyspark.errors import IllegalArgumentException
    df = spark.createDataFrame([(0, Vectors.sparse(10, [1], [1.0]), "x", [1])], ["row", "features", "s", "ids"])
    cases = [(dict(col="nope"), "not a column"), (dict(col="s"), "must be an MLlib vector"),
             (dict(out="s"), "already exists"), (dict(errors="skip"), "errors must be"),
             (dict(valuesCol="s"), "valuesCol goes with an ids column"), (dict(col="ids", valuesCol="s"),
                                                                           "must be array<float>"),
             (dict(batchRow="5"), "unknown option"), (dict(batchRows="x"), "batchRows must be an integer")]
    for kw, msg in cases:
        with pytest.raises(IllegalArgumentException, match=msg):
            jvm_transform(spark, scorer, df, model_path, **kw)
    with pytest.raises(Exception, match="WISP_EIO|No such file|cannot open"):
        jvm_transform(spark, scorer, df, str(tmp_path / "missing.wisp"))
    with pytest.raises(ValueError, match="engine must be"):
        WispModel(modelPath=model_path, engine="scala").transform(df)


def test_raw_columns_refused_by_engine_jvm(spark, col_model_jvm):
    df = spark.createDataFrame([(0, "x")], ["row", "city"])
    with pytest.raises(ValueError, match='engine="python"'):
        WispModel(modelPath=col_model_jvm, engine="jvm").transform(df)


@pytest.fixture(scope="module")
def col_model_jvm(tmp_path_factory):
    from test_transform import DESCRIPTION
    path = str(tmp_path_factory.mktemp("colmodel") / "cols.wisp")
    wisp.write_model(path, np.zeros(6508, np.float32), 0.25, columns=DESCRIPTION)
    return path


def test_floors_do_what_they_say(spark, scorer):
    data = [(0, Vectors.sparse(50, [1, 7], [0.5, 2.0])), (1, Vectors.dense([0.0, 1.5, 3.0])), (2, None),
            (3, Vectors.sparse(50, [], []))]
    df = spark.createDataFrame(data, T.StructType([T.StructField("row", T.IntegerType()),
                                                   T.StructField("features", VectorUDT())])).repartition(2, "row")
    want = {"pass": [1.0, 1.0, 1.0, 1.0], "read": [2.5 + 8, 4.5, 0.0, 0.0]}
    for how in ("pass", "read"):
        for eng in ("internal", "row"):
            out = DataFrame(scorer.floor(df._jdf, "features", "x", how, eng), spark).orderBy("row").collect()
            assert [r.x for r in out] == want[how], (how, eng)
            assert [r.features for r in out] == [d[1] for d in data]
