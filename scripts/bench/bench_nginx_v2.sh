#!/bin/bash
# bench_nginx_v2.sh — worker CPU per request of the Open Inference Protocol (v2) infer path against today's v1 libsvm
# body, same 100 rows, side by side.
#
#   scripts/bench/bench_nginx_v2.sh [--label NAME] [--duration S] [--rounds N] [--workers N] [--connections C]
#                                   [--device cpu|gpu] [--record]
#   -> build/results/bench_nginx_v2-<label>.json (scripts/results/ with --record or WISP_RECORD=1)
#
# Model and rows as scripts/bench/bench_nginx.sh: build/demo (make demo) when present, else
# examples/demo.lua --rows 2000 in a temporary folder (13 numeric + 26 categorical columns, 39
# features a row); the first 100 rows of its libsvm file. Four bodies of those rows
# (scripts/bench/bench_nginx_v2_bodies.lua): v1 text/x-libsvm (the reference: today's fastest
# body), v1 JSON {"instances": [{"ids", "vals"}]}, v2 binary (indptr INT64, indices INT32,
# values FP32 in the binary tensor data extension, outputs binary: what tritonclient sends) and
# v2 JSON tensors (outputs JSON).
# Before measuring, each body's answer is checked against `wisp score` on the rows (|p - cli| <= 1e-6).
# Measured: --rounds rounds (default 3), each a wrk run of --duration seconds (default 4) of
# every body in turn (1 wrk thread, --connections, default 8); the CPU seconds of nginx's workers
# (utime + stime, /proc/PID/stat) over each run / the requests answered = worker CPU per request,
# as bench_nginx.sh measures it. Ratios are per round (v2 over the libsvm run of the same round),
# the headline their median; targets (issue 18): v2 binary <= 1.15x, v2 JSON <= 1.5x. Then the
# in-process peer (scripts/bench/bench_nginx_peer.lua, one process, --duration s, same device):
# each body's rows/s (wrk's, wall clock) over the peer's. On the H200 (GPU default mode):
#   scripts/bench/bench_nginx_v2.sh --device gpu --label h200-gpu --record
[ -z "$BASH_VERSION" ] && exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/../.." || exit 1
root=$(pwd)
. scripts/lib/record.sh
label=dev; duration=4; rounds=3; workers=1; conns=8; device=cpu; RECORD=0
cmdline="scripts/bench/bench_nginx_v2.sh $*"
while [ $# -gt 0 ]; do
    case "$1" in
        --label) label=$2; shift 2;; --duration) duration=$2; shift 2;; --rounds) rounds=$2; shift 2;;
        --workers) workers=$2; shift 2;; --connections) conns=$2; shift 2;; --device) device=$2; shift 2;;
        --record) RECORD=1; shift;;
        -h|--help) sed -n '2,/^\[ -z/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0;;
        *) echo "bench_nginx_v2.sh: unknown option '$1' (try --help)" >&2; exit 2;;
    esac
done
build=${WISP_BUILD:-build}
case "$build" in /*) ;; *) build="$root/$build";; esac
W="$build/wisp"
command -v python3 >/dev/null 2>&1 || { echo "bench_nginx_v2.sh: python3 not found" >&2; exit 1; }
bench=bench_nginx_v2
. scripts/bench/bench_nginx_lib.sh
bench_setup
WRK=wrk; wrk_threads=1

# ---- rows, bodies, the CLI's answers --------------------------------------------------------
head -n 100 "$data" > "$tmp/hundred.libsvm"
"$W" run scripts/bench/bench_nginx_v2_bodies.lua "$tmp/hundred.libsvm" "$tmp" || exit 1
hlen=$(cat "$tmp/v2.bin.hlen")
"$W" score -m "$model" -d cpu "$tmp/hundred.libsvm" > "$tmp/cli.txt" || exit 1

user_opt=""; [ "$(id -u)" = 0 ] && user_opt="--user root"
examples/openresty/serve.sh --render-only --prefix "$prefix" --port "$port" --models "m=$model" --workers "$workers" \
    --device "$device" --max-rows 10000 --build "$build" $user_opt >/dev/null || exit 1
"$nginx_bin" -p "$prefix" -c conf/nginx.conf || exit 1
for _ in $(seq 1 100); do curl -s -o /dev/null -w '%{http_code}' "$base/readyz" 2>/dev/null | grep -q 200 \
    && break; sleep 0.1; done

v1url="$base/v1/models/m:predict"; v2url="$base/v2/models/m/infer"
# kind: name url body content-type header-length
kinds="v1_libsvm $v1url $tmp/hundred.libsvm text/x-libsvm 0
v1_json $v1url $tmp/v1.json application/json 0
v2_binary $v2url $tmp/v2.bin application/octet-stream $hlen
v2_json $v2url $tmp/v2.json application/json 0"

# ---- every body's answer equals the CLI's ---------------------------------------------------
while read -r name url body ct hl; do
    hdr=(); [ "$hl" != 0 ] && hdr=(-H "Inference-Header-Content-Length: $hl")
    curl -s -D "$tmp/$name.hdr" -o "$tmp/$name.out" -H "Content-Type: $ct" "${hdr[@]}" --data-binary @"$body" "$url"
done <<< "$kinds"
python3 - "$tmp" <<'PYEOF' \
    || { echo "bench_nginx_v2.sh: an answer differs from wisp score: not measuring" >&2; exit 1; }
import json, struct, sys
d = sys.argv[1]
cli = [float(x) for x in open(d + "/cli.txt").read().split()]
def hdr(name):
    h = {}
    for line in open("%s/%s.hdr" % (d, name), errors="replace"):
        if ":" in line:
            k, v = line.split(":", 1); h[k.strip().lower()] = v.strip()
    return h
got = {}
for name in ("v1_libsvm", "v1_json"):
    got[name] = json.load(open("%s/%s.out" % (d, name)))["predictions"]
got["v2_json"] = [o for o in json.load(open(d + "/v2_json.out"))["outputs"] if o["name"] == "probability"][0]["data"]
raw = open(d + "/v2_binary.out", "rb").read()
hl = int(hdr("v2_binary")["inference-header-content-length"])
head = json.loads(raw[:hl])
o = [o for o in head["outputs"] if o["name"] == "probability"][0]
got["v2_binary"] = list(struct.unpack("<%df" % o["shape"][0], raw[hl:hl + 4 * o["shape"][0]]))
ok = True
for k, v in got.items():
    bad = len(v) != len(cli) or any(p is None or abs(p - c) > 1e-6 for p, c in zip(v, cli))
    print("bench_nginx_v2.sh: %-10s %d rows %s wisp score" % (k, len(v), "DIFFER from" if bad else "equal"), file=sys.stderr)
    ok = ok and not bad
sys.exit(0 if ok else 1)
PYEOF

# warm-up: every body a second; then the rounds, each body in turn (wrkrun: bench_nginx_lib.sh's, as
# bench_nginx.sh measures its runs)
while read -r name url body ct hl; do
    wrkrun "${name}_warmup" 0 "$conns" 1 "$body" "$ct" 100 0 0 spec/nginx/wrk_post.lua "$hl" >/dev/null 2>&1
done <<< "$kinds"
: > "$runs"
for r in $(seq 1 "$rounds"); do
    while read -r name url body ct hl; do
        wrkrun "$name" "$r" "$conns" "$duration" "$body" "$ct" 100 0 0 spec/nginx/wrk_post.lua "$hl" >/dev/null
    done <<< "$kinds"
done

# the in-process peer (bench_nginx.sh's): the same 100-row libsvm body parsed and scored in one
# process on the same device, --duration seconds: rows/s of each body over the peer's
peer_line=$("$W" run scripts/bench/bench_nginx_peer.lua "$model" "$tmp/hundred.libsvm" "$device" "$duration" \
    | sed -n 's/^PEER //p')
[ -z "$peer_line" ] && peer_line='{"error": "the peer printed nothing"}'
echo "{\"name\": \"peer_100row_1proc\", \"round\": 1, ${peer_line#\{}" >> "$runs"
echo "  peer (in-process, 1 process): $peer_line" >&2

out_dir=$(record_dir)
out="$out_dir/bench_nginx_v2-$label.json"
python3 - "$runs" "$tmp/doc.json" "$cmdline" "$label" "$workers" "$conns" "$duration" "$rounds" "$device" <<'PYEOF' \
    || exit 1
import json, statistics, sys
runs_path, doc_path, cmd, label, workers, conns, duration, rounds, device = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_path)]
peer = [r for r in runs if r["name"] == "peer_100row_1proc"]
runs = [r for r in runs if r["name"] != "peer_100row_1proc"]
peer_rows = peer[0].get("parse_score_rows_per_s") if peer else None
for r in runs:
    n = r.get("requests") or 0
    r["rows_per_request"] = 100
    r["worker_cpu_us_per_request"] = round(r["worker_cpu_s"] * 1e6 / n, 1) if n else None
kinds = ["v1_libsvm", "v1_json", "v2_binary", "v2_json"]
per = {k: [r for r in runs if r["name"] == k] for k in kinds}
summary = {}
for k in kinds:
    xs = [r["worker_cpu_us_per_request"] for r in per[k] if r["worker_cpu_us_per_request"]]
    summary[k] = {"worker_cpu_us_per_request_median": statistics.median(xs) if xs else None,
                  "worker_cpu_us_per_request_all": xs,
                  "rps_median": statistics.median([r["rps"] for r in per[k]]) if per[k] else None,
                  "rows_per_s_median": 100 * statistics.median([r["rps"] for r in per[k]]) if per[k] else None,
                  "rows_per_s_over_peer": round(100 * statistics.median([r["rps"] for r in per[k]]) / peer_rows, 3) if (per[k] and peer_rows) else None,
                  "non2xx": sum(r.get("non2xx", 0) for r in per[k])}
ratios = {}
for k, target in (("v2_binary", 1.15), ("v2_json", 1.5), ("v1_json", None)):
    rs = []
    for a, b in zip(per[k], per["v1_libsvm"]):
        if a["worker_cpu_us_per_request"] and b["worker_cpu_us_per_request"]:
            rs.append(round(a["worker_cpu_us_per_request"] / b["worker_cpu_us_per_request"], 3))
    ratios[k + "_over_v1_libsvm"] = {"per_round": rs, "median": statistics.median(rs) if rs else None, "target": target,
                                     "meets_target": (statistics.median(rs) <= target) if (rs and target) else None}
doc = {"benchmark": "bench_nginx_v2", "label": label, "command": cmd, "script": "scripts/bench/bench_nginx_v2.sh",
       "issue": 18, "device": device,
       "workload": "100 rows of the demo model (39 features a row), one body per request; nginx %s worker(s), wrk 1 thread %s connections, %s s a run, %s rounds interleaved" % (workers, conns, duration, rounds),
       "definitions": {"worker_cpu_us_per_request": "CPU seconds (utime + stime) of nginx's workers over a run / requests answered",
                       "ratio": "per round: the v2 run's worker CPU per request over the v1 libsvm run's of the same round; the headline is the median"},
       "peer": {"in_process": "scripts/bench/bench_nginx_peer.lua: the same 100-row libsvm body parsed and scored in one process, same device, same run (results.in_process_peer)",
                "v1_libsvm": "today's text/x-libsvm body of the same 100 rows, same nginx, same run (results.summary.v1_libsvm)",
                "v1_json": "today's {\"instances\": [{\"ids\", \"vals\"}]} body of the same rows (results.summary.v1_json)"},
       "summary": summary, "ratios": ratios, "in_process_peer": peer[0] if peer else None, "runs": runs}
json.dump(doc, open(doc_path, "w"), indent=1)
for k in kinds:
    print("bench_nginx_v2.sh: %-10s %6.1f us of worker CPU a 100-row request (median of %d); %.0f rows/s = %s of the in-process peer" % (
        k, summary[k]["worker_cpu_us_per_request_median"] or -1, len(per[k]), summary[k]["rows_per_s_median"] or 0,
        summary[k]["rows_per_s_over_peer"]), file=sys.stderr)
for k, v in ratios.items():
    print("bench_nginx_v2.sh: %-26s %s (per round %s; target %s)" % (k, v["median"], v["per_round"], v["target"]), file=sys.stderr)
PYEOF
record_envelope "$W" "$tmp/doc.json" "$out" 2>/dev/null || { echo "bench_nginx_v2.sh: cannot write $out" >&2; exit 1; }
echo "bench_nginx_v2.sh: wrote $out" >&2
