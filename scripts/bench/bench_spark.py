#!/usr/bin/env python3
"""bench_spark.py — wisp in Spark against its peers on the same hashed rows, in one run (issue 17's performance section).

    WISP_BUILD=build sh spec/spark/run.sh          # makes build/spark-venv (pyspark, wisp, wisp-spark.jar)
    build/spark-venv/bin/python scripts/bench/bench_spark.py [--rows 2000000] [--record]
    build/spark-venv/bin/python scripts/bench/bench_spark.py --no-spark --device gpu:0 [--record]   # the GPU machine

Spark mode (local[N], N = --cores, default every core): ROWS rows of 13 numeric + 26
categorical columns made by Spark SQL from the row number, hashed by MLlib's FeatureHasher into
2^18 features (39 per row, fewer where two collide), cached in memory and counted before any
timing. Then, each timed as a full pass that writes nothing (the "noop" sink) or counts:
  - wisp:    WispModel(model).transform(df)                        (the arrow_udf path, device cpu)
  - floor:   the same Arrow UDF round trip (the vector column to Python, a struct back) doing
             nothing in Python: what any Python UDF over this column costs in Spark
  - mllib:   LogisticRegressionModel.transform(df), probability only, on the same weights
             (built from the wisp model's table through MLlib's own constructor)
  - wisp_sql: wisp_score(features) in Spark SQL (the JVM path, one engine call a row; BUILD/wisp.jar + wisp-spark.jar)
  - wisp_jvm: WispScorer.transform(df, model, "features", ...) (the batched JVM path: internal rows,
             --jvm-batch rows a Batch of direct buffers, one engine call each)
  - floor_internal_pass / floor_internal_read / floor_row_pass / floor_row_read: Spark's own floors for
             that pass, no wisp (WispScorer.floor): rows handed back with a constant added, or the vector's
             indices and values read (summed); over internal rows, or Dataset.mapPartitions + a Row encoder
  - scan_floor: the cached (id, features) rows into the noop sink, nothing computed
  - pipe:    the rows as libsvm text (made and cached before timing) through RDD.pipe(`wisp score`)
  - sklearn: mapInPandas calling scikit-learn's predict_proba on a CSR built from the vectors
Rows/s per executor core = rows / seconds / N. Each is timed --reps times, the best kept (and all
listed). The probabilities of wisp and MLlib are compared on the first 20000 rows.

No-Spark mode (--no-spark: the GPU machine has no JDK, and the pyspark wheel is more than a device
call carries): the same function the Arrow UDF calls in an executor (wisp.spark._score_arrays)
fed the same kind of Arrow batches (the storage struct of an MLlib sparse vector column, 10,000
rows a batch, 39 features a row over 2^18 ids), on --device against the CPU with every core.
Needs numpy and pyarrow, not pyspark.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
import record  # noqa: E402

import numpy as np  # noqa: E402

import wisp  # noqa: E402

NUM_FEATURES = 1 << 18
NUMERIC = ["n%d" % i for i in range(13)]
CATEG = ["c%d" % i for i in range(26)]


def weights(seed=7):
    rng = np.random.default_rng(seed)
    return rng.normal(0, 0.3, NUM_FEATURES).astype(np.float32), -1.25


def log(msg):
    sys.stderr.write("bench_spark: %s\n" % msg)
    sys.stderr.flush()


def timed(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), times


# ---- Spark mode ------------------------------------------------------------------------------

def spark_mode(args):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.ml.classification import LogisticRegressionModel
    from pyspark.ml.feature import FeatureHasher
    from pyspark.sql import SparkSession, functions as F
    from wisp.spark import WispModel

    cores = args.cores or os.cpu_count()
    b = (SparkSession.builder.master("local[%d]" % cores).appName("bench_spark")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", args.driver_memory)
         .config("spark.sql.shuffle.partitions", str(cores * 2))
         # the JVM paths' engine: one CPU thread a task (local mode: the executor is the driver's JVM)
         .config("spark.driver.extraJavaOptions", "-Dwisp.threads=1"))
    if args.arrow_batch:
        b = b.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch))
    jars = [j for j in args.jars.split(",") if j]
    have_jars = bool(jars) and all(os.path.exists(j) for j in jars)
    if have_jars:
        b = b.config("spark.jars", ",".join(jars))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    work = tempfile.mkdtemp(prefix="bench-spark-")
    try:
        w, bias = weights()
        model = os.path.join(work, "bench.wisp")
        wisp.write_model(model, w, bias)

        cols = [F.rand(100 + i).alias(n) for i, n in enumerate(NUMERIC)]
        cols += [F.concat(F.lit(n + "_"), F.pmod(F.xxhash64(F.col("id"), F.lit(i)), F.lit(50000 if i % 3 else 500))
                          .cast("string")).alias(n) for i, n in enumerate(CATEG)]
        raw = spark.range(0, args.rows, numPartitions=cores * 4).select("id", *cols)
        hasher = FeatureHasher(inputCols=NUMERIC + CATEG, outputCol="features", numFeatures=NUM_FEATURES)
        df = hasher.transform(raw).select("id", "features").cache()
        load_before = os.getloadavg()
        t0 = time.perf_counter()
        n = df.count()
        prep_s = time.perf_counter() - t0
        nnz = df.limit(1000).rdd.map(lambda r: len(r.features.indices)).mean()

        jvm = spark._jvm
        from pyspark.ml.common import _py2java
        from pyspark.ml.linalg import DenseVector
        coef = _py2java(spark.sparkContext, DenseVector(w.astype(np.float64)))   # pickled across, not element by element
        jlr = jvm.org.apache.spark.ml.classification.LogisticRegressionModel("wisp_bench_lr", coef, float(bias))
        lr = LogisticRegressionModel(jlr)
        lr.setProbabilityCol("p_mllib").setRawPredictionCol("").setPredictionCol("")

        wm = WispModel(modelPath=model, device="cpu", outputCol="p_wisp")

        def noop(d):
            d.write.format("noop").mode("overwrite").save()

        results = {}
        # parity on the first rows: MLlib computes in float64 from the same float32 weights
        sample = df.limit(20000)
        both = wm.transform(lr.transform(sample)).select("p_mllib", "p_wisp").collect()
        diff = max(abs(float(r.p_mllib[1]) - r.p_wisp) for r in both)
        results["wisp_vs_mllib_max_abs_diff"] = diff
        log("prepared %d rows in %.1f s; wisp vs MLlib max |diff| %.3g" % (n, prep_s, diff))

        best, all_t = timed(lambda: noop(wm.transform(df)), args.reps)
        results["wisp"] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                           "rows_per_s_per_core": n / best / cores}
        log("wisp: %.2f s" % best)
        # the floor of any Arrow UDF over this column: the same round trip (vector column to Python and a
        # struct<float, string> back), the Python side doing nothing
        floor = _noop_udf()
        best, all_t = timed(lambda: noop(df.withColumn("_w", floor("features")).select(
            "id", "features", F.col("_w.p").alias("p"), F.col("_w.e").alias("e"))), args.reps)
        results["arrow_udf_floor"] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                                      "rows_per_s_per_core": n / best / cores}
        log("arrow_udf_floor: %.2f s" % best)
        best, all_t = timed(lambda: noop(lr.transform(df).select("id", "p_mllib")), args.reps)
        results["mllib"] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                            "rows_per_s_per_core": n / best / cores}
        log("mllib: %.2f s" % best)
        if have_jars:
            # the JVM path: the Spark SQL function over the Java binding (one engine call a row)
            jvm.wisp.spark.WispUDF.register(spark._jsparkSession, "wisp_score", model, "cpu")
            best, all_t = timed(lambda: noop(df.select("id", F.expr("wisp_score(features)").alias("p"))), args.reps)
            results["wisp_sql"] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                                   "rows_per_s_per_core": n / best / cores}
            log("wisp_sql: %.2f s" % best)
            # the batched JVM path: WispScorer over the Dataset's internal rows, one engine call per batchRows rows
            scorer = jvm.wisp.spark.WispScorer
            opts = jvm.java.util.HashMap()
            opts.put("device", "cpu")
            opts.put("batchRows", str(args.jvm_batch))
            from pyspark.sql import DataFrame

            def jvm_scored(d, col="p_jvm"):
                return DataFrame(scorer.transform(d._jdf, model, "features", col, opts), spark)
            both = jvm_scored(wm.transform(sample)).select("p_wisp", "p_jvm").collect()
            results["wisp_jvm_vs_wisp_max_abs_diff"] = max(abs(r.p_wisp - r.p_jvm) for r in both)
            best, all_t = timed(lambda: noop(jvm_scored(df).select("id", "p_jvm")), args.reps)
            results["wisp_jvm"] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                                   "rows_per_s_per_core": n / best / cores, "batch_rows": args.jvm_batch}
            log("wisp_jvm: %.2f s" % best)
            # Spark's own floors for that pass, no wisp: rows handed back with a constant added ("pass"), the
            # vector's indices and values read ("read"); over internal rows as WispScorer runs, and through the
            # public Dataset.mapPartitions with a Row encoder
            for how in ("pass", "read"):
                for eng in ("internal", "row"):
                    key = "floor_%s_%s" % (eng, how)
                    best, all_t = timed(lambda: noop(DataFrame(scorer.floor(df._jdf, "features", "x", how, eng), spark)
                                                     .select("id", "x")), args.reps)
                    results[key] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                                    "rows_per_s_per_core": n / best / cores}
                    log("%s: %.2f s" % (key, best))
        # the scan alone: the cached rows (id, features) into the noop sink, nothing computed
        best, all_t = timed(lambda: noop(df.select("id", "features")), args.reps)
        results["scan_floor"] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                                 "rows_per_s_per_core": n / best / cores}
        log("scan_floor: %.2f s" % best)

        # RDD.pipe through the CLI: the text is made and cached first (not timed)
        def line(r):
            v = r.features
            return "0 " + " ".join("%d:%.9g" % (i, x) for i, x in zip(v.indices, v.values))
        text = df.rdd.map(line).cache()
        text.count()
        cmd = "%s score -d cpu -t 1 -m %s -" % (args.cli, model)
        best, all_t = timed(lambda: text.pipe(cmd, checkCode=True).count(), args.reps)
        results["pipe"] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                           "rows_per_s_per_core": n / best / cores, "command": cmd}
        log("pipe: %.2f s" % best)
        text.unpersist()

        if not args.skip_sklearn:
            best, all_t = timed(lambda: noop(df.mapInPandas(_sklearn_fn(w, bias), "id long, p_sklearn double")),
                                max(1, min(args.reps, 2)))
            results["sklearn_mapInPandas"] = {"seconds": best, "all_seconds": all_t, "rows_per_s": n / best,
                                              "rows_per_s_per_core": n / best / cores}
        results["wisp_over_mllib"] = results["mllib"]["seconds"] / results["wisp"]["seconds"]
        results["wisp_share_above_arrow_floor"] = 1 - results["arrow_udf_floor"]["seconds"] / results["wisp"]["seconds"]
        if "wisp_sql" in results:
            results["wisp_sql_over_mllib"] = results["mllib"]["seconds"] / results["wisp_sql"]["seconds"]
        if "wisp_jvm" in results:
            ml = results["mllib"]["seconds"]
            for key in ("wisp_jvm", "floor_internal_pass", "floor_internal_read", "floor_row_pass", "floor_row_read"):
                results[key + "_over_mllib"] = ml / results[key]["seconds"]
            results["wisp_jvm_share_above_internal_read_floor"] = \
                1 - results["floor_internal_read"]["seconds"] / results["wisp_jvm"]["seconds"]
        results["scan_floor_over_mllib"] = results["mllib"]["seconds"] / results["scan_floor"]["seconds"]
        # the target against what Spark itself allows on this machine
        target = 10 * results["mllib"]["rows_per_s_per_core"]
        results["ten_x_mllib_rows_per_s_per_core"] = target
        results["ten_x_mllib_within_scan_floor"] = results["scan_floor"]["rows_per_s_per_core"] >= target
        if "floor_internal_pass" in results:
            results["ten_x_mllib_within_mapPartitions_floor"] = \
                results["floor_internal_pass"]["rows_per_s_per_core"] >= target
        results["wisp_over_pipe"] = results["pipe"]["seconds"] / results["wisp"]["seconds"]
        if "sklearn_mapInPandas" in results:
            results["wisp_over_sklearn"] = results["sklearn_mapInPandas"]["seconds"] / results["wisp"]["seconds"]
        import pyspark
        doc = {
            "benchmark": "bench_spark", "issue": 17, "label": args.label or "spark",
            "command": " ".join(["scripts/bench/bench_spark.py"] + sys.argv[1:]),
            "workload": "%d rows, FeatureHasher(13 numeric + 26 categorical columns) into 2^18 features (%.1f "
                        "non-zeros a row), cached; f32 weights N(0, 0.3); local[%d], %d partitions"
                        % (n, nnz, cores, df.rdd.getNumPartitions()),
            "peers": "results.mllib (LogisticRegressionModel.transform, same weights), results.arrow_udf_floor (the "
                     "same Arrow UDF round trip doing nothing in Python), results.wisp_sql (the JVM "
                     "path: wisp_score in Spark SQL), results.wisp_jvm (the batched JVM path: WispScorer.transform), "
                     "results.floor_* (Spark's own mapPartitions floors, internal rows and Row encoder, pass and "
                     "read), results.scan_floor (the cached rows into the noop sink), results.pipe "
                     "(RDD.pipe through wisp score), results.sklearn_mapInPandas (mapInPandas + predict_proba)",
            "device": "cpu",
            "machine_detail": {"pyspark": pyspark.__version__, "java": _java_version(),
                               "wisp_threads": "spark.task.cpus (1) per Python worker; -Dwisp.threads=1 in the JVM"},
            "setup": {"prep_seconds_cache_count": prep_s, "reps": args.reps,
                      "load_average_1_5_15_before_after": [list(load_before), list(os.getloadavg())],
                      "arrow_batch_rows": spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch"),
                "sql_function": "wisp_score from %s" % ",".join(jars) if have_jars else "not measured (no jars)"},
            "results": results,
        }
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return doc


def _noop_udf():
    from typing import Iterator
    import pyarrow as pa
    from pyspark.sql.functions import arrow_udf

    def nothing(it: Iterator[pa.Array]) -> Iterator[pa.Array]:
        for a in it:
            n = len(a)
            yield pa.StructArray.from_arrays([pa.nulls(n, pa.float32()), pa.nulls(n, pa.string())], names=["p", "e"])
    return arrow_udf(nothing, "p float, e string")


def _sklearn_fn(w, bias):
    def fn(it):
        import numpy as np
        import scipy.sparse as sp
        from sklearn.linear_model import LogisticRegression
        est = LogisticRegression()
        est.coef_ = w.astype(np.float64)[None, :]
        est.intercept_ = np.array([bias])
        est.classes_ = np.array([0, 1])
        for pdf in it:
            indptr, ind, val = [0], [], []
            for v in pdf["features"]:       # one object a row: the vector's storage struct as a dict (Spark 4)
                if isinstance(v, dict):
                    i, x = v["indices"], v["values"]
                else:
                    i, x = v.indices, v.values
                ind.append(np.asarray(i, dtype=np.int32))
                val.append(np.asarray(x, dtype=np.float64))
                indptr.append(indptr[-1] + len(i))
            X = sp.csr_matrix((np.concatenate(val) if val else np.zeros(0), np.concatenate(ind) if ind else
                               np.zeros(0, np.int32), np.array(indptr)), shape=(len(pdf), len(w)))
            yield pdf[["id"]].assign(p_sklearn=est.predict_proba(X)[:, 1])
    return fn


def _java_version():
    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        return (r.stderr or r.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown (java -version failed)"


# ---- no-Spark mode: the executor's function on Arrow batches -------------------------------------

def arrow_batches(rows, batch, nnz=39, seed=11):
    """Arrow arrays laid out as Spark hands an MLlib sparse-vector column to the UDF (its storage struct)."""
    import pyarrow as pa
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        ids = np.sort(rng.integers(0, NUM_FEATURES, size=(n, nnz), dtype=np.int32), axis=1).reshape(-1)
        vals = rng.random(n * nnz).astype(np.float64)
        off = (np.arange(n + 1, dtype=np.int32) * nnz)
        struct = pa.StructArray.from_arrays(
            [pa.array(np.zeros(n, np.int8)), pa.array(np.full(n, NUM_FEATURES, np.int32)),
             pa.ListArray.from_arrays(pa.array(off), pa.array(ids)),
             pa.ListArray.from_arrays(pa.array(off), pa.array(vals))],
            names=["type", "size", "indices", "values"])
        out.append(struct)
    return out


def no_spark_mode(args):
    from wisp import spark as ws
    work = tempfile.mkdtemp(prefix="bench-spark-")
    try:
        w, bias = weights()
        model = os.path.join(work, "bench.wisp")
        wisp.write_model(model, w, bias)
        checksum = ws._file_checksum(model)
        batches = arrow_batches(args.rows, args.batch)
        results = {}
        ref = None
        for dev in [args.device, "cpu"] if args.device != "cpu" else ["cpu"]:
            cfg = {"path": model, "checksum": checksum, "shipped": "", "mode": "vector", "names": ["features"],
                   "device": dev, "batch_rows": 0, "errors": "null", "threads": 0, "verify": False}
            outs = [ws._score_arrays(cfg, [b]) for b in batches[:2]]           # warm: open, upload
            outs = []

            def run():
                outs.clear()
                for b in batches:
                    outs.append(ws._score_arrays(cfg, [b]))
            best, all_t = timed(run, args.reps)
            p = np.concatenate([o.field("p").to_numpy(zero_copy_only=False) for o in outs])
            s = ws._sessions[(model, checksum, dev)]
            results[dev] = {"seconds": best, "all_seconds": all_t, "rows_per_s": args.rows / best,
                            "last_device": s.last_device}
            if ref is None:
                ref = p
            else:
                results[dev]["max_abs_diff_vs_%s" % args.device] = float(np.max(np.abs(p - ref)))
        if args.device != "cpu":
            results["speedup_%s_over_cpu" % args.device.replace(":", "")] = \
                results["cpu"]["seconds"] / results[args.device]["seconds"]
        doc = {
            "benchmark": "bench_spark", "issue": 17, "label": args.label or "no-spark",
            "command": " ".join(["scripts/bench/bench_spark.py"] + sys.argv[1:]),
            "workload": "%d rows in Arrow batches of %d (an MLlib sparse-vector column's storage struct), 39 "
                        "features a row over 2^18 f32 weights, uniform ids" % (args.rows, args.batch),
            "peers": "results.cpu (the same function on the CPU, every core: %d threads)" % (os.cpu_count() or 0),
            "device": args.device,
            "what": "wisp.spark._score_arrays, the function the Arrow UDF calls in an executor, without Spark",
            "results": results,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return doc


def main(argv):
    rec = record.take_record_flag(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cores", type=int, default=0, help="local[N] (default: every core)")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--cli", default=os.path.join(ROOT, os.environ.get("WISP_BUILD", "build"), "wisp"))
    ap.add_argument("--skip-sklearn", action="store_true")
    ap.add_argument("--arrow-batch", type=int, default=0,
                    help="spark.sql.execution.arrow.maxRecordsPerBatch (default: Spark's, 10000)")
    ap.add_argument("--jars", default=",".join(os.path.join(ROOT, os.environ.get("WISP_BUILD", "build"), j)
                                             for j in ("wisp.jar", "wisp-spark.jar")),
                    help="the jars of the SQL function (skipped when missing)")
    ap.add_argument("--jvm-batch", type=int, default=4096, help="WispScorer's batchRows (rows per engine call)")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--device", default="gpu:0", help="no-Spark mode: the device against the CPU")
    ap.add_argument("--batch", type=int, default=10000, help="no-Spark mode: rows per Arrow batch")
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    args = ap.parse_args(argv[1:])
    args.cli = os.path.abspath(args.cli)
    doc = no_spark_mode(args) if args.no_spark else spark_mode(args)
    name = "bench_spark%s.json" % ("-" + args.label if args.label else ("-no-spark" if args.no_spark else ""))
    path = args.out or record.out_path(name, rec)
    env = record.write(path, doc)
    import json
    print(json.dumps(env["results"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
