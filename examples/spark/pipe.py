#!/usr/bin/env python3
"""examples/spark/pipe.py — the plain path: `wisp score` as the command of RDD.pipe, libsvm text in, one probability per line out.

    python3 examples/spark/pipe.py build/wisp build/demo/liblinear.wisp build/demo/test.libsvm

Each partition's lines go to one `wisp score -m MODEL -` process on its executor, which prints
one probability per row in order ("nan" for a malformed line, reported on the task's stderr);
zip() puts each line next to its probability. What an executor needs: the wisp binary and the
model at the paths given (a shared path, or ship them with --files and name them by their
SparkFiles paths). Nothing of wisp is imported: any Spark job can do this, PySpark or not.
"""
import os
import shlex
import sys


def score_lines(lines, wisp_cli, model, device="cpu"):
    """An RDD of libsvm lines -> an RDD of (line, probability as float; nan for a bad line).
    Blank and '#' lines make no row for `wisp score`, so they are dropped first (keeping the zip aligned)."""
    rows = lines.filter(lambda s: s.strip() != "" and not s.lstrip().startswith("#"))
    cmd = " ".join(shlex.quote(a) for a in (wisp_cli, "score", "-d", device, "-m", model, "-"))
    probs = rows.pipe(cmd, checkCode=False)      # exit status 1 after a malformed line: its rows are still there
    return rows.zip(probs.map(float))


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    wisp_cli, model, data = (os.path.abspath(a) for a in argv[1:])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[2]").appName("wisp-pipe").config("spark.ui.enabled", "false") \
        .config("spark.ui.showConsoleProgress", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    scored = score_lines(spark.sparkContext.textFile(data, minPartitions=2), wisp_cli, model)
    for line, p in scored.take(3):
        print("%.9f  %s" % (p, line[:40]))
    print("rows: %d" % scored.count())
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
