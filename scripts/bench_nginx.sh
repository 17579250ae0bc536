#!/bin/sh
# bench_nginx.sh — load benchmark of the nginx service (wrk on loopback, 2 workers): 1-row and 100-row requests, modes, the in-process peer, optionally 1M requests.
#
#   scripts/bench_nginx.sh [--label NAME] [--device cpu|gpu] [--duration S] [--quick] [--million] [--workers N]
#                          [--modes inline,async,thread,auto,batching] [--rounds N] [--serve-opts "..."]
#                          [--raw-bodies]
#   -> scripts/results/bench_nginx-<label>.json
#
# Model and rows: build/demo (make demo) when present, else examples/demo.lua --rows 2000 in a
# temporary folder: 13 numeric + 26 categorical columns of 2^18 buckets (6.8M fp32 weights),
# Zipf ids, 39 features a row. Request bodies: the first row, and the first 100 rows, of its
# libsvm file (text/x-libsvm), and the same 100 rows as JSON {"ids", "vals"} rows.
#
# Measured, in this order, each a wrk run of --duration seconds (2 threads, 16 connections):
#   inline mode (the default), batching off (the default): 1-row, 100-row
#   libsvm, 100-row JSON at peak; the same 1-row and 100-row requests at ~80% of their peak
#   rate (below); 1-row requests with batching on (16 and 64 connections); mode=thread (ngx.run_worker_thread): 1-row and 100-row; mode=async
#   (submit + ngx.sleep(0) + wait): 1-row and 100-row; mode=auto (thread above 16 KB): 100-row;
#   the in-process peer in the same run: scripts/bench_nginx_peer.lua parses and scores the
#   same 100-row body in a loop (one process, one thread; and two processes at once, since
#   nginx runs two workers), on the same device.
# p99/p50 at ~80% of peak: wrk2 (constant rate) is not packaged, so many connections each
# wait an exponentially distributed think time before each request (wrk's delay(), whole
# milliseconds); the mean think time is set from the peak rate and corrected once from the
# rate the first paced run achieved; the achieved fraction of peak is recorded.
# --million: at least 1,000,000 1-row requests (inline), counting non-2xx responses and
# socket errors. --modes: which of the mode groups above run (default all; inline and the
# peer always run). --serve-opts: extra examples/openresty/serve.sh options (e.g.
# "--cpu-affinity auto"). Each run also records the workers' CPU time per request.
# --raw-bodies: instead, a model with feature columns (13 numeric I1..I13 + 26 hash buckets
# C1..C26 of 2^18, 6.8M fp32 weights, 39 features a row, like the demo's) and 100 raw rows,
# sent four ways in inline mode, interleaved round by round: {"instances": [...]} of raw
# inputs (application/json; raw_100row_json_cjson: the same with one more key, which nginx.lua
# decodes with cjson: its path before the C fast path), the same rows as JSON lines
# (application/x-ndjson), and the transformed rows as libsvm lines (text/x-libsvm); nothing
# else is measured.
# On the GPU machine: `source .devdeps/env.sh` first (nginx, wrk and lua-resty-core from
# /opt/devdeps); --device gpu. Timings on the shared 2-core development machine are noisy,
# and wrk runs on the same two cores as nginx's two workers.
[ -z "$BASH_VERSION" ] && exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
label=dev-2core; device=cpu; duration=5; quick=0; million=0; workers=2; modes=inline,async,thread,auto,batching
rounds=3; serve_opts=""; raw_bodies=0
while [ $# -gt 0 ]; do
    case "$1" in
        --label) label=$2; shift 2;; --device) device=$2; shift 2;; --duration) duration=$2; shift 2;;
        --quick) quick=1; duration=2; shift;; --million) million=1; shift;; --workers) workers=$2; shift 2;;
        --modes) modes=$2; shift 2;; --rounds) rounds=$2; shift 2;; --serve-opts) serve_opts=$2; shift 2;;
        --raw-bodies) raw_bodies=1; shift;;
        -h|--help) sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'; exit 0;;
        *) echo "bench_nginx.sh: unknown option '$1' (try --help)" >&2; exit 2;;
    esac
done
build=${WISP_BUILD:-build}
case "$build" in /*) ;; *) build="$root/$build";; esac
W="$build/wisp"
for t in wrk curl "$W"; do command -v "$t" >/dev/null 2>&1 || { echo "bench_nginx.sh: $t not found" >&2; exit 1; }; done
nginx_bin=$(command -v nginx 2>/dev/null || ls /usr/sbin/nginx /opt/devdeps/usr/sbin/nginx 2>/dev/null | head -n 1)
[ -z "$nginx_bin" ] && { echo "bench_nginx.sh: nginx not found" >&2; exit 1; }

tmp=$(mktemp -d /tmp/wisp-bench-nginx.XXXXXX)
chmod 755 "$tmp"
prefix="$tmp/prefix"
cleanup() {
    if [ -f "$prefix/logs/nginx.pid" ]; then
        pid=$(cat "$prefix/logs/nginx.pid"); kill -QUIT "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- model and bodies ----------------------------------------------------------------
data=$(ls "$build"/demo/data_*.libsvm 2>/dev/null | head -n 1)
if [ -f "$build/demo/model.wisp" ] && [ -n "$data" ]; then
    model="$build/demo/model.wisp"
else
    echo "bench_nginx.sh: making a demo model and 2000 rows in $tmp/demo" >&2
    "$W" run examples/demo.lua --out "$tmp/demo" --rows 2000 >/dev/null || exit 1
    model="$tmp/demo/model.wisp"; data=$(ls "$tmp"/demo/data_*.libsvm | head -n 1)
fi
cp "$model" "$tmp/model.wisp"; model="$tmp/model.wisp"; chmod 644 "$model"
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
    "$W" run scripts/bench_nginx_rawmodel.lua "$tmp" || exit 1
    chmod 644 "$model"
fi

port=""
for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then port=$p; break; fi
done
base="http://127.0.0.1:$port"
url="$base/v1/models/m:predict"

start() {   # start MODE BATCHING: render, start or reload nginx, wait until it serves that mode
    examples/openresty/serve.sh --render-only --prefix "$prefix" --port "$port" --models "m=$model" --workers "$workers" \
        --device "$device" --mode "$1" --batching "$2" --max-rows 10000 --build "$build" $serve_opts >/dev/null || exit 1
    if [ -f "$prefix/logs/nginx.pid" ] && kill -0 "$(cat "$prefix/logs/nginx.pid")" 2>/dev/null; then
        "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload
    else
        "$nginx_bin" -p "$prefix" -c conf/nginx.conf || exit 1
    fi
    for _ in $(seq 1 100); do
        curl -s "$base/v1/models/m" 2>/dev/null | grep -q "\"mode\":\"$1\"" && curl -s -o /dev/null -w '%{http_code}' "$base/readyz" | grep -q 200 && break
        sleep 0.1
    done
    sleep 1     # old workers drain after a reload
    # warm-up: every worker (and, in mode=thread, every pool Lua VM, made on demand, each
    # mapping the model itself) is ready before the measured runs
    wrk -t2 -c64 -d1s -s spec/nginx/wrk_post.lua "$url" -- "$tmp/one.libsvm" text/x-libsvm >/dev/null 2>&1
}

runs="$tmp/runs.jsonl"; : > "$runs"
val() { echo "$1" | sed -E "s/.*\"$2\": ([0-9.]+).*/\1/"; }
clk=$(getconf CLK_TCK 2>/dev/null || echo 100)
workers_cpu() {   # CPU seconds used so far by nginx's worker processes
    local m t=0 p
    m=$(cat "$prefix/logs/nginx.pid" 2>/dev/null) || { echo 0; return; }
    for p in $(pgrep -P "$m"); do
        t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    awk -v t="$t" -v k="$clk" 'BEGIN { printf "%.2f", t / k }'
}
wrkrun() {  # wrkrun NAME ROUND CONNS SECONDS BODY CTYPE ROWS [THINK_MS] [MAX_PER_THREAD] -> prints the run's JSON
    local name=$1 round=$2 c=$3 d=$4 body=$5 ct=$6 rows=$7 think=${8:-0} maxn=${9:-0}
    local line cpu0 cpu1 wcpu
    cpu0=$(workers_cpu)
    ( TIMEFORMAT='WRKCPU %U %S'; time wrk -t2 -c"$c" -d"${d}s" --timeout 10s -s spec/nginx/wrk_post.lua "$url" -- "$body" "$ct" "$rows" "$think" "$maxn" ) > "$tmp/wrk.out" 2>&1
    cpu1=$(workers_cpu)
    line=$(grep '^WRK ' "$tmp/wrk.out" | sed 's/^WRK //')
    wcpu=$(awk '/^WRKCPU/ { print $2 + $3 }' "$tmp/wrk.out")
    [ -z "$line" ] && line='{"error": "wrk printed nothing", "rps": 0, "requests": 0}'
    # CPU seconds of nginx's workers (all their threads: /proc/PID/stat utime + stime) and of wrk
    # during the run: rows per worker-CPU-second compares with the peer's rows per CPU-second
    # whatever share of the machine the run got
    line=$(echo "$line" | awk -v r="$rows" -v n="$name" -v k="$round" -v c="$c" -v t="$think" -v cw="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')" -v cwrk="${wcpu:-0}" '{
        match($0, /"rps": [0-9.]+/); rps = substr($0, RSTART + 7, RLENGTH - 7);
        match($0, /"requests": [0-9]+/); nreq = substr($0, RSTART + 12, RLENGTH - 12);
        extra = sprintf("\"worker_cpu_s\": %.2f, \"wrk_cpu_s\": %.2f, \"worker_cpu_us_per_request\": %.1f, \"rows_per_worker_cpu_s\": %.1f, ",
                        cw, cwrk, nreq > 0 ? cw * 1e6 / nreq : 0, cw > 0 ? nreq * r / cw : 0);
        sub(/^\{/, sprintf("{\"name\": \"%s\", \"round\": %d, \"connections\": %d, \"think_ms\": %s, \"rows_per_request\": %d, \"rows_per_s\": %.1f, %s", n, k, c, t, r, rps * r, extra)); print }')
    echo "$line" >> "$runs"
    printf '%-34s %s\n' "$name#$round" "$(echo "$line" | sed -E 's/.*"rows_per_s": ([0-9.]+).*"rps": ([0-9.]+).*"p50_us": ([0-9]+).*"p99_us": ([0-9]+).*/rows\/s \1  req\/s \2  p50 \3 us  p99 \4 us/')" >&2
    echo "$line"
}
peer() {    # peer ROUND BODY ROWS: the in-process peer, one process (and, for 100 rows, two at once)
    local line a b
    line=$("$W" run scripts/bench_nginx_peer.lua "$model" "$2" "$pdev" "$duration" | sed -n 's/^PEER //p')
    echo "{\"name\": \"peer_${3}row_1proc\", \"round\": $1, ${line#\{}" >> "$runs"
    printf '%-34s %s\n' "peer_${3}row_1proc#$1" "$line" >&2
    if [ "$3" = 100 ]; then
        "$W" run scripts/bench_nginx_peer.lua "$model" "$2" "$pdev" "$duration" > "$tmp/peer_a.txt" &
        "$W" run scripts/bench_nginx_peer.lua "$model" "$2" "$pdev" "$duration" > "$tmp/peer_b.txt"
        wait
        a=$(sed -n 's/^PEER //p' "$tmp/peer_a.txt"); b=$(sed -n 's/^PEER //p' "$tmp/peer_b.txt")
        echo "{\"name\": \"peer_${3}row_2proc_a\", \"round\": $1, ${a#\{}" >> "$runs"
        echo "{\"name\": \"peer_${3}row_2proc_b\", \"round\": $1, ${b#\{}" >> "$runs"
    fi
}
paced() {   # paced NAME PEAK_RPS BODY CTYPE ROWS: ~80% of peak with think times (one correction)
    local name=$1 peak=$2 body=$3 ct=$4 rows=$5
    local target c think line got
    target=$(awk -v p="$peak" 'BEGIN { printf "%.1f", 0.8 * p }')
    c=$(awk -v t="$target" 'BEGIN { c = int(t * 0.004 + 0.999); if (c < 4) c = 4; if (c > 400) c = 400; print c }')
    think=$(awk -v t="$target" -v c="$c" 'BEGIN { printf "%.3f", c / t * 1000 }')
    line=$(wrkrun "${name}_calibrate" 1 "$c" "$duration" "$body" "$ct" "$rows" "$think")
    got=$(val "$line" rps)
    think=$(awk -v th="$think" -v c="$c" -v t="$target" -v g="$got" 'BEGIN { x = th + (c / t - c / g) * 1000; if (x < 0.5) x = 0.5; printf "%.3f", x }')
    wrkrun "$name" 1 "$c" "$duration" "$body" "$ct" "$rows" "$think" >/dev/null
    echo "{\"name\": \"${name}_target\", \"round\": 1, \"peak_rps\": $peak, \"target_rps\": $target}" >> "$runs"
}

pdev=$device; [ "$pdev" = gpu ] && pdev=gpu:0
other=on
[ "$quick" = 1 ] && rounds=1
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
    wrkrun inline_100row "$r" 16 "$duration" "$tmp/hundred.libsvm" text/x-libsvm 100 >/dev/null
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
med() { grep "\"name\": \"$1\"" "$runs" | sed -E 's/.*"rps": ([0-9.]+).*/\1/' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
if [ "$raw_bodies" = 0 ]; then
    peer 1 "$tmp/one.libsvm" 1
    # p99/p50 at ~80% of the peak (the median peak of the rounds above), inline mode
    start inline off
    paced inline_100row_at80 "$(med inline_100row)" "$tmp/hundred.libsvm" text/x-libsvm 100
    paced inline_1row_at80 "$(med inline_1row)" "$tmp/one.libsvm" text/x-libsvm 1
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

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "${WISP_COMMIT:-}" ] && commit=$WISP_COMMIT
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
nginx_v=$("$nginx_bin" -v 2>&1 | sed 's/.*: //')
mkdir -p scripts/results
out="scripts/results/bench_nginx-$label.json"
"$W" run scripts/bench_nginx_report.lua "$runs" > "$tmp/figures.json" || exit 1
cat > "$out" <<EOF
{
  "benchmark": "bench_nginx",
  "label": "$label",
  "machine": {"cpu": "$cpu", "cores": $(nproc), "gpu": "${gpu:-none}", "host": "$(hostname)"},
  "commit": "$commit",
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "command": "scripts/bench_nginx.sh --label $label --device $device --duration $duration --rounds $rounds --modes $modes$([ "$raw_bodies" = 1 ] && echo ' --raw-bodies')$([ -n "$serve_opts" ] && echo " --serve-opts '$serve_opts'")$([ "$quick" = 1 ] && echo ' --quick')$([ "$million" = 1 ] && echo ' --million')",
  "setup": {"nginx": "$nginx_v", "workers": $workers, "serve_opts": "$serve_opts", "uptime_at_start": "$uptime0", "device": "$device", "rounds": $rounds,
            "model": "$([ "$raw_bodies" = 1 ] && echo 'feature columns: 13 numeric I1..I13 (default 0, 10% missing) + 26 hash_bucket C1..C26 of 2^18 (Zipf strings), fp32 (6.8M weights), 39 features a row' || echo 'demo: 13 numeric + 26 x 2^18 hashed buckets, fp32 (6.8M weights), 39 features a row, Zipf ids')",
            "load": "wrk -t2 -c16 (and -c64) on loopback, on the same machine; bodies: $([ "$raw_bodies" = 1 ] && echo '100 raw rows as {instances} JSON (application/json; json_cjson: plus a key, decoded by cjson), as JSON lines (application/x-ndjson), and transformed as libsvm lines (text/x-libsvm), inline mode, interleaved round by round' || echo '1 and 100 libsvm rows (text/x-libsvm), 100 JSON {ids, vals} rows')",
            "peer": "scripts/bench_nginx_peer.lua: the same 100-row body parsed (batch:parse_libsvm) and scored in a loop, one process with one thread, and two processes at once; same device",
            "at80": "p99/p50 at ~80% of the median peak: many connections with exponential think times (wrk delay(), ms resolution), corrected once from the first run's rate",
            "note": "shared 2-core development machine: other engineers were building and testing during the run; wrk shares the two cores with nginx's two workers; quote ratios of runs measured side by side"},
  "seconds_total": $(( $(date +%s) - t_start )),
  "figures": $(cat "$tmp/figures.json")
}
EOF
echo "bench_nginx.sh: wrote $out" >&2
cat "$out"
