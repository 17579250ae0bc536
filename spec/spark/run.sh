#!/bin/sh
# spec/spark/run.sh — wisp in Spark: a venv with pyspark, `pip install .`, wisp-spark.jar, pytest on spec/spark in local[2] mode.
#
#   make BUILD=build all java && WISP_BUILD=build sh spec/spark/run.sh
#
# - The virtual environment is $WISP_BUILD/spark-venv (WISP_SPARK_VENV overrides), made when
#   missing and reused after: pyspark, pyarrow, pandas, numpy, scipy, scikit-learn, pytest,
#   setuptools, wheel from PyPI (never into the system's or the user's Python). Java from Debian
#   (pyspark 4 needs 17 or later: the JDK the Java binding builds with).
# - The wisp package is built from the repository root with `pip install --no-build-isolation`
#   (CPU only unless WISP_PY_NVCC names an nvcc), its build files under $WISP_BUILD/spark-py-build.
# - $WISP_BUILD/wisp-spark.jar (the Spark SQL function, engine/bindings/spark/) is built against the
#   wheel's own Spark jars (engine/bindings/spark/build.sh) over $WISP_BUILD/wisp.jar (make java).
# - The specs share one SparkSession (local[2]) and compare with the CLI $WISP_BUILD/wisp.
# WISP_SPARK=0 in spec/run.sh skips this suite. The last line printed is "spark: N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${WISP_BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VENV=${WISP_SPARK_VENV:-$BUILD/spark-venv}
case $VENV in /*) ;; *) VENV=$ROOT/$VENV ;; esac
LOG=$BUILD/spark-spec.log
SUITE=spark
. "$ROOT/spec/lib/pyvenv.sh"

[ -x "$BUILD/wisp" ] || pyvenv_fail "$BUILD/wisp is missing: build it first (make BUILD=$BUILD)"
[ -f "$BUILD/wisp.jar" ] || pyvenv_fail "$BUILD/wisp.jar is missing: build it first (make BUILD=$BUILD java)"
command -v java >/dev/null 2>&1 || pyvenv_fail "no java (Debian: apt-get install default-jdk-headless)"
pyvenv_make
: >"$LOG"
pyvenv_need "import pyspark, pyarrow, pandas, numpy, scipy, sklearn, pytest, wheel, setuptools; assert int(setuptools.__version__.split('.')[0]) >= 61; assert int(pyspark.__version__.split('.')[0]) >= 4" \
    "pyspark>=4.1" pyarrow pandas numpy scipy scikit-learn pytest "setuptools>=61" wheel
pyvenv_install_wisp "$BUILD/spark-py-build"
JARS=$("$VPY" -c "import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))") ||
    pyvenv_fail "cannot find pyspark's jars"
sh "$ROOT/engine/bindings/spark/build.sh" "$BUILD" "$JARS" >>"$LOG" 2>&1 || { cat "$LOG" >&2; pyvenv_fail "wisp-spark.jar did not build (log above)"; }

OUT=$BUILD/spark-pytest.out
# from a directory outside the tree, so `import wisp` is the installed package
(cd "$BUILD" && WISP_CLI=$BUILD/wisp WISP_SPARK_JARS="$BUILD/wisp.jar,$BUILD/wisp-spark.jar" WISP_ROOT=$ROOT \
    "$VPY" -m pytest -p no:cacheprovider -q -rfE "$ROOT/spec/spark") >"$OUT" 2>&1
rc=$?
cat "$OUT"
pyvenv_summary "$OUT" "$rc"
[ "$rc" = 0 ]
