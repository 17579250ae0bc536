#!/bin/sh
# run.sh — runs every C unit test and the busted specs; prints "N passed, N failed" last.
# Environment: WISP_BUILD (build dir, default build), WISP_TEST_GPU=1 for the GPU specs.
build=${WISP_BUILD:-build}
cd "$(dirname "$0")/.." || exit 2
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
export WISP_BUILD="$build"
passed=0 failed=0
log=$(mktemp) || exit 2
recap=$(mktemp) || exit 2           # one line per failing part, printed again last (CI shows the tail)
trap 'rm -f "$log" "$recap"' EXIT
# $1 what failed; the first lines of $log that say why
fail_recap() {
    echo "  $1" >>"$recap"
    grep -a -m 4 -E "WISP_TEST_SEED|CHECK failed|FAIL|not ok|ERROR|error|Assertion|Segmentation|Aborted|replay" "$log" | cut -c1-200 | sed 's/^/    | /' >>"$recap"
}
# run_suite LABEL NAME CMD...: runs CMD (output into $log) and adds the counts of its last line
# "NAME: N passed, N failed" (none, or a non-zero exit with 0 failed, counts as a failure)
run_suite() {
    label=$1 name=$2; shift 2
    start=$(date +%s)
    "$@" >"$log" 2>&1
    rc=$?
    line=$(grep -aE "^$name: [0-9]+ passed, [0-9]+ failed" "$log" | tail -n 1)
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ -z "$line" ]; then p=0; f=1; fi
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    printf '%-24s %5d passed, %d failed  (%ds)\n' "$label" "$p" "$f" $(( $(date +%s) - start ))
    if [ "$f" -ne 0 ]; then grep -av '^ok ' "$log" | sed 's/^/    /' | tail -n 60; fail_recap "$label: $f failed"; fi
}

for t in "$build"/test/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    start=$(date +%s)
    "$t" >"$log" 2>&1
    rc=$?
    line=$(grep -E "^$name: [0-9]+ passed, [0-9]+ failed" "$log" | tail -n 1)
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ -z "$line" ]; then p=0; f=1; fi            # crashed before its closing line
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # non-zero exit counts as a failure
    passed=$((passed + p)); failed=$((failed + f))
    printf '%-24s %5d passed, %d failed  (%ds)\n' "$name" "$p" "$f" $(( $(date +%s) - start ))
    if [ "$f" -ne 0 ]; then sed 's/^/    /' "$log" | tail -n 40; fail_recap "$name: $f failed"; fi
done

# busted specs under LuaJIT, TAP output: count "ok" / "not ok" lines
if command -v luajit >/dev/null 2>&1 && [ -d spec/lua ]; then
    WISP_LIB="$build/libwisp.so" luajit spec/busted.lua -o TAP spec/lua >"$log" 2>&1
    rc=$?
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    printf '%-24s %5d passed, %d failed\n' "busted (spec/lua)" "$p" "$f"
    if [ "$f" -ne 0 ]; then grep -v '^ok ' "$log" | sed 's/^/    /' | tail -n 80; fail_recap "busted (spec/lua): $f failed"; fi
else
    echo "busted specs: luajit or spec/lua missing"; failed=$((failed + 1)); echo "  busted specs: luajit or spec/lua missing" >>"$recap"
fi

# every recorded run in scripts/results/ against its one schema (scripts/results/SCHEMA.md):
# scripts/results/check.lua prints "results schema: N passed, N failed" last
command -v luajit >/dev/null 2>&1 && [ -f scripts/results/check.lua ] &&
    run_suite "results (schema)" "results schema" luajit scripts/results/check.lua

# the OpenResty service against a real nginx (spec/nginx/run.sh prints "nginx: N passed, N failed" last)
[ -f spec/nginx/run.sh ] && [ "${WISP_NGINX:-1}" != 0 ] && run_suite "nginx (spec/nginx)" nginx sh spec/nginx/run.sh

# the service's property test, fuzzer and reload soak against a real nginx (spec/nginx/property.sh,
# svcfuzz.sh, soak.sh: each prints "NAME: N passed, N failed" last; bounded: ~15 s, 30 s, 3 x 18 s;
# WISP_SVCFUZZ_SECONDS, WISP_SOAK_SECONDS change that, WISP_SEED replays)
if [ "${WISP_NGINX:-1}" != 0 ]; then
    for h in property svcfuzz soak; do
        [ -f "spec/nginx/$h.sh" ] && run_suite "$h (spec/nginx)" "$h" sh "spec/nginx/$h.sh"
    done
fi

# the Python package (spec/python/run.sh: its own venv under $WISP_BUILD/py-venv, pip install ., pytest;
# prints "python: N passed, N failed[, N skipped]" last; WISP_PYTHON=0 skips it)
[ -f spec/python/run.sh ] && [ "${WISP_PYTHON:-1}" != 0 ] && run_suite "python (spec/python)" python sh spec/python/run.sh

# the Open Inference Protocol (KServe v2) endpoints against a real nginx (spec/oip/run.sh: its own venv under
# $WISP_BUILD/oip-venv with tritonclient, kserve, schemathesis; prints "oip: N passed, N failed[, N skipped]" last;
# WISP_OIP=0 skips it, as does WISP_NGINX=0)
[ -f spec/oip/run.sh ] && [ "${WISP_NGINX:-1}" != 0 ] && [ "${WISP_OIP:-1}" != 0 ] && run_suite "oip (spec/oip)" oip sh spec/oip/run.sh

# the Java binding (spec/java/run.sh: JUnit 5 against $build/wisp.jar; prints "java: N passed, N failed" last;
# WISP_JAVA=0 skips it; a build without the jar, e.g. no JDK, counts as one failure with the reason)
[ -f spec/java/run.sh ] && [ "${WISP_JAVA:-1}" != 0 ] && run_suite "java (spec/java)" java sh spec/java/run.sh

# wisp in Spark (spec/spark/run.sh: its own venv with pyspark under $WISP_BUILD/spark-venv, local[2], one
# SparkSession; needs the jar, so WISP_JAVA=0 skips it too, as WISP_SPARK=0 does; prints "spark: N passed, N failed" last)
[ -f spec/spark/run.sh ] && [ "${WISP_SPARK:-1}" != 0 ] && [ "${WISP_JAVA:-1}" != 0 ] && run_suite "spark (spec/spark)" spark sh spec/spark/run.sh

# the C++ header (spec/cpp/test_wisp_hpp.cpp: parity with the CLI, every C failure as wisp::Error; prints
# "cpp: N passed, N failed" last; built by `make test`), then examples/quickstart.cpp built with pkg-config
# against a scratch install (WISP_CPP=0 skips both)
if [ "${WISP_CPP:-1}" != 0 ]; then
    run_suite "cpp (spec/cpp)" cpp "$build/test-cpp/test_wisp_hpp" "$build/wisp"
    cstage=$(mktemp -d)
    nv=""; [ -f "$build/obj/cuda/cuda_stub.o" ] && nv="NVCC="
    if make -s install BUILD="$build" $nv PREFIX=/usr DESTDIR="$cstage" >"$log" 2>&1 &&
       PKG_CONFIG_SYSROOT_DIR="$cstage" PKG_CONFIG_LIBDIR="$cstage/usr/lib/pkgconfig" \
         sh -c 'c++ -std=c++20 examples/quickstart.cpp $(pkg-config --cflags --libs wisp) -o "$0/quickstart_cpp"' "$cstage" >>"$log" 2>&1 &&
       (cd "$cstage" && LD_LIBRARY_PATH="$cstage/usr/lib" ./quickstart_cpp) >>"$log" 2>&1 &&
       grep -q "p = 0.924142 0.731059" "$log"; then
        passed=$((passed + 1)); printf '%-24s %5d passed, %d failed\n' "install+quickstart.cpp" 1 0
    else
        failed=$((failed + 1)); printf '%-24s %5d passed, %d failed\n' "install+quickstart.cpp" 0 1; sed 's/^/    /' "$log" | tail -n 20
        fail_recap "install+quickstart.cpp"
    fi
    rm -rf "$cstage"
fi

# libwisp.so exports exactly the functions of wisp.h (+ the test hooks of the Makefile): each one defined
if [ -f "$build/libwisp.map" ] && command -v nm >/dev/null 2>&1; then
    want=$(grep -oE '^wisp_[a-z0-9_]+' "$build/libwisp.map" | sort -u)
    have=$(nm -D --defined-only "$build/libwisp.so" | awk '$2 ~ /^[TWDBRV]$/ {print $3}' | sort -u)
    missing=$(printf '%s\n' "$want" | comm -23 - "$(printf '%s\n' "$have" >"$log"; echo "$log")")
    extra=$(printf '%s\n' "$have" | grep -v -x -F "$want")
    if [ -z "$missing" ] && [ -z "$extra" ]; then
        passed=$((passed + 1)); printf '%-24s %5d passed, %d failed\n' "exports (libwisp.so)" 1 0
    else
        failed=$((failed + 1)); printf '%-24s %5d passed, %d failed\n' "exports (libwisp.so)" 0 1
        echo "  exports (libwisp.so): missing: $missing; extra: $extra" >>"$recap"
        [ -n "$missing" ] && echo "    declared in wisp.h but not defined in libwisp.so:" $missing
        [ -n "$extra" ] && echo "    exported but not in wisp.h:" $extra
    fi
fi

# the README's doc test (spec/doc/readme.sh: runs the tour's "# doc-test" blocks after a demo into a
# scratch dir and compares their output with the README's; prints "readme: N passed, N failed" last).
# The README's outputs are those of a machine without a GPU (CI's: "on cpu", LIBLINEAR and a JDK
# from Debian), so WISP_TEST_GPU=1 skips it and says so; WISP_README=1 runs it there anyway.
if [ -z "$WISP_TEST_GPU" ] || [ "${WISP_README:-0}" = 1 ]; then
    [ -f spec/doc/readme.sh ] && run_suite "readme (spec/doc)" readme sh spec/doc/readme.sh
else
    echo "readme (spec/doc): SKIPPED under WISP_TEST_GPU (its outputs are a CPU machine's; WISP_README=1 runs it)"
fi

# install into a scratch DESTDIR and build the C quickstart against it with pkg-config
stage=$(mktemp -d)
# a build made with NVCC= (engine/cuda/cuda_stub.c) is installed as it is, not rebuilt with the CUDA backend
nv=""; [ -f "$build/obj/cuda/cuda_stub.o" ] && nv="NVCC="
if make -s install BUILD="$build" $nv PREFIX=/usr DESTDIR="$stage" >"$log" 2>&1 &&
   PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_LIBDIR="$stage/usr/lib/pkgconfig" \
     sh -c 'cc examples/quickstart.c $(pkg-config --cflags --libs wisp) -o "$0/quickstart"' "$stage" >>"$log" 2>&1 &&
   (cd "$stage" && LD_LIBRARY_PATH="$stage/usr/lib" ./quickstart) >>"$log" 2>&1 &&
   grep -q "p = 0.924142 0.731059" "$log" &&
   make -s uninstall BUILD="$build" $nv PREFIX=/usr DESTDIR="$stage" >>"$log" 2>&1 &&
   [ -z "$(find "$stage/usr" -type f)" ]; then
    passed=$((passed + 1)); printf '%-24s %5d passed, %d failed\n' "install+quickstart" 1 0
else
    failed=$((failed + 1)); printf '%-24s %5d passed, %d failed\n' "install+quickstart" 0 1; sed 's/^/    /' "$log" | tail -n 20
    fail_recap "install+quickstart"
fi
rm -rf "$stage"

# sanitizer builds, valgrind and a short fuzz pass (spec/reliability.sh; WISP_RELIABILITY=0 skips,
# and it is skipped by default under WISP_TEST_GPU)
if [ "${WISP_RELIABILITY:-$([ -n "$WISP_TEST_GPU" ] && echo 0 || echo 1)}" != 0 ] && [ -f spec/reliability.sh ]; then
    echo "reliability (spec/reliability.sh):"
    sh spec/reliability.sh | tee "$log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -n "$line" ]; then p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}; else p=0; f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    [ "$f" -eq 0 ] || echo "  reliability: $f failed (its recap is above)" >>"$recap"
fi

if [ -s "$recap" ]; then
    echo "what failed:"
    head -n 30 "$recap"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
