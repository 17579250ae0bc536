#!/bin/sh
# spec/java/run.sh — the Java binding's JUnit 5 specs (spec/java/wisp/*Test.java) against $WISP_BUILD/wisp.jar.
#
#   make BUILD=build java && WISP_BUILD=build sh spec/java/run.sh     (or: make java-test)
#
# Compiles the specs into $WISP_BUILD/java/test-classes with Debian's junit5
# (/usr/share/java/junit-platform-console-standalone.jar), runs them with the
# console launcher, and compares with the CLI $WISP_BUILD/wisp. The native
# library is the one inside the jar (extracted at run time, as users get it).
# The last line printed is "java: N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${WISP_BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
JUNIT=${WISP_JUNIT:-/usr/share/java/junit-platform-console-standalone.jar}
fail() { echo "spec/java: $*" >&2; echo "java: 0 passed, 1 failed"; exit 1; }
[ -f "$BUILD/wisp.jar" ] || fail "$BUILD/wisp.jar is missing: build it first (make BUILD=$BUILD java)"
[ -x "$BUILD/wisp" ] || fail "$BUILD/wisp is missing: build it first (make BUILD=$BUILD)"
[ -f "$JUNIT" ] || fail "$JUNIT is missing (Debian: apt-get install junit5)"
command -v javac >/dev/null 2>&1 || fail "no javac (Debian: apt-get install default-jdk-headless)"
rm -rf "$BUILD/java/test-classes" && mkdir -p "$BUILD/java/test-classes" || fail "cannot create $BUILD/java/test-classes"
javac --release 17 -d "$BUILD/java/test-classes" -cp "$BUILD/wisp.jar:$JUNIT" "$ROOT"/spec/java/wisp/*.java ||
    fail "the specs do not compile"
log=$BUILD/java/junit.log
java -Dwisp.cli="$BUILD/wisp" -jar "$JUNIT" --disable-banner --details=tree --disable-ansi-colors \
    -cp "$BUILD/wisp.jar:$BUILD/java/test-classes" --select-package wisp >"$log" 2>&1
rc=$?
cat "$log"
p=$(sed -nE 's/.*\[ *([0-9]+) tests successful *\].*/\1/p' "$log" | tail -n 1)
f=$(sed -nE 's/.*\[ *([0-9]+) tests failed *\].*/\1/p' "$log" | tail -n 1)
[ -n "$p" ] || p=0
[ -n "$f" ] || f=1
[ $rc -ne 0 ] && [ "$f" -eq 0 ] && f=1
echo "java: $p passed, $f failed"
[ "$f" -eq 0 ]
