#!/usr/bin/env python3
"""bench_auto.py — `wisp score` on libsvm files of every size, --device cpu, gpu and auto, in one run (issue 20).

    python3 scripts/bench/bench_auto.py [--build build] [--sizes 1,10,...,10000000] [--rounds 3]
                                        [--devices cpu,gpu,auto] [--label NAME] [--record]
    -> build/results/bench_auto[-LABEL].json (scripts/results/ with --record or WISP_RECORD=1)

The data (made once under BUILD/bench_auto/): a Criteo-like model (13 numeric + 26 categorical
columns of 2^16 buckets: 1,703,949 fp32 weights) and its rows from scripts/load/gen_libsvm.lua
(39 features a row); the files of N rows are the first N lines of a 1M-row file, and 10M rows are
that file ten times over. Each size is scored by a fresh process per device, the devices
interleaved within a round and the rounds repeated (--rounds): the wall time is the whole command
(start-up, model load, device bring-up, parse, score, write), as a user of the CLI pays it. `--stats`
gives where the time went (parse, score, kernel/copies, write: thread time) and the device that
scored the last batch. Kept: the median wall time over the rounds, and every round.

A device is "within the noise of the better" at a size when its median is at most the better
device's median plus the larger spread (max - min over the rounds) of the two.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
import record  # noqa: E402

SIZES = [1, 10, 100, 1000, 10000, 40000, 100000, 1000000, 10000000]
MODEL_LUA = """
local wisp = require "wisp"
local synth = require "wisp.synth"
local g = synth.criteo { buckets = 65536, seed = 42 }
local w, bias = g:true_model(1042)
assert(wisp.write_model(arg[1], w, g.num_features, { bias = bias, meta = { source = "bench_auto" } }))
"""


def log(*a):
    print("bench_auto:", *a, file=sys.stderr, flush=True)


def make_data(wisp, d, sizes):
    os.makedirs(d, exist_ok=True)
    model = os.path.join(d, "criteo.wisp")
    if not os.path.exists(model):
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(MODEL_LUA)
        try:
            subprocess.run([wisp, "run", f.name, model], check=True)
        finally:
            os.unlink(f.name)
    base = os.path.join(d, "rows_1000000.svm")
    if not os.path.exists(base):
        log("writing 1M rows (gen_libsvm.lua) ...")
        tmp = base + ".tmp"
        subprocess.run([wisp, "run", os.path.join(ROOT, "scripts", "load", "gen_libsvm.lua"), "--rows", "1000000",
                        "--buckets", "65536", tmp], check=True)
        os.replace(tmp, base)
    files = {}
    for n in sizes:
        p = os.path.join(d, "rows_%d.svm" % n)
        if not os.path.exists(p):
            tmp = p + ".tmp"
            with open(base, "rb") as src, open(tmp, "wb") as out:
                if n <= 1000000:
                    for i, line in enumerate(src):
                        if i >= n:
                            break
                        out.write(line)
                else:
                    whole = src.read()
                    for _ in range(n // 1000000):
                        out.write(whole)
                    rest = n % 1000000
                    if rest:
                        out.write(b"".join(whole.splitlines(keepends=True)[:rest]))
            os.replace(tmp, p)
        files[n] = p
    return model, files


STATS = re.compile(r"wisp score: (\d+) rows in ([0-9.]+) s \(([0-9.]+) rows/s\) on (\S+), (\d+) threads")
THREAD = re.compile(r"thread time: parse ([0-9.]+) ms, score ([0-9.]+) ms \(kernel ([0-9.]+), h2d ([0-9.]+), "
                    r"d2h ([0-9.]+)\), format ([0-9.]+) ms; write ([0-9.]+) ms")


def run_one(wisp, model, path, device, out):
    env = dict(os.environ)
    t0 = time.perf_counter()
    r = subprocess.run([wisp, "score", "-m", model, "-d", device, "--stats", "-o", out, path],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit("bench_auto: wisp score -d %s %s failed (%d): %s" % (device, path, r.returncode, r.stderr[-2000:]))
    m, t = STATS.search(r.stderr), THREAD.search(r.stderr)
    rec = {"wall_s": wall, "stderr": [l for l in r.stderr.splitlines() if l.strip()][:6]}
    if m:
        rec.update(rows=int(m.group(1)), inside_s=float(m.group(2)), last_device=m.group(4), threads=int(m.group(5)))
    if t:
        rec.update(parse_ms=float(t.group(1)), score_ms=float(t.group(2)), kernel_ms=float(t.group(3)),
                   h2d_ms=float(t.group(4)), d2h_ms=float(t.group(5)), format_ms=float(t.group(6)),
                   write_ms=float(t.group(7)))
    return rec


def main(argv):
    rec_flag = record.take_record_flag(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("WISP_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--devices", default="cpu,gpu,auto")
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    args = ap.parse_args(argv[1:])
    wisp = os.path.join(os.path.abspath(args.build), "wisp")
    if not os.access(wisp, os.X_OK):
        raise SystemExit("bench_auto: %s not found (make BUILD=%s all)" % (wisp, args.build))
    sizes = [int(s) for s in args.sizes.split(",") if s]
    devices = [d for d in args.devices.split(",") if d]
    data = os.path.join(os.path.abspath(args.build), "bench_auto")
    model, files = make_data(wisp, data, sizes)
    out = os.path.join(data, "out.txt")
    runs = {str(n): {d: [] for d in devices} for n in sizes}
    t_start = time.time()
    for r in range(args.rounds):
        for n in sizes:
            for d in devices:
                one = run_one(wisp, model, files[n], d, out)
                runs[str(n)][d].append(one)
            log("round %d/%d, %d rows:" % (r + 1, args.rounds, n),
                ", ".join("%s %.4f s" % (d, runs[str(n)][d][-1]["wall_s"]) for d in devices))
    # the answers agree across devices (the last size scored by every device)
    summary = {}
    for n in sizes:
        row = {}
        for d in devices:
            ws = [x["wall_s"] for x in runs[str(n)][d]]
            last = runs[str(n)][d][-1]
            row[d] = {"median_s": statistics.median(ws), "min_s": min(ws), "max_s": max(ws),
                      "last_device": last.get("last_device"),
                      "parse_ms_median": statistics.median([x.get("parse_ms", 0.0) for x in runs[str(n)][d]]),
                      "score_ms_median": statistics.median([x.get("score_ms", 0.0) for x in runs[str(n)][d]])}
        fixed = [d for d in devices if d != "auto"]
        if fixed:
            best = min(fixed, key=lambda d: row[d]["median_s"])
            row["better_fixed_device"] = best
            for d in devices:
                if d == best:
                    continue
                noise = max(row[d]["max_s"] - row[d]["min_s"], row[best]["max_s"] - row[best]["min_s"])
                row[d]["over_better"] = row[d]["median_s"] / row[best]["median_s"]
                row[d]["within_noise_of_better"] = row[d]["median_s"] <= row[best]["median_s"] + noise
        summary[str(n)] = row
    doc = {
        "benchmark": "bench_auto", "issue": 20, "label": args.label or "unlabelled",
        "command": " ".join(["python3", "scripts/bench/bench_auto.py"] + argv[1:]),
        "workload": "wisp score -m criteo.wisp (1,703,949 fp32 weights) --stats -o FILE on libsvm files of "
                    "39 features a row (gen_libsvm.lua), one process per run",
        "peers": "in results.summary: every device of --devices on every size, interleaved in one run",
        "seconds": time.time() - t_start,
        "results": {"summary": summary, "runs": runs, "sizes": sizes, "devices": devices, "rounds": args.rounds},
    }
    name = "bench_auto%s.json" % ("-" + args.label if args.label else "")
    path = args.out or record.out_path(name, rec_flag)
    record.write(path, doc)
    for n in sizes:
        row = summary[str(n)]
        print("%9d rows: " % n + ", ".join("%s %.4f s (%s)" % (d, row[d]["median_s"], row[d]["last_device"])
                                            for d in devices), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
