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
LOG=$BUILD/py-spec.log
SUITE=python
. "$ROOT/spec/lib/pyvenv.sh"

[ -x "$BUILD/wisp" ] || pyvenv_fail "$BUILD/wisp is missing: build it first (make BUILD=$BUILD)"
pyvenv_make
: >"$LOG"
pyvenv_need "import pytest, numpy, scipy, sklearn, wheel, setuptools; assert int(setuptools.__version__.split('.')[0]) >= 61" \
    pytest numpy scipy scikit-learn "setuptools>=61" wheel
# the peers of the raw-row and ONNX specs (test_raw.py, test_onnx.py skip without them; a failed
# install is reported, not fatal: the package itself needs none of them)
if ! "$VPY" -c "import pandas, pyarrow, onnx, onnxruntime, skl2onnx" 2>/dev/null; then
    "$VPY" -m pip install -q --disable-pip-version-check pandas pyarrow onnx onnxruntime skl2onnx >>"$LOG" 2>&1 ||
        echo "spec/python: pip could not install pandas, pyarrow, onnx, onnxruntime, skl2onnx: their specs skip" >&2
fi
pyvenv_install_wisp "$BUILD/py-build"

OUT=$BUILD/py-pytest.out
# run from a directory outside the tree so `import wisp` is the installed package
(cd "$BUILD" && WISP_CLI=$BUILD/wisp "$VPY" -m pytest -p no:cacheprovider -q -rfE "$ROOT/spec/python") >"$OUT" 2>&1
rc=$?
cat "$OUT"
pyvenv_summary "$OUT" "$rc"
[ "$rc" = 0 ]
