#!/bin/sh
# spec/v2/run.sh — the v2 specs (the Open Inference Protocol of KServe and Triton) against a real nginx.
#
#   WISP_BUILD=build sh spec/v2/run.sh [pytest args: spec/v2/test_infer.py, -k binary, ...]
#
# - The virtual environment is $WISP_BUILD/v2-venv (WISP_V2_VENV overrides; WISP_OIP_VENV is its 0.1.x name),
#   created when missing and reused after; tritonclient[http], pytest, numpy, requests and schemathesis are
#   installed into it, and kserve + scikit-learn (KServe's reference server, the protocol's
#   reference for the shapes of metadata and error answers): when kserve does not install,
#   this says so and the specs that need it skip with that message.
# - The specs start nginx themselves (spec/v2/conftest.py: wisp_service), on free loopback
#   ports, with $WISP_BUILD/libwisp.so; the CLI $WISP_BUILD/wisp is the reference for every
#   probability (build it first: make BUILD=$WISP_BUILD NVCC=).
# The last line printed is "v2: N passed, N failed" (", N skipped" may follow).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${WISP_BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VENV=${WISP_V2_VENV:-${WISP_OIP_VENV:-$BUILD/v2-venv}}
case $VENV in /*) ;; *) VENV=$ROOT/$VENV ;; esac
LOG=$BUILD/v2-spec.log
SUITE=v2
. "$ROOT/spec/lib/pyvenv.sh"

[ -x "$BUILD/wisp" ] || pyvenv_fail "$BUILD/wisp is missing: build it first (make BUILD=$BUILD NVCC=)"
[ -f "$BUILD/libwisp.so" ] || pyvenv_fail "$BUILD/libwisp.so is missing: build it first (make BUILD=$BUILD NVCC=)"
pyvenv_make
: >"$LOG"
pyvenv_need "import tritonclient.http, pytest, numpy, requests, schemathesis" \
    "tritonclient[http]" pytest numpy requests schemathesis
# KServe's reference server: optional (a failed install is reported; its specs skip)
if ! "$VPY" -c "import kserve, sklearn" 2>/dev/null; then
    if ! "$VPY" -m pip install -q --disable-pip-version-check kserve scikit-learn >>"$LOG" 2>&1; then
        echo "spec/v2: pip could not install kserve + scikit-learn (log: $LOG): the KServe reference specs skip" >&2
        export WISP_V2_NO_KSERVE="pip could not install kserve (see $LOG)"
    fi
fi

OUT=$BUILD/v2-pytest.out
# from the checkout's root (paths like spec/v2/test_infer.py::test_x work as arguments); no pytest
# cache written into the tree; without a path argument: every spec of spec/v2
has_path=0
for a in "$@"; do case $a in spec/*|/*|./*) has_path=1 ;; esac; done
[ "$has_path" = 0 ] && set -- "$@" spec/v2
(cd "$ROOT" && WISP_BUILD=$BUILD WISP_ROOT=$ROOT "$VPY" -m pytest -p no:cacheprovider -q -rfEs "$@") >"$OUT" 2>&1
rc=$?
cat "$OUT"
pyvenv_summary "$OUT" "$rc" 5
[ "$rc" = 0 ]
