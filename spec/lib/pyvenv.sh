# spec/lib/pyvenv.sh — what the Python suites' runners share (spec/python, spec/oip, spec/spark run.sh):
# a virtual environment of the suite's own under $WISP_BUILD (never the system's or the user's Python),
# pip installs into it, `pip install .` of the package, and pytest's summary as "SUITE: N passed, N failed".
#
# Sourced by a runner after it sets SUITE (the name printed: python, oip, spark), BUILD (absolute),
# VENV (absolute), LOG and ROOT (the checkout). Then:
#   pyvenv_fail MSG...                      print why on stderr, "SUITE: 0 passed, 1 failed", exit 1
#   pyvenv_make                             create $VENV when it has no python; sets VPY
#   pyvenv_need CHECK PKG...                pip install PKG... into $VENV unless `python -c CHECK` works
#   pyvenv_install_wisp PYBUILD             pip install . (no build isolation, no deps), build files in PYBUILD
#   pyvenv_summary OUT RC [OK_RC...]        print pytest's last line of OUT as "SUITE: ..."; returns 0 when RC
#                                           is 0 or one of OK_RC and nothing failed
PY=${PYTHON:-python3}

pyvenv_fail() {
    echo "spec/$SUITE: $*" >&2
    echo "$SUITE: 0 passed, 1 failed"
    exit 1
}

pyvenv_make() {
    mkdir -p "$BUILD" || pyvenv_fail "cannot create $BUILD"
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv "$VENV" ||
            pyvenv_fail "cannot create a virtual environment in $VENV with $PY (Debian: apt-get install python3-venv)"
    fi
    VPY=$VENV/bin/python
}

pyvenv_need() {
    check=$1; shift
    "$VPY" -c "$check" 2>/dev/null && return 0
    "$VPY" -m pip install -q --disable-pip-version-check "$@" >>"$LOG" 2>&1 ||
        { cat "$LOG" >&2; pyvenv_fail "pip could not install $* into $VENV"; }
}

pyvenv_install_wisp() {
    (cd "$ROOT" && WISP_PY_BUILD=$1 WISP_NVCC=${WISP_PY_NVCC-} \
        "$VPY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall . \
        >"$LOG" 2>&1) || { cat "$LOG" >&2; pyvenv_fail "pip install . failed (log above)"; }
}

pyvenv_summary() {
    "$VPY" - "$SUITE" "$@" <<'PYEOF'
import re, sys
suite, out, rc, ok_rcs = sys.argv[1], sys.argv[2], sys.argv[3], {"0"} | set(sys.argv[4:])
text = open(out).read().strip().splitlines()
last = text[-1] if text else ""
counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last)}
passed = counts.get("passed", 0)
failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
if rc not in ok_rcs and failed == 0:
    failed = 1            # pytest failed without a summary (a collection or usage error)
line = "%s: %d passed, %d failed" % (suite, passed, failed)
if counts.get("skipped"):
    line += ", %d skipped" % counts["skipped"]
print(line)
sys.exit(1 if failed else 0)
PYEOF
}
