#!/usr/bin/env bash
# device_transform.sh — one call on the GPU machine: build, the GPU transform tests (ids byte for byte, score_raw), the bench, memcheck.
# Run there from the repository root with .devdeps carried:
#   export WISP_COMMIT=<short commit> && source .devdeps/env.sh && scripts/device/device_transform.sh
# On success it prints, last: "test_transform_gpu: N passed, 0 failed", "test_gpu: N passed, 0 failed",
# the bench's lines ((a) GPU end to end ... (b) CPU transform ... -> Nx ... ids equal to the CPU's: True)
# and "ERROR SUMMARY: 0 errors". Results: scripts/results/bench_transform_gpu-h200*.json (and $OUT).
set -uo pipefail
cd "$(dirname "$0")/../.."
export WISP_RECORD=${WISP_RECORD:-1}   # a device run is for recording: its benchmarks write scripts/results/ (WISP_RECORD=0: build/results/)
export WISP_SKIP_DEPS=1 PYTHONUNBUFFERED=1
export CPATH=/opt/devdeps/usr/include:/opt/devdeps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
B=${BUILD:-build-gpu}
make BUILD="$B" -j16 all "$B/test/test_transform_gpu" "$B/test/test_gpu" > /tmp/xf_build.log 2>&1 || { tail -30 /tmp/xf_build.log; echo "BUILD FAILED"; exit 1; }
WISP_TEST_GPU=1 timeout 120 "$B/test/test_transform_gpu" 2>&1 | tail -4
WISP_TEST_GPU=1 WISP_TEST_GPU_QUICK=1 WISP_TEST_NO_STICKY=1 timeout 90 "$B/test/test_gpu" 2>&1 | tail -1
WISP_LIB=$PWD/$B/libwisp.so timeout 60 luajit spec/busted.lua -o TAP spec/lua/transform_gpu_spec.lua 2>&1 | grep -c "^ok" | sed 's/^/busted transform_gpu_spec ok: /'
timeout 150 python3 scripts/bench/bench_transform_gpu.py --lib "$B/libwisp.so" --label h200 2>&1 | tail -9
WISP_GPU_XF_CHUNK_ROWS=400000 timeout 60 python3 scripts/bench/bench_transform_gpu.py --lib "$B/libwisp.so" --label h200-onechunk --cpu-repeat 1 2>&1 | sed -n 2,3p
WISP_TEST_GPU=1 WISP_TEST_GPU_QUICK=1 timeout 120 compute-sanitizer --tool memcheck --leak-check no --print-limit 5 "$B/test/test_transform_gpu" 2>&1 | tail -2
[ -n "${OUT:-}" ] && cp scripts/results/bench_transform_gpu-h200*.json "$OUT/" 2>/dev/null
exit 0
