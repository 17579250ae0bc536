#!/usr/bin/env bash
# bench_cpu_vs_liblinear.sh — LIBLINEAR's own predictor against `wisp score` on the same file, side by side.
#
# A Criteo-like libsvm data set (13 numeric + 26 Zipf categorical features a row,
# 1-based ids over 13 + 26*BUCKETS features) is generated, a LIBLINEAR model is
# trained on it with `liblinear-train -s 0 -B 1`, imported with `wisp import
# liblinear`, and a held-out file is scored end to end (file in, predictions out)
# by `liblinear-predict -b 1` and `wisp score`. Checks the probabilities agree
# (first probability column = the model's first label) and records both timings.
#
# usage: scripts/bench/bench_cpu_vs_liblinear.sh [--rows N] [--buckets B] [--repeat R] [--threads T] [--record]
#            [--build DIR] [--baseline WISP_BINARY] [--out FILE]
#   --build DIR      the build to measure (default build; made with make BUILD=DIR)
#   --baseline BIN   another `wisp` binary (e.g. a build of an older commit) timed
#                    in the same run, turn about with the measured one
# Also records the libsvm parser's MB/s per core: the file's bytes over the
# parse thread time that `wisp score --threads 1 --stats` reports.
# output: build/results/bench_cpu_vs_liblinear.json, scripts/results/ with --record or WISP_RECORD=1 (+ a table on stdout)
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=200000 buckets=262144 repeat=5 threads=0 build=build baseline="" out="" RECORD=0
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --baseline) baseline=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --record) RECORD=1; shift ;;
        --rows) rows=$2; shift 2 ;;
        --buckets) buckets=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "bench_cpu_vs_liblinear: unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v liblinear-train >/dev/null || { echo "liblinear-tools is not installed (make deps)" >&2; exit 2; }
make -s BUILD="$build" all >/dev/null
wisp=$build/wisp
dir=build/bench_liblinear           # the data (made once, shared by every build)
odir=$build/bench_liblinear_out     # this build's outputs
mkdir -p "$dir" "$odir" scripts/results
[ -z "$baseline" ] || [ -x "$baseline" ] || { echo "bench_cpu_vs_liblinear: --baseline $baseline is not an executable" >&2; exit 2; }
train="$dir/train_${rows}_${buckets}.libsvm" test="$dir/test_${rows}_${buckets}.libsvm"
model="$dir/model_${rows}_${buckets}.txt" wmodel="$odir/model_${rows}_${buckets}.wisp"

now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.6g\", $1 }"; }
[ -s "$train" ] || { echo "generating $train"; $wisp run scripts/load/gen_libsvm.lua --rows "$rows" --buckets "$buckets" --seed 1 --one-based "$train"; }
[ -s "$test" ]  || { echo "generating $test";  $wisp run scripts/load/gen_libsvm.lua --rows "$rows" --buckets "$buckets" --seed 2 --one-based "$test"; }
if [ ! -s "$model" ]; then
    echo "training: liblinear-train -s 0 -B 1 $train $model"
    t0=$(now); liblinear-train -s 0 -B 1 "$train" "$model" >/dev/null; t1=$(now)
    echo "  trained in $(calc "$t1 - $t0") s"
fi
$wisp import liblinear "$model" "$wmodel"
nfeat=$(awk '/^nr_feature/ {print $2}' "$model")

# time a command R times; print the median seconds
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
time_cmd() { # R, command...
    local r=$1; shift
    for _ in $(seq "$r"); do
        local t0 t1; t0=$(now); "$@" >/dev/null; t1=$(now)
        calc "$t1 - $t0"; echo
    done | median
}
# warm the page cache for both readers
cat "$test" "$model" "$wmodel" >/dev/null

ll_repeat=$(( repeat < 3 ? repeat : 3 ))
echo "timing liblinear-predict -b 1 ($ll_repeat runs)"
t_ll=$(time_cmd "$ll_repeat" liblinear-predict -b 1 "$test" "$model" "$odir/liblinear.out")
load1=$(cut -d' ' -f1 /proc/loadavg)
# the measured build and the baseline take turns, so both see the same load
wisp_runs=() base_runs=() wisp1_runs=() base1_runs=()
echo "timing wisp score --device cpu ($repeat runs${baseline:+, turn about with $baseline})"
for _ in $(seq "$repeat"); do
    wisp_runs+=("$(time_cmd 1 $wisp score -m "$wmodel" --device cpu --threads "$threads" -o "$odir/wisp.out" "$test")")
    wisp1_runs+=("$(time_cmd 1 $wisp score -m "$wmodel" --device cpu --threads 1 -o "$odir/wisp1.out" "$test")")
    if [ -n "$baseline" ]; then
        base_runs+=("$(time_cmd 1 "$baseline" score -m "$wmodel" --device cpu --threads "$threads" -o "$odir/base.out" "$test")")
        base1_runs+=("$(time_cmd 1 "$baseline" score -m "$wmodel" --device cpu --threads 1 -o "$odir/base1.out" "$test")")
    fi
done
t_wisp=$(printf '%s\n' "${wisp_runs[@]}" | median)
t_wisp1=$(printf '%s\n' "${wisp1_runs[@]}" | median)
load2=$(cut -d' ' -f1 /proc/loadavg)
# the parser's MB/s per core: bytes / the parse thread time of a one-thread run (best of 3)
bytes=$(stat -c %s "$test")
parse_mbs() { # binary
    for _ in 1 2 3; do
        "$1" score -m "$wmodel" --device cpu --threads 1 --stats -o /dev/null "$test" 2>&1 >/dev/null |
            sed -n 's/.*thread time: parse \([0-9.]*\) ms.*/\1/p'
    done | sort -n | head -1 | awk -v b="$bytes" '{ if ($1 > 0) printf "%.0f", b / ($1 / 1000) / 1e6; else print "null" }'
}
parse_mb=$(parse_mbs "$wisp")
base_json=""
if [ -n "$baseline" ]; then
    t_base=$(printf '%s\n' "${base_runs[@]}" | median)
    t_base1=$(printf '%s\n' "${base1_runs[@]}" | median)
    base_parse_mb=$(parse_mbs "$baseline")
    cmp -s "$odir/wisp.out" "$odir/base.out" && base_same=true || base_same=false
    base_json=",
  \"baseline\": {\"binary\": \"$baseline\", \"wisp_score_s\": $t_base, \"wisp_score_1thread_s\": $t_base1,
               \"speedup_vs_liblinear\": $(calc "$t_ll / $t_base"), \"parse_mb_per_s_per_core\": $base_parse_mb,
               \"measured_over_baseline\": $(calc "$t_base / $t_wisp"), \"identical_output\": $base_same}"
fi

# agreement: column 2 of liblinear's output is P(first label); wisp prints P(first label)
read -r maxdiff nrows < <(tail -n +2 "$odir/liblinear.out" | cut -d' ' -f2 | paste - "$odir/wisp.out" |
    awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++} END {printf "%.3g %d\n", m, n}')
same_threads=$(cmp -s "$odir/wisp.out" "$odir/wisp1.out" && echo true || echo false)
speedup=$(calc "$t_ll / $t_wisp")
speedup1=$(calc "$t_ll / $t_wisp1")
nnz=$(awk '{n += NF - 1} END {print n}' "$test")

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
. scripts/lib/record.sh
commit=$(record_commit)
[ -n "$out" ] || out="$(record_dir)/bench_cpu_vs_liblinear.json"   # build/results/ unless --record or WISP_RECORD=1
cat > "$odir/doc.json" <<EOF
{
  "benchmark": "bench_cpu_vs_liblinear",
  "command": "scripts/bench/bench_cpu_vs_liblinear.sh --rows $rows --buckets $buckets --repeat $repeat --threads $threads${baseline:+ --baseline $baseline}",
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "commit": "$commit",
  "machine": {"cpu": "$cpu", "cores": $(nproc), "gpu": "none used (--device cpu)", "load_average_1m": [$load1, $load2]},
  "data": {"rows": $nrows, "features_in_file": $nnz, "features_per_row": $(calc "$nnz / $nrows"),
           "model_features": $nfeat, "trainer": "liblinear-train -s 0 -B 1"},
  "peers": {
    "liblinear_predict_s": $t_ll,
    "wisp_score_s": $t_wisp,
    "wisp_score_1thread_s": $t_wisp1
  },
  "parse_mb_per_s_per_core": $parse_mb,
  "speedup": $speedup,
  "speedup_1thread": $speedup1,
  "max_abs_prob_diff": $maxdiff,
  "identical_output_1_vs_all_threads": $same_threads,
  "target": {"speedup_min": 15, "max_abs_prob_diff": 1e-6},
  "note": "end to end: file in, predictions out, median of runs; liblinear prints %g (6 significant digits)"$base_json
}
EOF
record_envelope "$wisp" "$odir/doc.json" "$out" 2>/dev/null
printf '\n%-34s %10s\n' "command ($nrows rows, $nfeat features)" "seconds"
printf '%-34s %10.3f\n' "liblinear-predict -b 1" "$t_ll" "wisp score (all cores)" "$t_wisp" "wisp score --threads 1" "$t_wisp1"
printf 'speedup %.1fx (1 thread: %.1fx); max |p_liblinear - p_wisp| = %s; 1 vs all threads identical: %s\n' \
    "$speedup" "$speedup1" "$maxdiff" "$same_threads"
printf 'libsvm parser: %s MB/s per core; load average %s -> %s\n' "$parse_mb" "$load1" "$load2"
[ -z "$baseline" ] || printf 'baseline %s: %.3f s (%.1fx liblinear), parser %s MB/s per core; measured/baseline %.2fx; same output: %s\n' \
    "$baseline" "$t_base" "$(calc "$t_ll / $t_base")" "$base_parse_mb" "$(calc "$t_base / $t_wisp")" "$base_same"
echo "wrote $out"
