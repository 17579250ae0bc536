#!/bin/sh
# spec/python/run.sh — the Python package's specs: a venv, `pip install .` of the repository, pytest on spec/python.
#
#   WISP_BUILD=build sh spec/python/run.sh
#
# - The virtual environment is $WISP_BUILD/py-venv (WISP_PY_VENV overrides);
#   it is created when missing and reused after; pytest, numpy, scipy, scikit-learn,
#   setuptools and wheel (and, for the specs that compare with them, pandas,
#   pyarrow, onnx, onnxruntime, skl2onnx) are installed into it (never into the system's or
#   the user's Python).
# - The package is built from the repository root with `pip install
#   --no-build-isolation` (setup.py: make -> libwisp.a -> the extension), its
#   build files under $WISP_BUILD/py-build. CPU only unless WISP_PY_NVCC names
#   an nvcc (the CUDA kernels take minutes to compile; the GPU specs of the
#   package come later).
# - The specs compare against the CLI $WISP_BUILD/wisp (build it first:
#   make BUILD=$WISP_BUILD).
# The last line printed is "python: N passed, N failed" (", N skipped" may follow).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${WISP_BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VENV=${WISP_PY_VENV:-$BUILD/py-venv}
case $VENV in /*) ;; *) VENV=$ROOT/$VENV ;; esac
PY=${PYTHON:-python3}
LOG=$BUILD/py-spec.log

fail() {
    echo "spec/python: $*" >&2
    echo "python: 0 passed, 1 failed"
    exit 1
}

[ -x "$BUILD/wisp" ] || fail "$BUILD/wisp is missing: build it first (make BUILD=$BUILD)"
mkdir -p "$BUILD" || fail "cannot create $BUILD"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV" || fail "cannot create a virtual environment in $VENV with $PY (Debian: apt-get install python3-venv)"
fi
VPY=$VENV/bin/python
if ! "$VPY" -c "import pytest, numpy, scipy, sklearn, wheel, setuptools; assert int(setuptools.__version__.split('.')[0]) >= 61" 2>/dev/null; then
    "$VPY" -m pip install -q --disable-pip-version-check pytest numpy scipy scikit-learn "setuptools>=61" wheel >"$LOG" 2>&1 ||
        { cat "$LOG" >&2; fail "pip could not install pytest, numpy, scipy, scikit-learn, setuptools, wheel into $VENV"; }
fi
# the peers of the raw-row and ONNX specs (test_raw.py, test_onnx.py skip without them; a failed
# install is reported, not fatal: the package itself needs none of them)
if ! "$VPY" -c "import pandas, pyarrow, onnx, onnxruntime, skl2onnx" 2>/dev/null; then
    "$VPY" -m pip install -q --disable-pip-version-check pandas pyarrow onnx onnxruntime skl2onnx >>"$LOG" 2>&1 ||
        echo "spec/python: pip could not install pandas, pyarrow, onnx, onnxruntime, skl2onnx: their specs skip" >&2
fi
(cd "$ROOT" && WISP_PY_BUILD=$BUILD/py-build WISP_NVCC=${WISP_PY_NVCC-} \
    "$VPY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall . \
    >"$LOG" 2>&1) || { cat "$LOG" >&2; fail "pip install . failed (log above)"; }

OUT=$BUILD/py-pytest.out
# run from a directory outside the tree so `import wisp` is the installed package
(cd "$BUILD" && WISP_CLI=$BUILD/wisp "$VPY" -m pytest -p no:cacheprovider -q -rfE "$ROOT/spec/python") >"$OUT" 2>&1
rc=$?
cat "$OUT"
"$VPY" - "$OUT" "$rc" <<'PYEOF'
import re, sys
text = open(sys.argv[1]).read().strip().splitlines()
last = text[-1] if text else ""
counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last)}
passed = counts.get("passed", 0)
failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
if sys.argv[2] != "0" and failed == 0:
    failed = 1            # pytest failed without a summary (a collection or usage error)
line = "python: %d passed, %d failed" % (passed, failed)
if counts.get("skipped"):
    line += ", %d skipped" % counts["skipped"]
print(line)
PYEOF
[ "$rc" = 0 ]
