#!/bin/sh
# bench_java.sh — the Java binding's cost: JNI per call for 10 rows vs C, 200k rows from direct buffers vs C,
# and a pure-Java scorer loop over the same arrays (what a Java team writes without wisp) as the peer.
#
#   scripts/bench/bench_java.sh [--build DIR] [--threads N] [--device DEV] [--record]
#
# Builds DIR/wisp.jar (make BUILD=DIR java), scripts/bench/BenchJava.java and bench_java_c.c;
# BenchJava writes a 4M-weight f32 model and 200k rows x 39 uniform ids, scores them on DEV (cpu)
# (10 rows: median of 7 x 200k calls; 200k rows: median of 15), and the C peer reads the same
# files and times wisp_batch_wrap + wisp_session_score the same way (what the JNI shim does per
# call). Writes build/results/bench_java.json, or scripts/results/ with --record (SCHEMA.md).
set -eu
cd "$(dirname "$0")/../.."
. scripts/lib/record.sh
build=build threads=0 device=cpu RECORD=0
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --record) RECORD=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "bench_java.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case $build in /*) ;; *) build=$PWD/$build ;; esac
nv=""; [ -f "$build/obj/cuda/cuda_stub.o" ] && nv="NVCC="
make -s BUILD="$build" $nv all java "$build/wisp.pc" >/dev/null
work=$build/bench-java
rm -rf "$work" && mkdir -p "$work/classes"
javac --release 17 -d "$work/classes" -cp "$build/wisp.jar" scripts/bench/BenchJava.java
cc -O2 -std=c11 -D_GNU_SOURCE -Iengine/include -o "$work/bench_java_c" scripts/bench/bench_java_c.c "$build/libwisp.a" \
    $(sed -n 's/^Libs.private: //p' "$build/wisp.pc" 2>/dev/null || echo "-lxxhash -lm -lpthread -ldl -lrt")
jres=$(java -Dwisp.threads="$threads" -cp "$build/wisp.jar:$work/classes" BenchJava "$work" "$device")
cres=$("$work/bench_java_c" "$work" "$threads" "$device")
commit=$(record_commit)
out="$(record_dir)/bench_java.json"
jv=$(java -version 2>&1 | head -n 1 | sed 's/"/\\"/g')
cat > "$work/doc.json" <<EOD
{
  "benchmark": "bench_java",
  "issue": 16,
  "command": "scripts/bench/bench_java.sh --threads $threads --device $device$( [ "$RECORD" = 1 ] && echo ' --record' || true)",
  "commit": "$commit",
  "device": "$device",
  "workload": "4194304 f32 weights, uniform ids; 10 rows and 200000 rows of 39 valued features",
  "peers": "results.c_* (wrap + score from C, the same rows and files) and results.java_peer_* (a pure-Java gather-sum-sigmoid loop, one thread)",
  "machine_detail": {"java": "$jv"},
  "results": {"java": $jres, "c": $cres}
}
EOD
record_envelope "$build/wisp" "$work/doc.json" "$out" 2>/dev/null
echo "java: $jres"
echo "c:    $cres"
echo "wrote $out"
