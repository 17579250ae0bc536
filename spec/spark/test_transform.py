"""test_transform.py — wisp.spark.WispModel against `wisp score -d cpu`: MLlib vectors (sparse, dense, mixed), id arrays
(binary, valued, duplicates), raw columns, several partitions and Arrow batches, bad rows, batchRows, params, persistence."""
import json
import os
import shutil

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql import types as T

import wisp
from wisp.spark import WispModel

from conftest import NUM, assert_cli, cli_format, libsvm, make_rows, run_cli


def collect(df, col="probability"):
    rows = df.orderBy("row").collect()
    return np.array([np.nan if r[col] is None else r[col] for r in rows], dtype=np.float32), rows


def vec_df(spark, rows, parts, size=NUM + 40):
    data = [(i, Vectors.sparse(size, ids, [float(v) for v in vals])) for i, (ids, vals) in enumerate(rows)]
    return spark.createDataFrame(data, ["row", "features"]).repartition(parts, "row")


def test_sparse_vectors_equal_cli_on_several_partitions(spark, cli, model_path):
    rows = make_rows(1500, 1)
    df = vec_df(spark, rows, 6)
    assert df.rdd.getNumPartitions() == 6
    p, out = collect(WispModel(modelPath=model_path).transform(df))
    ref = run_cli(cli, model_path, libsvm(rows))
    assert len(p) == len(ref) == 1500
    assert_cli(p, ref)
    # and bit for bit the engine call the executors make (Session.score of the same CSR, float32)
    indptr = np.cumsum([0] + [len(ids) for ids, _ in rows]).astype(np.int32)
    ids = np.array([i for r, _ in rows for i in r], dtype=np.int32)
    vals = np.array([v for _, r in rows for v in r], dtype=np.float32)
    np.testing.assert_array_equal(p, wisp.load(model_path).session("cpu").score((indptr, ids, vals)))
    assert all(r["probability_error"] is None for r in out)
    assert out[0]["features"] == Vectors.sparse(NUM + 40, rows[0][0], rows[0][1])     # the input column passes through


def test_dense_and_mixed_vectors_equal_cli(spark, cli, model_path):
    rng = np.random.default_rng(3)
    data, ref_rows = [], []
    for i in range(400):
        n = int(rng.integers(0, 60))
        d = rng.normal(0, 1, n).astype(np.float32)
        d[rng.random(n) < 0.4] = 0.0                    # zero entries: skipped, as for dense rows in Session.score
        if i % 3 == 0:
            ids = np.flatnonzero(rng.random(NUM + 20) < 0.02)
            vals = rng.normal(0, 1, len(ids)).astype(np.float32)
            v = Vectors.sparse(NUM + 20, ids.tolist(), vals.astype(float).tolist())
            ref_rows.append((ids.tolist(), vals.tolist()))
        else:
            v = Vectors.dense(d.astype(float).tolist())
            nz = np.flatnonzero(d)
            ref_rows.append((nz.tolist(), d[nz].tolist()))
        data.append((i, v))
    df = spark.createDataFrame(data, ["row", "features"]).repartition(3, "row")
    p, _ = collect(WispModel(modelPath=model_path).transform(df))
    assert_cli(p, run_cli(cli, model_path, libsvm(ref_rows)))
    # every row dense
    dense = spark.createDataFrame([d for d in data if not hasattr(d[1], "indices")], ["row", "features"])
    p2, _ = collect(WispModel(modelPath=model_path).transform(dense))
    assert_cli(p2, run_cli(cli, model_path, libsvm([r for d, r in zip(data, ref_rows)
                                                                       if not hasattr(d[1], "indices")])))


def test_id_arrays_binary_with_duplicates(spark, cli, model_path):
    rng = np.random.default_rng(5)
    rows = []
    for i in range(700):
        k = int(rng.integers(0, 30))
        ids = rng.integers(0, NUM + 30, size=k).tolist()          # unsorted, duplicates: each entry counts
        if i % 9 == 2:
            ids += [0, NUM - 1, NUM, ids[0] if ids else 5]
        rows.append((ids, None))
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("ids", T.ArrayType(T.IntegerType()))])
    df = spark.createDataFrame([(i, r[0]) for i, r in enumerate(rows)], schema).repartition(4, "row")
    p, _ = collect(WispModel(modelPath=model_path, inputCol="ids").transform(df))
    assert_cli(p, run_cli(cli, model_path, libsvm(rows, binary=True)))


@pytest.mark.parametrize("id_type,val_type", [(T.LongType(), T.DoubleType()), (T.IntegerType(), T.FloatType())])
def test_id_arrays_with_values(spark, cli, model_path, id_type, val_type):
    rows = make_rows(600, 7)
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("ids", T.ArrayType(id_type)),
                           T.StructField("vals", T.ArrayType(val_type))])
    df = spark.createDataFrame([(i, ids, [float(v) for v in vals]) for i, (ids, vals) in enumerate(rows)],
                               schema).repartition(5, "row")
    p, _ = collect(WispModel(modelPath=model_path, inputCol="ids", valuesCol="vals").transform(df))
    assert_cli(p, run_cli(cli, model_path, libsvm(rows)))


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
        {"name": "city_x_uid", "type": "crossed", "keys": ["city", "uid"], "buckets": 5000, "offset": 1007},
        {"name": "tags", "type": "hash_bucket", "key": "tags", "buckets": 500, "offset": 6007},
        {"name": "score", "type": "numeric", "key": "score", "offset": 6507},
    ],
}


@pytest.fixture(scope="module")
def col_model(tmp_path_factory):
    rng = np.random.default_rng(9)
    path = str(tmp_path_factory.mktemp("cols") / "cols.wisp")
    wisp.write_model(path, rng.normal(0, 0.5, 6508).astype(np.float32), 0.25, columns=DESCRIPTION)
    return path


def test_raw_columns_equal_cli_jsonl(spark, cli, col_model):
    rng = np.random.default_rng(11)
    cities = ["paris", "rome", "", "Zürich", "a,b", None]
    rows = []
    for i in range(500):
        r = {"row": i, "age": float(np.float32(rng.uniform(0, 90))), "city": cities[int(rng.integers(0, 6))],
             "uid": int(rng.integers(-1, 10**12)), "tags": ["t%d" % int(rng.integers(0, 40)) for _ in range(int(rng.integers(0, 4)))],
             "score": float(np.float32(rng.normal())) if i % 4 == 1 else None, "label": i % 2}
        rows.append(r)
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("age", T.FloatType()),
                           T.StructField("city", T.StringType()), T.StructField("uid", T.LongType()),
                           T.StructField("tags", T.ArrayType(T.StringType())), T.StructField("score", T.FloatType()),
                           T.StructField("label", T.IntegerType())])
    df = spark.createDataFrame([tuple(r[f.name] for f in schema.fields) for r in rows], schema).repartition(3, "row")
    p, _ = collect(WispModel(modelPath=col_model).transform(df))         # inputs found by name; row, label skipped
    text = "".join(json.dumps({k: v for k, v in r.items() if v is not None and k not in ("row", "label")}) + "\n"
                   for r in rows)
    assert_cli(p, run_cli(cli, col_model, text, fmt="jsonl"))
    p2, _ = collect(WispModel(modelPath=col_model, inputCols=["age", "city", "uid", "tags", "score"]).transform(df))
    np.testing.assert_array_equal(p2, p)


def test_bad_rows_stay_rows(spark, cli, model_path):
    good = make_rows(300, 13)
    size = NUM + 40
    data, kinds = [], {}
    for i, (ids, vals) in enumerate(good):
        data.append((i, Vectors.sparse(size, ids, [float(v) for v in vals])))
    bad_vals = {5: float("nan"), 77: float("inf"), 150: 1e39, 222: -float("inf")}
    for r, v in bad_vals.items():
        ids = good[r][0] or [3]
        data[r] = (r, Vectors.sparse(size, ids, [v] + [1.0] * (len(ids) - 1)))
        kinds[r] = "finite float32"
    for r in (9, 10, 299):
        data[r] = (r, None)
        kinds[r] = "null vector"
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("features", VectorUDT())])
    df = spark.createDataFrame(data, schema).repartition(3, "row")
    p, out = collect(WispModel(modelPath=model_path).transform(df))
    ref = run_cli(cli, model_path, libsvm(good))
    for r in range(300):
        if r in kinds:
            assert out[r]["probability"] is None, r
            assert kinds[r] in out[r]["probability_error"], (r, out[r]["probability_error"])
        else:
            assert out[r]["probability_error"] is None
            assert cli_format([p[r]])[0] == ref[r], r                      # the bad rows do not touch their neighbours


def test_bad_id_arrays(spark, cli, model_path):
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("ids", T.ArrayType(T.LongType())),
                           T.StructField("vals", T.ArrayType(T.DoubleType()))])
    data = [(0, [1, 2], [0.5, 1.5]), (1, None, None), (2, [3, None], [1.0, 1.0]), (3, [4, 5], [1.0]),
            (4, [6], None), (5, [7, 8], [1.0, None]), (6, [-1, 2], [1.0, 1.0]), (7, [], []), (8, [9, 10], [2.0, 0.25]), (9, [], []), (10, [], [])]
    df = spark.createDataFrame(data, schema).coalesce(1)
    p, out = collect(WispModel(modelPath=model_path, inputCol="ids", valuesCol="vals").transform(df))
    why = {r["row"]: r["probability_error"] for r in out}
    assert why[1] == "null ids" and why[2] == "a null id" and why[3] == "2 ids but 1 values"
    assert why[4] == "null values" and why[5] == "a null value" and "negative" in why[6]
    assert_cli(p[[0, 7, 8, 9, 10]], run_cli(cli, model_path, "0 1:0.5 2:1.5\n0\n0 9:2 10:0.25\n0\n0\n"))
    assert np.isnan(p[[1, 2, 3, 4, 5, 6]]).all()


def test_errors_raise_fails_the_task(spark, model_path):
    df = spark.createDataFrame([(0, Vectors.sparse(10, [1], [1.0])), (1, Vectors.sparse(10, [2], [float("nan")]))],
                               ["row", "features"])
    with pytest.raises(Exception) as e:
        WispModel(modelPath=model_path, errors="raise").transform(df).collect()
    assert "BadRowError" in str(e.value) and "finite float32" in str(e.value)


@pytest.mark.parametrize("batch_rows", [10, 250])
def test_batch_rows_split_and_coalesce(spark, cli, model_path, batch_rows):
    rows = make_rows(900, 21)
    df = vec_df(spark, rows, 2)
    p, _ = collect(WispModel(modelPath=model_path, batchRows=batch_rows).transform(df))
    assert_cli(p, run_cli(cli, model_path, libsvm(rows)))


def test_model_opened_once_per_executor_process(spark, model_path, stats_dir, tmp_path):
    from conftest import read_stats
    path = str(tmp_path / "once.wisp")
    shutil.copyfile(model_path, path)
    rows = make_rows(2000, 23)
    df = vec_df(spark, rows, 8)
    n = WispModel(modelPath=path).transform(df).filter("probability is not null").count()
    assert n == 2000
    mine = []
    for st in read_stats(stats_dir):
        opened = {k: v for k, v in st["opens"].items() if k.startswith(os.path.abspath(path) + "#")}
        if opened:
            mine.append((st["pid"], list(opened.values())))
    assert mine, "no executor process opened the model"
    assert all(v == [1] for _, v in mine), mine            # once per process, not per task (8) or batch (24+)
    assert len(mine) < 8                                     # so some process ran several tasks on one open


def test_new_file_at_the_same_path_is_opened_again(spark, cli, model_path, tmp_path):
    path = str(tmp_path / "swap.wisp")
    rows = make_rows(200, 29)
    df = vec_df(spark, rows, 2)
    rng = np.random.default_rng(31)
    for version in range(2):
        wisp.write_model(path, rng.normal(0, 1, NUM).astype(np.float32), 0.1 * version)
        p, _ = collect(WispModel(modelPath=path).transform(df))
        assert_cli(p, run_cli(cli, path, libsvm(rows)))


def test_shared_path_without_shipping(spark, cli, model_path):
    rows = make_rows(300, 37)
    p, _ = collect(WispModel(modelPath=model_path, shipModel=False).transform(vec_df(spark, rows, 2)))
    assert_cli(p, run_cli(cli, model_path, libsvm(rows)))


def test_params_and_refusals(spark, model_path, col_model, tmp_path):
    df = spark.createDataFrame([(0, Vectors.sparse(10, [1], [1.0]), "x")], ["row", "features", "s"])
    with pytest.raises(ValueError, match="already exists"):
        WispModel(modelPath=model_path, outputCol="s").transform(df)
    with pytest.raises(ValueError, match="errors must be"):
        WispModel(modelPath=model_path, errors="skip").transform(df)
    with pytest.raises(ValueError, match="not a column"):
        WispModel(modelPath=model_path, inputCol="nope").transform(df)
    with pytest.raises(ValueError, match="must be an MLlib vector"):
        WispModel(modelPath=model_path, inputCol="s").transform(df)
    with pytest.raises(ValueError, match="valuesCol goes with an ids column"):
        WispModel(modelPath=model_path, valuesCol="s").transform(df)
    with pytest.raises(ValueError, match="feature columns"):
        WispModel(modelPath=model_path, inputCols=["s"]).transform(df)
    with pytest.raises(ValueError, match="none of the model's inputs"):
        WispModel(modelPath=col_model, inputCol="nope").transform(df)
    with pytest.raises(wisp.WispIOError):
        WispModel(modelPath=str(tmp_path / "missing.wisp")).transform(df)
    m = WispModel(modelPath=model_path, outputCol="p", errorCol="why", device="cpu", batchRows=64)
    assert m.getErrorCol() == "why" and m.getOutputCol() == "p"
    out = m.transform(df)
    assert out.columns == ["row", "features", "s", "p", "why"]
    assert out.schema["p"].dataType == T.FloatType() and out.schema["why"].dataType == T.StringType()


def test_pipeline_save_and_load(spark, model_path, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import FeatureHasher
    df = spark.createDataFrame([(i, "c%d" % (i % 7), float(i) / 3) for i in range(50)], ["row", "cat", "num"])
    pipe = Pipeline(stages=[FeatureHasher(inputCols=["cat", "num"], outputCol="features", numFeatures=NUM),
                            WispModel(modelPath=model_path)]).fit(df)
    p1, _ = collect(pipe.transform(df))
    pipe.write().overwrite().save(str(tmp_path / "pipe"))
    p2, _ = collect(PipelineModel.load(str(tmp_path / "pipe")).transform(df))
    np.testing.assert_array_equal(p1, p2)
    assert not np.isnan(p1).any()


def test_equals_mllib_on_the_same_weights(spark, model_path):
    # MLlib's LogisticRegressionModel on the model's float32 weights (as float64), through its own constructor:
    # MLlib sums in float64, wisp in float32 weights x float32 values; the tolerance is 1e-6 in probability
    from pyspark.ml.classification import LogisticRegressionModel
    from pyspark.ml.common import _py2java
    from pyspark.ml.linalg import DenseVector
    m = wisp.load(model_path)
    w = np.array([m.weight(i) for i in range(m.num_features)], dtype=np.float64)
    jlr = spark._jvm.org.apache.spark.ml.classification.LogisticRegressionModel(
        "wisp_spec_lr", _py2java(spark.sparkContext, DenseVector(w)), float(m.bias))
    lr = LogisticRegressionModel(jlr).setProbabilityCol("p_mllib").setRawPredictionCol("").setPredictionCol("")
    rows = [([i for i in ids if i < NUM], [v for i, v in zip(ids, vals) if i < NUM])
            for ids, vals in make_rows(800, 47, max_id=NUM)]    # MLlib needs the vector's size to be the table's
    df = vec_df(spark, rows, 3, size=NUM)
    out = WispModel(modelPath=model_path).transform(lr.transform(df)).orderBy("row").collect()
    diff = max(abs(float(r.p_mllib[1]) - r.probability) for r in out)
    assert diff < 1e-6, diff
