#!/usr/bin/env python3
"""examples/spark/quickstart.py — wisp in PySpark: FeatureHasher -> WispModel.transform, and the same rows through the SQL function wisp_score.

    build/spark-venv/bin/python examples/spark/quickstart.py [build]      (the venv: WISP_BUILD=build sh spec/spark/run.sh)

Writes a small model (2^12 hashed features) into a temporary directory, hashes three columns of
a DataFrame with MLlib's FeatureHasher into a vector column, scores it with
wisp.spark.WispModel (probability, probability_error), and, when BUILD/wisp-spark.jar and
BUILD/wisp.jar exist, registers wisp_score from the JVM and runs the same rows through Spark SQL.
"""
import os
import sys
import tempfile

import numpy as np


def run(spark, model_path):
    """The example's DataFrame scored by WispModel: (row, features, probability, probability_error)."""
    from pyspark.ml.feature import FeatureHasher
    from wisp.spark import WispModel
    rows = [(0, "paris", "mobile", 3.0), (1, "rome", "desktop", 1.5), (2, "oslo", "mobile", 0.0), (3, None, "tv", 2.0)]
    df = spark.createDataFrame(rows, "row int, city string, device string, visits double")
    hashed = FeatureHasher(inputCols=["city", "device", "visits"], outputCol="features", numFeatures=1 << 12).transform(df)
    return WispModel(modelPath=model_path, inputCol="features").transform(hashed).select(
        "row", "features", "probability", "probability_error")


def write_model(path):
    import wisp
    rng = np.random.default_rng(0)
    wisp.write_model(path, rng.normal(0, 1, 1 << 12).astype(np.float32), -0.5)


def main(argv):
    build = os.path.abspath(argv[1] if len(argv) > 1 else "build")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = [os.path.join(build, "wisp.jar"), os.path.join(build, "wisp-spark.jar")]
    have_jars = all(os.path.exists(j) for j in jars)
    from pyspark.sql import SparkSession
    b = SparkSession.builder.master("local[2]").appName("wisp-quickstart").config("spark.ui.enabled", "false") \
        .config("spark.ui.showConsoleProgress", "false")
    if have_jars:
        b = b.config("spark.jars", ",".join(jars))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "ctr.wisp")
        write_model(model)
        scored = run(spark, model)
        for r in scored.orderBy("row").collect():
            print("row %d  p = %.6f" % (r.row, r.probability))
        if have_jars:
            spark._jvm.wisp.spark.WispUDF.register(spark._jsparkSession, "wisp_score", model, "auto")
            scored.createOrReplaceTempView("scored")
            for r in spark.sql("SELECT row, wisp_score(features) AS p FROM scored ORDER BY row").collect():
                print("row %d  wisp_score = %.6f" % (r.row, r.p))
        else:
            print("(no %s: the SQL function is skipped; make java and sh spec/spark/run.sh build it)" % jars[1])
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
