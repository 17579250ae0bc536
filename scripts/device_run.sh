#!/usr/bin/env bash
# device_run.sh — one call on the GPU machine: build, the GPU test suite, and every benchmark.
# Run there from the repository root, with .devdeps carried (see ../shared/device/README.md):
#   export WISP_COMMIT=<git rev-parse --short HEAD, computed here> && source .devdeps/env.sh && scripts/device_run.sh [--quick]
# (the device's copy of the tree has no .git, so the results record WISP_COMMIT)
# Logs and JSON results go to build/device_out and scripts/results/, and as one archive to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=build/device_out
mkdir -p "$out" scripts/results
export CPATH=/opt/devdeps/usr/include:/opt/devdeps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
export LUA_PATH="/opt/devdeps/usr/share/luajit2-2.1/?.lua;/opt/devdeps/usr/share/luajit-2.1/?.lua;${LUA_PATH:-;}"
export WISP_SKIP_DEPS=1 PYTHONUNBUFFERED=1
quick=${1:-}
# the device tool brings back at most 8 files: one archive, refreshed after every step
snapshot() { cp scripts/results/*.json "$out/" 2>/dev/null; [ -n "${OUT:-}" ] && tar czf "$OUT/device_out.tgz" -C build device_out; }
step() { snapshot; echo; echo "=== $* ($(date +%T))"; }

step build
timeout 150 make -j16 BUILD=build all > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo "BUILD FAILED"; snapshot; exit 1; }
build/wisp devices | tee "$out/devices.txt"

step "make test-gpu"
timeout 150 make BUILD=build test-gpu 2>&1 | tee "$out/test_gpu.log" | tail -25

step "bench_gpu.py"
timeout 180 python3 scripts/bench_gpu.py --lib build/libwisp.so --out scripts/results/bench_gpu.json > "$out/bench_gpu.log" 2>&1
tail -40 "$out/bench_gpu.log"

step "bench_cpu.lua (with the scipy peer)"
if [ "$quick" = --quick ]; then cpu_args="--quick"; else cpu_args="--threads 1,2,16 --sizes 10,1k,200k,1M"; fi
timeout 120 build/wisp run scripts/bench_cpu.lua --label h200-host $cpu_args > "$out/bench_cpu.log" 2>&1
tail -25 "$out/bench_cpu.log"

step demo
timeout 45 make BUILD=build demo 2>&1 | tail -12 | tee "$out/demo.log"
snapshot
echo "=== done ($(date +%T))"
