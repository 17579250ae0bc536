#!/usr/bin/env bash
# device_run.sh — one call on the GPU machine: build, the GPU test suite, and the benchmarks.
# Run there from the repository root, with .devdeps carried (see ../shared/device/README.md):
#   the build needs more than prepare.sh's default set, and the service's specs nginx:
#   ../shared/device/prepare.sh libxxhash-dev libxxhash0 libedit-dev libedit2 libbsd0 libmd0 nginx nginx-common \
#     libnginx-mod-http-lua libnginx-mod-http-ndk lua-resty-core lua-resty-lrucache libpcre3 wrk liblinear-tools liblinear4 libblas3
#   export WISP_COMMIT=<git rev-parse --short HEAD, computed here> &&
#   source .devdeps/env.sh && scripts/device/device_run.sh [STAGE...]
# Stages (default: all but xf, tfreplay, nvtx, nginx, multigpu, in this order): test bench_gpu bench_cpu seed
#   sanitize batcher xf tfreplay demo nvtx nginx multigpu
#   multigpu: scripts/bench/bench_multigpu.py (issue 8): replicated and sharded tables on 1, 2, 4 GPUs, with the
#       copy floors; label h200-x<GPUs> unless WISP_MG_LABEL is set, extra options in WISP_MG_OPTS (--quick, --sizes ...).
#   xf: the GPU transform's tests and bench with score_raw packing every array
#       (WISP_GPU_XF_DIRECT=0) and copying pinned arrays directly (the default, =1); tfreplay: spec/interop/tf_parity.py --replay
#       build/tfkeep (carry build/tfkeep); nvtx: Nsight Systems over `wisp score --device gpu:0`
#       (the NVTX ranges by name); nginx: scripts/bench/bench_nginx.sh on the GPU and, pinned, the CPU.
# (the device's copy of the tree has no .git, so the results record WISP_COMMIT)
# Logs and JSON results go to build/device_out and scripts/results/, and as one archive to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export WISP_RECORD=${WISP_RECORD:-1}   # a device run is for recording: its benchmarks write scripts/results/ (WISP_RECORD=0: build/results/)
out=build/device_out
mkdir -p "$out" scripts/results
export CPATH=/opt/devdeps/usr/include:/opt/devdeps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
export LUA_PATH="/opt/devdeps/usr/share/luajit2-2.1/?.lua;/opt/devdeps/usr/share/luajit-2.1/?.lua;${LUA_PATH:-;}"
export WISP_SKIP_DEPS=1 PYTHONUNBUFFERED=1
# no JDK and no PyPI there: the Java and Python specs run in CI and on this machine, not on the device
export WISP_JAVA=0 WISP_PYTHON=0
stages=${*:-test bench_gpu bench_cpu seed sanitize batcher demo}
want() { case " $stages " in *" $1 "*) return 0 ;; esac; return 1; }
# the device tool brings back at most 8 files: one archive, refreshed after every step
snapshot() { cp scripts/results/*.json "$out/" 2>/dev/null; [ -n "${OUT:-}" ] && tar czf "$OUT/device_out.tgz" -C build device_out; }
step() { snapshot; echo; echo "=== $* ($(date +%T))"; }

step build
timeout 150 make -j16 BUILD=build all > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo "BUILD FAILED"; snapshot; exit 1; }
build/wisp devices | tee "$out/devices.txt"

if want test; then
    step "make test-gpu"
    timeout 150 make BUILD=build test-gpu 2>&1 | tee "$out/test_gpu.log" | grep -v '^ok ' | tail -25
fi
if want bench_gpu; then
    step "bench_gpu.py"
    timeout 180 python3 scripts/bench/bench_gpu.py --lib build/libwisp.so --out scripts/results/bench_gpu.json > "$out/bench_gpu.log" 2>&1
    tail -32 "$out/bench_gpu.log"
fi
if want bench_cpu; then
    step "bench_cpu.lua (with the scipy peer)"
    timeout 120 build/wisp run scripts/bench/bench_cpu.lua --label h200-host --threads 1,2,16 --sizes 10,1k,200k,1M \
        > "$out/bench_cpu.log" 2>&1
    tail -25 "$out/bench_cpu.log"
fi
if want seed; then
    step "seed_experiment.lua"
    timeout 120 build/wisp run scripts/bench/seed_experiment.lua --label h200 > "$out/seed.log" 2>&1
    tail -45 "$out/seed.log"
fi
if want sanitize; then
    step "compute-sanitizer memcheck + racecheck on the GPU specs (quick mode): test_gpu, test_gpu_stream, test_transform_gpu"
    make BUILD=build build/test/test_gpu build/test/test_gpu_stream build/test/test_transform_gpu > /dev/null 2>&1
    for t in test_gpu test_gpu_stream test_transform_gpu; do
        for tool in memcheck racecheck; do
            WISP_TEST_GPU=1 WISP_TEST_GPU_QUICK=1 WISP_TEST_NO_STICKY=1 timeout 70 \
                compute-sanitizer --tool $tool --error-exitcode 99 build/test/$t > "$out/${t}_$tool.log" 2>&1
            echo "$t $tool: exit $? ; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|$t: [0-9]+ passed" "$out/${t}_$tool.log" | tr '\n' ' ')"
        done
    done
fi
if want batcher; then
    step "bench_batcher.lua on the GPU"
    timeout 90 build/wisp run scripts/bench/bench_batcher.lua --device gpu:0 --label h200 > "$out/batcher.log" 2>&1
    tail -20 "$out/batcher.log"
    step "bench_batcher.lua on the host CPU"
    timeout 90 build/wisp run scripts/bench/bench_batcher.lua --device cpu --label h200-cpu > "$out/batcher_cpu.log" 2>&1
    tail -20 "$out/batcher_cpu.log"
fi
if want xf; then
    for d in 0 1; do
        step "GPU transform, WISP_GPU_XF_DIRECT=$d"
        make BUILD=build build/test/test_transform_gpu > /dev/null 2>&1
        WISP_GPU_XF_DIRECT=$d WISP_TEST_GPU=1 timeout 120 build/test/test_transform_gpu 2>&1 | tail -2
        WISP_GPU_XF_DIRECT=$d timeout 150 python3 scripts/bench/bench_transform_gpu.py --lib build/libwisp.so \
            --label "h200-direct$d" --cpu-repeat 2 > "$out/xf_direct$d.log" 2>&1
        tail -6 "$out/xf_direct$d.log"
    done
fi
if want tfreplay; then
    step "tf_parity.py --replay build/tfkeep (TensorFlow and Keras models, every device, score and score_raw)"
    if [ -d build/tfkeep ]; then WISP_LIB=$PWD/build/libwisp.so timeout 120 python3 spec/interop/tf_parity.py --replay build/tfkeep 2>&1 | tail -8
    else echo "build/tfkeep missing (carry it)"; fi
fi
if want demo; then
    step demo
    timeout 45 make BUILD=build demo 2>&1 | tail -12 | tee "$out/demo.log"
fi
if want nvtx; then
    step "Nsight Systems: NVTX ranges of wisp score --device gpu:0"
    nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
    data=$(ls build/demo/data*.libsvm 2>/dev/null | head -n 1)
    if [ -z "$nsys" ]; then echo "nsys not found"
    elif [ -z "$data" ]; then echo "no demo data (run the demo stage first)"
    else
        timeout 120 "$nsys" profile -t cuda,nvtx -o "$out/wisp_score" --force-overwrite true \
            build/wisp score -m build/demo/model.wisp --device gpu:0 --batch 50000 -o /dev/null "$data" > "$out/nsys.log" 2>&1
        tail -3 "$out/nsys.log"
        for r in nvtx_sum nvtxsum; do
            timeout 60 "$nsys" stats --report $r --format csv "$out/wisp_score.nsys-rep" > "$out/nvtx.csv" 2>&1
            grep -q "wisp" "$out/nvtx.csv" && break
        done
        head -20 "$out/nvtx.csv"
    fi
fi
if want nginx; then
    step "bench_nginx.sh on the GPU (1 worker) and, pinned, on the CPU (2 workers)"
    timeout 240 scripts/bench/bench_nginx.sh --device gpu --workers 1 --label h200-gpu --million ${WISP_NGINX_GPU_OPTS:-} > "$out/nginx_gpu.log" 2>&1
    tail -15 "$out/nginx_gpu.log"
    timeout 240 scripts/bench/bench_nginx.sh --device cpu --label h200-cpu ${WISP_NGINX_CPU_OPTS:---pin} > "$out/nginx_cpu.log" 2>&1
    tail -15 "$out/nginx_cpu.log"
fi
if want multigpu; then
    step "bench_multigpu.py: replicated and sharded tables on 1..N GPUs"
    ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    NCCL_NVLS_ENABLE=0 timeout 420 python3 scripts/bench/bench_multigpu.py --lib build/libwisp.so \
        --label "${WISP_MG_LABEL:-h200-x${ngpus:-0}}" ${WISP_MG_OPTS:-} > "$out/multigpu.log" 2>&1
    echo "exit $?"
    tail -45 "$out/multigpu.log"
fi
snapshot
echo "=== done ($(date +%T))"
