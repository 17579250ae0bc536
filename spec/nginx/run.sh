#!/bin/sh
# run.sh — the OpenResty service against a real nginx: predictions equal the CLI's, every error path, metrics, hot reload under load.
#
#   sh spec/nginx/run.sh            (make test runs it; WISP_NGINX=0 skips it there)
# Uses $WISP_BUILD (default build) for the CLI and libwisp.so; starts Debian's nginx (or
# /opt/devdeps's) on a free loopback port under a temporary prefix, stops it on exit.
# The last line is exactly "nginx: N passed, N failed". The service scores on the CPU, or on
# a GPU with WISP_TEST_GPU=1 (make test-gpu) or WISP_NGINX_DEVICE=gpu (predictions must still
# equal the CLI's CPU answers to 1e-6).
[ -z "$BASH_VERSION" ] && exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/../.." || exit 1
root=$(pwd)
build=${WISP_BUILD:-build}
case "$build" in /*) ;; *) build="$root/$build";; esac
W="$build/wisp"
pass=0; fail=0
device=${WISP_NGINX_DEVICE:-cpu}
[ "${WISP_TEST_GPU:-0}" = 1 ] && [ -z "${WISP_NGINX_DEVICE:-}" ] && device=gpu
want_dev=cpu; [ "$device" != cpu ] && want_dev=gpu:0
want_mode=inline; [ "$want_dev" != cpu ] && want_mode=auto     # serve.sh's default: mode = device
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
finish() { echo "nginx: $pass passed, $fail failed"; }

tmp=$(mktemp -d /tmp/wisp-nginx.XXXXXX)
chmod 755 "$tmp"     # nginx workers run as an unprivileged user when started by root: they read the models here
prefix="$tmp/prefix"
nginx_bin=""
stop_nginx() {
    if [ -n "$nginx_bin" ] && [ -f "$prefix/logs/nginx.pid" ]; then
        pid=$(cat "$prefix/logs/nginx.pid" 2>/dev/null)
        if [ -n "$pid" ]; then
            kill -QUIT "$pid" 2>/dev/null
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
}
cleanup() {
    [ -n "${wrk_pid:-}" ] && kill "$wrk_pid" 2>/dev/null
    stop_nginx
    if [ "$fail" -ne 0 ] && [ -f "$prefix/logs/error.log" ]; then
        echo "--- error.log (last 30 lines)"; tail -n 30 "$prefix/logs/error.log"
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

for t in curl "$W"; do
    if ! command -v "$t" >/dev/null 2>&1; then bad "missing $t"; finish; exit 1; fi
done
if [ ! -f "$build/libwisp.so" ]; then bad "missing $build/libwisp.so"; finish; exit 1; fi
nginx_bin=$(command -v nginx 2>/dev/null || ls /usr/sbin/nginx /opt/devdeps/usr/sbin/nginx 2>/dev/null | head -n 1)
if [ -z "$nginx_bin" ]; then bad "nginx not installed (make deps-test installs it)"; finish; exit 1; fi

# ---- models, rows and the CLI's answers ------------------------------------------
d="$tmp/m"; mkdir -p "$d"
"$W" run spec/nginx/models.lua "$d" >/dev/null || { bad "spec/nginx/models.lua failed"; finish; exit 1; }
cp "$d/ctr.wisp" "$d/ctr_v1.wisp"
"$W" score -m "$d/ctr.wisp" -d cpu "$d/rows.libsvm" > "$d/ctr_v1.txt"
"$W" score -m "$d/ctr_v2.wisp" -d cpu "$d/rows.libsvm" > "$d/ctr_v2.txt"
"$W" score -m "$d/plain.wisp" -d cpu "$d/plain.libsvm" > "$d/plain.txt"
"$W" score -m "$d/ctr.wisp" -d cpu --format jsonl "$d/rows.ndjson" > "$d/ctr_v1_jsonl.txt"
"$W" score -m "$d/ctr.wisp" -d cpu --format jsonl "$d/tricky.ndjson" > "$d/tricky.txt"
chk() { "$W" run spec/nginx/check.lua "$@"; }

# a free loopback port: probe, then retry the start on another port when the bind still
# fails (a port can be taken between the probe and the start, or be in use without a listener)
. "$root/spec/nginx/free_port.sh"
pick_port() {
    port=$(free_port)
    base="http://127.0.0.1:$port"
}

# "late" is missing at start: /readyz must say 503 until it appears
models="ctr=$d/ctr.wisp,plain=$d/plain.wisp,late=$d/late.wisp"
render() {   # render [extra serve.sh options]
    examples/openresty/serve.sh --render-only --prefix "$prefix" --port "$port" --models "$models" \
        --workers 2 --batching on --max-body 64k --max-rows 100 --build "$build" --device "$device" "$@" >/dev/null
}
started=""
for attempt in 1 2 3 4 5; do
    pick_port
    [ -z "$port" ] && { bad "no free port"; finish; exit 1; }
    render || { bad "render the config"; finish; exit 1; }
    if "$nginx_bin" -p "$prefix" -c conf/nginx.conf 2>"$tmp/start.err"; then started=1; break; fi
    grep -q "Address already in use" "$tmp/start.err" || break
done
if [ -n "$started" ]; then ok "nginx starts ($nginx_bin, port $port)"
else bad "nginx starts: $(cat "$tmp/start.err")"; finish; exit 1; fi
for _ in $(seq 1 50); do curl -s -o /dev/null "$base/healthz" && break; sleep 0.1; done

# curl helpers: req NAME EXPECTED_STATUS curl-args... -> body in $tmp/NAME.json
req() {
    name=$1; want=$2; shift 2
    code=$(curl -s -o "$tmp/$name.json" -w '%{http_code}' "$@")
    if [ "$code" = "$want" ]; then return 0; fi
    echo "     ($name: HTTP $code, expected $want: $(head -c 300 "$tmp/$name.json"))"
    return 1
}
J=(-H 'Content-Type: application/json')
L=(-H 'Content-Type: text/x-libsvm')
N=(-H 'Content-Type: application/x-ndjson')
if "$W" run spec/nginx/format_check.lua | grep -q '^FORMAT ok'; then
    ok "the answer's number formatter equals %.9g (100k random floats, decade edges, NaN/inf -> null)"
else bad "number formatter: $("$W" run spec/nginx/format_check.lua | head -n 3)"; fi
expect_error() {   # expect_error LABEL NAME STATUS curl-args...  (a JSON {"error": ...} with that status)
    label=$1; name=$2; st=$3; shift 3
    if req "$name" "$st" "$@" && chk field "$tmp/$name.json" error; then ok "$label -> $st"; else bad "$label -> $st"; fi
}

# ---- fork safety: the master touched no library, made no thread --------------------
mpid=$(cat "$prefix/logs/nginx.pid")
threads=$(awk '/^Threads:/ {print $2}' "/proc/$mpid/status")
if [ "$threads" = 1 ] && ! grep -q libwisp "/proc/$mpid/maps" && ! grep -qi cuda "/proc/$mpid/maps"; then
    ok "master process: 1 thread, libwisp/CUDA not mapped (init_by_lua only records options)"
else bad "master process: $threads threads, maps: $(grep -c -e libwisp -e cuda "/proc/$mpid/maps")"; fi
wpids=$(pgrep -P "$mpid" | tr '\n' ' ')
nmapped=0
for w in $wpids; do grep -q "$d/ctr.wisp" "/proc/$w/maps" && nmapped=$((nmapped + 1)); done
if [ "$nmapped" -ge 2 ]; then ok "each worker maps the model file itself ($nmapped workers)"; else bad "workers mapping ctr.wisp: $nmapped"; fi

# ---- health, readiness ---------------------------------------------------------------
if req health 200 "$base/healthz" && chk field "$tmp/health.json" status ok; then ok "/healthz 200"; else bad "/healthz"; fi
if req ready0 503 "$base/readyz" && chk field "$tmp/ready0.json" models.late.ready false; then ok "/readyz 503 while model 'late' is missing"; else bad "/readyz before late"; fi
expect_error "predict on a model not loaded" late503 503 "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/late:predict"
cp "$d/plain.wisp" "$d/late.tmp" && mv "$d/late.tmp" "$d/late.wisp"
for _ in $(seq 1 30); do curl -s -o /dev/null -w '%{http_code}' "$base/readyz" | grep -q 200 && break; sleep 0.1; done
if req ready1 200 "$base/readyz" && chk field "$tmp/ready1.json" ready true; then ok "/readyz 200 once every model is loaded"; else bad "/readyz after late appeared"; fi

# ---- predictions equal the CLI's --------------------------------------------------------
if req p1 200 "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict" && chk preds "$tmp/p1.json" "$d/ctr_v1.txt"; then
    ok "JSON raw rows (60, feature columns) equal wisp score on the transformed rows"; else bad "JSON rows vs CLI"; fi
if req p2 200 "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" && chk preds "$tmp/p2.json" "$d/ctr_v1.txt"; then
    ok "libsvm body (text/x-libsvm) equals wisp score"; else bad "libsvm vs CLI"; fi
if req p3 200 "${J[@]}" --data-binary @"$d/plain.json" "$base/v1/models/plain:predict" && chk preds "$tmp/p3.json" "$d/plain.txt"; then
    ok "JSON {ids, vals} rows (model without columns) equal wisp score"; else bad "plain JSON vs CLI"; fi
if req p4 200 -H 'Content-Type: text/plain; charset=utf-8' --data-binary @"$d/plain.libsvm" "$base/v1/models/plain:predict" && chk preds "$tmp/p4.json" "$d/plain.txt"; then
    ok "libsvm body (text/plain) equals wisp score"; else bad "plain libsvm vs CLI"; fi
# JSON lines of raw inputs (application/x-ndjson, application/jsonl): the C parser straight
if req nd1 200 "${N[@]}" --data-binary @"$d/rows.ndjson" "$base/v1/models/ctr:predict" && chk preds "$tmp/nd1.json" "$d/ctr_v1_jsonl.txt" \
   && chk preds "$tmp/nd1.json" "$d/ctr_v1.txt"; then
    ok "JSON lines (application/x-ndjson, 60 raw rows) equal wisp score --format jsonl"; else bad "ndjson vs CLI"; fi
if req nd2 200 -H 'Content-Type: application/jsonl; charset=utf-8' --data-binary @"$d/rows.ndjson" "$base/v1/models/ctr:predict" \
   && chk preds "$tmp/nd2.json" "$d/ctr_v1_jsonl.txt"; then
    ok "JSON lines (application/jsonl) equal wisp score --format jsonl"; else bad "jsonl vs CLI"; fi
if req nd3 200 "${N[@]}" --data-binary @"$d/badrows.ndjson" "$base/v1/models/ctr:predict" && chk preds "$tmp/nd3.json" "$d/ctr_v1.txt" 2,5,7 \
   && chk field "$tmp/nd3.json" errors.1.index 2 && chk field "$tmp/nd3.json" errors.1.line 4 && chk field "$tmp/nd3.json" errors.1.error \
   && chk field "$tmp/nd3.json" errors.2.line 7 && chk field "$tmp/nd3.json" errors.3.line 9; then
    ok "JSON lines with 3 bad lines (string for float, unknown input, invalid JSON): null + errors[{index, error, line}], the others scored"
else bad "ndjson bad lines"; fi
if req tj 200 "${J[@]}" --data-binary @"$d/tricky.json" "$base/v1/models/ctr:predict" && chk preds "$tmp/tj.json" "$d/tricky.txt" \
   && req tn 200 "${N[@]}" --data-binary @"$d/tricky.ndjson" "$base/v1/models/ctr:predict" && chk preds "$tmp/tn.json" "$d/tricky.txt"; then
    ok "pretty-printed instances with quotes, braces, commas and escapes in strings: JSON and JSON lines equal the CLI"
else bad "tricky instances"; fi
# single rows, 24 at once (8 parallel clients): the batcher path (batching on), each equals its CLI line
seq 1 24 | xargs -P 8 -I{} curl -s -o "$tmp/one_{}.out" -H 'Content-Type: application/json' --data-binary @"$d/one_{}.json" "$base/v1/models/ctr:predict"
n1=0
for i in $(seq 1 24); do chk preds "$tmp/one_$i.out" "$d/ctr_v1.txt" "" "$i" >/dev/null && n1=$((n1 + 1)); done
if [ "$n1" = 24 ]; then ok "24 concurrent single-row requests (coalesced by the batcher) equal the CLI"; else bad "single rows: $n1/24 equal"; fi

# ---- per-row errors: a bad row does not poison the others -------------------------------
if req e1 200 "${J[@]}" --data-binary @"$d/badrows.json" "$base/v1/models/ctr:predict" && chk preds "$tmp/e1.json" "$d/ctr_v1.txt" 2,5,7; then
    ok "JSON rows 2, 5, 7 bad: null + errors[index], the other 7 rows scored"; else bad "JSON bad rows"; fi
if req e2 200 "${J[@]}" --data-binary @"$d/plainbad.json" "$base/v1/models/plain:predict" && chk preds "$tmp/e2.json" "$d/plain.txt" 1,3,4; then
    ok "{ids, vals} rows 1, 3, 4 bad (negative id, vals length, no ids): null + errors"; else bad "plain bad rows"; fi
{ sed -n 1,3p "$d/rows.libsvm"; echo "1 5:x"; sed -n 5,6p "$d/rows.libsvm"; } > "$d/badline.libsvm"
if req e3 200 "${L[@]}" --data-binary @"$d/badline.libsvm" "$base/v1/models/ctr:predict" && chk preds "$tmp/e3.json" "$d/ctr_v1.txt" 3 \
   && chk field "$tmp/e3.json" errors.1.line 4; then
    ok "a malformed libsvm line: null + errors[{index 3, line 4}], the others scored"; else bad "libsvm bad line"; fi
if req e4 400 "${J[@]}" --data-binary @"$d/allbad.json" "$base/v1/models/ctr:predict" && chk field "$tmp/e4.json" errors.2.index 1; then
    ok "every row bad -> 400 with the per-row errors"; else bad "all rows bad"; fi

# ---- error paths --------------------------------------------------------------------------
expect_error "bad JSON" bj 400 "${J[@]}" --data-binary '{"instances": [' "$base/v1/models/ctr:predict"
expect_error "JSON without instances" ni 400 "${J[@]}" --data-binary '{"rows": []}' "$base/v1/models/ctr:predict"
expect_error "empty instances" ei 400 "${J[@]}" --data-binary '{"instances": []}' "$base/v1/models/ctr:predict"
expect_error "empty body" eb 400 "${J[@]}" --data-binary '' "$base/v1/models/ctr:predict"
expect_error "empty JSON lines body" ebn 400 "${N[@]}" --data-binary '' "$base/v1/models/ctr:predict"
expect_error "JSON lines body of blank lines only" bln 400 "${N[@]}" --data-binary $'\n\n  \n' "$base/v1/models/ctr:predict"
expect_error "JSON lines for a model without columns" ndp 415 "${N[@]}" --data-binary '{"a": 1}' "$base/v1/models/plain:predict"
expect_error "101 JSON lines (max_rows_per_request 100)" n101 413 "${N[@]}" --data-binary @"$d/rows101.ndjson" "$base/v1/models/ctr:predict"
if chk field "$tmp/n101.json" limit_rows 100; then ok "413 (JSON lines) names the row limit"; else bad "413 limit_rows (ndjson)"; fi
expect_error "unknown model" um 404 "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/nosuch:predict"
expect_error "unknown endpoint" ue 404 "$base/v2/whatever"
expect_error "unknown verb" uv 404 -X POST "$base/v1/models/ctr:explain"
expect_error "GET on :predict" gm 405 "$base/v1/models/ctr:predict"
if curl -s -D - -o /dev/null "$base/v1/models/ctr:predict" | grep -qi '^Allow: POST'; then ok "405 carries Allow: POST"; else bad "405 Allow header"; fi
expect_error "POST on model metadata" pm 405 -X POST "$base/v1/models/ctr"
expect_error "unsupported Content-Type" ct 415 -H 'Content-Type: application/xml' --data-binary '<x/>' "$base/v1/models/ctr:predict"
head -c 70000 /dev/zero | tr '\0' '1' > "$d/big.txt"
expect_error "body over client_max_body_size (64k)" big 413 "${L[@]}" --data-binary @"$d/big.txt" "$base/v1/models/ctr:predict"
for i in $(seq 1 101); do echo "0 1:1"; done > "$d/rows101.libsvm"
expect_error "101 rows (max_rows_per_request 100)" r101 413 "${L[@]}" --data-binary @"$d/rows101.libsvm" "$base/v1/models/ctr:predict"
if chk field "$tmp/r101.json" limit_rows 100; then ok "413 names the row limit"; else bad "413 limit_rows"; fi

# ---- metadata --------------------------------------------------------------------------
if req meta 200 "$base/v1/models/ctr" && chk field "$tmp/meta.json" name ctr && chk field "$tmp/meta.json" features 3012 \
   && chk field "$tmp/meta.json" dtype f32 && chk field "$tmp/meta.json" version.checksum && chk field "$tmp/meta.json" version.mtime \
   && chk field "$tmp/meta.json" columns.5.name age_bucketized_X_city && chk field "$tmp/meta.json" inputs.1.name \
   && chk field "$tmp/meta.json" device.in_use "$want_dev"; then
    ok "GET /v1/models/ctr: name, version (checksum, mtime), features, dtype, columns, inputs, device"; else bad "metadata"; fi
if chk field "$tmp/meta.json" mode "$want_mode" && chk field "$tmp/meta.json" mode_chosen_by device; then
    ok "no mode configured: $want_mode, the default on $want_dev (mode_chosen_by: device)"; else bad "the device's default mode ($want_mode)"; fi
if req list 200 "$base/v1/models" && chk field "$tmp/list.json" models.3.name plain; then ok "GET /v1/models lists the models"; else bad "model list"; fi

# ---- metrics, summed over both workers ----------------------------------------------------
sleep 0.3
curl -s "$base/metrics" > "$tmp/metrics.txt"
m() { grep -F "$1" "$tmp/metrics.txt" | head -n 1 | awk '{print $NF}'; }
# ctr predict 200s so far: p1, p2, nd1, nd2, nd3, tj, tn, 24 single rows, e1, e3
n200=$(m 'wisp_requests_total{model="ctr",endpoint="predict",code="200"}')
if [ "$n200" = 33 ]; then ok "metrics: 33 ctr predict 200s counted across workers"; else bad "metrics: ctr 200s = '$n200', expected 33"; fi
if [ -n "$(m 'wisp_batch_rows_bucket{model="ctr",path="batcher",le="+Inf"}')" ] \
   && [ -n "$(m 'wisp_stage_seconds_bucket{model="ctr",stage="kernel",le="+Inf"}')" ] \
   && [ -n "$(m 'wisp_stage_seconds_count{model="ctr",stage="parse"}')" ] \
   && [ "$(m "wisp_device_info{model=\"ctr\",device=\"$want_dev\"}")" = 1 ] \
   && [ -n "$(m 'wisp_request_seconds_count{model="ctr"}')" ] \
   && [ -n "$(m 'wisp_errors_total{kind="bad_request"}')" ] && [ -n "$(m 'wisp_errors_total{kind="body_too_large"}')" ] \
   && [ -n "$(m 'wisp_row_errors_total{model="ctr"}')" ] && grep -q '^# TYPE wisp_stage_seconds histogram' "$tmp/metrics.txt"; then
    ok "metrics: batch sizes, stage and request latency histograms, device, errors (Prometheus text)"
else bad "metrics content"; sed -n 1,40p "$tmp/metrics.txt"; fi
lagn=$(m 'wisp_event_loop_lag_seconds_count ')
if [ -n "$lagn" ] && [ "$lagn" -ge 2 ] && [ -n "$(m 'wisp_event_loop_lag_seconds_bucket{le="+Inf"}')" ]; then
    ok "metrics: the event loop's lag, measured by each worker's flush timer ($lagn ticks)"
else bad "event-loop lag histogram: count '$lagn'"; grep -F wisp_event_loop "$tmp/metrics.txt"; fi

# ---- hot reload under load ----------------------------------------------------------------
if command -v wrk >/dev/null 2>&1; then
    wrk -t2 -c8 -d3s -s spec/nginx/wrk_post.lua "$base/v1/models/ctr:predict" -- "$d/rows.json" application/json 60 > "$tmp/wrk.txt" 2>&1 &
    wrk_pid=$!
    sleep 1
    cp "$d/ctr_v2.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"        # renamed into place
    wait "$wrk_pid"; wrk_pid=""
    line=$(grep '^WRK ' "$tmp/wrk.txt")
    nreq=$(echo "$line" | sed -E 's/.*"requests": ([0-9]+).*/\1/')
    non2xx=$(echo "$line" | sed -E 's/.*"non2xx": ([0-9]+).*/\1/')
    serr=$(echo "$line" | sed -E 's/.*"socket_errors": ([0-9]+).*/\1/')
    if [ -n "$line" ] && [ "$non2xx" = 0 ] && [ "$serr" = 0 ] && [ "$nreq" -gt 100 ]; then
        ok "hot reload under load (wrk, 8 connections, 3 s): $nreq requests, 0 non-2xx, 0 socket errors"
    else bad "hot reload under load: $line $(tail -n 5 "$tmp/wrk.txt")"; fi
else
    # no wrk: 8 parallel curl loops
    for c in $(seq 1 8); do
        ( for i in $(seq 1 40); do curl -s -o /dev/null -w '%{http_code}\n' "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict"; done ) > "$tmp/load_$c.txt" &
    done
    sleep 0.5
    cp "$d/ctr_v2.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
    wait
    nbad=$(cat "$tmp"/load_*.txt | grep -vc '^200$')
    if [ "$nbad" = 0 ]; then ok "hot reload under load (8 curl loops): 0 failures"; else bad "hot reload under load: $nbad failures"; fi
fi
sleep 1.2
nv2=0
for i in $(seq 1 10); do
    curl -s -o "$tmp/v2_$i.json" "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict"
    chk preds "$tmp/v2_$i.json" "$d/ctr_v2.txt" >/dev/null && nv2=$((nv2 + 1))
done
if [ "$nv2" = 10 ]; then ok "after the rename every worker answers with the new model (10/10 equal its CLI)"; else bad "new model: $nv2/10"; fi

# ---- a broken file renamed in: the old model keeps serving ---------------------------------
head -c 9000 "$d/ctr_v1.wisp" > "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
sleep 1.3
nkeep=0
for i in $(seq 1 6); do
    code=$(curl -s -o "$tmp/keep_$i.json" -w '%{http_code}' "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict")
    [ "$code" = 200 ] && chk preds "$tmp/keep_$i.json" "$d/ctr_v2.txt" >/dev/null && nkeep=$((nkeep + 1))
done
if [ "$nkeep" = 6 ]; then ok "truncated model file: the loaded version keeps serving (6/6)"; else bad "broken file: $nkeep/6 served by the old model"; fi
if req brk 200 "$base/v1/models/ctr" && chk field "$tmp/brk.json" reload.error && chk field "$tmp/brk.json" ready true; then
    ok "the failure is reported in /v1/models/ctr (reload.error), still ready"; else bad "reload error in metadata"; fi
if grep -q "reload failed, the loaded version keeps serving" "$prefix/logs/error.log"; then ok "the failure is in the error log"; else bad "error log"; fi
sleep 0.3
if [ -n "$(curl -s "$base/metrics" | grep -F 'wisp_model_reloads_total{model="ctr",result="failed"}')" ]; then
    ok "metrics count the failed reload"; else bad "failed reload metric"; fi
expect_error "POST :reload with a broken file -> 500, old model kept" rl1 500 -X POST "$base/v1/models/ctr:reload"

# ---- the reload endpoint -------------------------------------------------------------------
cp "$d/ctr_v1.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
if req rl2 200 -X POST "$base/v1/models/ctr:reload" && chk field "$tmp/rl2.json" reloaded true; then ok "POST :reload -> 200"; else bad "POST :reload"; fi
sleep 1.2
nv1=0
for i in $(seq 1 8); do
    curl -s -o "$tmp/v1_$i.json" "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict"
    chk preds "$tmp/v1_$i.json" "$d/ctr_v1.txt" >/dev/null && nv1=$((nv1 + 1))
done
if [ "$nv1" = 8 ]; then ok "after :reload every worker serves the restored file (8/8)"; else bad "after :reload: $nv1/8"; fi

# ---- scripts/loadgen.c (bench_nginx.sh's open-loop generator) against the service ----------
if cc -O2 -pthread -o "$tmp/loadgen" scripts/loadgen.c -lm 2> "$tmp/loadgen.err"; then
    line=$("$tmp/loadgen" --port "$port" --path /v1/models/ctr:predict --body "$d/rows.json" --ctype application/json \
           --rate 400 --duration 1 --warmup 0.2 --connections 4 --threads 2 --arrivals poisson 2> "$tmp/loadgen.out")
    lg() { echo "$line" | sed -E "s/.*\"$1\":([0-9.]+).*/\1/"; }
    if [ -n "$line" ] && [ "$(lg errors)" = 0 ] && [ "$(lg non2xx)" = 0 ] && [ "$(lg measured)" -gt 200 ] \
       && awk -v a="$(lg p50_us)" -v b="$(lg p99_us)" 'BEGIN { exit !(a > 0 && b >= a) }'; then
        ok "scripts/loadgen.c: $(lg measured) scheduled requests answered 200, p50 $(lg p50_us) us, p99 $(lg p99_us) us"
    else bad "scripts/loadgen.c: '$line' $(cat "$tmp/loadgen.out")"; fi
else bad "scripts/loadgen.c does not build: $(head -c 300 "$tmp/loadgen.err")"; fi

# ---- the other modes: nginx -s reload (HUP) with mode = thread, then async -------------------
for mode in thread async auto; do
    render --mode "$mode" && "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload 2>/dev/null
    okm=0
    for _ in $(seq 1 40); do
        sleep 0.15
        req "mode_$mode" 200 "$base/v1/models/ctr" 2>/dev/null >/dev/null && chk field "$tmp/mode_$mode.json" mode "$mode" >/dev/null 2>&1 \
            && chk field "$tmp/mode_$mode.json" mode_chosen_by configuration >/dev/null 2>&1 && { okm=1; break; }
    done
    sleep 0.3     # old workers drain
    if [ "$okm" = 1 ] && req "pm_$mode" 200 "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/pm_$mode.json" "$d/ctr_v1.txt" \
       && req "pl_$mode" 200 "${L[@]}" --data-binary @"$d/badline.libsvm" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/pl_$mode.json" "$d/ctr_v1.txt" 3 \
       && req "pn_$mode" 200 "${N[@]}" --data-binary @"$d/badrows.ndjson" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/pn_$mode.json" "$d/ctr_v1.txt" 2,5,7 && chk field "$tmp/pn_$mode.json" errors.3.line 9; then
        ok "mode=$mode after nginx -s reload: JSON, libsvm and JSON lines (with bad lines) equal the CLI"
    else bad "mode=$mode"; fi
done

# ---- a device default that needs a thread pool nginx.conf does not have: mode = "device"
# picks cpu_mode / gpu_mode (here "thread"); with no `thread_pool` line the worker says so in
# the error log and scores inline, and the request still gets its answer
render && sed -i -e '/^thread_pool /d' -e 's/^\( *\)mode = "device",/\1mode = "device", cpu_mode = "thread", gpu_mode = "thread",/' \
    "$prefix/conf/nginx.conf" && "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload 2>/dev/null
okm=0
for _ in $(seq 1 40); do
    sleep 0.15
    req mode_dev 200 "$base/v1/models/ctr" 2>/dev/null >/dev/null && chk field "$tmp/mode_dev.json" mode thread >/dev/null 2>&1 \
        && chk field "$tmp/mode_dev.json" mode_chosen_by device >/dev/null 2>&1 && { okm=1; break; }
done
sleep 0.3
if [ "$okm" = 1 ] && req pl_nopool 200 "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" \
   && chk preds "$tmp/pl_nopool.json" "$d/ctr_v1.txt" \
   && req pl_nopool2 200 "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" \
   && chk preds "$tmp/pl_nopool2.json" "$d/ctr_v1.txt" \
   && grep -q 'mode thread (the default on this device) needs `thread_pool wisp threads=2;`' "$prefix/logs/error.log"; then
    ok "a default mode without its thread pool: answered inline, and the error log says what to add"
else bad "default mode without a thread pool (mode thread seen: $okm; log: $(grep -c 'needs `thread_pool' "$prefix/logs/error.log"))"; fi

# ---- inline again, with a 1 KB header buffer: the body no longer arrives with the headers in
# one buffer (wisp.nginx reads libsvm / JSON lines bodies from nginx's memory through
# $request_body, which then joins the buffers); answers carry Content-Length, not chunked
render --mode inline --header-buffer 1k && "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload 2>/dev/null
okm=0
for _ in $(seq 1 40); do
    sleep 0.15
    req mode_inline 200 "$base/v1/models/ctr" 2>/dev/null >/dev/null && chk field "$tmp/mode_inline.json" mode inline >/dev/null 2>&1 && { okm=1; break; }
done
sleep 0.3
hdr=$(curl -s -D - -o "$tmp/pl_split.json" "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" | tr -d '\r')
if [ "$okm" = 1 ] && chk preds "$tmp/pl_split.json" "$d/ctr_v1.txt" \
   && req pn_split 200 "${N[@]}" --data-binary @"$d/rows.ndjson" "$base/v1/models/ctr:predict" && chk preds "$tmp/pn_split.json" "$d/ctr_v1_jsonl.txt" \
   && echo "$hdr" | grep -qi "^content-length: $(wc -c < "$tmp/pl_split.json" | tr -d ' ')\$" && ! echo "$hdr" | grep -qi '^transfer-encoding'; then
    ok "a $(wc -c < "$d/rows.libsvm" | tr -d ' ')-byte libsvm body and a JSON lines body read past a 1 KB header buffer equal the CLI; the answer has Content-Length, no chunked encoding"
else bad "bodies past a 1 KB header buffer (mode inline: $okm; headers: $(echo "$hdr" | head -n 8 | tr '\n' ' '))"; fi
expect_error "empty libsvm body (inline, 1 KB header buffer)" ebl 400 "${L[@]}" --data-binary '' "$base/v1/models/ctr:predict"

if grep -E '\[(alert|crit|emerg)\]|lua entry thread aborted|runtime error' "$prefix/logs/error.log" >/dev/null; then
    bad "error.log has alerts or Lua errors:"; grep -E '\[(alert|crit|emerg)\]|aborted|runtime error' "$prefix/logs/error.log" | head -n 5
else ok "error.log: no alerts, no Lua errors"; fi

nsleep0=$(grep -c 'ngx.sleep(0) called without delayed events patch' "$prefix/logs/error.log")
echo "info: error.log holds $nsleep0 'ngx.sleep(0) without delayed events patch' warnings (mode=async yields with ngx.sleep(0))"; grep "ngx.sleep(0) called" "$prefix/logs/error.log" | sed -E "s/.*request: //" | sort | uniq -c | head -n 3
stop_nginx
if [ -n "$mpid" ] && ! kill -0 "$mpid" 2>/dev/null; then ok "nginx stopped"; else bad "nginx still running"; fi
finish
[ "$fail" -eq 0 ]
