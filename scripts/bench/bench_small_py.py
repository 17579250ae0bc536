#!/usr/bin/env python3
"""bench_small_py.py — 10 rows end to end through the wisp package, in a process of its own.

The Python half of issue 20's small-batch figure, measured the way scripts/bench/bench_small_gpu.cu
measures the C half: a fresh process that loads the model, makes ROWS rows of 39 features (13 valued,
26 binary: a value for every entry, 1.0 for the binary ones, as a scipy CSR or an (indptr, indices,
values) tuple carries them), and times CALLS calls of wisp.Session(model, DEVICE).score((indptr,
indices, values)) with time.perf_counter_ns around each. scripts/bench/bench_gpu.py runs it round by
round beside the C driver (and also times the package inside its own process, after its other
sections: both figures are recorded).

    python3 scripts/bench/bench_small_py.py --model PATH [--device gpu] [--rows 10] [--calls 20000]

Prints one JSON object: median/p90/p99/min of the calls (us), the library's own time a call
(inside_wisp_us: the session's ns_total over its batches), the device that scored, fallbacks, and the
largest difference to a CPU session's answers on the same rows.
"""
import argparse
import json
import os
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a .wisp model file")
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=20)
    args = ap.parse_args()
    if not 1 <= args.rows <= 4096 or args.calls < 10:
        ap.error("--rows 1..4096, --calls >= 10")
    try:
        import wisp
    except ImportError as e:
        raise SystemExit("bench_small_py: import wisp failed (%s): install the package or put it on PYTHONPATH" % e)
    m = wisp.load(args.model)
    rng = np.random.default_rng(args.seed)
    K, KV = 39, 13
    rows = args.rows
    ptr = (np.arange(rows + 1) * K).astype(np.uint32)
    ids = rng.integers(0, m.num_features, rows * K).astype(np.uint32)
    vals = np.ones(rows * K, np.float32)
    for r in range(rows):
        vals[r * K:r * K + KV] = rng.uniform(-1, 1, KV).astype(np.float32)
    X = (ptr, ids, vals)
    s = wisp.Session(m, args.device)
    for _ in range(200):
        s.score(X)
    s.reset_stats()
    t = np.empty(args.calls)
    clock = time.perf_counter_ns
    score = s.score
    for i in range(args.calls):
        t0 = clock()
        score(X)
        t[i] = clock() - t0
    st = s.stats()
    got = s.score(X)
    ref = wisp.Session(m, "cpu").score(X)
    t /= 1e3
    print(json.dumps({
        "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "python": sys.version.split()[0], "numpy": np.__version__, "wisp": wisp.version(),
        "device": args.device, "ran_on": s.last_device, "rows": rows, "calls": args.calls,
        "fallbacks": st["fallbacks"], "max_abs_diff_vs_cpu": float(np.max(np.abs(got - ref))),
        "inside_wisp_us": st["ns_total"] / max(st["batches"], 1) / 1e3,
        "session_score": {"median_us": float(np.median(t)), "p90_us": float(np.percentile(t, 90)),
                          "p99_us": float(np.percentile(t, 99)), "min_us": float(t.min()),
                          "mean_us": float(t.mean())},
    }))


if __name__ == "__main__":
    main()
