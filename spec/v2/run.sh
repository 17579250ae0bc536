#!/bin/sh
# spec/oip/run.sh — the Open Inference Protocol (KServe v2) specs: pytest on spec/oip against a real nginx with wisp.
#
#   WISP_BUILD=build sh spec/oip/run.sh [pytest args: spec/oip/test_infer.py, -k binary, ...]
#
# - The virtual environment is $WISP_BUILD/oip-venv (WISP_OIP_VENV overrides), created when
#   missing and reused after; tritonclient[http], pytest, numpy, requests and schemathesis are
#   installed into it, and kserve + scikit-learn (KServe's reference server, the protocol's
#   reference for the shapes of metadata and error answers): when kserve does not install,
#   this says so and the specs that need it skip with that message.
# - The specs start nginx themselves (spec/oip/conftest.py: wisp_service), on free loopback
#   ports, with $WISP_BUILD/libwisp.so; the CLI $WISP_BUILD/wisp is the reference for every
#   probability (build it first: make BUILD=$WISP_BUILD NVCC=).
# The last line printed is "oip: N passed, N failed" (", N skipped" may follow).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${WISP_BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VENV=${WISP_OIP_VENV:-$BUILD/oip-venv}
case $VENV in /*) ;; *) VENV=$ROOT/$VENV ;; esac
LOG=$BUILD/oip-spec.log
SUITE=oip
. "$ROOT/spec/lib/pyvenv.sh"

[ -x "$BUILD/wisp" ] || pyvenv_fail "$BUILD/wisp is missing: build it first (make BUILD=$BUILD NVCC=)"
[ -f "$BUILD/libwisp.so" ] || pyvenv_fail "$BUILD/libwisp.so is missing: build it first (make BUILD=$BUILD NVCC=)"
pyvenv_make
: >"$LOG"
pyvenv_need "import tritonclient.http, pytest, numpy, requests, schemathesis" "tritonclient[http]" pytest numpy requests schemathesis
# KServe's reference server: optional (a failed install is reported; its specs skip)
if ! "$VPY" -c "import kserve, sklearn" 2>/dev/null; then
    if ! "$VPY" -m pip install -q --disable-pip-version-check kserve scikit-learn >>"$LOG" 2>&1; then
        echo "spec/oip: pip could not install kserve + scikit-learn (log: $LOG): the KServe reference specs skip" >&2
        export WISP_OIP_NO_KSERVE="pip could not install kserve (see $LOG)"
    fi
fi

OUT=$BUILD/oip-pytest.out
# from the checkout's root (paths like spec/oip/test_infer.py::test_x work as arguments); no pytest
# cache written into the tree; without a path argument: every spec of spec/oip
has_path=0
for a in "$@"; do case $a in spec/*|/*|./*) has_path=1 ;; esac; done
[ "$has_path" = 0 ] && set -- "$@" spec/oip
(cd "$ROOT" && WISP_BUILD=$BUILD WISP_ROOT=$ROOT "$VPY" -m pytest -p no:cacheprovider -q -rfEs "$@") >"$OUT" 2>&1
rc=$?
cat "$OUT"
pyvenv_summary "$OUT" "$rc" 5
[ "$rc" = 0 ]
