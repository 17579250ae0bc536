#!/bin/bash
# bench_nginx.sh — load benchmark of the nginx service (wrk on loopback, 2 workers): 1-row and 100-row requests, modes,
# the in-process peer, optionally 1M requests.
#
#   scripts/bench/bench_nginx.sh [--label NAME] [--device cpu|gpu] [--duration S] [--quick] [--million] [--workers N]
#                          [--modes inline,async,thread,auto,batching] [--rounds N] [--serve-opts "..."]
#                          [--raw-bodies] [--pin] [--wrk-threads N] [--wrk-batch] [--no-at80] [--plan]
#                          [--peer-seconds S]
#   -> build/results/bench_nginx-<label>.json (scripts/results/ with --record or WISP_RECORD=1)
#
# On the GPU machine (16 cores), each about 3 minutes (all five mode groups, 3 rounds of 5 s: ~5-6):
# source .devdeps/env.sh && scripts/bench/bench_nginx.sh --device cpu --pin --modes inline --rounds 3 --label
# h200-cpu-pin
# source .devdeps/env.sh && scripts/bench/bench_nginx.sh --device gpu --workers 1 --modes inline,thread,auto --rounds 2
# --label h200-gpu
# (the GPU run unpinned: mode thread's pool threads would share the one pinned worker's core;
# add --pin to measure it on one core, against a peer on that core.)
#
# --pin: a fair, clean comparison where the machine has at least workers + 2 cores (nproc):
# nginx's W workers are pinned one a core to cores 0..W-1 (worker_cpu_affinity, through
# serve.sh --cpu-affinity), wrk runs under taskset on the other cores, and the in-process
# peer runs as W processes at once, each pinned to one of the workers' cores. The headline
# is then nginx's rows/s over the W peers' rows/s (both wall clock, on the same W cores, in
# the same round), next to the per-CPU-second ratio. The W-process peer brackets each round's
# inline_100row run: it runs immediately before it and immediately after it (--peer-seconds
# each, default --duration / 2, so the two cost what one run of --duration did), and each
# round's ratio is nginx's rows/s over the mean of the two; the headline is the median of the
# rounds' ratios (with their min, max and list). Where the two brackets of a round differ by
# more than 15% (max/min), the summary warns "peer unstable: ..." and the JSON records it:
# a ratio is then only as good as the peer's steadiness. The 1-process peer still runs once a
# round (its figures are kept) but does not decide the headline. The workers' Cpus_allowed_list is read
# back from /proc and recorded. On fewer cores --pin says so and runs unpinned (as without
# it): wrk shares the cores with the workers, and the per-CPU-second ratio is the fairer
# figure. --plan prints the pinning plan (cores, the worker_cpu_affinity line, the taskset
# lines) and exits. --wrk-threads: wrk's threads (default 2; with pinning min(4, free cores)).
# --wrk-batch: run wrk as SCHED_BATCH (chrt -b 0): where wrk shares the cores with the
# workers, its wakeups otherwise preempt a worker in the middle of a request (seen on the
# 2-core machine: 0.5-0.8 involuntary context switches of a worker per 100-row request,
# /proc/PID/status), which a client on another machine never does; recorded in the JSON.
# The workers' involuntary context switches per request are recorded for every run.
# --at80-modes LIST: the modes whose 100-row (and 1-row, where that mode's peak was measured)
# requests also run the wrk think-time and open-loop points at ~80% of their own peak (default:
# inline; with --device gpu: inline,auto, the mode a GPU service runs; a mode must be in --modes).
# --no-at80: skip the runs at ~80% of peak (paced, open and closed loop, the ideal queue, and
# the 1-row peer): for quick A/B rounds. --quick: --duration 2 and one round (unless --rounds
# is given). --peer-seconds S: the W-process peer's seconds at each bracket (default
# --duration / 2; the peer runs its parse+score loop S seconds, then scores alone S seconds).
#
# Model and rows: build/demo (make demo) when present, else examples/demo.lua --rows 2000 in a
# temporary folder: 13 numeric + 26 categorical columns of 2^18 buckets (6.8M fp32 weights),
# Zipf ids, 39 features a row. Request bodies: the first row, and the first 100 rows, of its
# libsvm file (text/x-libsvm), and the same 100 rows as JSON {"ids", "vals"} rows.
#
# Measured, in this order, each a wrk run of --duration seconds (2 threads, 16 connections):
#   inline mode (the default), batching off (the default): 1-row, 100-row
#   libsvm (bracketed by the W-process peer: run just before and just after it), 100-row JSON
#   at peak, the 1-process peer; the same 1-row and 100-row requests at ~80% of their peak
# rate (below); 1-row requests with batching on (16 and 64 connections); mode=thread (ngx.run_worker_thread): 1-row and
# 100-row; mode=async
#   (submit + ngx.sleep(0) + wait): 1-row and 100-row; mode=auto (thread above 16 KB): 100-row;
#   the in-process peer in the same run: scripts/bench/bench_nginx_peer.lua parses and scores the
#   same 100-row body in a loop (one process, one thread, --duration s; and W processes at
#   once, since nginx runs W workers, --peer-seconds s before and after inline_100row; with
#   --pin each on one of the workers' cores), on the same device.
# p99/p50 at ~80% of peak (inline, 100-row and 1-row): wrk2 (constant rate) is not packaged,
# so many connections each wait a think time before each request (wrk's delay(), whole
# milliseconds; the latency wrk records starts when the request is written, so it holds no
# think time), two ways: "paced" (every connection waits the mean think time, dithered
# between the two whole milliseconds around it: a near-constant offered rate, as wrk2 -R)
# and "poisson" (exponentially distributed think times: bursty arrivals, queueing included).
# The mean think time is set from the median peak and corrected from the achieved rate
# (short calibration runs, up to 3, until within 0.76-0.84 of peak); the measured run's
# achieved fraction of peak, p50/p90/p99/p99.9 (wrk's latency histogram) are recorded.
# Those pauses are whole milliseconds, so the requests leave in bursts at each tick; the
# same two points are also measured open loop by scripts/load/loadgen.c (compiled here with cc):
# requests on a schedule at 0.8 x the median peak, constant rate or Poisson, each timed from
# its scheduled time (queueing for a connection included), microsecond timing (_open_const,
# _open_poisson; with --pin on wrk's cores, 2 threads; each records the workers' run delay, the time
# they waited for a CPU (/proc/PID/schedstat), and how often their event loop lagged over 5 and
# 20 ms (wisp_event_loop_lag_seconds): a stall that is not the worker's own shows in the first).
# Beside each open-loop run, the floor:
# scripts/load/queue_model.lua's ideal FIFO queue (W servers, the same arrivals at the run's
# achieved fraction of the peak; det and exp service, random and shared dispatch; and the
# 1-connection latency quantiles as an empirical service shape) -> "at80_ideal_queue".
# And closed loop, as a wrk user sets load (by connections, no think time): a short sweep of
# 1, 2, 3, 4, 6, 8 connections picks the count nearest 0.8 x peak, measured for --duration:
# connections, achieved fraction, p50/p90/p99/p99.9 -> "at80_closed_100", "at80_closed_1".
# (On a 2-core machine where wrk shares the cores, 1 connection can exceed the 16-connection
# peak: the sweep then stops at 1 and records a fraction above 1.)
# --million: at least 1,000,000 1-row requests (inline), counting non-2xx responses and
# socket errors. --modes: which of the mode groups above run (default all; inline and the
# peer always run). --serve-opts: extra examples/openresty/serve.sh options (e.g.
# "--cpu-affinity auto"). Each run also records the workers' CPU time per request.
# --raw-bodies: instead, a model with feature columns (13 numeric I1..I13 + 26 hash buckets
# C1..C26 of 2^18, 6.8M fp32 weights, 39 features a row, like the demo's) and 100 raw rows,
# sent four ways in inline mode, interleaved round by round: {"instances": [...]} of raw
# inputs (application/json; raw_100row_json_cjson: the same with one more key, for which the service
# (lua/wisp/nginx/v1/decode.lua) also decodes the whole body with cjson to check that it is JSON; the C
# parser still reads the instances, lua/wisp/nginx/v1/instances.lua), the same rows as JSON lines
# (application/x-ndjson), and the transformed rows as libsvm lines (text/x-libsvm); nothing
# else is measured.
# On the GPU machine: `source .devdeps/env.sh` first (nginx, wrk and lua-resty-core from
# /opt/devdeps); --device gpu. Timings on the shared 2-core development machine are noisy,
# and wrk runs on the same two cores as nginx's two workers.
[ -z "$BASH_VERSION" ] && exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/../.." || exit 1
root=$(pwd)
label=dev-2core; device=cpu; duration=5; quick=0; million=0; workers=2; modes=inline,async,thread,auto,batching
rounds=3; serve_opts=""; raw_bodies=0; pin=0; plan=0; wrk_threads=""; wrk_batch=0; at80=1; peer_secs=""; rounds_given=0
at80_modes=""
while [ $# -gt 0 ]; do
    case "$1" in
        --label) label=$2; shift 2;; --device) device=$2; shift 2;; --duration) duration=$2; shift 2;;
        --quick) quick=1; duration=2; shift;; --million) million=1; shift;; --workers) workers=$2; shift 2;;
        --modes) modes=$2; shift 2;; --rounds) rounds=$2; rounds_given=1; shift 2;; --serve-opts) serve_opts=$2; shift \
            2;;
        --raw-bodies) raw_bodies=1; shift;; --pin) pin=1; shift;; --plan) plan=1; shift;;
        --wrk-threads) wrk_threads=$2; shift 2;; --wrk-batch) wrk_batch=1; shift;; --no-at80) at80=0; shift;;
        --peer-seconds) peer_secs=$2; shift 2;; --at80-modes) at80_modes=$2; shift 2;;
        --record) RECORD=1; shift;;
        -h|--help) sed -n '2,/^\[ -z "\$BASH_VERSION"/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0;;
        *) echo "bench_nginx.sh: unknown option '$1' (try --help)" >&2; exit 2;;
    esac
done
if [ -z "$at80_modes" ]; then case "$device" in gpu*) at80_modes=inline,auto;; *) at80_modes=inline;; esac; fi
for m in $(echo "$at80_modes" | tr ',' ' '); do
    case "$m" in inline|thread|async|auto) ;; *) echo \
        "bench_nginx.sh: --at80-modes: inline, thread, async or auto expected, got '$m'" >&2; exit 2;; esac
done
build=${WISP_BUILD:-build}
case "$build" in /*) ;; *) build="$root/$build";; esac
W="$build/wisp"

# ---- the pinning plan (--pin) ----------------------------------------------------------
# CPUs this process may use (a container's cpuset need not start at 0), expanded
cpu_list() { awk -F, '{ for (i = 1; i <= NF; i++) { n = split($i, r, "-"); a = r[1]; b = (n > 1) ? r[2] : r[1];
                        for (c = a; c <= b; c++) printf "%s%d", (k++ ? " " : ""), c } } END { print "" }'; }
allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status 2>/dev/null | cpu_list)
[ -n "${WISP_BENCH_CPUS:-}" ] && allowed=$(echo "$WISP_BENCH_CPUS" | cpu_list)    # --plan on another machine's CPU list
[ -z "$allowed" ] && allowed=$(seq 0 $(( $(nproc) - 1 )) | tr '\n' ' ')
siblings() { cat "/sys/devices/system/cpu/cpu$1/topology/thread_siblings_list" 2>/dev/null | cpu_list; }
pin_min_free=${WISP_BENCH_PIN_MIN_FREE:-2}    # cores left to wrk (tests on a small machine may lower it)
pinned=0; pin_why=""; worker_cores=""; wrk_cores=""; affinity=""
if [ "$pin" = 1 ]; then
    if ! command -v taskset >/dev/null 2>&1; then pin_why="taskset not found"
    else
        # the workers' cores: the first allowed CPUs, no two on one physical core (SMT siblings);
        # wrk's: the rest, less the workers' siblings
        used=" "
        for c in $allowed; do
            [ "$(echo "$worker_cores" | wc -w)" -ge "$workers" ] && break
            case "$used" in *" $c "*) continue;; esac
            worker_cores="$worker_cores $c"; used="$used$c $(siblings "$c") "
        done
        for c in $allowed; do case "$used" in *" $c "*) ;; *) wrk_cores="$wrk_cores $c";; esac; done
        worker_cores=$(echo $worker_cores); wrk_cores=$(echo $wrk_cores)
        nfree=$(echo "$wrk_cores" | wc -w)
        if [ "$(echo "$worker_cores" | wc -w)" -lt "$workers" ] || [ "$nfree" -lt "$pin_min_free" ]; then
            pin_why="$(nproc) cores ($allowed): $workers workers + $pin_min_free cores for wrk, one physical core each, do not fit"
        else
            pinned=1
            # worker_cpu_affinity: one binary mask a worker (rightmost digit = CPU 0)
            for c in $worker_cores; do
                m=1; for _ in $(seq 1 "$c"); do m="${m}0"; done
                affinity="$affinity $m"
            done
            affinity=$(echo $affinity)
        fi
    fi
    [ "$pinned" = 0 ] \
        && echo \
        "bench_nginx.sh: --pin: not pinning ($pin_why); wrk shares the cores with the workers, as without --pin" >&2
fi
[ -z "$wrk_threads" ] && { wrk_threads=2; [ "$pinned" = 1 ] && { wrk_threads=$(echo "$wrk_cores" \
    | wc -w); [ "$wrk_threads" -gt 4 ] && wrk_threads=4; }; }
csv() { echo "$1" | tr ' ' ','; }
if [ "$pinned" = 1 ]; then
    WRK="taskset -c $(csv "$wrk_cores") wrk"
    if [ "$device" = gpu ]; then echo \
        "bench_nginx.sh: --pin on a GPU: the workers' CUDA helper threads share their cores" >&2; fi
else
    WRK=wrk
fi
if [ "$wrk_batch" = 1 ]; then
    if command -v chrt >/dev/null 2>&1; then WRK="chrt -b 0 $WRK"
    else echo "bench_nginx.sh: --wrk-batch: chrt not found; wrk runs SCHED_OTHER" >&2; wrk_batch=0; fi
fi
peer_core() {   # peer_core K (1-based): the taskset prefix of the K-th peer process, or nothing
    [ "$pinned" = 1 ] || return 0
    echo "taskset -c $(echo "$worker_cores" | cut -d' ' -f"$1")"
}
if [ "$plan" = 1 ] || [ "$pin" = 1 ]; then
    echo "bench_nginx.sh: plan: nproc $(nproc), allowed CPUs: $allowed; workers $workers; pinned: $([ "$pinned" = 1 ] \
        && echo yes || echo "no${pin_why:+ ($pin_why)}")" >&2
    if [ "$pinned" = 1 ]; then
        echo "  nginx: worker_cpu_affinity $affinity;   (serve.sh --cpu-affinity '$affinity': workers on CPUs $(csv \
            "$worker_cores"))" >&2
        echo "  wrk:   $WRK -t$wrk_threads ...   (CPUs $(csv "$wrk_cores"))" >&2
        for k in $(seq 1 "$workers"); do echo "  peer $k: $(peer_core \
            "$k") build/wisp run scripts/bench/bench_nginx_peer.lua ...   (with the other $((workers - \
            1)) at once, before and after each round's inline_100row)" >&2; done
    else
        echo "  nginx: no worker_cpu_affinity; wrk: wrk -t$wrk_threads ... ; peers: unpinned" >&2
    fi
    [ "$plan" = 1 ] && exit 0
fi

bench=bench_nginx
. scripts/bench/bench_nginx_lib.sh
bench_setup

# ---- bodies ----------------------------------------------------------------------------
head -n 1 "$data" > "$tmp/one.libsvm"
head -n 100 "$data" > "$tmp/hundred.libsvm"
cat > "$tmp/tojson.lua" <<'EOF'
local rows = {}
for line in io.lines(arg[1]) do
    local ids, vals = {}, {}
    for id, v in line:gmatch("(%d+):(%S+)") do ids[#ids + 1] = id; vals[#vals + 1] = v end
    rows[#rows + 1] = '{"ids":[' .. table.concat(ids, ",") .. '],"vals":[' .. table.concat(vals, ",") .. ']}'
end
io.write('{"instances":[', table.concat(rows, ","), ']}\n')
EOF
"$W" run "$tmp/tojson.lua" "$tmp/hundred.libsvm" > "$tmp/hundred.json"
if [ "$raw_bodies" = 1 ]; then
    # a model with feature columns and 100 raw rows: hundred_raw.json ({"instances"}),
    # hundred.ndjson (JSON lines) and hundred.libsvm (the same rows transformed)
    "$W" run scripts/bench/bench_nginx_rawmodel.lua "$tmp" || exit 1
    chmod 644 "$model"
fi

url="$base/v1/models/m:predict"

start() {   # start MODE BATCHING: render, start or reload nginx, wait until it serves that mode
    examples/openresty/serve.sh --render-only --prefix "$prefix" --port "$port" --models "m=$model" --workers \
        "$workers" \
        --device "$device" --mode "$1" --batching "$2" --max-rows 10000 --build "$build" \
        ${affinity:+--cpu-affinity "$affinity"} $serve_opts >/dev/null || exit 1
    if [ -f "$prefix/logs/nginx.pid" ] && kill -0 "$(cat "$prefix/logs/nginx.pid")" 2>/dev/null; then
        "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload
    else
        "$nginx_bin" -p "$prefix" -c conf/nginx.conf || exit 1
    fi
    for _ in $(seq 1 100); do
        curl -s "$base/v1/models/m" 2>/dev/null | grep -q "\"mode\":\"$1\"" \
            && curl -s -o /dev/null -w '%{http_code}' "$base/readyz" | grep -q 200 && break
        sleep 0.1
    done
    sleep 1     # old workers drain after a reload
    # warm-up: every worker (and, in mode=thread, every pool Lua VM, made on demand, each
    # mapping the model itself) is ready before the measured runs
    $WRK -t"$wrk_threads" -c64 -d1s -s spec/nginx/wrk_post.lua "$url" -- "$tmp/one.libsvm" text/x-libsvm >/dev/null 2>&1
    # the CPUs each worker may run on, as the kernel says (pinning checked, not assumed)
    local m p seen=""
    m=$(cat "$prefix/logs/nginx.pid" 2>/dev/null)
    for p in $(pgrep -P "$m" 2>/dev/null); do
        tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "worker process" || continue
        seen="$seen $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)"
    done
    workers_seen=$(echo $seen)
    if [ "$pinned" = 1 ] && [ "$(echo "$workers_seen" | tr ' ' '\n' | sort -n | tr '\n' ' ' \
        | sed 's/ $//')" != "$(echo "$worker_cores" | tr ' ' '\n' | sort -n | tr '\n' ' ' | sed 's/ $//')" ]; then
        echo "bench_nginx.sh: warning: workers' Cpus_allowed_list '$workers_seen', expected one of '$worker_cores' each" >&2
        pin_mismatch=1
    fi
}
workers_seen=""; pin_mismatch=0

val() { echo "$1" | sed -E "s/.*\"$2\": ([0-9.]+).*/\1/"; }
stall_marks() {   # the workers' run delay so far (ms waiting for a CPU, /proc/PID/schedstat) and the event-loop
                  # lag ticks so far (/metrics, wisp_event_loop_lag_seconds): all, over 5 ms, over 20 ms
    local m p rd=0
    m=$(cat "$prefix/logs/nginx.pid" 2>/dev/null) || { echo "0 0 0 0"; return; }
    for p in $(pgrep -P "$m"); do rd=$((rd + $(awk '{ print $2 }' "/proc/$p/schedstat" 2>/dev/null || echo 0))); done
    curl -s "$base/metrics" | awk -v rd="$rd" '
        /^wisp_event_loop_lag_seconds_count/ { n = $2 }
        /^wisp_event_loop_lag_seconds_bucket\{le="0.005"\}/ { b5 = $2 }
        /^wisp_event_loop_lag_seconds_bucket\{le="0.02"\}/ { b20 = $2 }
        END { printf "%.3f %d %d %d", rd / 1e6, n, n - b5, n - b20 }'
}
peer() {    # peer ROUND BODY ROWS: the in-process peer, one process, --duration seconds
    local line
    line=$($(peer_core 1) "$W" run scripts/bench/bench_nginx_peer.lua "$model" "$2" "$pdev" "$duration" \
        | sed -n 's/^PEER //p')
    echo "{\"name\": \"peer_${3}row_1proc\", \"round\": $1, \"cpu\": \"$(peer_core 1 \
        | sed 's/.* //')\", ${line#\{}" >> "$runs"
    printf '%-34s %s\n' "peer_${3}row_1proc#$1" "$line" >&2
}
peer_wproc() {   # peer_wproc ROUND BODY ROWS BRACKET(before|after): W peer processes at once, --peer-seconds
    # as nginx runs W workers (with --pin each on one worker's core); run immediately before
    # and immediately after the round's inline_100row (the report takes the mean of the two)
    local k pids="" line
    for k in $(seq 1 "$workers"); do
        $(peer_core "$k") "$W" run scripts/bench/bench_nginx_peer.lua "$model" "$2" "$pdev" "$peer_secs" > \
            "$tmp/peer_$k.txt" &
        pids="$pids $!"
    done
    wait $pids
    for k in $(seq 1 "$workers"); do
        line=$(sed -n 's/^PEER //p' "$tmp/peer_$k.txt")
        [ -z "$line" ] && line='{"error": "the peer printed nothing"}'
        echo "{\"name\": \"peer_${3}row_wproc\", \"round\": $1, \"bracket\": \"$4\", \"seconds\": $peer_secs, \"proc\": $k, \"procs\": $workers, \"cpu\": \"$(peer_core "$k" | sed 's/.* //')\", ${line#\{}" >> "$runs"
    done
    printf '%-34s %s\n' "peer_${3}row_${workers}proc#$1 $4" "$(grep \
        "\"peer_${3}row_wproc\", \"round\": $1, \"bracket\": \"$4\"," "$runs" \
        | sed -E 's/.*"parse_score_rows_per_s": ([0-9.]+).*/\1/; t; s/.*/error/' | tr '\n' ' ')rows/s" >&2
    if [ "$4" = after ]; then   # the bracket at a glance (the report warns where it is unsteady)
        grep "\"peer_${3}row_wproc\", \"round\": $1, \"bracket\": " "$runs" | awk -v r="$1" -v w="$workers" '
            /"bracket": "before"/ && match($0, /"parse_score_rows_per_s": [0-9.]+/) { b += substr($0, RSTART + 25, RLENGTH - 25) }
            /"bracket": "after"/ && match($0, /"parse_score_rows_per_s": [0-9.]+/) { a += substr($0, RSTART + 25, RLENGTH - 25) }
            END { if (a > 0 && b > 0) { hi = a > b ? a : b; lo = a > b ? b : a
                  printf "%-34s before %.0f, after %.0f rows/s (after/before %.3f%s)\n", "peer_" w "proc#" r " bracket", b, a, a / b,
                         (hi / lo - 1 > 0.15 ? "; differ by more than 15%" : "") } }' >&2
    fi
}
# wrk script for the "paced" arrivals: spec/nginx/wrk_post.lua with a near-constant think
# time (the mean, dithered between the whole milliseconds around it) instead of exponential
cat > "$tmp/wrk_paced.lua" <<EOF
dofile("$root/spec/nginx/wrk_post.lua")
local init0, think = init, 0
function init(args) init0(args); think = tonumber(args[4] or 0) end
local floor, random = math.floor, math.random
function delay()
    if think <= 0 then return 0 end
    local b = floor(think)
    return b + (random() < think - b and 1 or 0)
end
EOF
paced() {   # paced NAME PEAK_RPS BODY CTYPE ROWS ARRIVALS(poisson|paced): ~80% of peak with think times
    local name=$1 peak=$2 body=$3 ct=$4 rows=$5 arr=$6
    local target c think line got k frac script=spec/nginx/wrk_post.lua cal
    [ "$arr" = paced ] && script="$tmp/wrk_paced.lua"
    target=$(awk -v p="$peak" 'BEGIN { printf "%.1f", 0.8 * p }')
    # enough connections that each waits >= ~4 ms between requests (ms resolution), at most 400
    c=$(awk -v t="$target" 'BEGIN { c = int(t * 0.004 + 0.999); if (c < 4) c = 4; if (c > 400) c = 400; print c }')
    think=$(awk -v t="$target" -v c="$c" 'BEGIN { printf "%.3f", c / t * 1000 }')
    cal=$duration; [ "$cal" -gt 3 ] && cal=3
    # short calibration runs (at most 3) until the achieved rate is 0.76-0.84 of the peak
    for k in 1 2 3; do
        line=$(wrkrun "${name}_calibrate" "$k" "$c" "$cal" "$body" "$ct" "$rows" "$think" 0 "$script")
        got=$(val "$line" rps)
        frac=$(awk -v g="$got" -v p="$peak" 'BEGIN { printf "%.3f", g / p }')
        # the think time that gives the target: c / rate = think + latency, latency from this run
        think=$(awk -v th="$think" -v c="$c" -v t="$target" -v g="$got" \
            'BEGIN { if (g <= 0) g = t / 2; x = th + (c / t - c / g) * 1000; if (x < 0.5) x = 0.5; printf "%.3f", x }')
        awk -v f="$frac" 'BEGIN { exit !(f >= 0.76 && f <= 0.84) }' && break
    done
    wrkrun "$name" 1 "$c" "$duration" "$body" "$ct" "$rows" "$think" 0 "$script" >/dev/null
    echo "{\"name\": \"${name}_target\", \"round\": 1, \"peak_rps\": $peak, \"target_rps\": $target, \"arrivals\": \"$arr\", \"calibration_runs\": $k}" >> "$runs"
}

# Open-loop arrivals (scripts/load/loadgen.c, built here): requests on a schedule at 80% of the
# peak, constant rate (as wrk2 -R) or Poisson, each timed from its scheduled time (no
# coordinated omission, no millisecond ticks). wrk's delay() above paces in whole
# milliseconds, so its "80%" arrives in bursts at each tick.
LG=""
build_loadgen() {
    [ -n "$LG" ] && return 0
    cc -O2 -pthread -o "$tmp/loadgen" scripts/load/loadgen.c -lm 2> "$tmp/loadgen.err" && LG="$tmp/loadgen"
}
open_at80() {   # open_at80 NAME PEAK_RPS BODY CTYPE ROWS ARRIVALS(const|poisson)
    local name=$1 peak=$2 body=$3 ct=$4 rows=$5 arr=$6 target c line cpu0 cs0 cpu1 cs1 lgt=1 pre="" s0 s1
    build_loadgen \
        || { echo "bench_nginx.sh: scripts/load/loadgen.c does not build: $(head -c 300 "$tmp/loadgen.err")" >&2; \
        return 0; }
    target=$(awk -v p="$peak" 'BEGIN { printf "%.1f", 0.8 * p }')
    # connections for ~5 ms of answers in flight (a request waiting for one counts the wait)
    c=$(awk -v t="$target" 'BEGIN { c = int(t * 0.005 + 0.999); if (c < 16) c = 16; if (c > 512) c = 512; print c }')
    if [ "$pinned" = 1 ]; then
        lgt=$(echo "$wrk_cores" | wc -w); [ "$lgt" -gt 2 ] && lgt=2
        pre="taskset -c $(csv "$wrk_cores")"
    fi
    s0=$(stall_marks)
    read -r cpu0 cs0 <<< "$(workers_cpu)"
    line=$($pre "$LG" --port "$port" --path /v1/models/m:predict --body "$body" --ctype "$ct" --rate "$target" \
           --duration "$duration" --warmup 1 --connections "$c" --threads "$lgt" --arrivals "$arr")
    read -r cpu1 cs1 <<< "$(workers_cpu)"
    s1=$(stall_marks)
    [ -z "$line" ] \
        && line='{"error": "loadgen printed nothing", "achieved_rps": 0, "measured": 0, "p50_us": 0, "p99_us": 0}'
    line=$(echo "$line" | awk -v n="$name" -v r="$rows" -v cw="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')" \
                              -v s0="$s0" -v s1="$s1" '{
        match($0, /"achieved_rps":[0-9.]+/); rps = substr($0, RSTART + 15, RLENGTH - 15);
        match($0, /"sent":[0-9]+/); nreq = substr($0, RSTART + 7, RLENGTH - 7);
        split(s0, a, " "); split(s1, b, " ");
        sub(/^\{/, sprintf("{\"name\": \"%s\", \"round\": 1, \"rows_per_request\": %d, \"rps\": %.1f, \"rows_per_s\": %.1f, \"worker_cpu_us_per_request\": %.1f, \"worker_run_delay_ms\": %.3f, \"loop_lag_ticks\": %d, \"loop_lag_over_5ms\": %d, \"loop_lag_over_20ms\": %d, ",
                           n, r, rps, rps * r, nreq > 0 ? cw * 1e6 / nreq : 0, b[1] - a[1], b[2] - a[2], b[3] - a[3], b[4] - a[4])); print }')
    echo "$line" >> "$runs"
    echo "{\"name\": \"${name}_target\", \"round\": 1, \"peak_rps\": $peak, \"target_rps\": $target, \"arrivals\": \"open_$arr\", \"calibration_runs\": 0}" >> "$runs"
    printf '%-34s %s\n' "$name" "$(echo "$line" \
        | sed -E \
        's/.*"rps": ([0-9.]+).*"worker_run_delay_ms": ([0-9.-]+), "loop_lag_ticks": ([0-9-]+), "loop_lag_over_5ms": ([0-9-]+), "loop_lag_over_20ms": ([0-9-]+).*"p50_us":([0-9.]+),"p90_us":[0-9.]+,"p99_us":([0-9.]+).*/req\/s \1  p50 \6 us  p99 \7 us  workers waited for a CPU \2 ms; event-loop lag over 5 ms in \4 and over 20 ms in \5 of \3 ticks/')" >&2
    ideal_queue "$name" "$arr" "$peak" "$rows" "$line"
}

# The floor for p99/p50 (scripts/load/queue_model.lua): an ideal FIFO queue with the W workers as
# servers, fed the same arrivals (const or Poisson) at the run's achieved fraction of the peak,
# 1M simulated requests: service deterministic and exponential, requests dispatched at random
# to a worker (as connections belong to workers) or from one shared queue; and "empirical":
# the service times shaped as wrk's latency quantiles at 1 connection (closed_at80's sweep),
# scaled to the worker's time per request at the peak (S = W / peak rps), the rest of the
# 1-connection mean latency added to every request as a fixed delay (loopback, client), in us.
qmodel() {  # qmodel ARGS...: queue_model.lua's JSON line, or {}
    local out
    out=$("$W" run scripts/load/queue_model.lua --servers "$workers" --n 1000000 --seed 1 --json "$@" 2>/dev/null)
    case "$out" in "{"*) echo "$out";; *) echo "{}";; esac
}
qpick() { echo "$1" \
    | sed -E \
    's/.*"p50": ([0-9.e+-]+).*"p99": ([0-9.e+-]+).*"p99_over_p50": ([0-9.e+-]+).*/{"p50": \1, "p99": \2, "p99_over_p50": \3}/; t; s/.*/null/'; }
ideal_queue() {   # ideal_queue NAME ARRIVALS(const|poisson) PEAK_RPS ROWS LOADGEN_LINE -> a line of $tmp/ideal.jsonl
    local name=$1 arr=$2 peak=$3 rows=$4 line=$5 rho p50 p99 s q="$tmp/quant_${4}row.txt" emp="null" mq d k out
    rho=$(echo "$line" | sed -nE 's/.*"achieved_rps":([0-9.]+).*/\1/p')
    rho=$(awk -v a="${rho:-0}" -v p="$peak" \
        'BEGIN { r = p > 0 ? a / p : 0; if (r <= 0.01) r = 0.8; if (r > 0.99) r = 0.99; printf "%.4f", r }')
    p50=$(echo "$line" | sed -nE 's/.*"p50_us":([0-9.]+).*/\1/p'); p99=$(echo "$line" \
        | sed -nE 's/.*"p99_us":([0-9.]+).*/\1/p')
    s=$(awk -v w="$workers" -v p="$peak" 'BEGIN { printf "%.3f", (p > 0 ? w / p * 1e6 : 0) }')
    out="{\"name\": \"$name\", \"servers\": $workers, \"rho\": $rho, \"arrivals\": \"$arr\", \"measured\": {\"p50_us\": ${p50:-null}, \"p99_us\": ${p99:-null}, \"p99_over_p50\": $(awk -v a="${p50:-0}" -v b="${p99:-0}" 'BEGIN { if (a > 0) printf "%.3f", b / a; else printf "null" }')}"
    for k in det_random det_shared exp_random exp_shared; do
        out="$out, \"$k\": $(qpick "$(qmodel --rho "$rho" --arrivals "$arr" --service "${k%_*}" --dispatch "${k#*_}")")"
    done
    if [ -s "$q" ]; then
        mq=$(awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n }' "$q")
        d=$(awk -v m="$mq" -v s="$s" 'BEGIN { d = m - s; if (d < 0) d = 0; printf "%.3f", d }')
        emp="{\"service_us_mean\": $s, \"delay_us\": $d, \"latency_1conn_mean_us\": ${mq:-null}"
        for k in random shared; do
            emp="$emp, \"$k\": $(qpick "$(qmodel --rho "$rho" --arrivals "$arr" --service "$q" --mean "$s" --delay \
                "$d" --dispatch "$k")")"
        done
        emp="$emp}"
    fi
    echo "$out, \"empirical_us\": $emp}" >> "$tmp/ideal.jsonl"
}

# Closed loop at ~80% of the peak, the way a wrk user sets load: wrk has no rate option, so
# the load is the number of connections, each sending its next request when its answer is in
# (no think time). A short sweep (1, 2, 3, 4, 6, 8 connections, min(--duration, 3) s each,
# stopping at the first at or above 0.8 x peak) picks the count whose rate is nearest 0.8 x
# peak, which is then measured for --duration. wrk's threads: min(its threads, connections).
# The 1-connection run also writes 1000 evenly spaced quantiles of its latency
# ($tmp/quant_ROWSrow.txt: the latency at no load, for the ideal queue's empirical service).
cat > "$tmp/wrk_quant.lua" <<EOF
dofile("$root/spec/nginx/wrk_post.lua")
local done0 = done
function done(summary, latency, requests)
    done0(summary, latency, requests)
    local f = io.open("$tmp/quant.txt", "w")
    if f then
        for i = 1, 1000 do f:write(latency:percentile((i - 0.5) / 10), "\n") end
        f:close()
    end
end
EOF
closed_at80() {   # closed_at80 NAME PEAK_RPS BODY CTYPE ROWS -> $tmp/closed_ROWS.json
    local name=$1 peak=$2 body=$3 ct=$4 rows=$5 c line got frac sd sweep="" best=1 bestd=9 wt0=$wrk_threads f
    local wrk_threads=$wrk_threads   # wrkrun reads it: no more threads than connections
    sd=$duration; [ "$sd" -gt 3 ] && sd=3
    rm -f "$tmp/quant.txt"
    for c in 1 2 3 4 6 8; do
        wrk_threads=$wt0; [ "$c" -lt "$wt0" ] && wrk_threads=$c
        line=$(wrkrun "${name}_sweep" "$c" "$c" "$sd" "$body" "$ct" "$rows" 0 0 "$tmp/wrk_quant.lua")
        [ "$c" = 1 ] && [ -s "$tmp/quant.txt" ] && mv "$tmp/quant.txt" "$tmp/quant_${rows}row.txt"
        got=$(val "$line" rps)
        frac=$(awk -v g="$got" -v p="$peak" 'BEGIN { printf "%.3f", (p > 0 ? g / p : 0) }')
        sweep="$sweep${sweep:+, }{\"connections\": $c, \"rps\": $got, \"fraction_of_peak\": $frac, \"p50_us\": $(val \
            "$line" p50_us), \"p99_us\": $(val "$line" p99_us)}"
        f=$(awk -v f="$frac" -v b="$bestd" 'BEGIN { d = f - 0.8; if (d < 0) d = -d; if (d < b) printf "%.3f", d }')
        [ -n "$f" ] && { best=$c; bestd=$f; }
        awk -v f="$frac" 'BEGIN { exit !(f >= 0.8) }' && break     # more connections only add load
    done
    wrk_threads=$wt0; [ "$best" -lt "$wt0" ] && wrk_threads=$best
    line=$(wrkrun "$name" 1 "$best" "$duration" "$body" "$ct" "$rows")
    awk -v n="$name" -v c="$best" -v p="$peak" -v g="$(val "$line" rps)" -v p50="$(val "$line" p50_us)" -v p90="$(val \
        "$line" p90_us)" \
        -v p99="$(val "$line" p99_us)" -v p999="$(val "$line" p999_us)" -v sd="$sd" -v d="$duration" -v t="$wrk_threads" -v sw="[$sweep]" 'BEGIN {
        printf "{\"name\": \"%s\", \"arrivals\": \"closed loop: wrk, %d connections, no think time\", \"connections\": %d, \"wrk_threads\": %d, \"seconds\": %s, ", n, c, c, t, d
        printf "\"peak_rps\": %s, \"rps\": %s, \"fraction_of_peak\": %.3f, \"p50_us\": %s, \"p90_us\": %s, \"p99_us\": %s, \"p999_us\": %s, ", p, g, (p > 0 ? g / p : 0), p50, p90, p99, p999
        printf "\"p99_over_p50\": %.3f, \"target\": \"p99/p50 <= 3\", \"sweep_seconds\": %s, \"sweep\": %s}\n", (p50 > 0 ? p99 / p50 : 0), sd, sw }' > "$tmp/closed_${rows}.json"
}

pdev=$device; [ "$pdev" = gpu ] && pdev=gpu:0
other=on
[ "$quick" = 1 ] && [ "$rounds_given" = 0 ] && rounds=1     # --quick: one round, unless --rounds says otherwise
# the W-process peer's seconds, each bracket (its parse+score loop, then as long scoring alone):
# by default half of --duration, so that the two brackets of a round take what one W-process
# run of --duration took before they were bracketed
[ -z "$peer_secs" ] && peer_secs=$(awk -v d="$duration" 'BEGIN { printf "%g", d / 2 }')
want() { case ",$modes," in *",$1,"*) return 0;; esac; return 1; }
t_start=$(date +%s)
uptime0=$(uptime | sed 's/^ *//')
# the modes, interleaved round by round with the peer, so that the machine's load (shared,
# noisy) falls on all of them alike; the report takes medians and maxima over rounds
for r in $(seq 1 "$rounds"); do
    if [ "$raw_bodies" = 1 ]; then
        [ "$r" = 1 ] && start inline off
        wrkrun raw_100row_json "$r" 16 "$duration" "$tmp/hundred_raw.json" application/json 100 >/dev/null
        wrkrun raw_100row_json_cjson "$r" 16 "$duration" "$tmp/hundred_raw_cjson.json" application/json 100 >/dev/null
        wrkrun raw_100row_ndjson "$r" 16 "$duration" "$tmp/hundred.ndjson" application/x-ndjson 100 >/dev/null
        wrkrun raw_100row_libsvm "$r" 16 "$duration" "$tmp/hundred.libsvm" text/x-libsvm 100 >/dev/null
        continue
    fi
    start inline off
    wrkrun inline_1row "$r" 16 "$duration" "$tmp/one.libsvm" text/x-libsvm 1 >/dev/null
    # the headline's pair, side by side: the W-process peer immediately before and after
    peer_wproc "$r" "$tmp/hundred.libsvm" 100 before
    wrkrun inline_100row "$r" 16 "$duration" "$tmp/hundred.libsvm" text/x-libsvm 100 >/dev/null
    peer_wproc "$r" "$tmp/hundred.libsvm" 100 after
    wrkrun inline_100row_json "$r" 16 "$duration" "$tmp/hundred.json" application/json 100 >/dev/null
    peer "$r" "$tmp/hundred.libsvm" 100
    if want async; then
        start async off
        wrkrun async_1row "$r" 16 "$duration" "$tmp/one.libsvm" text/x-libsvm 1 >/dev/null
        wrkrun async_100row "$r" 16 "$duration" "$tmp/hundred.libsvm" text/x-libsvm 100 >/dev/null
    fi
    if want thread; then
        start thread off
        wrkrun thread_1row "$r" 16 "$duration" "$tmp/one.libsvm" text/x-libsvm 1 >/dev/null
        wrkrun thread_100row "$r" 16 "$duration" "$tmp/hundred.libsvm" text/x-libsvm 100 >/dev/null
    fi
    if want auto; then
        start auto off         # inline below 16 KB bodies, a worker thread above (the 100-row body is ~39 KB)
        wrkrun auto_100row "$r" 16 "$duration" "$tmp/hundred.libsvm" text/x-libsvm 100 >/dev/null
    fi
    if want batching; then
        start inline "$other"
        wrkrun "inline_1row_batching_$other" "$r" 16 "$duration" "$tmp/one.libsvm" text/x-libsvm 1 >/dev/null
        wrkrun "inline_1row_batching_${other}_64conn" "$r" 64 "$duration" "$tmp/one.libsvm" text/x-libsvm 1 >/dev/null
    fi
done
med() { grep "\"name\": \"$1\"" "$runs" | sed -E 's/.*"rps": ([0-9.]+).*/\1/' | sort -n \
    | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
if [ "$raw_bodies" = 0 ] && [ "$at80" = 1 ]; then
    peer 1 "$tmp/one.libsvm" 1
    # p99/p50 at ~80% of the peak (the median peak of the rounds above), inline mode
    start inline off
    paced inline_100row_at80 "$(med inline_100row)" "$tmp/hundred.libsvm" text/x-libsvm 100 poisson
    paced inline_100row_at80_paced "$(med inline_100row)" "$tmp/hundred.libsvm" text/x-libsvm 100 paced
    paced inline_1row_at80 "$(med inline_1row)" "$tmp/one.libsvm" text/x-libsvm 1 poisson
    paced inline_1row_at80_paced "$(med inline_1row)" "$tmp/one.libsvm" text/x-libsvm 1 paced
    closed_at80 inline_100row_at80_closed "$(med inline_100row)" "$tmp/hundred.libsvm" text/x-libsvm 100
    closed_at80 inline_1row_at80_closed "$(med inline_1row)" "$tmp/one.libsvm" text/x-libsvm 1
    open_at80 inline_100row_at80_open_const "$(med inline_100row)" "$tmp/hundred.libsvm" text/x-libsvm 100 const
    open_at80 inline_100row_at80_open_poisson "$(med inline_100row)" "$tmp/hundred.libsvm" text/x-libsvm 100 poisson
    open_at80 inline_1row_at80_open_const "$(med inline_1row)" "$tmp/one.libsvm" text/x-libsvm 1 const
    open_at80 inline_1row_at80_open_poisson "$(med inline_1row)" "$tmp/one.libsvm" text/x-libsvm 1 poisson
    # the same think-time and open-loop points in the other --at80-modes, at 80% of each mode's own peak
    for m in $(echo "$at80_modes" | tr ',' ' '); do
        [ "$m" = inline ] && continue
        if ! want "$m" || [ -z "$(med "${m}_100row")" ]; then
            echo "bench_nginx.sh: --at80-modes $m: no ${m}_100row peak measured (add $m to --modes); skipped" >&2; \
                continue
        fi
        start "$m" off
        paced "${m}_100row_at80" "$(med "${m}_100row")" "$tmp/hundred.libsvm" text/x-libsvm 100 poisson
        paced "${m}_100row_at80_paced" "$(med "${m}_100row")" "$tmp/hundred.libsvm" text/x-libsvm 100 paced
        open_at80 "${m}_100row_at80_open_const" "$(med "${m}_100row")" "$tmp/hundred.libsvm" text/x-libsvm 100 const
        if [ -n "$(med "${m}_1row")" ]; then
            paced "${m}_1row_at80" "$(med "${m}_1row")" "$tmp/one.libsvm" text/x-libsvm 1 poisson
            paced "${m}_1row_at80_paced" "$(med "${m}_1row")" "$tmp/one.libsvm" text/x-libsvm 1 paced
        fi
    done
    if want thread; then
        # the same open-loop points with scoring off the event loop (ngx.run_worker_thread),
        # at 80% of thread mode's own peak
        start thread off
        open_at80 thread_100row_at80_open_poisson "$(med thread_100row)" "$tmp/hundred.libsvm" text/x-libsvm 100 poisson
        open_at80 thread_1row_at80_open_poisson "$(med thread_1row)" "$tmp/one.libsvm" text/x-libsvm 1 poisson
    fi
fi
if [ "$million" = 1 ]; then
    # wrk stops by time only (a thread that stops itself still leaves wrk sleeping for -d):
    # run long enough for 1,000,000 requests at 80% of the median peak, then check the count
    # (the metrics count every answer too); a short run is repeated for the rest
    peak1=$(med inline_1row)
    left=1000000; k=1
    while [ "$left" -gt 0 ] && [ "$k" -le 3 ]; do
        secs=$(awk -v n="$left" -v p="$peak1" 'BEGIN { s = int(n / (0.8 * p)) + 2; if (s > 550) s = 550; print s }')
        line=$(wrkrun million_1row "$k" 16 "$secs" "$tmp/one.libsvm" text/x-libsvm 1)
        left=$((left - $(val "$line" requests)))
        k=$((k + 1))
    done
fi
curl -s "$base/metrics" > "$tmp/metrics.txt"
grep -E '^wisp_(device_info|requests_total|errors_total)' "$tmp/metrics.txt" | head -n 20 >&2
grep -E '^wisp_batch_rows_(sum|count)' "$tmp/metrics.txt" >&2

. scripts/lib/record.sh
commit=$(record_commit)
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
nginx_v=$("$nginx_bin" -v 2>&1 | sed 's/.*: //')
out="$(record_dir)/bench_nginx-$label.json"   # build/results/ unless --record or WISP_RECORD=1
"$W" run scripts/bench/bench_nginx_report.lua "$runs" "$([ "$pinned" = 1 ] && [ "$pin_mismatch" = 0 ] && echo pinned \
    || echo unpinned)" > "$tmp/figures.json" || exit 1
cat > "$tmp/doc.json" <<EOF
{
  "benchmark": "bench_nginx",
  "peers": "in results.figures: the in-process peer (scripts/bench/bench_nginx_peer.lua) measured in the same run, before and after each round",
  "label": "$label",
  "machine": {"cpu": "$cpu", "cores": $(nproc), "gpu": "${gpu:-none}", "host": "$(hostname)"},
  "commit": "$commit",
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "command": "scripts/bench/bench_nginx.sh --label $label --device $device --workers $workers --duration $duration --rounds $rounds --modes $modes$([ "$pin" = 1 ] && echo ' --pin')$([ "$at80" = 0 ] && echo ' --no-at80')$([ "$wrk_batch" = 1 ] && echo ' --wrk-batch')$([ "$raw_bodies" = 1 ] && echo ' --raw-bodies')$([ -n "$serve_opts" ] && echo " --serve-opts '$serve_opts'")$([ "$quick" = 1 ] && echo ' --quick') --peer-seconds $peer_secs --at80-modes $at80_modes$([ "$million" = 1 ] && echo ' --million')",
  "pin": {"requested": $([ "$pin" = 1 ] && echo true || echo false), "in_force": $([ "$pinned" = 1 ] && [ "$pin_mismatch" = 0 ] && echo true || echo false), "nproc": $(nproc), "allowed_cpus": "$(csv "$allowed")",
          "worker_cores": "$(csv "$worker_cores")", "worker_cpu_affinity": "$affinity", "workers_cpus_allowed_seen": "$workers_seen",
          "wrk_cores": "$(csv "$wrk_cores")", "peer_cores": "$(csv "$worker_cores")", "wrk_threads": $wrk_threads, "why_not": "$pin_why",
          "wrk_sched": "$([ "$wrk_batch" = 1 ] && echo 'SCHED_BATCH (chrt -b 0)' || echo 'SCHED_OTHER')"},
  "setup": {"nginx": "$nginx_v", "workers": $workers, "serve_opts": "$serve_opts", "uptime_at_start": "$uptime0", "device": "$device", "rounds": $rounds,
            "model": "$([ "$raw_bodies" = 1 ] && echo 'feature columns: 13 numeric I1..I13 (default 0, 10% missing) + 26 hash_bucket C1..C26 of 2^18 (Zipf strings), fp32 (6.8M weights), 39 features a row' || echo 'demo: 13 numeric + 26 x 2^18 hashed buckets, fp32 (6.8M weights), 39 features a row, Zipf ids')",
            "load": "wrk -t$wrk_threads -c16 (and -c64) on loopback, on the same machine$([ "$pinned" = 1 ] && echo ", pinned to CPUs $(csv "$wrk_cores") (the workers: $(csv "$worker_cores"))" || echo ", unpinned: it shares the cores with the workers"); bodies: $([ "$raw_bodies" = 1 ] && echo '100 raw rows as {instances} JSON (application/json; json_cjson: plus a key, decoded by cjson), as JSON lines (application/x-ndjson), and transformed as libsvm lines (text/x-libsvm), inline mode, interleaved round by round' || echo '1 and 100 libsvm rows (text/x-libsvm), 100 JSON {ids, vals} rows')",
            "peer": "scripts/bench/bench_nginx_peer.lua: the same 100-row body parsed (batch:parse_libsvm) and scored in a loop, one process with one thread (--duration s, after inline_100row_json), and $workers processes at once (peer_100row_wproc, $peer_secs s each: immediately before and immediately after each round's inline_100row, bracket before/after)$([ "$pinned" = 1 ] && echo ", each pinned to one of the workers' CPUs ($(csv "$worker_cores"))"); same device",
            "peer_seconds": $peer_secs,
            "at80": "p99/p50 at ~80% of the median peak, inline: many connections, each waiting a think time before each request (wrk delay(), whole ms; wrk's latency starts at the write, without the think time): _at80 = exponential think times (poisson: bursty), _at80_paced = the mean think time dithered between whole ms (near-constant rate, as wrk2 -R); calibrated by up to 3 short runs to 0.76-0.84 of peak; the measured run's achieved fraction is recorded. _at80_open_const / _at80_open_poisson: scripts/load/loadgen.c, open loop at 0.8 x peak, requests sent on a schedule (every 1/rate s, or Poisson), each timed from its scheduled time (a wait for a free connection counts), microsecond timing, 1 s warm-up not counted",
            "note": "$([ "$pinned" = 1 ] && echo "pinned run: the workers and the peers on the same $workers CPUs, wrk on others; headline = median over rounds of nginx rows/s over the mean of the $workers peers' rows/s run immediately before and after it, wall clock" || echo "unpinned: on a machine shared with other work timings are noisy and wrk shares the cores with nginx's workers; quote the per-CPU-second ratios of runs measured side by side (headline: nginx rows per worker CPU-second over the $workers peers' rows per CPU-second, mean of the brackets before and after, median of rounds)")"},
  "seconds_total": $(( $(date +%s) - t_start )),
  "at80_closed_100": $(cat "$tmp/closed_100.json" 2>/dev/null || echo null),
  "at80_closed_1": $(cat "$tmp/closed_1.json" 2>/dev/null || echo null),
  "at80_ideal_queue": $(if [ -s "$tmp/ideal.jsonl" ]; then echo "{\"what\": \"scripts/load/queue_model.lua beside each open-loop run: an ideal FIFO queue, $workers servers, the run's arrivals at its achieved fraction of the peak (rho), 1M requests, seed 1; det_/exp_: p50 and p99 in units of the mean service time; empirical_us: in us\", \"runs\": ["; paste -sd, "$tmp/ideal.jsonl"; echo "]}"; else echo null; fi),
  "figures": $(cat "$tmp/figures.json")
}
EOF
record_envelope "$W" "$tmp/doc.json" "$out" 2>/dev/null || { echo "bench_nginx.sh: cannot write $out" >&2; exit 1; }
for rows in 100 1; do
    [ -s "$tmp/closed_${rows}.json" ] && awk -v r="$rows" '{
        match($0, /"connections": [0-9]+/); c = substr($0, RSTART + 15, RLENGTH - 15)
        match($0, /"fraction_of_peak": [0-9.]+/); f = substr($0, RSTART + 20, RLENGTH - 20)
        match($0, /"p50_us": [0-9]+/); a = substr($0, RSTART + 10, RLENGTH - 10)
        match($0, /"p99_us": [0-9]+/); b = substr($0, RSTART + 10, RLENGTH - 10)
        printf "%-26s %s of peak, %s conn, p50 %s us, p99 %s us, p99/p50 %.2f (target <= 3)\n", "inline_" r "row_at80_closed", f, c, a, b, (a > 0 ? b / a : 0) }' "$tmp/closed_${rows}.json" >&2
done
# each open-loop ratio beside the ideal queue's (det/exp service, random/shared dispatch, empirical)
[ -s "$tmp/ideal.jsonl" ] && awk '{
    match($0, /"name": "[^"]+"/); n = substr($0, RSTART + 9, RLENGTH - 10)
    match($0, /"rho": [0-9.]+/); rho = substr($0, RSTART + 7, RLENGTH - 7)
    match($0, /"measured": \{[^}]*\}/); m = substr($0, RSTART, RLENGTH); sub(/.*"p99_over_p50": /, "", m); sub(/\}/, "", m)
    line = sprintf("%-32s rho %.2f: p99/p50 measured %.2f; ideal queue:", n, rho, m)
    split("det_random det_shared exp_random exp_shared", ks, " ")
    for (i = 1; i <= 4; i++)
        if (match($0, "\"" ks[i] "\": \\{[^}]*\\}")) { x = substr($0, RSTART, RLENGTH); sub(/.*"p99_over_p50": /, "", x); sub(/\}/, "", x); line = line sprintf(" %s %.2f", ks[i], x) }
    if (match($0, /"empirical_us": \{.*"random": \{[^}]*\}/)) { x = substr($0, RSTART, RLENGTH); sub(/.*"p99_over_p50": /, "", x); sub(/\}/, "", x); line = line sprintf(" empirical_random %.2f", x) }
    print line }' "$tmp/ideal.jsonl" >&2
echo "bench_nginx.sh: wrote $out" >&2
cat "$out"
