"""conftest.py — fixtures of the Spark specs: one SparkSession (local[2]) for every spec, the wisp CLI, models, rows.

The reference for every score is `wisp score -d cpu` (the CLI named by $WISP_CLI, set by
spec/spark/run.sh) on the same rows written as libsvm text or JSON lines: float32 equality
where the Spark path makes the same engine call.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

NUM = 1000                      # weights in the test model: ids 0..999; ids up to NUM+40 appear (ignored)
STATS_DIR = tempfile.mkdtemp(prefix="wisp-spark-stats-")
# set before Spark starts: the Python workers inherit it (wisp.spark writes their counters there)
os.environ["WISP_SPARK_STATS_DIR"] = STATS_DIR
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("WISP_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("WISP_CLI must name the wisp CLI (spec/spark/run.sh sets it to $WISP_BUILD/wisp)")
    return path


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession
    jars = os.environ.get("WISP_SPARK_JARS", "")
    b = (SparkSession.builder.master("local[2]").appName("wisp-spark-specs")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "97")    # several Arrow batches a partition
         .config("spark.driver.extraJavaOptions", "-Dwisp.threads=1"))
    if jars:
        b = b.config("spark.jars", jars)
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def stats_dir():
    return STATS_DIR


@pytest.fixture(scope="session")
def model_path(tmp_path_factory):
    import wisp
    d = tmp_path_factory.mktemp("model")
    rng = np.random.default_rng(17)
    path = str(d / "ids.wisp")
    wisp.write_model(path, rng.normal(0, 0.8, NUM).astype(np.float32), -0.3)
    return path


def make_rows(n, seed, max_id=NUM + 40):
    """n rows as (ids sorted unique, float32 values): empty rows, ids 0 and the table's edges
    (NUM-1, NUM), ids beyond the table."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        k = 0 if i % 13 == 0 else int(rng.integers(1, 25))
        ids = set(rng.choice(max_id, size=k, replace=False).tolist())
        if i % 11 == 1:
            ids |= {0, NUM - 1, NUM}
        ids = sorted(ids)
        vals = rng.normal(0, 1.5, size=len(ids)).astype(np.float32).tolist()
        rows.append((ids, vals))
    return rows


def libsvm(rows, binary=False):
    lines = []
    for ids, vals in rows:
        if binary:
            feats = ["%d" % i for i in ids]
        else:
            feats = ["%d:%.9g" % (i, v) for i, v in zip(ids, vals)]
        lines.append(" ".join(["0"] + feats))
    return "\n".join(lines) + "\n"


def cli_format(p):
    """Probabilities as `wisp score` prints them (engine/cli/cli.c fmt_prob): 9 decimals in [0.001, 1],
    %.9g below, "nan" (None too: a null probability is a bad row, which the CLI prints as nan)."""
    out = []
    for v in p:
        v = float("nan") if v is None else float(np.float32(v))
        if math.isnan(v):
            out.append("nan")
        elif 0.001 <= v <= 1.0:
            x = math.floor(v * 1e9 + 0.5)     # llround of a positive value
            out.append("1.000000000" if x >= 1000000000 else "0.%09d" % x)
        else:
            out.append("%.9g" % v)
    return np.array(out)


def assert_cli(p, want):
    """p (Spark's probabilities) prints exactly as `wisp score` printed want."""
    np.testing.assert_array_equal(cli_format(p), want)


def run_cli(cli, model, text, fmt="libsvm", tmpdir=None, expect_bad=False):
    """What `wisp score -d cpu` prints for text, one string a row ("nan" for a bad row)."""
    with tempfile.NamedTemporaryFile("w", suffix="." + fmt, dir=tmpdir, delete=False) as f:
        f.write(text)
        name = f.name
    try:
        r = subprocess.run([cli, "score", "-d", "cpu", "-m", model, "--format", fmt, name],
                           capture_output=True, text=True)
    finally:
        os.unlink(name)
    assert r.returncode == (1 if expect_bad else 0), r.stderr
    return np.array(r.stdout.split())


def read_stats(d):
    out = []
    for name in os.listdir(d):
        if name.endswith(".json") and not name.startswith("."):
            with open(os.path.join(d, name)) as f:
                out.append(json.load(f))
    return out
