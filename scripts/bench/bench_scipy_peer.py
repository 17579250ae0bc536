#!/usr/bin/env python3
# bench_scipy_peer.py — the scipy peer of scripts/bench/bench_cpu.lua: CSR mat-vec (+ sigmoid) on the same raw arrays, JSON out.
#
# usage: python3 scripts/bench/bench_scipy_peer.py DIR --sizes 10,100,... [--dists uniform,zipf]
#            [--repeats 5] [--min-ms 50] [--max-windows 4096] [--check-rows N] [--bias B]
#
# DIR holds raw little-endian files written by bench_cpu.lua:
#   weights.f32                  the weight vector (float32, num_features values)
#   <dist>.indptr.i32           int32 row offsets of the data rows (rows + 1 values, [0] == 0)
#   <dist>.indices.i32           int32 feature ids
#   <dist>.data.f32              float32 values (1.0 for binary features)
#   <dist>.wisp.f32              (optional) wisp's probabilities for the first --check-rows rows
# Batches of B rows are the windows [k*B, (k+1)*B) of the data rows, k < min(rows // B,
# --max-windows), the same windows bench_cpu.lua scores; each timing repeat rotates
# through them. One thread: the caller sets OMP_NUM_THREADS=1 etc. (scipy's CSR
# mat-vec is single-threaded anyway). Prints one JSON object on stdout; when numpy or
# scipy cannot be imported it prints {"available": false, "reason": ...} and exits 0.
import json
import os
import platform
import sys
import time


def parse_args(argv):
    opts = {"dir": None, "sizes": [], "dists": ["uniform", "zipf"], "repeats": 5, "min_ms": 50.0,
            "max_windows": 4096, "check_rows": 0, "bias": 0.0}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and i + 1 < len(argv):
            v = argv[i + 1]
            i += 2
            if a == "--sizes":
                opts["sizes"] = [int(x) for x in v.split(",") if x]
            elif a == "--dists":
                opts["dists"] = [x for x in v.split(",") if x]
            elif a == "--repeats":
                opts["repeats"] = max(1, int(v))
            elif a == "--min-ms":
                opts["min_ms"] = float(v)
            elif a == "--max-windows":
                opts["max_windows"] = max(1, int(v))
            elif a == "--check-rows":
                opts["check_rows"] = int(v)
            elif a == "--bias":
                opts["bias"] = float(v)
            else:
                raise SystemExit("bench_scipy_peer.py: unknown option %s" % a)
        elif opts["dir"] is None and not a.startswith("--"):
            opts["dir"] = a
            i += 1
        else:
            raise SystemExit("bench_scipy_peer.py: bad argument %s" % a)
    if opts["dir"] is None:
        raise SystemExit("usage: bench_scipy_peer.py DIR --sizes LIST [options]")
    return opts


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def main():
    opts = parse_args(sys.argv[1:])
    try:
        import numpy as np
        import scipy
        import scipy.sparse as sp
    except Exception as e:  # ImportError, or a broken install
        print(json.dumps({"available": False, "reason": "cannot import numpy/scipy: %s" % e,
                          "python": platform.python_version()}))
        return 0

    d = opts["dir"]
    bias = np.float32(opts["bias"])
    w = np.fromfile(os.path.join(d, "weights.f32"), dtype=np.float32)
    nfeat = w.shape[0]
    result = {
        "available": True,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "threads_env": {k: os.environ.get(k) for k in
                        ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        "operation": "p = 1 / (1 + exp(-(A @ w + bias))), A scipy.sparse.csr_matrix float32 "
                     "(rows x %d), w float32; matvec_ms times A @ w alone" % nfeat,
        "repeats": opts["repeats"],
        "min_ms": opts["min_ms"],
        "results": [],
        "check": {},
    }

    def sigmoid_of(A):
        z = A @ w
        z += bias
        return 1.0 / (1.0 + np.exp(-z))

    def timed(fn, mats, min_ns, repeats):
        # warm-up pass, then `repeats` passes of at least min_ns each, rotating through mats
        k = 0
        per_call = []
        calls_total = 0
        for rep in range(repeats + 1):
            calls = 0
            t0 = time.perf_counter_ns()
            while True:
                fn(mats[k])
                k = (k + 1) % len(mats)
                calls += 1
                t = time.perf_counter_ns() - t0
                if t >= min_ns:
                    break
            if rep > 0:
                per_call.append(t / calls)
                calls_total += calls
        return median(per_call), min(per_call), max(per_call), calls_total

    min_ns = opts["min_ms"] * 1e6
    for dist in opts["dists"]:
        indptr = np.fromfile(os.path.join(d, dist + ".indptr.i32"), dtype=np.int32)
        indices = np.fromfile(os.path.join(d, dist + ".indices.i32"), dtype=np.int32)
        data = np.fromfile(os.path.join(d, dist + ".data.f32"), dtype=np.float32)
        nrows = indptr.shape[0] - 1

        # correctness against wisp's probabilities on the first rows
        wisp_path = os.path.join(d, dist + ".wisp.f32")
        if opts["check_rows"] > 0 and os.path.exists(wisp_path):
            pw = np.fromfile(wisp_path, dtype=np.float32).astype(np.float64)
            n = min(opts["check_rows"], nrows, pw.shape[0])
            A = sp.csr_matrix((data[:indptr[n]], indices[:indptr[n]], indptr[:n + 1]), shape=(n, nfeat))
            z = (A @ w).astype(np.float64) + float(bias)
            ps = 1.0 / (1.0 + np.exp(-z))
            result["check"][dist] = {"rows": int(n), "max_abs_diff": float(np.max(np.abs(ps - pw[:n]))) if n else 0.0}

        for B in opts["sizes"]:
            if B > nrows:
                continue
            nwin = min(nrows // B, opts["max_windows"])
            mats = []
            for k in range(nwin):
                a, b = int(indptr[k * B]), int(indptr[(k + 1) * B])
                ip = indptr[k * B:(k + 1) * B + 1] - np.int32(a)
                mats.append(sp.csr_matrix((data[a:b], indices[a:b], ip), shape=(B, nfeat)))
            nnz = int(indptr[nwin * B])
            mv_med, mv_min, mv_max, mv_calls = timed(lambda A: A @ w, mats, min_ns, opts["repeats"])
            tot_med, tot_min, tot_max, tot_calls = timed(sigmoid_of, mats, min_ns, opts["repeats"])
            feats = nnz / (nwin * B)
            result["results"].append({
                "dist": dist, "rows": B, "windows": nwin, "features_per_row": feats,
                "matvec_ms": mv_med / 1e6, "matvec_ms_min": mv_min / 1e6, "matvec_ms_max": mv_max / 1e6,
                "total_ms": tot_med / 1e6, "total_ms_min": tot_min / 1e6, "total_ms_max": tot_max / 1e6,
                "calls": tot_calls,
                "rows_per_s": B / (tot_med / 1e9),
                "ns_per_feature": tot_med / (B * feats),
            })
            del mats
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
