#!/bin/sh
# property.sh — the service's property test: the same row gets the CPU's probability, bit for bit, on every route, in
# every mode, whatever its neighbours.
#
#   sh spec/nginx/property.sh          (make test runs it through spec/run.sh; WISP_NGINX=0 skips it)
# Environment: WISP_BUILD (default build), WISP_SEED (the rows' seed; default 1, printed),
# WISP_PROPERTY_CONFIGS (default "inline:off thread:off async:off auto:off inline:on auto:on":
# serve.sh's --mode and --batching of each nginx started in turn), WISP_NGINX_DEVICE (serve.sh
# --device, default cpu; gpu with WISP_TEST_GPU=1: the answers must still be the CPU's, bit for bit).
# Rows, requests and checks: spec/nginx/property.lua (its opening comment says what is sent).
# One nginx a configuration (2 workers, the same prefix), every request sent by one curl (8 in
# parallel, keepalive), each answer checked against the Lua API's CPU scores of the same rows,
# themselves checked against `wisp score -d cpu`. Models: plain (ids), plain8 (plain
# quantized to int8), cols (feature columns). The last line is "property: N passed, N failed"
# (one check per request and configuration, plus the reference checks).
[ -z "$BASH_VERSION" ] && exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/../.." || exit 1
SUITE=property
. spec/nginx/harness.sh
seed=${WISP_SEED:-1}
configs=${WISP_PROPERTY_CONFIGS:-inline:off thread:off async:off auto:off inline:on auto:on}
replay_cmd="replay: WISP_SEED=$seed WISP_BUILD=$build sh spec/nginx/property.sh"
need curl "$W"
echo "property: seed $seed (WISP_SEED replays), device $device, configurations: $configs"

# ---- rows, requests, references ----------------------------------------------------------
"$W" run spec/nginx/property.lua gen "$d" "$seed" || { bad "property.lua gen"; finish; exit 1; }
"$W" score -m "$d/plain.wisp" -d cpu "$d/plain.libsvm" > "$d/plain.cli" 2> "$d/plain.cli.err"
"$W" score -m "$d/cols.wisp" -d cpu --format jsonl "$d/cols.jsonl" > "$d/cols.cli" 2> "$d/cols.cli.err"
"$W" score -m "$d/plain8.wisp" -d cpu "$d/plain.libsvm" > "$d/plain8.cli" 2> "$d/plain8.cli.err"
if out=$("$W" run spec/nginx/property.lua ref "$d"); then
    ok "the reference: the Lua API's CPU scores print as wisp score -d cpu's lines ($(wc -l < \
        "$d/plain.cli") id rows, $(wc -l < "$d/cols.cli") raw rows)"
else bad "the reference disagrees with wisp score:"; echo "$out" | head -n 10; finish; exit 1; fi
# the columns model's rows as libsvm lines of their transformed features (written by ref): wisp
# score of those lines prints what wisp score --format jsonl printed for the raw rows
"$W" score -m "$d/cols.wisp" -d cpu "$d/cols.libsvm" > "$d/cols_libsvm.cli" 2>/dev/null
if cmp -s "$d/cols_libsvm.cli" "$d/cols.cli"; then
    ok "wisp score: the raw rows (--format jsonl) and their transformed features (libsvm) score the same ($(wc -l < \
        "$d/cols.cli") rows)"
else bad "wisp score: raw rows and their transformed libsvm lines differ: $(diff "$d/cols.cli" "$d/cols_libsvm.cli" \
    | head -n 4 | tr '\n' ' ')"; fi
# the CLI itself on a number longer than the parsers' token limit: refused, or read as the number
z=$(printf '%0520d' 0)
printf '{"y": 1, "x": 1.%se5}\n{"y": 1, "x": 1e5}\n{"y": 1, "x": 1}\n' "$z" > "$d/long.jsonl"
long=$("$W" score -m "$d/cols.wisp" -d cpu --format jsonl "$d/long.jsonl" 2>/dev/null | tr '\n' ' ')
set -- $long
if [ "${1:-}" = nan ] || { [ "${1:-}" = "${2:-}" ] && [ "${1:-}" != "${3:-}" ]; }; then
    ok "wisp score --format jsonl: a 523-character 1e5 is refused or read as 1e5 ($long)"
else bad "wisp score --format jsonl: the 523-character number 1.000...e5 scores as 1 does, not as 1e5 (got '$long' for it, 1e5, 1: the number's text cut at 511 bytes)"; fi

models="plain=$d/plain.wisp,plain8=$d/plain8.wisp,cols=$d/cols.wisp"
start_nginx() {   # start_nginx MODE BATCHING
    started=""
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        [ -z "$port" ] && return 1
        examples/openresty/serve.sh --render-only --prefix "$prefix" --port "$port" --models "$models" \
            --workers 2 --mode "$1" --batching "$2" --max-body 4m --max-rows 1000 --build "$build" --device "$device" \
                >/dev/null || return 1
        rm -f "$prefix/logs/error.log"     # a failed bind (port taken since the probe) logs an [emerg] there
        if "$nginx_bin" -p "$prefix" -c conf/nginx.conf 2>"$tmp/start.err"; then started=1; break; fi
        grep -q "Address already in use" "$tmp/start.err" || break
    done
    [ -n "$started" ] || return 1
    for _ in $(seq 1 100); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] && return 0
        sleep 0.1
    done
    return 1
}

for c in $configs; do
    mode=${c%%:*}; batching=${c#*:}
    name="$mode,batching=$batching"
    if ! start_nginx "$mode" "$batching"; then
        bad "[$name] nginx starts and gets ready: $(cat "$tmp/start.err" 2>/dev/null | head -c 300)"
        [ -f "$prefix/logs/error.log" ] && tail -n 5 "$prefix/logs/error.log"
        stop_nginx; continue
    fi
    o="$tmp/out-$mode-$batching"; mkdir -p "$o"
    sed -e "s|@BASE@|http://127.0.0.1:$port|g" -e "s|@OUT@|$o|g" "$d/curl.cfg" > "$tmp/curl.cfg"
    curl -s --parallel --parallel-max 8 -K "$tmp/curl.cfg" > "$tmp/curl.out" 2>&1
    res=$("$W" run spec/nginx/property.lua check "$d" "$o" "$name")
    echo "$res" | grep -v '^property\['
    line=$(echo "$res" | grep -E '^property\[.*\]: [0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ -z "$line" ]; then bad "[$name] property.lua check did not finish: $(echo "$res" | tail -n 3)"
    else
        pass=$((pass + p)); fail=$((fail + f))
        echo "     [$name] $p requests right, $f wrong"
    fi
    # the workers: none died, no Lua error
    if grep -E 'exited on signal|\[alert\]|\[crit\]|\[emerg\]|lua entry thread aborted|runtime error' \
        "$prefix/logs/error.log" >/dev/null 2>&1; then
        bad "[$name] error.log: $(grep -E 'exited on signal|\[alert\]|\[crit\]|\[emerg\]|aborted|runtime error' \
            "$prefix/logs/error.log" | head -n 3 | cut -c1-300)"
    else ok "[$name] error.log: no dead worker, no alert, no Lua error"; fi
    stop_nginx
    rm -f "$prefix/logs/error.log"
done
finish
[ "$fail" -eq 0 ]
