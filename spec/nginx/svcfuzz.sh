#!/bin/sh
# svcfuzz.sh — the service fuzzer against a real nginx: spec/nginx/svcfuzz.c for a bounded time, then the workers'
# check.
#
#   sh spec/nginx/svcfuzz.sh                 (make test runs it through spec/run.sh; WISP_NGINX=0 skips it)
#   sh spec/nginx/svcfuzz.sh --replay FILE   start the same nginx, send FILE (a saved request), print the answer
# Environment: WISP_BUILD (default build; the harness is $WISP_BUILD/test-tools/svcfuzz, built by
# `make test-tools`), WISP_SVCFUZZ_SECONDS (default 30, shared by the modes), WISP_SEED (default
# 1, printed), WISP_SVCFUZZ_MODES (serve.sh --mode of each nginx in turn, default "inline thread":
# bodies read from nginx's buffers, and copied to the pool's VMs), WISP_SVCFUZZ_CONNS (2).
# Failing requests are kept in $WISP_BUILD/svcfuzz/MODE/ (svcfuzz-PROPERTY-N.req); --replay
# uses the first mode. The executions go to
# $WISP_BUILD/reliability/svcfuzz.json (spec/reliability.sh puts them in reliability.json).
# The last line is "svcfuzz: N passed, N failed" (one per property, plus the workers' check).
[ -z "$BASH_VERSION" ] && exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/../.." || exit 1
SUITE=svcfuzz
. spec/nginx/harness.sh
F="$build/test-tools/svcfuzz"
secs=${WISP_SVCFUZZ_SECONDS:-30}; seed=${WISP_SEED:-1}; modes=${WISP_SVCFUZZ_MODES:-inline thread}
conns=${WISP_SVCFUZZ_CONNS:-2}
replay=""; [ "${1:-}" = --replay ] && replay=${2:-}
[ -z "$replay" ] && replay_cmd="replay the run: WISP_SEED=$seed WISP_SVCFUZZ_SECONDS=$secs WISP_SVCFUZZ_MODES='$modes' \
WISP_BUILD=$build sh spec/nginx/svcfuzz.sh (a saved request: sh spec/nginx/svcfuzz.sh --replay FILE)"
need "$W" "$F" curl

"$W" run spec/nginx/models.lua "$d" 2>/dev/null || { bad "spec/nginx/models.lua"; finish; exit 1; }
stop_nginx2() { stop_nginx; rm -f "$prefix/logs/nginx.pid"; }
start_nginx() {   # start_nginx MODE -> $port, nginx ready
    started=""
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        examples/openresty/serve.sh --render-only --prefix "$prefix" --port "$port" --models \
            "ctr=$d/ctr.wisp,plain=$d/plain.wisp" \
            --workers 2 --mode "$1" --max-body 1m --max-rows 1000 --build "$build" --device cpu >/dev/null || break
        rm -f "$prefix/logs/error.log"     # a failed bind (port taken since the probe) logs an [emerg] there
        if "$nginx_bin" -p "$prefix" -c conf/nginx.conf 2>"$tmp/start.err"; then started=1; break; fi
        grep -q "Address already in use" "$tmp/start.err" || break
    done
    for _ in $(seq 1 100); do
        [ -n "$started" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] \
            && return 0
        sleep 0.1
    done
    return 1
}
if [ -n "$replay" ]; then
    mode=${modes%% *}
    start_nginx "$mode" || { bad "nginx starts and gets ready: $(head -c 300 "$tmp/start.err")"; finish; exit 1; }
    "$F" --port "$port" --replay "$replay"; rc=$?
    [ $rc = 0 ] && ok "replay $replay (mode $mode)" || bad "replay $replay (mode $mode)"
    echo "--- error.log (last 5 lines)"; grep -v '\[notice\]' "$prefix/logs/error.log" | tail -n 5 | cut -c1-300
    finish; [ "$fail" -eq 0 ]; exit
fi
workers() { pgrep -P "$(cat "$prefix/logs/nginx.pid")" 2>/dev/null | sort | tr '\n' ' '; }
saved="$build/svcfuzz"; mkdir -p "$saved"; rm -f "$saved"/svcfuzz-*.req
nmodes=$(echo $modes | wc -w)
per=$(awk -v s="$secs" -v n="$nmodes" 'BEGIN { printf "%.1f", s / n }')
total=0; deadall=0; permode=""
for mode in $modes; do
    if ! start_nginx "$mode"; then bad "[$mode] nginx starts and gets ready: $(head -c 300 "$tmp/start.err")"; \
        stop_nginx2; continue; fi
    before=$(workers)
    mkdir -p "$saved/$mode"
    "$F" --port "$port" --dir "$d" --seconds "$per" --seed "$seed" --conns "$conns" --out "$saved/$mode" > \
        "$tmp/fuzz.out" 2>&1
    rc=$?
    after=$(workers)
    grep -av "^svcfuzz: [0-9]* passed" "$tmp/fuzz.out" | sed "s/^/[$mode] /"
    line=$(grep -aE '^svcfuzz: [0-9]+ passed, [0-9]+ failed' "$tmp/fuzz.out" | tail -n 1)
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ -z "$line" ]; then bad "[$mode] svcfuzz did not finish (exit $rc): $(tail -n 3 "$tmp/fuzz.out")"; else \
        pass=$((pass + p)); fail=$((fail + f)); fi
    dead=$(grep -cE 'exited on signal|exited with code [1-9]' "$prefix/logs/error.log")
    deadall=$((deadall + dead))
    if [ "$before" = "$after" ] \
        && [ "$dead" = 0 ]; then ok "[$mode] workers: no worker died (pids $before the same after the run)"
    else bad "[$mode] workers died: pids before '$before', after '$after'; error.log: $(grep -E \
        'exited on signal|exited with code' "$prefix/logs/error.log" | head -n 3 | cut -c1-200)"; fi
    if grep -E '\[alert\]|\[emerg\]|lua entry thread aborted|runtime error' "$prefix/logs/error.log" \
        | grep -v 'exited on signal' >/dev/null; then
        bad "[$mode] error.log has alerts or Lua errors: $(grep -E '\[alert\]|\[emerg\]|aborted|runtime error' \
            "$prefix/logs/error.log" | grep -v 'exited on signal' | head -n 3 | cut -c1-300)"
    else ok "[$mode] error.log: no alert, no Lua error"; fi
    execs=$(sed -nE 's/^svcfuzz: executions ([0-9]+).*/\1/p' "$tmp/fuzz.out")
    total=$((total + ${execs:-0}))
    permode="$permode${permode:+, }\"$mode\": ${execs:-0}"
    stop_nginx2
done
mkdir -p "$build/reliability"
printf '{"modes": "%s", "seed": %s, "seconds": %s, "executions": %s, "executions_by_mode": {%s}, "checks_failed": %s, "dead_workers": %s}\n' \
    "$modes" "$seed" "$secs" "$total" "$permode" "$fail" "$deadall" > "$build/reliability/svcfuzz.json"
echo "svcfuzz: $total executions in all ($(cat "$build/reliability/svcfuzz.json"))"
finish
[ "$fail" -eq 0 ]
