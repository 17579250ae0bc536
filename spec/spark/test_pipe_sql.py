"""test_pipe_sql.py — the two paths that need no wisp.spark: RDD.pipe through `wisp score` (examples/spark/pipe.py)
and the JVM's Spark SQL function wisp_score (engine/bindings/spark, over the Java binding), each against `wisp score -d cpu`."""
import importlib.util
import os

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql import types as T

from conftest import NUM, assert_cli, cli_format, libsvm, make_rows, run_cli

ROOT = os.environ.get("WISP_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))


def load_example():
    spec = importlib.util.spec_from_file_location("wisp_pipe_example", os.path.join(ROOT, "examples", "spark", "pipe.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pipe_equals_cli_with_a_bad_line(spark, cli, model_path):
    rows = make_rows(800, 41)
    text = libsvm(rows)
    lines = text.splitlines()
    lines[17] = "0 5:abc"                           # a malformed line: nan, and the other rows are kept
    lines.insert(30, "")                            # blank and comment lines make no row
    lines.insert(31, "# a comment")
    rdd = spark.sparkContext.parallelize(lines, 4)
    out = load_example().score_lines(rdd, cli, model_path).collect()
    kept = [l for l in lines if l.strip() and not l.startswith("#")]
    assert [l for l, _ in out] == kept
    ref = run_cli(cli, model_path, "\n".join(kept) + "\n", expect_bad=True)
    p = np.array([x for _, x in out], dtype=np.float32)
    assert np.isnan(p[17]) and ref[17] == "nan"
    assert_cli(p, ref)           # pipe hands back the CLI's own text: float() of it prints the same


@pytest.fixture(scope="module")
def sql_fn(spark, model_path):
    jvm = spark._jvm
    try:
        udf = jvm.wisp.spark.WispUDF
        udf.opens(model_path)
    except Exception as e:
        pytest.fail("wisp.spark.WispUDF is not on the driver's class path (WISP_SPARK_JARS=%r): %s"
                    % (os.environ.get("WISP_SPARK_JARS"), e))
    udf.register(spark._jsparkSession, "wisp_score", model_path, "auto")
    return udf


def test_sql_function_equals_cli(spark, cli, model_path, sql_fn):
    rows = make_rows(1200, 43)
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("features", VectorUDT()),
                           T.StructField("ids", T.ArrayType(T.LongType()))])
    data = [(i, Vectors.sparse(NUM + 40, ids, [float(v) for v in vals]), ids) for i, (ids, vals) in enumerate(rows)]
    spark.createDataFrame(data, schema).repartition(6, "row").createOrReplaceTempView("wisp_sql_rows")
    out = spark.sql("SELECT row, wisp_score(features) AS p, wisp_score_error(features) AS why, wisp_score(ids) AS q "
                    "FROM wisp_sql_rows ORDER BY row").collect()
    p = np.array([r.p for r in out], dtype=np.float32)
    q = np.array([r.q for r in out], dtype=np.float32)
    assert_cli(p, run_cli(cli, model_path, libsvm(rows)))
    assert_cli(q, run_cli(cli, model_path, libsvm(rows, binary=True)))
    assert all(r.why is None for r in out)
    assert sql_fn.opens(model_path) == 1                   # one JVM (local mode): one open for 6 partitions, 2 threads


def test_sql_function_bad_rows(spark, cli, model_path, sql_fn):
    schema = T.StructType([T.StructField("row", T.IntegerType()), T.StructField("features", VectorUDT()),
                           T.StructField("ids", T.ArrayType(T.LongType()))])
    data = [(0, Vectors.sparse(20, [1, 4], [0.5, 2.0]), [1, 4]), (1, None, None),
            (2, Vectors.sparse(20, [3], [float("nan")]), [3, None]), (3, Vectors.dense([0.0, 1.0, 0.0, 2.5]), [-2]),
            (4, Vectors.sparse(20, [5], [1e39]), [])]
    spark.createDataFrame(data, schema).createOrReplaceTempView("wisp_sql_bad")
    out = spark.sql("SELECT row, wisp_score(features) p, wisp_score_error(features) why, wisp_score(ids) q, "
                    "wisp_score_error(ids) qwhy FROM wisp_sql_bad ORDER BY row").collect()
    ref = run_cli(cli, model_path, "0 1:0.5 4:2\n0 1:1 3:2.5\n0 1 4\n0\n")
    assert_cli([out[0].p, out[3].p, out[0].q, out[4].q], ref)
    assert out[1].p is None and out[1].why == "null features"
    assert out[2].p is None and "finite float32" in out[2].why and out[2].qwhy == "a null id"
    assert out[4].p is None and "finite float32" in out[4].why
    assert out[3].q is None and "negative" in out[3].qwhy


def test_sql_function_task_device(spark, sql_fn):
    def addrs(*a):
        arr = spark.sparkContext._gateway.new_array(spark._jvm.java.lang.String, len(a))
        for i, x in enumerate(a):
            arr[i] = x
        return arr
    assert sql_fn.taskDevice("auto", None, None) == "cpu"
    assert sql_fn.taskDevice("auto", addrs(), None) == "cpu"
    assert sql_fn.taskDevice("auto", addrs("3"), None) == "gpu:3"
    assert sql_fn.taskDevice("auto", addrs("5"), "4,5") == "gpu:1"
    assert sql_fn.taskDevice("cpu", addrs("5"), None) == "cpu"


def test_quickstart_example(spark, cli, tmp_path, sql_fn):
    spec = importlib.util.spec_from_file_location("wisp_quickstart", os.path.join(ROOT, "examples", "spark", "quickstart.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = str(tmp_path / "q.wisp")
    mod.write_model(model)
    out = mod.run(spark, model).orderBy("row").collect()
    text = "".join("0 " + " ".join("%d:%.9g" % (i, v) for i, v in zip(r.features.indices, r.features.values)) + "\n"
                   for r in out)
    assert_cli([r.probability for r in out], run_cli(cli, model, text))
    sql_fn.register(spark._jsparkSession, "wisp_q", model, "cpu")
    mod.run(spark, model).createOrReplaceTempView("wisp_q_rows")
    q = spark.sql("SELECT wisp_q(features) AS p FROM wisp_q_rows ORDER BY row").collect()
    assert_cli([r.p for r in q], run_cli(cli, model, text))
