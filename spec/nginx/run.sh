#!/bin/sh
# run.sh — the OpenResty service against a real nginx: predictions equal the CLI's, every error path, metrics, hot
# reload under load.
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
SUITE=nginx
. spec/nginx/harness.sh
want_dev=cpu; [ "$device" != cpu ] && want_dev=gpu:0
want_mode=inline; [ "$want_dev" != cpu ] && want_mode=auto     # serve.sh's default: mode = device
on_exit() {
    [ -n "${wrk_pid:-}" ] && kill "$wrk_pid" 2>/dev/null
    if [ "$fail" -ne 0 ] && [ -f "$prefix/logs/error.log" ]; then
        echo "--- error.log (last 30 lines)"; tail -n 30 "$prefix/logs/error.log"
    fi
}
need curl "$W"
if [ ! -f "$build/libwisp.so" ]; then bad "missing $build/libwisp.so"; finish; exit 1; fi

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
# n_equal N NAME WANT [curl options...]: N predictions of ctr, each answer saved as $tmp/NAME_i.json; prints how
# many answered 200 with the predictions of WANT (a CLI's lines); the body is rows.json unless the options say
n_equal() {
    local n=$1 name=$2 want=$3 k=0 code i; shift 3
    [ $# -eq 0 ] && set -- "${J[@]}" --data-binary @"$d/rows.json"
    for i in $(seq 1 "$n"); do
        code=$(curl -s -o "$tmp/${name}_$i.json" -w '%{http_code}' "$@" "$base/v1/models/ctr:predict")
        [ "$code" = 200 ] && chk preds "$tmp/${name}_$i.json" "$want" >/dev/null && k=$((k + 1))
    done
    echo "$k"
}

# a free loopback port: probe, then retry the start on another port when the bind still
# fails (a port can be taken between the probe and the start, or be in use without a listener)
pick_port() {
    port=$(free_port)
    base="http://127.0.0.1:$port"
}

# "late" is missing at start: /readyz must say 503 until it appears
models="ctr=$d/ctr.wisp,plain=$d/plain.wisp,late=$d/late.wisp,uids=$d/ints.wisp"
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
    if req "$name" "$st" "$@" \
        && chk field "$tmp/$name.json" error; then ok "$label -> $st"; else bad "$label -> $st"; fi
}

# ---- fork safety: the master touched no library, made no thread --------------------
mpid=$(cat "$prefix/logs/nginx.pid")
threads=$(awk '/^Threads:/ {print $2}' "/proc/$mpid/status")
if [ "$threads" = 1 ] && ! grep -q libwisp "/proc/$mpid/maps" && ! grep -qi cuda "/proc/$mpid/maps"; then
    ok "master process: 1 thread, libwisp/CUDA not mapped (init_by_lua only records options)"
else bad "master process: $threads threads, maps: $(grep -c -e libwisp -e cuda "/proc/$mpid/maps")"; fi
wpids=$(pgrep -P "$mpid" | tr '\n' ' ')
nloaded=0
for w in $wpids; do grep -q "\[notice\] $w#.*model 'ctr' loaded (start)" "$prefix/logs/error.log" \
    && nloaded=$((nloaded + 1)); done
if [ "$nloaded" -ge 2 ]; then ok \
    "each worker loads the model itself, in init_worker ($nloaded workers; a private verified copy each)"
else bad "workers that logged loading ctr.wisp: $nloaded"; fi

# ---- health, readiness ---------------------------------------------------------------
if req health 200 "$base/healthz" \
    && chk field "$tmp/health.json" status ok; then ok "/healthz 200"; else bad "/healthz"; fi
if req ready0 503 "$base/readyz" \
    && chk field "$tmp/ready0.json" models.late.ready false; then ok "/readyz 503 while model 'late' is missing"; else \
    bad "/readyz before late"; fi
expect_error "predict on a model not loaded" late503 503 "${J[@]}" --data-binary @"$d/rows.json" \
    "$base/v1/models/late:predict"
cp "$d/plain.wisp" "$d/late.tmp" && mv "$d/late.tmp" "$d/late.wisp"
for _ in $(seq 1 30); do curl -s -o /dev/null -w '%{http_code}' "$base/readyz" | grep -q 200 && break; sleep 0.1; done
if req ready1 200 "$base/readyz" \
    && chk field "$tmp/ready1.json" ready true; then ok "/readyz 200 once every model is loaded"; else bad \
    "/readyz after late appeared"; fi

# ---- predictions equal the CLI's --------------------------------------------------------
if req p1 200 "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict" \
    && chk preds "$tmp/p1.json" "$d/ctr_v1.txt"; then
    ok "JSON raw rows (60, feature columns) equal wisp score on the transformed rows"; else bad "JSON rows vs CLI"; fi
if req p2 200 "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" \
    && chk preds "$tmp/p2.json" "$d/ctr_v1.txt"; then
    ok "libsvm body (text/x-libsvm) equals wisp score"; else bad "libsvm vs CLI"; fi
if req p3 200 "${J[@]}" --data-binary @"$d/plain.json" "$base/v1/models/plain:predict" \
    && chk preds "$tmp/p3.json" "$d/plain.txt"; then
    ok "JSON {ids, vals} rows (model without columns) equal wisp score"; else bad "plain JSON vs CLI"; fi
if req p4 200 -H 'Content-Type: text/plain; charset=utf-8' --data-binary @"$d/plain.libsvm" \
    "$base/v1/models/plain:predict" && chk preds "$tmp/p4.json" "$d/plain.txt"; then
    ok "libsvm body (text/plain) equals wisp score"; else bad "plain libsvm vs CLI"; fi
# JSON lines of raw inputs (application/x-ndjson, application/jsonl): the C parser straight
if req nd1 200 "${N[@]}" --data-binary @"$d/rows.ndjson" "$base/v1/models/ctr:predict" \
    && chk preds "$tmp/nd1.json" "$d/ctr_v1_jsonl.txt" \
   && chk preds "$tmp/nd1.json" "$d/ctr_v1.txt"; then
    ok "JSON lines (application/x-ndjson, 60 raw rows) equal wisp score --format jsonl"; else bad "ndjson vs CLI"; fi
if req nd2 200 -H 'Content-Type: application/jsonl; charset=utf-8' --data-binary @"$d/rows.ndjson" \
    "$base/v1/models/ctr:predict" \
   && chk preds "$tmp/nd2.json" "$d/ctr_v1_jsonl.txt"; then
    ok "JSON lines (application/jsonl) equal wisp score --format jsonl"; else bad "jsonl vs CLI"; fi
if req nd3 200 "${N[@]}" --data-binary @"$d/badrows.ndjson" "$base/v1/models/ctr:predict" \
    && chk preds "$tmp/nd3.json" "$d/ctr_v1.txt" 2,5,7 \
   && chk field "$tmp/nd3.json" errors.1.index 2 && chk field "$tmp/nd3.json" errors.1.line 4 \
       && chk field "$tmp/nd3.json" errors.1.error \
   && chk field "$tmp/nd3.json" errors.2.line 7 && chk field "$tmp/nd3.json" errors.3.line 9; then
    ok "JSON lines with 3 bad lines (string for float, unknown input, invalid JSON): null + errors[{index, error, line}], the others scored"
else bad "ndjson bad lines"; fi
if req tj 200 "${J[@]}" --data-binary @"$d/tricky.json" "$base/v1/models/ctr:predict" \
    && chk preds "$tmp/tj.json" "$d/tricky.txt" \
   && req tn 200 "${N[@]}" --data-binary @"$d/tricky.ndjson" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/tn.json" "$d/tricky.txt"; then
    ok "pretty-printed instances with quotes, braces, commas and escapes in strings: JSON and JSON lines equal the CLI"
else bad "tricky instances"; fi
# single rows, 24 at once (8 parallel clients): the batcher path (batching on), each equals its CLI line
seq 1 24 | xargs -P 8 -I{} curl -s -o "$tmp/one_{}.out" -H 'Content-Type: application/json' --data-binary \
    @"$d/one_{}.json" "$base/v1/models/ctr:predict"
n1=0
for i in $(seq 1 24); do chk preds "$tmp/one_$i.out" "$d/ctr_v1.txt" "" "$i" >/dev/null && n1=$((n1 + 1)); done
if [ "$n1" = 24 ]; then ok "24 concurrent single-row requests (coalesced by the batcher) equal the CLI"; else bad \
    "single rows: $n1/24 equal"; fi

# ---- per-row errors: a bad row does not poison the others -------------------------------
if req e1 200 "${J[@]}" --data-binary @"$d/badrows.json" "$base/v1/models/ctr:predict" \
    && chk preds "$tmp/e1.json" "$d/ctr_v1.txt" 2,5,7; then
    ok "JSON rows 2, 5, 7 bad: null + errors[index], the other 7 rows scored"; else bad "JSON bad rows"; fi
if chk count "$tmp/e1.json" bad_rows 3 && chk field "$tmp/e1.json" bad_rows.1.index 2 \
    && chk field "$tmp/e1.json" bad_rows.3.index 7 \
   && chk has "$tmp/e1.json" bad_rows.2.error "" && chk invariant "$tmp/e1.json" >/dev/null; then
    ok "the same rows in bad_rows (the glossary's name; errors is its 0.1.x alias, with the same entries)"
else bad "bad_rows of the JSON bad rows"; fi
if req e2 200 "${J[@]}" --data-binary @"$d/plainbad.json" "$base/v1/models/plain:predict" \
    && chk preds "$tmp/e2.json" "$d/plain.txt" 1,3,4; then
    ok "{ids, vals} rows 1, 3, 4 bad (negative id, vals length, no ids): null + errors"; else bad "plain bad rows"; fi
{ sed -n 1,3p "$d/rows.libsvm"; echo "1 5:x"; sed -n 5,6p "$d/rows.libsvm"; } > "$d/badline.libsvm"
if req e3 200 "${L[@]}" --data-binary @"$d/badline.libsvm" "$base/v1/models/ctr:predict" \
    && chk preds "$tmp/e3.json" "$d/ctr_v1.txt" 3 \
   && chk field "$tmp/e3.json" errors.1.line 4; then
    ok "a malformed libsvm line: null + errors[{index 3, line 4}], the others scored"; else bad "libsvm bad line"; fi
if req e4 400 "${J[@]}" --data-binary @"$d/allbad.json" "$base/v1/models/ctr:predict" \
    && chk field "$tmp/e4.json" errors.2.index 1; then
    ok "every row bad -> 400 with the per-row errors"; else bad "all rows bad"; fi

# ---- error paths --------------------------------------------------------------------------
expect_error "bad JSON" bj 400 "${J[@]}" --data-binary '{"instances": [' "$base/v1/models/ctr:predict"
expect_error "JSON without instances" ni 400 "${J[@]}" --data-binary '{"rows": []}' "$base/v1/models/ctr:predict"
expect_error "empty instances" ei 400 "${J[@]}" --data-binary '{"instances": []}' "$base/v1/models/ctr:predict"
expect_error "empty body" eb 400 "${J[@]}" --data-binary '' "$base/v1/models/ctr:predict"
expect_error "empty JSON lines body" ebn 400 "${N[@]}" --data-binary '' "$base/v1/models/ctr:predict"
expect_error "JSON lines body of blank lines only" bln 400 "${N[@]}" --data-binary $'\n\n  \n' \
    "$base/v1/models/ctr:predict"
expect_error "JSON lines for a model without columns" ndp 415 "${N[@]}" --data-binary '{"a": 1}' \
    "$base/v1/models/plain:predict"
expect_error "101 JSON lines (max_rows_per_request 100)" n101 413 "${N[@]}" --data-binary @"$d/rows101.ndjson" \
    "$base/v1/models/ctr:predict"
if chk field "$tmp/n101.json" limit_rows 100; then ok "413 (JSON lines) names the row limit"; else bad \
    "413 limit_rows (ndjson)"; fi
expect_error "unknown model" um 404 "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/nosuch:predict"
expect_error "unknown endpoint" ue 404 "$base/v2/whatever"
expect_error "unknown verb" uv 404 -X POST "$base/v1/models/ctr:explain"
expect_error "GET on :predict" gm 405 "$base/v1/models/ctr:predict"
if curl -s -D - -o /dev/null "$base/v1/models/ctr:predict" \
    | grep -qi '^Allow: POST'; then ok "405 carries Allow: POST"; else bad "405 Allow header"; fi
expect_error "POST on model metadata" pm 405 -X POST "$base/v1/models/ctr"
expect_error "unsupported Content-Type" ct 415 -H 'Content-Type: application/xml' --data-binary '<x/>' \
    "$base/v1/models/ctr:predict"
head -c 70000 /dev/zero | tr '\0' '1' > "$d/big.txt"
expect_error "body over client_max_body_size (64k)" big 413 "${L[@]}" --data-binary @"$d/big.txt" \
    "$base/v1/models/ctr:predict"
for i in $(seq 1 101); do echo "0 1:1"; done > "$d/rows101.libsvm"
expect_error "101 rows (max_rows_per_request 100)" r101 413 "${L[@]}" --data-binary @"$d/rows101.libsvm" \
    "$base/v1/models/ctr:predict"
if chk field "$tmp/r101.json" limit_rows 100; then ok "413 names the row limit"; else bad "413 limit_rows"; fi

# ---- metadata --------------------------------------------------------------------------
if req meta 200 "$base/v1/models/ctr" && chk field "$tmp/meta.json" name ctr \
    && chk field "$tmp/meta.json" features 3012 \
   && chk field "$tmp/meta.json" dtype f32 && chk field "$tmp/meta.json" version.checksum \
       && chk field "$tmp/meta.json" version.mtime \
   && chk field "$tmp/meta.json" columns.5.name age_bucketized_X_city && chk field "$tmp/meta.json" inputs.1.name \
   && chk field "$tmp/meta.json" device.in_use "$want_dev"; then
    ok "GET /v1/models/ctr: name, version (checksum, mtime), features, dtype, columns, inputs, device"; else bad \
        "metadata"; fi
if chk field "$tmp/meta.json" mode "$want_mode" && chk field "$tmp/meta.json" mode_chosen_by device; then
    ok "no mode configured: $want_mode, the default on $want_dev (mode_chosen_by: device)"; else bad \
        "the device's default mode ($want_mode)"; fi
if req list 200 "$base/v1/models" \
    && chk field "$tmp/list.json" models.3.name plain; then ok "GET /v1/models lists the models"; else bad \
    "model list"; fi

# ---- metrics, summed over both workers ----------------------------------------------------
sleep 0.3
curl -s "$base/metrics" > "$tmp/metrics.txt"
m() { grep -F "$1" "$tmp/metrics.txt" | head -n 1 | awk '{print $NF}'; }
# ctr predict 200s so far: p1, p2, nd1, nd2, nd3, tj, tn, 24 single rows, e1, e3
n200=$(m 'wisp_requests_total{model="ctr",endpoint="predict",code="200"}')
if [ "$n200" = 33 ]; then ok "metrics: 33 ctr predict 200s counted across workers"; else bad \
    "metrics: ctr 200s = '$n200', expected 33"; fi
if [ -n "$(m 'wisp_batch_rows_bucket{model="ctr",path="batcher",le="+Inf"}')" ] \
   && [ -n "$(m 'wisp_stage_seconds_bucket{model="ctr",stage="kernel",le="+Inf"}')" ] \
   && [ -n "$(m 'wisp_stage_seconds_count{model="ctr",stage="parse"}')" ] \
   && [ "$(m "wisp_device_info{model=\"ctr\",device=\"$want_dev\"}")" = 1 ] \
   && [ -n "$(m 'wisp_request_seconds_count{model="ctr"}')" ] \
   && [ -n "$(m 'wisp_errors_total{kind="bad_request"}')" ] \
       && [ -n "$(m 'wisp_errors_total{kind="body_too_large"}')" ] \
   && [ -n "$(m 'wisp_row_errors_total{model="ctr"}')" ] \
       && grep -q '^# TYPE wisp_stage_seconds histogram' "$tmp/metrics.txt"; then
    ok "metrics: batch sizes, stage and request latency histograms, device, errors (Prometheus text)"
else bad "metrics content"; sed -n 1,40p "$tmp/metrics.txt"; fi
lagn=$(m 'wisp_event_loop_lag_seconds_count ')
if [ -n "$lagn" ] && [ "$lagn" -ge 2 ] && [ -n "$(m 'wisp_event_loop_lag_seconds_bucket{le="+Inf"}')" ]; then
    ok "metrics: the event loop's lag, measured by each worker's flush timer ($lagn ticks)"
else bad "event-loop lag histogram: count '$lagn'"; grep -F wisp_event_loop "$tmp/metrics.txt"; fi

# ---- issue 14, class 1: one row, one probability, whatever the path, format or neighbours ----
# (the service runs batching on: a 1-row request goes through the batcher)
"$W" score -m "$d/ints.wisp" -d cpu --format jsonl "$d/ints.ndjson" > "$d/ints.txt"
"$W" score -m "$d/ints.wisp" -d cpu --format jsonl "$d/ints_bad.ndjson" > "$d/ints_bad.txt" 2>/dev/null
if [ "$(sed -n 1p "$d/ints.txt")" != "$(sed -n 2p "$d/ints.txt")" ]; then
    ok "the CLI scores uid 2^53+1 and 2^53 differently (the checks below can tell a double from the int64)"
else bad "uid 2^53+1 and 2^53 score the same in the CLI: the int64 checks cannot fail"; fi
if req i1 200 "${J[@]}" --data-binary @"$d/ints.json" "$base/v1/models/uids:predict" \
    && chk preds "$tmp/i1.json" "$d/ints.txt" \
   && req i2 200 "${J[@]}" --data-binary @"$d/ints_sig.json" "$base/v1/models/uids:predict" \
       && chk preds "$tmp/i2.json" "$d/ints.txt" \
   && req i3 200 "${N[@]}" --data-binary @"$d/ints.ndjson" "$base/v1/models/uids:predict" \
       && chk preds "$tmp/i3.json" "$d/ints.txt"; then
    ok "int64 inputs at and above 2^53: {\"instances\"}, with a signature_name key, and JSON lines equal the CLI"
else bad "int64 inputs above 2^53 (instances / signature_name / JSON lines)"; fi
if req i4 200 "${J[@]}" --data-binary @"$d/ints_bad.json" "$base/v1/models/uids:predict" \
    && chk preds "$tmp/i4.json" "$d/ints_bad.txt" 2 \
   && chk has "$tmp/i4.json" errors.1.error "string"; then
    ok "int64 inputs above 2^53 next to a bad row (a string for the int): the others still equal the CLI"
else bad "int64 inputs next to a bad row"; fi
for k in 1 2 4 5; do
    sed -n "${k}p" "$d/ints.ndjson" | sed 's/^/{"instances": [/; s/$/]}/' > "$d/int1_$k.json"
done
n1=0
for k in 1 2 4 5; do
    req "int1_$k" 200 "${J[@]}" --data-binary @"$d/int1_$k.json" "$base/v1/models/uids:predict" >/dev/null \
        && chk preds "$tmp/int1_$k.json" "$d/ints.txt" "" "$k" >/dev/null && n1=$((n1 + 1))
done
if [ "$n1" = 4 ]; then ok "each int64 row alone (1-row requests: the batcher) equals its CLI line"; else bad \
    "1-row int64 requests: $n1/4"; fi
# valued libsvm rows alone: the batcher must keep their values (it read "1 1:0.5" as 1 1:1)
printf '1 1:0.5 7:0.25\n1 3:2.5\n1 1:0.5 7\n1 9007199254740993:1 3:0.5\n' > "$d/valued.libsvm"
"$W" score -m "$d/plain.wisp" -d cpu "$d/valued.libsvm" > "$d/valued.txt"
nv=0
for k in 1 2 3 4; do
    sed -n "${k}p" "$d/valued.libsvm" > "$d/valued_$k.libsvm"
    req "val_$k" 200 "${L[@]}" --data-binary @"$d/valued_$k.libsvm" "$base/v1/models/plain:predict" >/dev/null \
        && chk preds "$tmp/val_$k.json" "$d/valued.txt" "" "$k" >/dev/null && nv=$((nv + 1))
done
if [ "$nv" = 4 ]; then ok "1-row libsvm requests with values (all valued, mixed, an id beyond 2^53) equal the CLI"; \
    else bad "1-row valued libsvm: $nv/4 equal the CLI"; fi
nv=0
k=1
for body in '{"instances": [{"ids": [1, 7], "vals": [0.5, 0.25]}]}' '{"instances": [{"ids": [3], "vals": [2.5]}]}' \
            '{"signature_name": "x", "instances": [{"ids": [9007199254740993, 3], "vals": [1, 0.5]}]}'; do
    line=$k; [ "$k" = 3 ] && line=4
    req "valj_$k" 200 "${J[@]}" --data-binary "$body" "$base/v1/models/plain:predict" >/dev/null \
        && chk preds "$tmp/valj_$k.json" "$d/valued.txt" "" "$line" >/dev/null && nv=$((nv + 1))
    k=$((k + 1))
done
if [ "$nv" = 3 ]; then ok \
    "1-row JSON {ids, vals} requests (values kept; an id beyond 2^53 ignored as libsvm's) equal the CLI"; else bad \
    "1-row JSON ids/vals: $nv/3 equal the CLI"; fi

# ---- issue 14, classes 5 and 7: values a float32 cannot hold, ids of the wrong JSON type --------
cat > "$d/types.json" <<'JSON'
{"instances": [{"ids": [1, 7], "vals": [0.5, 0.25]}, {"ids": [1], "vals": [1e39]}, {"ids": [1, 2], "vals": [1e39, -1e39]},
 {"ids": [1], "vals": [1e400]}, {"ids": {"0": 5}}, {"ids": "1"}, {"ids": [1.5]}, {"ids": ["1"]},
 {"ids": [18446744073709551616]}, {"ids": [1], "vals": ["0.5"]}, [1, 2], {"ids": [1], "vals": null}]}
JSON
{ printf '1 1:0.5 7:0.25\n'; for _ in $(seq 1 11); do printf '1 1\n'; done; } > "$d/types.libsvm"   # rows 1-10 null
"$W" score -m "$d/plain.wisp" -d cpu "$d/types.libsvm" > "$d/types.txt"
if req ty 200 "${J[@]}" --data-binary @"$d/types.json" "$base/v1/models/plain:predict" \
    && chk preds "$tmp/ty.json" "$d/types.txt" 1,2,3,4,5,6,7,8,9,10 \
   && chk has "$tmp/ty.json" errors.1.error "not a finite float32" \
       && chk has "$tmp/ty.json" errors.2.error "not a finite float32" \
   && chk has "$tmp/ty.json" errors.3.error "not a finite float32" \
       && chk has "$tmp/ty.json" errors.4.error "got an object" \
   && chk has "$tmp/ty.json" errors.5.error 'got the string "1"' && chk has "$tmp/ty.json" errors.6.error "got 1.5" \
   && chk has "$tmp/ty.json" errors.7.error 'got the string "1"' \
       && chk has "$tmp/ty.json" errors.8.error "overflows 64 bits" \
   && chk has "$tmp/ty.json" errors.9.error 'got the string "0.5"' \
       && chk has "$tmp/ty.json" errors.10.error "got a list"; then
    ok "{ids, vals}: 1e39, [1e39, -1e39], 1e400, ids an object / a string / 1.5 / [\"1\"] / 2^64, vals [\"0.5\"], a list row: each null with a message naming it"
else bad "JSON values and id types"; fi
long=$(head -c 520 /dev/zero | tr '\0' '0')
if req lng 200 "${J[@]}" --data-binary \
    "{\"instances\": [{\"ids\": [1, 7], \"vals\": [0.5, 0.25]}, {\"ids\": [1], \"vals\": [1.${long}e5]}], \"note\": \"${long}\"}" \
       "$base/v1/models/plain:predict" && chk preds "$tmp/lng.json" "$d/types.txt" 1 \
           && chk has "$tmp/lng.json" errors.1.error "longer than the 511 bytes" \
   && chk count "$tmp/lng.json" bad_rows 1 && chk count "$tmp/lng.json" errors 1; then
    ok "{ids, vals}: a number of 523 characters is refused as libsvm refuses it (cjson would read it); a long run elsewhere in the body is not"
else bad "JSON number over 511 bytes"; fi
if req cty 200 "${J[@]}" --data-binary \
    '{"instances": [{"age": 30, "city": "Paris"}, {"age": 1e39}, {"age": [1e39, -1e39]}, 5, "x", null]}' \
       "$base/v1/models/ctr:predict" && chk has "$tmp/cty.json" errors.1.error "finite" \
           && chk has "$tmp/cty.json" errors.3.error "got a number" \
   && chk has "$tmp/cty.json" errors.4.error "got a string" && chk has "$tmp/cty.json" errors.5.error "got null" \
   && chk field "$tmp/cty.json" errors.2.index 2; then
    ok "raw rows: 1e39, a list for a number, instances that are not objects: null + errors naming them"
else bad "raw rows with out-of-range values and non-object instances"; fi
expect_error "instances with a trailing comma: bad JSON, for every model" tc1 400 "${J[@]}" --data-binary \
    '{"instances": [{"age": 3},]}' "$base/v1/models/ctr:predict"
expect_error "a bad row inside a body that is not JSON: 400 bad JSON" tc2 400 "${J[@]}" --data-binary \
    '{"instances": [{"age": "x"}, {"age": 1} x]}' "$base/v1/models/ctr:predict"
expect_error "instances given twice" tc3 400 "${J[@]}" --data-binary \
    '{"instances": [{"age": 3}], "instances": [{"age": 4}]}' "$base/v1/models/ctr:predict"

# ---- issue 14, class 6: the HTTP surface --------------------------------------------------------
if req gz 415 "${J[@]}" -H 'Content-Encoding: gzip' --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict" \
   && chk has "$tmp/gz.json" error "Content-Encoding gzip is not supported" \
   && req br 415 "${L[@]}" -H 'Content-Encoding: br' --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" \
   && req idn 200 "${L[@]}" -H 'Content-Encoding: identity' --data-binary @"$d/rows.libsvm" \
       "$base/v1/models/ctr:predict"; then
    ok "Content-Encoding gzip or br -> 415 naming it; identity is scored"
else bad "Content-Encoding"; fi
hh=$(curl -s -I "$base/healthz" | tr -d '\r')
hm=$(curl -s -I "$base/v1/models/ctr" | tr -d '\r')
if echo "$hh" | grep -q '^HTTP/1.1 200' && echo "$hm" | grep -q '^HTTP/1.1 200' && echo "$hm" \
    | grep -qi '^content-type: application/json' \
   && [ "$(curl -s -I -o /dev/null -w '%{http_code}' "$base/metrics")" = 200 ] \
   && curl -s -D - -o /dev/null -X POST "$base/healthz" | tr -d '\r' | grep -qi '^Allow: GET, HEAD$'; then
    ok "HEAD /healthz, /v1/models/ctr, /metrics -> 200; 405 on a GET endpoint says Allow: GET, HEAD"
else bad "HEAD and Allow ($(echo "$hh" | head -n 1) / $(echo "$hm" | head -n 1))"; fi
# the errors nginx answers itself are JSON too (errors.conf): a request line it cannot parse, a
# URI or a header over large_client_header_buffers, a method nginx refuses (TRACE)
raw_http() {   # raw_http NAME TEXT: send TEXT on a fresh connection, the answer in $tmp/NAME.raw
    { exec 3<>"/dev/tcp/127.0.0.1/$port" && printf '%b' "$2" >&3 \
        && timeout 5 cat <&3 > "$tmp/$1.raw"; exec 3<&- 3>&-; } 2>/dev/null
}
json_answer() {   # json_answer NAME STATUS: the raw answer has that status, a JSON content type, a JSON {"error"} body
    head -n 1 "$tmp/$1.raw" | grep -q "^HTTP/1.1 $2 " && grep -qi '^content-type: application/json' "$tmp/$1.raw" \
        && sed '1,/^\r$/d' "$tmp/$1.raw" > "$tmp/$1.json" && chk field "$tmp/$1.json" error
}
raw_http nx400 'GARBAGE\r\n\r\n'
long=$(head -c 70000 /dev/zero | tr '\0' 'a')
raw_http nx414 "GET /$long HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
raw_http nx494 "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: $long\r\nConnection: close\r\n\r\n"
raw_http nx405 "TRACE / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
raw_http nx505 "GET /healthz HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n"
raw_http nx413 "TRACE /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 99999999999\r\n\r\n"
nj=0; for t in nx400:400 nx414:414 nx494:400 nx405:405 nx505:505 nx413:413; do json_answer "${t%%:*}" "${t##*:}" \
    && nj=$((nj + 1)); done
if [ "$nj" = 6 ]; then ok \
    "nginx's own 400 (bad request line), 414, 400 (header too large), 405 (TRACE), 505 (HTTP/9.9), 413 (TRACE with a huge Content-Length: an error in an error page) answer JSON {\"error\"}"
else bad "nginx's own errors as JSON: $nj/6 ($(for f in nx400 nx414 nx494 nx405 nx505 nx413; do head -n 1 \
    "$tmp/$f.raw" | tr -d '\r'; echo -n ' | '; done))"; fi
# a message that quotes what the client sent stays UTF-8 (cjson copies bytes: \xff made the answer not JSON)
if req u8 404 "$base/v1/models/ct%FFr:predict" -X POST && iconv -f UTF-8 -t UTF-8 "$tmp/u8.json" >/dev/null 2>&1 \
   && chk has "$tmp/u8.json" error "unknown model 'ct"; then
    ok "an unknown model name with a byte that is not UTF-8: 404, the answer valid UTF-8 JSON"
else bad "invalid UTF-8 echoed into an answer: $(od -c "$tmp/u8.json" | head -n 3 | tr '\n' ' ')"; fi
if curl -s -D - -o "$tmp/big2.json" "${L[@]}" --data-binary @"$d/big.txt" "$base/v1/models/ctr:predict" | tr -d '\r' \
    | grep -qi '^content-type: application/json' \
   && chk field "$tmp/big2.json" error; then ok "413 from nginx (body too large) is JSON with a JSON content type"; \
       else bad "413 content type"; fi

# ---- hot reload under load ----------------------------------------------------------------
if command -v wrk >/dev/null 2>&1; then
    wrk -t2 -c8 -d3s -s spec/nginx/wrk_post.lua "$base/v1/models/ctr:predict" -- "$d/rows.json" application/json 60 > \
        "$tmp/wrk.txt" 2>&1 &
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
        ( for i in $(seq 1 40); do curl -s -o /dev/null -w '%{http_code}\n' "${J[@]}" --data-binary @"$d/rows.json" \
            "$base/v1/models/ctr:predict"; done ) > "$tmp/load_$c.txt" &
    done
    sleep 0.5
    cp "$d/ctr_v2.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
    wait
    nbad=$(cat "$tmp"/load_*.txt | grep -vc '^200$')
    if [ "$nbad" = 0 ]; then ok "hot reload under load (8 curl loops): 0 failures"; else bad \
        "hot reload under load: $nbad failures"; fi
fi
sleep 1.2
nv2=$(n_equal 10 v2 "$d/ctr_v2.txt")
if [ "$nv2" = 10 ]; then ok "after the rename every worker answers with the new model (10/10 equal its CLI)"; else bad \
    "new model: $nv2/10"; fi

# ---- a broken file renamed in: the old model keeps serving ---------------------------------
head -c 9000 "$d/ctr_v1.wisp" > "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
sleep 1.3
nkeep=$(n_equal 6 keep "$d/ctr_v2.txt")
if [ "$nkeep" = 6 ]; then ok "truncated model file: the loaded version keeps serving (6/6)"; else bad \
    "broken file: $nkeep/6 served by the old model"; fi
if req brk 200 "$base/v1/models/ctr" && chk field "$tmp/brk.json" reload.error \
    && chk field "$tmp/brk.json" ready true; then
    ok "the failure is reported in /v1/models/ctr (reload.error), still ready"; else bad "reload error in metadata"; fi
if grep -q "reload failed, the loaded version keeps serving" "$prefix/logs/error.log"; then ok \
    "the failure is in the error log"; else bad "error log"; fi
sleep 0.3
if [ -n "$(curl -s "$base/metrics" | grep -F 'wisp_model_reloads_total{model="ctr",result="failed"}')" ]; then
    ok "metrics count the failed reload"; else bad "failed reload metric"; fi
expect_error "POST :reload with a broken file -> 500, old model kept" rl1 500 -X POST "$base/v1/models/ctr:reload"

# ---- the reload endpoint -------------------------------------------------------------------
cp "$d/ctr_v1.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
if req rl2 200 -X POST "$base/v1/models/ctr:reload" \
    && chk field "$tmp/rl2.json" reloaded true; then ok "POST :reload -> 200"; else bad "POST :reload"; fi
sleep 1.2
nv1=$(n_equal 8 v1 "$d/ctr_v1.txt")
if [ "$nv1" = 8 ]; then ok "after :reload every worker serves the restored file (8/8)"; else bad \
    "after :reload: $nv1/8"; fi

# ---- issue 14, class 3: a body still arriving while a new version is renamed in ---------------
# (headers and half the body, a rename, a reload check, then the rest: the answer is 200 from
# one version, whole; it was 415 for JSON lines and an HTML 500 for libsvm: the request kept
# the entry it saw before its body arrived, which the reload closed)
slow_post() {   # slow_post NAME CTYPE BODY NEWMODEL -> $tmp/NAME.raw, $tmp/NAME.json
    len=$(wc -c < "$3"); half=$((len / 2))
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf 'POST /v1/models/ctr:predict HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n' "$2" "$len" >&3
    head -c "$half" "$3" >&3
    sleep 0.3
    cp "$4" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
    sleep 1.4
    tail -c +$((half + 1)) "$3" >&3
    timeout 5 cat <&3 > "$tmp/$1.raw"
    exec 3<&- 3>&-
    sed '1,/^\r$/d' "$tmp/$1.raw" > "$tmp/$1.json"
}
one_version() {   # one_version NAME: the answer equals v1's or v2's CLI answers, whole
    chk preds "$tmp/$1.json" "$d/ctr_v1.txt" >/dev/null || chk preds "$tmp/$1.json" "$d/ctr_v2.txt" >/dev/null
}
slow_post slow1 application/x-ndjson "$d/rows.ndjson" "$d/ctr_v2.wisp"
slow_post slow2 text/x-libsvm "$d/rows.libsvm" "$d/ctr_v1.wisp"
slow_post slow3 application/json "$d/rows.json" "$d/ctr_v2.wisp"
slow_post slow4 text/x-libsvm "$d/rows.libsvm" "$d/ctr_v1.wisp"
nslow=0
for s in slow1 slow2 slow3 slow4; do head -n 1 "$tmp/$s.raw" | grep -q '^HTTP/1.1 200 ' && one_version "$s" \
    && nslow=$((nslow + 1)); done
if [ "$nslow" = 4 ]; then ok \
    "bodies arriving across a rename (JSON lines, libsvm, JSON): 200, every answer whole from one version"
else bad "bodies across a rename: $nslow/4 ($(for s in slow1 slow2 slow3 slow4; do head -n 1 "$tmp/$s.raw" \
    | tr -d '\r'; echo -n ' | '; done))"; fi

# ---- issue 14, class 2: the served file changed in place ---------------------------------------
# cp over it (another model's bytes, same inode), truncated, a few bytes rewritten: the workers
# keep serving the version they verified, refuse the file with a logged reason, and say so in
# /v1/models/NAME ("file") and /readyz (still 200: a verified version serves; "warning")
sleep 1.2
wp0=$(pgrep -P "$mpid" | sort | tr '\n' ' ')
req ipv 200 "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict" >/dev/null
v1id=$(grep -o '"version":"[^"]*"' "$tmp/ipv.json" | head -n 1 | sed 's/.*:"//; s/"//')
if chk preds "$tmp/ipv.json" "$d/ctr_v1.txt" && req rlu 200 -X POST "$base/v1/models/ctr:reload" \
    && chk field "$tmp/rlu.json" unchanged true \
   && chk field "$tmp/rlu.json" reloaded false; then
    ok "POST :reload of an unchanged file: 200 {\"unchanged\": true}, nothing mapped again"
else bad "debounced :reload"; fi
inplace_check() {   # inplace_check LABEL
    sleep 1.3
    nin=$(n_equal 8 inp "$d/ctr_v1.txt")
    if [ "$nin" = 8 ] && req ipm 200 "$base/v1/models/ctr" \
        && chk has "$tmp/ipm.json" file.state "changed in place, refused" \
       && chk field "$tmp/ipm.json" file.serving "$v1id" && req ipr 200 "$base/readyz" \
           && chk has "$tmp/ipr.json" models.ctr.warning "changed in place" \
       && chk field "$tmp/ipr.json" models.ctr.serving "$v1id"; then
        ok "$1: 8/8 answers are the verified version's, /v1/models/ctr and /readyz (200) report it refused"
    else bad "$1: $nin/8 answers from the verified version; $(head -c 300 "$tmp/ipm.json")"; fi
}
cp "$d/ctr_v2.wisp" "$d/ctr.wisp"                 # cp over the served file: same inode, new bytes
inplace_check "another model cp'd over the served file"
truncate -s 9000 "$d/ctr.wisp"
inplace_check "the served file truncated in place"
cp "$d/ctr_v1.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"       # a fresh inode, v1 again
sleep 1.3
printf '\125\252\125' | dd of="$d/ctr.wisp" bs=1 seek=6000 conv=notrunc 2>/dev/null
inplace_check "three bytes of the weights rewritten in place"
if req rlx 500 -X POST "$base/v1/models/ctr:reload" && chk has "$tmp/rlx.json" error "changed in place" \
   && grep -q "changed in place, refused" "$prefix/logs/error.log"; then
    ok "POST :reload of a file changed in place: refused (500, the reason), and the error log says why"
else bad ":reload of a file changed in place"; fi
cp "$d/ctr_v2.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
sleep 1.3
nv2=$(n_equal 8 ipn "$d/ctr_v2.txt")
if [ "$nv2" = 8 ] && req ipm2 200 "$base/v1/models/ctr" && chk field "$tmp/ipm2.json" file.state serving \
   && req ipr2 200 "$base/readyz" && ! chk field "$tmp/ipr2.json" models.ctr.warning >/dev/null; then
    ok "then a good file renamed in: served (8/8 v2), the warning gone"
else bad "rename after in-place changes: $nv2/8 v2"; fi
wp1=$(pgrep -P "$mpid" | sort | tr '\n' ' ')
if [ "$wp0" = "$wp1" ] && ! grep -q "exited on signal" "$prefix/logs/error.log"; then
    ok "no worker died through the in-place changes (pids $wp1)"
else bad "workers: before $wp0, after $wp1; $(grep 'exited on signal' "$prefix/logs/error.log" | head -n 2)"; fi
cp "$d/ctr_v1.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
sleep 1.3

# ---- scripts/load/loadgen.c (bench_nginx.sh's open-loop generator) against the service ----------
if cc -O2 -pthread -o "$tmp/loadgen" scripts/load/loadgen.c -lm 2> "$tmp/loadgen.err"; then
    line=$("$tmp/loadgen" --port "$port" --path /v1/models/ctr:predict --body "$d/rows.json" --ctype application/json \
           --rate 400 --duration 1 --warmup 0.2 --connections 4 --threads 2 --arrivals poisson 2> "$tmp/loadgen.out")
    lg() { echo "$line" | sed -E "s/.*\"$1\":([0-9.]+).*/\1/"; }
    if [ -n "$line" ] && [ "$(lg errors)" = 0 ] && [ "$(lg non2xx)" = 0 ] && [ "$(lg measured)" -gt 200 ] \
       && awk -v a="$(lg p50_us)" -v b="$(lg p99_us)" 'BEGIN { exit !(a > 0 && b >= a) }'; then
        ok "scripts/load/loadgen.c: $(lg measured) scheduled requests answered 200, p50 $(lg p50_us) us, p99 $(lg \
            p99_us) us"
    else bad "scripts/load/loadgen.c: '$line' $(cat "$tmp/loadgen.out")"; fi
else bad "scripts/load/loadgen.c does not build: $(head -c 300 "$tmp/loadgen.err")"; fi

# a 60-row libsvm body over thread_min_bytes (16 KB: mode auto sends it to the thread pool)
{ cat "$d/rows.libsvm"; for i in $(seq 1 200); do echo \
    "# padding line $i: comments make no row ........................................"; done; } > "$d/big60.libsvm"
# ---- the other modes: nginx -s reload (HUP) with mode = thread, then async -------------------
for mode in thread async auto; do
    render --mode "$mode" && "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload 2>/dev/null
    okm=0
    for _ in $(seq 1 40); do
        sleep 0.15
        req "mode_$mode" 200 "$base/v1/models/ctr" 2>/dev/null >/dev/null \
            && chk field "$tmp/mode_$mode.json" mode "$mode" >/dev/null 2>&1 \
            && chk field "$tmp/mode_$mode.json" mode_chosen_by configuration >/dev/null 2>&1 && { okm=1; break; }
    done
    sleep 0.3     # old workers drain
    if [ "$mode" = thread ] || [ "$mode" = auto ]; then
        # a broken file renamed in before the pool's VMs mapped anything: they must not load
        # it (nor any file but the version the request holds): answers stay the loaded version's
        head -c 9000 "$d/ctr_v1.wisp" > "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
        sleep 1.3
        nk=$(n_equal 6 "tk_$mode" "$d/ctr_v1.txt" "${L[@]}" --data-binary @"$d/big60.libsvm")
        if [ "$nk" = 6 ] && req "tkm_$mode" 200 "$base/v1/models/ctr" && chk field "$tmp/tkm_$mode.json" mode "$mode" \
           && ! grep -q 'needs `thread_pool' "$prefix/logs/error.log"; then
            ok "mode=$mode: a broken file renamed in, 19 KB bodies (the thread pool): 6/6 answers 200 from the loaded version, scored inline this once (the mode stays $mode)"
        else bad "mode=$mode, broken file renamed in: $nk/6 from the loaded version ($(head -c 200 \
            "$tmp/tk_${mode}_1.json"))"; fi
        cp "$d/ctr_v1.wisp" "$d/ctr.tmp" && mv "$d/ctr.tmp" "$d/ctr.wisp"
        sleep 1.3
    fi
    if [ "$okm" = 1 ] && req "pm_$mode" 200 "${J[@]}" --data-binary @"$d/rows.json" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/pm_$mode.json" "$d/ctr_v1.txt" \
       && req "pl_$mode" 200 "${L[@]}" --data-binary @"$d/badline.libsvm" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/pl_$mode.json" "$d/ctr_v1.txt" 3 \
       && req "pn_$mode" 200 "${N[@]}" --data-binary @"$d/badrows.ndjson" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/pn_$mode.json" "$d/ctr_v1.txt" 2,5,7 && chk field "$tmp/pn_$mode.json" errors.3.line 9; then
        ok "mode=$mode after nginx -s reload: JSON, libsvm and JSON lines (with bad lines) equal the CLI"
    else bad "mode=$mode"; fi
    # a body arriving across a rename (the same bytes renamed in: a new entry, one version)
    slow_post "slowm_$mode" text/x-libsvm "$d/big60.libsvm" "$d/ctr_v1.wisp"
    if head -n 1 "$tmp/slowm_$mode.raw" | grep -q '^HTTP/1.1 200 ' \
        && chk preds "$tmp/slowm_$mode.json" "$d/ctr_v1.txt"; then
        ok "mode=$mode: a 19 KB body arriving across a rename: 200, equal to the CLI"
    else bad "mode=$mode: a body across a rename: $(head -n 1 "$tmp/slowm_$mode.raw") $(head -c 200 \
        "$tmp/slowm_$mode.json")"; fi
done

# ---- a device default that needs a thread pool nginx.conf does not have: mode = "device"
# picks cpu_mode / gpu_mode (here "thread"); with no `thread_pool` line the worker says so in
# the error log and scores inline, and the request still gets its answer
render && sed -i -e '/^thread_pool /d' -e \
    's/^\( *\)mode = "device",/\1mode = "device", cpu_mode = "thread", gpu_mode = "thread",/' \
    "$prefix/conf/nginx.conf" && "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload 2>/dev/null
okm=0
for _ in $(seq 1 40); do
    sleep 0.15
    req mode_dev 200 "$base/v1/models/ctr" 2>/dev/null >/dev/null \
        && chk field "$tmp/mode_dev.json" mode thread >/dev/null 2>&1 \
        && chk field "$tmp/mode_dev.json" mode_chosen_by device >/dev/null 2>&1 && { okm=1; break; }
done
sleep 0.3
if [ "$okm" = 1 ] && req pl_nopool 200 "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" \
   && chk preds "$tmp/pl_nopool.json" "$d/ctr_v1.txt" \
   && req pl_nopool2 200 "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" \
   && chk preds "$tmp/pl_nopool2.json" "$d/ctr_v1.txt" \
   && grep -q 'mode thread (the default on this device) needs `thread_pool wisp threads=2;`' "$prefix/logs/error.log"; \
       then
    ok "a default mode without its thread pool: answered inline, and the error log says what to add"
else bad "default mode without a thread pool (mode thread seen: $okm; log: $(grep -c 'needs `thread_pool' \
    "$prefix/logs/error.log"))"; fi

# ---- inline again, with a 1 KB header buffer: the body no longer arrives with the headers in
# one buffer (wisp.nginx reads libsvm / JSON lines bodies from nginx's memory through
# $request_body, which then joins the buffers); answers carry Content-Length, not chunked
render --mode inline --header-buffer 1k && "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload 2>/dev/null
okm=0
for _ in $(seq 1 40); do
    sleep 0.15
    req mode_inline 200 "$base/v1/models/ctr" 2>/dev/null >/dev/null \
        && chk field "$tmp/mode_inline.json" mode inline >/dev/null 2>&1 && { okm=1; break; }
done
sleep 0.3
hdr=$(curl -s -D - -o "$tmp/pl_split.json" "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" \
    | tr -d '\r')
if [ "$okm" = 1 ] && chk preds "$tmp/pl_split.json" "$d/ctr_v1.txt" \
   && req pn_split 200 "${N[@]}" --data-binary @"$d/rows.ndjson" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/pn_split.json" "$d/ctr_v1_jsonl.txt" \
   && echo "$hdr" | grep -qi "^content-length: $(wc -c < "$tmp/pl_split.json" | tr -d ' ')\$" && ! echo "$hdr" \
       | grep -qi '^transfer-encoding'; then
    ok "a $(wc -c < "$d/rows.libsvm" \
        | tr -d \
        ' ')-byte libsvm body and a JSON lines body read past a 1 KB header buffer equal the CLI; the answer has Content-Length, no chunked encoding"
else bad "bodies past a 1 KB header buffer (mode inline: $okm; headers: $(echo "$hdr" | head -n 8 | tr '\n' ' '))"; fi
expect_error "empty libsvm body (inline, 1 KB header buffer)" ebl 400 "${L[@]}" --data-binary '' \
    "$base/v1/models/ctr:predict"

# ---- issue 14, class 6: the admin endpoints on their own listener (serve.sh --admin-port) --------
# (a probed port can be taken before nginx binds it: the master then logs "Address already in
# use" and keeps the old configuration; try another port)
okm=0
for attempt in 1 2 3 4 5; do
    aport=$(free_port)
    render --mode inline --admin-port "$aport" && "$nginx_bin" -p "$prefix" -c conf/nginx.conf -s reload 2>/dev/null
    for _ in $(seq 1 40); do
        sleep 0.15
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/metrics")" = 403 ] \
            && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$aport/healthz")" = 200 ] \
            && { okm=1; break; }
        grep -q "bind() to 127.0.0.1:$aport failed (98" "$prefix/logs/error.log" && break
    done
    [ "$okm" = 1 ] && break
done
sleep 0.3
if [ "$okm" = 1 ] && req ad1 403 -X POST "$base/v1/models/ctr:reload" \
    && chk has "$tmp/ad1.json" error "admin listener" \
   && req ad2 403 "$base/metrics" && req ad3 200 -X POST "http://127.0.0.1:$aport/v1/models/ctr:reload" \
       && chk field "$tmp/ad3.json" unchanged true \
   && curl -s "http://127.0.0.1:$aport/metrics" | grep -q '^wisp_requests_total' \
   && req ad4 200 "${L[@]}" --data-binary @"$d/rows.libsvm" "$base/v1/models/ctr:predict" \
       && chk preds "$tmp/ad4.json" "$d/ctr_v1.txt"; then
    ok "--admin-port: :reload and /metrics answer 403 (JSON) on the prediction port and are served on the admin port; predictions unchanged"
else bad "admin listener (listener up: $okm)"; fi

# every answer with predictions seen in this run: each null has its errors entry, and back
if ninv=$(chk invariant "$tmp"/*.json "$tmp"/*.out); then ok \
    "every null prediction has its errors entry ($ninv answers checked)"
else bad "null predictions without errors: $ninv"; fi

if grep -E '\[(alert|crit|emerg)\]|lua entry thread aborted|runtime error' "$prefix/logs/error.log" \
    | grep -v 'failed (98: Address already in use)' | grep -q .; then
    bad "error.log has alerts or Lua errors:"; grep -E '\[(alert|crit|emerg)\]|aborted|runtime error' \
        "$prefix/logs/error.log" | head -n 5
else ok "error.log: no alerts, no Lua errors"; fi

nsleep0=$(grep -c 'ngx.sleep(0) called without delayed events patch' "$prefix/logs/error.log")
echo "info: error.log holds $nsleep0 'ngx.sleep(0) without delayed events patch' warnings (mode=async yields with ngx.sleep(0))"; grep "ngx.sleep(0) called" "$prefix/logs/error.log" | sed -E "s/.*request: //" | sort | uniq -c | head -n 3
stop_nginx
if [ -n "$mpid" ] && ! kill -0 "$mpid" 2>/dev/null; then ok "nginx stopped"; else bad "nginx still running"; fi
finish
[ "$fail" -eq 0 ]
