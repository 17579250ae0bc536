#!/bin/sh
# reliability.sh — sanitizer, valgrind and fuzzing passes over the CPU engine; prints "N passed, N failed" last.
#
#   sh spec/reliability.sh [STAGE...]     stages: fuzz regress asan tsan valgrind (default: all of them)
#   sh spec/reliability.sh json           only rewrite the JSON from the last run's figures ($WISP_RELIABILITY_JSON,
#                                         default scripts/results/reliability.json)
#
# Each program run of each stage counts as one check: it passes when it exits 0,
# its closing "name: N passed, 0 failed" line (C tests) says so, and its output
# holds no sanitizer or valgrind report.
#   fuzz      every spec/fuzz/fuzz_* target for WISP_FUZZ_SECONDS (default 12; `make fuzz`
#             passes FUZZ_SECONDS, default 60), corpus in $WISP_BUILD/fuzz/corpus/<target>
#             (kept between runs) seeded from spec/fuzz/corpus/<target>; a crash leaves
#             $WISP_BUILD/fuzz/artifacts/<target>-crash-* : copy it into
#             spec/fuzz/regress/<target>/ and fix the bug
#   regress   every target replays spec/fuzz/corpus/<target> and spec/fuzz/regress/<target>
#   asan      the C tests and the busted specs against the ASan+UBSan library
#             (LuaJIT: LD_PRELOAD of clang's ASan runtime, leaks checked)
#   tsan      the C tests under ThreadSanitizer
#   valgrind  the C tests of the normal build under valgrind memcheck, WISP_TEST_QUICK=1
# Environment: WISP_BUILD (default build), WISP_FUZZ_SECONDS, WISP_RELIABILITY_JSON=path: write
# the figures there as JSON in the results schema (scripts/results/SCHEMA.md: the document below goes
# through `luajit scripts/lib/record.lua envelope`, which fills machine, cpu, cores, gpu and commit and
# moves the figures under "results"; scripts/results/reliability.json is made that way); its "service"
# section holds what spec/nginx/soak.sh and svcfuzz.sh left in $WISP_BUILD/reliability (the soak's
# requests, file changes of each kind, wrong answers, dead workers; the fuzzer's executions).
build=${WISP_BUILD:-build}
cd "$(dirname "$0")/.." || exit 2
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
export WISP_BUILD="$build"
stages=${*:-fuzz regress asan tsan valgrind}
secs=${WISP_FUZZ_SECONDS:-${FUZZ_SECONDS:-12}}
res="$build/reliability"
mkdir -p "$res" || exit 2
results="$res/results.txt"        # key=value lines for the JSON
[ "$stages" = json ] || {
    : >"$results"
    echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$results"
    echo "command=WISP_FUZZ_SECONDS=$secs sh spec/reliability.sh $stages" >>"$results"   # the JSON's "command"
}
passed=0 failed=0
[ "$stages" = json ] || { : >"$res/failures.txt"; rm -f "$res"/failed.*.log; }
log=$(mktemp) || exit 2
trap 'rm -f "$log"' EXIT

note() { echo "$1=$2" >>"$results"; }
has() { case " $stages " in *" $1 "*) return 0 ;; esac; return 1; }

REPORTS='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer|ERROR: ThreadSanitizer|ERROR SUMMARY: [1-9]|Invalid (read|write|free)|definitely lost: [1-9]|==[0-9]+== Conditional jump'

# one check: $1 stage, $2 name, $3 seconds, $4 exit status; the output is in $log
record() {
    stage=$1 name=$2 secs_taken=$3 rc=$4
    line=$(grep -E "^[a-z_0-9]+: [0-9]+ passed, [0-9]+ failed" "$log" | tail -n 1)
    ok=1
    [ "$rc" -eq 0 ] || ok=0
    if [ -n "$line" ]; then
        f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
        [ "$f" -eq 0 ] || ok=0
    fi
    if grep -qE "$REPORTS" "$log"; then ok=0; fi
    if [ $ok -eq 1 ]; then
        passed=$((passed + 1)); verdict=clean
    else
        failed=$((failed + 1)); verdict=FAILED
    fi
    printf '%-10s %-22s %-7s (%ds)%s\n' "$stage" "$name" "$verdict" "$secs_taken" "${line:+  $line}"
    note "run.$stage.$name" "$verdict $secs_taken"
    if [ $ok -eq 0 ]; then
        # kept for the recap printed last (a CI log shows its tail) and the whole output for reading
        cp "$log" "$res/failed.$stage.$(echo "$name" | tr -c 'A-Za-z0-9_.\n-' '_').log" 2>/dev/null
        {
            printf '%-10s %-22s FAILED%s\n' "$stage" "$name" "${line:+  $line}"
            grep -m 4 -E "WISP_TEST_SEED|$REPORTS|CHECK failed|fuzz property failed|^not ok|SUMMARY:|deadly signal" "$log" | cut -c1-200 | sed 's/^/    | /'
            grep -m 1 -E '^Base64: ' "$log" | cut -c1-600 | sed 's/^/    | /'   # libFuzzer's input, to recreate it
        } >>"$res/failures.txt"
        if grep -qE "$REPORTS" "$log"; then          # the first report with its stack
            awk -v re="$REPORTS" '$0 ~ re { on = 1 } on && n < 45 { print "    | " $0; n++ }' "$log"
        elif grep -qE "CHECK failed|fuzz property failed|^not ok" "$log"; then
            grep -E -A3 "CHECK failed|fuzz property failed|^not ok" "$log" | head -n 40 | sed 's/^/    | /'
        else
            tail -n 30 "$log" | sed 's/^/    | /'
        fi
    fi
}

now() { date +%s; }

# ---- build what is missing (a no-op inside `make test`, which built it) ----------------
targets=""
if has fuzz || has regress; then targets="$targets fuzz-build"; fi
if has asan; then targets="$targets asan-build"; fi
if has tsan; then targets="$targets tsan-build"; fi
if [ -n "$targets" ]; then
    if ! make -s --no-print-directory BUILD="$build" $targets >"$log" 2>&1; then
        cat "$log" | tail -n 30
        echo "reliability: building$targets failed"
        echo "0 passed, 1 failed"
        exit 1
    fi
fi

# ---- fuzzing --------------------------------------------------------------------------------
fuzz_total=0
if has fuzz; then
    note fuzz.seconds_per_target "$secs"
    mkdir -p "$build/fuzz/artifacts"
    for bin in "$build"/fuzz/fuzz_*; do
        [ -x "$bin" ] || continue
        t=$(basename "$bin")
        corpus="$build/fuzz/corpus/$t"
        mkdir -p "$corpus"
        dirs="$corpus spec/fuzz/corpus/$t"
        [ -d "spec/fuzz/regress/$t" ] && dirs="$dirs spec/fuzz/regress/$t"
        maxlen=4096; [ "$t" = fuzz_model ] && maxlen=8192
        start=$(now)
        touch "$res/stamp.$t"
        "$bin" -max_total_time="$secs" -max_len=$maxlen -timeout=25 -rss_limit_mb=2560 -print_final_stats=1 \
            -artifact_prefix="$build/fuzz/artifacts/$t-" $dirs >"$log" 2>&1
        rc=$?
        execs=$(grep -E '^stat::number_of_executed_units:' "$log" | awk '{s += $2} END {print s + 0}')
        fuzz_total=$((fuzz_total + execs))
        files=$(ls "$corpus" | wc -l)
        note "fuzz.$t.execs" "$execs"
        note "fuzz.$t.corpus_files" "$files"
        crashes=$(find "$build/fuzz/artifacts" -name "$t-*" -newer "$res/stamp.$t" 2>/dev/null | wc -l)   # this run's
        note "fuzz.$t.artifacts" "$crashes"
        record fuzz "$t" $(( $(now) - start )) $rc
        echo "           $execs executions, corpus $files files"
        if [ $rc -ne 0 ]; then
            echo "    the failing input: $(ls -t "$build/fuzz/artifacts/$t-"* 2>/dev/null | head -n 1)"
            echo "    replay: $bin <input>; keep it: cp <input> spec/fuzz/regress/$t/"
        fi
    done
    note fuzz.total_execs "$fuzz_total"
    echo "           fuzzing: $fuzz_total executions in all"
fi

# ---- regression inputs --------------------------------------------------------------------
if has regress; then
    for bin in "$build"/fuzz/fuzz_*; do
        [ -x "$bin" ] || continue
        t=$(basename "$bin")
        dirs="spec/fuzz/corpus/$t"
        [ -d "spec/fuzz/regress/$t" ] && dirs="$dirs spec/fuzz/regress/$t"
        start=$(now)
        "$bin" -runs=0 -max_len=1048576 $dirs >"$log" 2>&1
        rc=$?
        record regress "$t" $(( $(now) - start )) $rc
    done
    note regress.inputs "$(find spec/fuzz/regress -type f ! -name FINDINGS 2>/dev/null | wc -l)"
fi

# ---- ASan + UBSan -------------------------------------------------------------------------
if has asan; then
    export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    for t in "$build"/asan/test/test_*; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        start=$(now)
        WISP_TEST_NO_BENCH=1 "$t" >"$log" 2>&1
        rc=$?
        if [ "$name" = test_alloc_fail ]; then
            note alloc_fail.points "$(sed -nE 's/^test_alloc_fail: failure points tried: ([0-9]+).*/\1/p' "$log")"
            sed -nE 's/^  (.*[^ ]) +([0-9]+) failure points.*/alloc_fail.op.\1=\2/p' "$log" | tr ' ' '_' >>"$results"
        fi
        record asan "$name" $(( $(now) - start )) $rc
    done
    # the busted specs: LuaJIT loads the sanitized library; clang's shared ASan runtime must come first.
    # Left out: the one spec that preloads the library itself (LD_PRELOAD=$WISP_LIB replaces the runtime).
    rt=$(${SAN_CC:-clang} -print-file-name=libclang_rt.asan-x86_64.so 2>/dev/null)
    case "$rt" in /*) ;; *) rt=$(${SAN_CC:-clang} -print-file-name=libclang_rt.asan.so 2>/dev/null) ;; esac  # clang >= 15
    if command -v luajit >/dev/null 2>&1 && [ -f "$rt" ] && [ -f "$build/asan/libwisp.so" ]; then
        start=$(now)
        # Leaks are checked in this process only: the -e chunk turns the check off for its children
        # (cp, mkdir, sh... inherit LD_PRELOAD, and leak at exit). quarantine_size_mb: a spec
        # measures that freed batches give their memory back.
        LD_PRELOAD="$rt" ASAN_OPTIONS="detect_leaks=1:quarantine_size_mb=32" WISP_LIB="$build/asan/libwisp.so" \
            luajit -e 'local ffi = require "ffi"; ffi.cdef "int setenv(const char *, const char *, int);"
                       ffi.C.setenv("ASAN_OPTIONS", "detect_leaks=0:quarantine_size_mb=32", 1)' \
            spec/busted.lua -o TAP --filter-out="uses ffi.C when the process already exports" spec/lua >"$log" 2>&1
        rc=$?
        p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
        echo "busted: $p passed, $f failed" >>"$log"
        note asan.busted "$p passed, $f failed"
        record asan "busted(spec/lua)" $(( $(now) - start )) $rc
    else
        echo "asan       busted(spec/lua)       FAILED: luajit, $rt or $build/asan/libwisp.so missing" | tee -a "$res/failures.txt"
        failed=$((failed + 1))
    fi
    unset ASAN_OPTIONS UBSAN_OPTIONS
fi

# ---- ThreadSanitizer ---------------------------------------------------------------------------
if has tsan; then
    for t in "$build"/tsan/test/test_*; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        start=$(now)
        # die_after_fork=0: test_score forks a child to check the pool after fork()
        TSAN_OPTIONS="halt_on_error=1:allocator_may_return_null=1:second_deadlock_stack=1:die_after_fork=0" WISP_TEST_NO_BENCH=1 \
            WISP_TEST_QUICK=1 "$t" >"$log" 2>&1
        rc=$?
        record tsan "$name" $(( $(now) - start )) $rc
    done
fi

# ---- valgrind memcheck --------------------------------------------------------------------------
if has valgrind; then
    if command -v valgrind >/dev/null 2>&1; then
        for t in "$build"/test/test_*; do
            [ -x "$t" ] || continue
            name=$(basename "$t")
            start=$(now)
            WISP_TEST_QUICK=1 WISP_TEST_NO_BENCH=1 valgrind -q --error-exitcode=99 --leak-check=full \
                --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
                "$t" >"$log" 2>&1
            rc=$?
            record valgrind "$name" $(( $(now) - start )) $rc
        done
    else
        echo "valgrind: not installed"; failed=$((failed + 1))
    fi
fi

if [ "$stages" = json ]; then                 # the JSON again from the last run's figures
    passed=$(sed -n "s/^passed=//p" "$results" 2>/dev/null); failed=$(sed -n "s/^failed=//p" "$results" 2>/dev/null)
    passed=${passed:-0} failed=${failed:-0}
else
    note passed "$passed"
    note failed "$failed"
fi

# ---- the figures as JSON ---------------------------------------------------------------------------
json_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n'; }
# write_json: the run's document (its "machine" object becomes machine_detail in the envelope; the
# commit is record.lua's: WISP_COMMIT, else git's short HEAD and +uncommitted)
write_json() {
    command=$(sed -n 's/^command=//p' "$results")
    if [ -z "$command" ]; then                  # a run from before the command was noted: its stages
        command="sh spec/reliability.sh $(sed -n 's/^run\.\([a-z]*\)\..*/\1/p' "$results" | uniq | tr '\n' ' ' | sed 's/ $//')"
        command="$command (WISP_FUZZ_SECONDS=$(sed -n 's/^fuzz\.seconds_per_target=//p' "$results"); command reconstructed from the figures)"
    fi
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
    os=$(sed -n 's/^PRETTY_NAME="\(.*\)"/\1/p' /etc/os-release 2>/dev/null)
    cc=$(${SAN_CC:-clang} --version 2>/dev/null | head -n 1)
    vg=$(valgrind --version 2>/dev/null)
    printf '{\n'
    printf '  "date": "%s",\n' "$(sed -n 's/^date=//p' "$results")"       # when the run started
    printf '  "command": "%s",\n' "$(json_str "$command")"
    printf '  "peers": "none (a record of tests, sanitizers and fuzzing; no peer)",\n'
    printf '  "machine": {"cpu": "%s", "cores": %s, "os": "%s", "kernel": "%s", "sanitizer_compiler": "%s", "valgrind": "%s"},\n' \
        "$(json_str "$cpu")" "$(nproc 2>/dev/null || echo 0)" "$(json_str "$os")" "$(uname -r)" "$(json_str "$cc")" "$(json_str "$vg")"
    awk -F= '
        function q(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
        { k = $1; v = substr($0, length($1) + 2); val[k] = v; order[++n] = k }
        END {
            printf "  \"fuzz\": {\"seconds_per_target\": %d, \"targets\": {", val["fuzz.seconds_per_target"] + 0
            sep = ""
            for (i = 1; i <= n; i++) if (order[i] ~ /^fuzz\.[a-z_0-9]+\.execs$/) {
                split(order[i], p, "."); t = p[2]
                printf "%s\n    %s: {\"executions\": %d, \"corpus_files\": %d, \"crash_artifacts\": %d}", sep, q(t),
                    val[order[i]], val["fuzz." t ".corpus_files"], val["fuzz." t ".artifacts"]
                sep = ","
            }
            printf "\n  }, \"total_executions\": %d},\n", val["fuzz.total_execs"] + 0
            printf "  \"fuzz_regression_inputs\": %d,\n", val["regress.inputs"] + 0
            printf "  \"allocation_failure\": {\"points_tried\": %d, \"per_operation\": {", val["alloc_fail.points"] + 0
            sep = ""
            for (i = 1; i <= n; i++) if (order[i] ~ /^alloc_fail\.op\./) {
                printf "%s%s: %d", sep, q(substr(order[i], 15)), val[order[i]]; sep = ", "
            }
            printf "}},\n"
            printf "  \"busted_under_asan\": %s,\n", q(val["asan.busted"])
            printf "  \"runs\": ["
            sep = ""
            for (i = 1; i <= n; i++) if (order[i] ~ /^run\./) {
                split(order[i], p, "."); split(val[order[i]], r, " ")
                name = substr(order[i], length(p[1]) + length(p[2]) + 3)
                printf "%s\n    {\"stage\": %s, \"program\": %s, \"result\": %s, \"seconds\": %d}", sep, q(p[2]), q(name), q(r[1]), r[2]
                sep = ","
            }
            printf "\n  ],\n"
            printf "  \"checks_passed\": %d,\n  \"checks_failed\": %d,\n", val["passed"], val["failed"]
        }' "$results"
    printf '  "defects_found_and_fixed": ['
    sep=""
    if [ -f spec/fuzz/regress/FINDINGS ]; then
        while IFS= read -r l; do
            case "$l" in ''|'#'*) continue ;; esac
            printf '%s\n    "%s"' "$sep" "$(json_str "$l")"; sep=","
        done <spec/fuzz/regress/FINDINGS
    fi
    printf '\n  ],\n'
    printf '  "crashes_found_by_fuzzing": %d,\n' "$(grep -c 'found by fuzz_' spec/fuzz/regress/FINDINGS 2>/dev/null)"
    # the service's harnesses (spec/nginx/soak.sh, svcfuzz.sh: spec/run.sh runs them before this
    # script) leave one JSON object each in $res: the soak's counts per mode, the fuzzer's executions
    printf '  "service": {"soak": ['
    sep=""
    for f in "$res"/soak.*.json; do
        [ -f "$f" ] || continue
        printf '%s\n    %s' "$sep" "$(tr -d '\n' <"$f")"; sep=","
    done
    printf '\n  ], "svcfuzz": %s},\n' "$( [ -f "$res/svcfuzz.json" ] && tr -d '\n' <"$res/svcfuzz.json" || echo null)"
    printf '  "open_defects": %d\n}\n' "$failed"
}
[ "$stages" = json ] && [ -z "$WISP_RELIABILITY_JSON" ] && WISP_RELIABILITY_JSON=scripts/results/reliability.json
if [ -n "$WISP_RELIABILITY_JSON" ]; then
    if [ ! -s "$results" ]; then
        echo "reliability: no figures in $results (run the stages first)"; failed=$((failed + 1))
    elif write_json >"$res/reliability.raw.json" &&
            luajit scripts/lib/record.lua envelope "$res/reliability.raw.json" "$WISP_RELIABILITY_JSON" 2>"$log"; then
        echo "reliability: wrote $WISP_RELIABILITY_JSON"
    else
        cat "$log"
        echo "reliability: writing $WISP_RELIABILITY_JSON failed (the document: $res/reliability.raw.json)"
        failed=$((failed + 1))
    fi
fi

if [ "$failed" -gt 0 ] && [ -s "$res/failures.txt" ]; then
    echo "reliability: what failed (whole outputs: $res/failed.<stage>.<program>.log):"
    head -n 40 "$res/failures.txt"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
