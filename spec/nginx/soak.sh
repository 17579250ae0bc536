#!/bin/sh
# soak.sh — the concurrent reload soak against a real nginx (issue 14, classes 2 and 3): spec/nginx/soak.c's clients and
# file changes, once a mode.
#
#   sh spec/nginx/soak.sh          (make test runs it through spec/run.sh; WISP_NGINX=0 skips it)
# Environment: WISP_BUILD (default build; the harness is $WISP_BUILD/test-tools/soak, built by
# `make test-tools`), WISP_SOAK_SECONDS (per mode, default 18), WISP_SOAK_MODES (default
# "inline thread auto:on": serve.sh --mode[:--batching]; thread is where 503s were seen, auto
# with batching the GPU's default), WISP_SEED (default 1, printed), WISP_SOAK_CONNS (6),
# WISP_NGINX_DEVICE (serve.sh --device, default cpu; gpu with WISP_TEST_GPU=1).
# Each mode: a fresh nginx (2 workers) serving ctr = a file this script renames, copies over,
# truncates and corrupts (soak.c's reloader) while soak.c's clients check every answer; the
# workers' pids before and after must be the same and the error log must hold no worker that
# exited; the first configuration then checks how a cp over, a truncation and a rewrite in place
# are reported (/v1/models/NAME file.state, /readyz's warning) while the old version serves. The counts go to
# $WISP_BUILD/reliability/soak.<mode>.json (spec/reliability.sh puts
# them in reliability.json). The last line is "soak: N passed, N failed".
[ -z "$BASH_VERSION" ] && exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/../.." || exit 1
SUITE=soak
. spec/nginx/harness.sh
S="$build/test-tools/soak"
secs=${WISP_SOAK_SECONDS:-18}; modes=${WISP_SOAK_MODES:-inline thread auto:on}; seed=${WISP_SEED:-1}
conns=${WISP_SOAK_CONNS:-6}
replay_cmd="replay: WISP_SEED=$seed WISP_SOAK_SECONDS=$secs WISP_SOAK_MODES='$modes' \
WISP_BUILD=$build sh spec/nginx/soak.sh"
need curl "$W" "$S"

# ---- three versions, two broken files, the rows and every version's answers ------------------
"$W" run spec/nginx/models.lua "$d" 2>/dev/null || { bad "spec/nginx/models.lua"; finish; exit 1; }
mv "$d/ctr.wisp" "$d/v1.wisp"; mv "$d/ctr_v2.wisp" "$d/v2.wisp"
"$W" run spec/nginx/soak_models.lua "$d" || { bad "spec/nginx/soak_models.lua"; finish; exit 1; }
head -c 9000 "$d/v1.wisp" > "$d/trunc.wisp"
cp "$d/v1.wisp" "$d/badsum.wisp"
sz=$(stat -c %s "$d/v1.wisp")
printf '\x55\xaa' | dd of="$d/badsum.wisp" bs=1 seek=$((sz / 2)) conv=notrunc 2>/dev/null
for v in v1 v2 v3; do "$W" score -m "$d/$v.wisp" -d cpu "$d/rows.libsvm" > "$d/$v.txt" \
    || { bad "wisp score $v"; finish; exit 1; }; done
for f in trunc badsum; do
    if "$W" info "$d/$f.wisp" >/dev/null 2>&1; then bad "the broken file $f.wisp loads"; fi
done
mkdir -p "$build/reliability"; rm -f "$build/reliability"/soak.*.json     # this run's figures only

workers() { pgrep -P "$(cat "$prefix/logs/nginx.pid")" 2>/dev/null | sort | tr '\n' ' '; }
for mb in $modes; do
    mode=${mb%%:*}; batching=off
    case "$mb" in *:*) batching=${mb#*:}; mode="$mode+batching";; esac
    rm -f "$d/ctr.wisp"          # absent at start: 503 until the first good load, the only 503 allowed
    started=""
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        examples/openresty/serve.sh --render-only --prefix "$prefix" --port "$port" --models "ctr=$d/ctr.wisp" \
            --workers 2 --mode "${mode%%+*}" --batching "$batching" --max-body 4m --build "$build" --device "$device" \
                >/dev/null || break
        rm -f "$prefix/logs/error.log"     # a failed bind (port taken since the probe) logs an [emerg] there
        if "$nginx_bin" -p "$prefix" -c conf/nginx.conf 2>"$tmp/start.err"; then started=1; break; fi
        grep -q "Address already in use" "$tmp/start.err" || break
    done
    if [ -z "$started" ]; then bad "[$mode] nginx starts: $(head -c 300 "$tmp/start.err")"; stop_nginx; continue; fi
    sleep 0.3
    c0=$(curl -s -o "$tmp/first.json" -w '%{http_code}' -H 'Content-Type: text/x-libsvm' --data-binary \
        @"$d/rows.libsvm" "http://127.0.0.1:$port/v1/models/ctr:predict")
    # a broken file first: still not loaded (503), then v1
    cp "$d/trunc.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
    sleep 1.3
    c1=$(curl -s -o "$tmp/first2.json" -w '%{http_code}' -H 'Content-Type: text/x-libsvm' --data-binary \
        @"$d/rows.libsvm" "http://127.0.0.1:$port/v1/models/ctr:predict")
    cp "$d/v1.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
    ready=""
    for _ in $(seq 1 100); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] && { ready=1; break; }
        sleep 0.1
    done
    if [ "$c0" = 503 ] && [ "$c1" = 503 ] && grep -q '"error"' "$tmp/first.json" \
        && grep -q '"error"' "$tmp/first2.json" && [ -n "$ready" ]; then
        ok "[$mode] before the first good load: 503 with a JSON error (file absent, then truncated); ready once v1 is renamed in"
    else bad "[$mode] before the first good load: HTTP $c0 ($(head -c 150 "$tmp/first.json")), then $c1 ($(head -c 150 \
        "$tmp/first2.json")), ready: ${ready:-no}"; fi
    if [ -z "$ready" ]; then stop_nginx; continue; fi
    before=$(workers)
    "$S" --port "$port" --dir "$d" --served "$d/ctr.wisp" --seconds "$secs" --conns "$conns" --seed "$seed" > \
        "$tmp/soak.out" 2>&1
    rc=$?
    # the first configuration also checks how an in-place change is reported (the service's operator
    # contract): v2 renamed in, then cp v1 over it / truncate it / rewrite 8 bytes of it: the
    # answers stay v2's, /v1/models/ctr says file.state "changed in place, refused: ...", /readyz
    # stays 200 with a warning for ctr
    if [ "$mb" = "${modes%% *}" ]; then
        base="http://127.0.0.1:$port"
        for change in cp truncate rewrite; do
            cp "$d/v2.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
            run=0     # both workers serve v2: 8 answers in a row (up to 10 s)
            for _ in $(seq 1 40); do
                sleep 0.25
                curl -s -o "$tmp/rp.json" -H 'Content-Type: text/x-libsvm' --data-binary @"$d/rows.libsvm" \
                    "$base/v1/models/ctr:predict"
                if "$W" run spec/nginx/check.lua preds "$tmp/rp.json" "$d/v2.txt" >/dev/null 2>&1; then run=$((run + \
                    1)); else run=0; fi
                [ "$run" -ge 8 ] && break
            done
            case $change in
                cp) cat "$d/v1.wisp" > "$d/ctr.wisp";;
                truncate) truncate -s $(( $(stat -c %s "$d/ctr.wisp") / 2 )) "$d/ctr.wisp";;
                rewrite) printf 'XXXXXXXX' | dd of="$d/ctr.wisp" bs=1 seek=300 conv=notrunc 2>/dev/null;;
            esac
            run=0     # both workers have seen the change: 8 metadata answers in a row say so (up to 10 s)
            for _ in $(seq 1 40); do
                sleep 0.25
                if curl -s "$base/v1/models/ctr" \
                    | grep -q '"state":"changed in place'; then run=$((run + 1)); else run=0; fi
                [ "$run" -ge 8 ] && break
            done
            nv2=0; nmeta=0; nready=0
            for i in 1 2 3 4 5 6; do
                curl -s -o "$tmp/rp.json" -H 'Content-Type: text/x-libsvm' --data-binary @"$d/rows.libsvm" \
                    "$base/v1/models/ctr:predict"
                "$W" run spec/nginx/check.lua preds "$tmp/rp.json" "$d/v2.txt" >/dev/null 2>&1 && nv2=$((nv2 + 1))
                curl -s "$base/v1/models/ctr" | grep -q '"state":"changed in place' && nmeta=$((nmeta + 1))
                [ "$(curl -s -o "$tmp/ry.json" -w '%{http_code}' "$base/readyz")" = 200 ] \
                    && grep -q '"warning"' "$tmp/ry.json" && nready=$((nready + 1))
            done
            if [ "$nv2" = 6 ] && [ "$nmeta" = 6 ] && [ "$nready" = 6 ]; then
                ok "[$mode] $change in place: v2 keeps serving (6/6), /v1/models/ctr says \"changed in place\", /readyz 200 with a warning"
            else bad "[$mode] $change in place: v2's answers $nv2/6, /v1/models/ctr file.state 'changed in place' $nmeta/6, /readyz 200 + warning $nready/6 ($(curl -s "$base/v1/models/ctr" | grep -o '"file":{[^}]*}' | head -c 200))"; fi
        done
    fi
    after=$(workers)
    grep -v '^SOAK_JSON' "$tmp/soak.out" | grep -v '^soak: [0-9]* passed' | sed "s/^/     [$mode] /"
    line=$(grep -E '^soak: [0-9]+ passed, [0-9]+ failed' "$tmp/soak.out" | tail -n 1)
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ -z "$line" ]; then bad "[$mode] soak did not finish (exit $rc): $(tail -n 3 "$tmp/soak.out")"
    else pass=$((pass + p)); fail=$((fail + f)); echo "     [$mode] soak.c: $p checks passed, $f failed"; fi
    dead=$(grep -cE 'exited on signal|exited with code [1-9]' "$prefix/logs/error.log")
    if [ "$before" = "$after" ] && [ "$dead" = 0 ]; then ok "[$mode] no worker died (pids $before)"
    else bad "[$mode] workers died: pids before '$before', after '$after'; error.log: $(grep -E \
        'exited on signal|exited with code [1-9]' "$prefix/logs/error.log" | head -n 3 | cut -c1-200)"; fi
    if grep -E '\[alert\]|\[emerg\]|lua entry thread aborted|runtime error' "$prefix/logs/error.log" \
        | grep -v 'exited on signal' >/dev/null; then
        bad "[$mode] error.log has alerts or Lua errors: $(grep -E '\[alert\]|\[emerg\]|aborted|runtime error' \
            "$prefix/logs/error.log" | head -n 3 | cut -c1-300)"
    else ok "[$mode] error.log: no alert, no Lua error"; fi
    refused=$(grep -c 'reload failed' "$prefix/logs/error.log")
    js=$(grep '^SOAK_JSON ' "$tmp/soak.out" | sed 's/^SOAK_JSON //')
    if [ -n "$js" ]; then
        echo "$js" \
            | sed \
            "s/^{/{\"mode\": \"$mode\", \"seed\": $seed, \"dead_workers\": $dead, \"refused_reloads_logged\": $refused, /" > "$build/reliability/soak.$mode.json"
        echo "     [$mode] $(cat "$build/reliability/soak.$mode.json")"
    fi
    stop_nginx
    [ "$fail" -ne 0 ] && [ -f "$prefix/logs/error.log" ] \
        && { echo "     --- error.log (last 8 lines)"; tail -n 8 "$prefix/logs/error.log" | cut -c1-300; }
    rm -f "$prefix/logs/error.log"
done
finish
[ "$fail" -eq 0 ]
