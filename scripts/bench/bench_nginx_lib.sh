# bench_nginx_lib.sh — what the service's benchmarks share (bench_nginx.sh, bench_nginx_v2.sh), sourced by bash
# from the checkout's root with $W (the CLI), $build and $bench (the script's name, for messages) set:
#   bench_setup            wrk, curl and nginx found ($nginx_bin), a scratch folder $tmp (nginx's prefix $prefix,
#                          QUIT on exit), the demo model ($model: build/demo/model.wisp when `make demo` made it,
#                          else examples/demo.lua --rows 2000 in $tmp) and its rows ($data), a free port ($base),
#                          the runs' file $runs
#   workers_cpu            CPU seconds used so far by nginx's workers (utime + stime), and their involuntary
#                          context switches
#   wrkrun NAME ROUND CONNS SECONDS BODY CTYPE ROWS [THINK_MS] [MAX_PER_THREAD] [WRK_SCRIPT] [HEADER_LENGTH]
#                          one wrk run against $url ($WRK -t$wrk_threads, spec/nginx/wrk_post.lua by default;
#                          HEADER_LENGTH: v2's Inference-Header-Content-Length), measured as nginx's worker CPU per
#                          request: the run's JSON line printed and appended to $runs
bench_setup() {
    for t in wrk curl "$W"; do command -v "$t" >/dev/null 2>&1 || { echo "$bench: $t not found" >&2; exit 1; }; done
    nginx_bin=$(command -v nginx 2>/dev/null || ls /usr/sbin/nginx /opt/devdeps/usr/sbin/nginx 2>/dev/null | head -n 1)
    [ -z "$nginx_bin" ] && { echo "$bench: nginx not found" >&2; exit 1; }
    tmp=$(mktemp -d "/tmp/wisp-$bench.XXXXXX")
    chmod 755 "$tmp"
    prefix="$tmp/prefix"
    trap bench_cleanup EXIT
    trap 'exit 1' INT TERM
    data=$(ls "$build"/demo/data*.libsvm 2>/dev/null | head -n 1)
    if [ -f "$build/demo/model.wisp" ] && [ -n "$data" ]; then
        model="$build/demo/model.wisp"
    else
        echo "$bench: making a demo model and 2000 rows in $tmp/demo" >&2
        "$W" run examples/demo.lua --out "$tmp/demo" --rows 2000 >/dev/null || exit 1
        model="$tmp/demo/model.wisp"; data=$(ls "$tmp"/demo/data*.libsvm | head -n 1)
    fi
    cp "$model" "$tmp/model.wisp"; model="$tmp/model.wisp"; chmod 644 "$model"
    . spec/nginx/free_port.sh
    port=$(free_port)
    base="http://127.0.0.1:$port"
    runs="$tmp/runs.jsonl"; : > "$runs"
}
bench_cleanup() {
    if [ -f "$prefix/logs/nginx.pid" ]; then
        pid=$(cat "$prefix/logs/nginx.pid"); kill -QUIT "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$tmp"
}

clk=$(getconf CLK_TCK 2>/dev/null || echo 100)
workers_cpu() {
    local m t=0 p cs=0
    m=$(cat "$prefix/logs/nginx.pid" 2>/dev/null) || { echo "0 0"; return; }
    for p in $(pgrep -P "$m"); do
        t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
        cs=$((cs + $(awk '/^nonvoluntary_ctxt_switches/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)))
    done
    awk -v t="$t" -v k="$clk" -v cs="$cs" 'BEGIN { printf "%.2f %d", t / k, cs }'
}

wrkrun() {
    local name=$1 round=$2 c=$3 d=$4 body=$5 ct=$6 rows=$7 think=${8:-0} maxn=${9:-0}
    local script=${10:-spec/nginx/wrk_post.lua} hlen=${11:-0}
    local line cpu0 cpu1 wcpu cs0 cs1
    read -r cpu0 cs0 <<< "$(workers_cpu)"
    ( TIMEFORMAT='WRKCPU %U %S'
      time $WRK -t"$wrk_threads" -c"$c" -d"${d}s" --timeout 10s -s "$script" "$url" -- "$body" "$ct" "$rows" "$think" \
          "$maxn" "$hlen" ) > "$tmp/wrk.out" 2>&1
    read -r cpu1 cs1 <<< "$(workers_cpu)"
    line=$(grep '^WRK ' "$tmp/wrk.out" | sed 's/^WRK //')
    wcpu=$(awk '/^WRKCPU/ { print $2 + $3 }' "$tmp/wrk.out")
    [ -z "$line" ] && line='{"error": "wrk printed nothing", "rps": 0, "requests": 0}'
    # CPU seconds of nginx's workers (all their threads: /proc/PID/stat utime + stime) and of wrk
    # during the run: rows per worker-CPU-second compares with the peer's rows per CPU-second
    # whatever share of the machine the run got
    line=$(echo "$line" | awk -v r="$rows" -v n="$name" -v k="$round" -v c="$c" -v t="$think" \
        -v cw="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')" -v cwrk="${wcpu:-0}" -v ncs="$((cs1 - cs0))" '{
        match($0, /"rps": [0-9.]+/); rps = substr($0, RSTART + 7, RLENGTH - 7);
        match($0, /"requests": [0-9]+/); nreq = substr($0, RSTART + 12, RLENGTH - 12);
        extra = sprintf("\"worker_cpu_s\": %.2f, \"wrk_cpu_s\": %.2f, \"worker_cpu_us_per_request\": %.1f, " \
                        "\"rows_per_worker_cpu_s\": %.1f, \"worker_preemptions_per_request\": %.3f, ",
                        cw, cwrk, nreq > 0 ? cw * 1e6 / nreq : 0, cw > 0 ? nreq * r / cw : 0,
                        nreq > 0 ? ncs / nreq : 0);
        sub(/^\{/, sprintf("{\"name\": \"%s\", \"round\": %d, \"connections\": %d, \"think_ms\": %s, " \
                           "\"rows_per_request\": %d, \"rows_per_s\": %.1f, %s", n, k, c, t, r, rps * r,
                           extra)); print }')
    echo "$line" >> "$runs"
    local f='s/.*"rows_per_s": ([0-9.]+).*"rps": ([0-9.]+).*"p50_us": ([0-9]+).*"p99_us": ([0-9]+).*/'
    printf '%-34s %s\n' "$name#$round" "$(echo "$line" | sed -E "${f}rows\/s \1  req\/s \2  p50 \3 us  p99 \4 us/")" >&2
    echo "$line"
}
