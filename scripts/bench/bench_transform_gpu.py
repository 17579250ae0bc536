#!/usr/bin/env python3
"""bench_transform_gpu.py — the transform node on the GPU: raw columns -> probabilities on the device, against transforming on the CPU and shipping every crossed id.

Usage: scripts/bench/bench_transform_gpu.py [--lib build/libwisp.so] [--rows 200000] [--repeat 10] [--cpu-repeat 3]
                                      [--threads N] [--label LABEL] [--out scripts/results/bench_transform_gpu-LABEL.json]

Model: 26 categorical string inputs C1..C26 (Criteo-like: 8 hex digits, Zipf(1.2) ids,
10% empty = missing), 26 hash_bucket columns (10^5 buckets) and all 325 pairwise crosses
(10^5 buckets each): 351 columns, 35.1M fp32 weights, random. Rows: --rows, parsed once
from TSV into raw columns in host memory (wisp_raw, pageable), before any timing.

Measured in the same run, on the same rows:
 (a) gpu_e2e: wisp_session_score_raw on "gpu": the raw columns are packed into pinned
     staging and copied (the only thing that crosses PCIe), fingerprinted, and one fused
     kernel hashes, crosses and sums the weights per row; probabilities back.
 (b) the peer: wisp_transform on the CPU (1 thread: the whole batch on this thread; all
     cores: the rows cut into one raw batch per thread, transformed in parallel threads --
     ctypes drops the GIL), then every id shipped and scored by wisp_session_score on the
     same GPU (the all-cores peer submits its per-thread batches back to back with
     wisp_session_submit/wait).
 (c) gpu_transform: wisp_session_transform (ids computed on the GPU and copied back into a
     batch), for reference.
Floor of (a): the raw bytes shipped (bytes_h2d of one call) over 50 GB/s (PCIe gen5 x16,
~55 GB/s measured pinned in scripts/gpu_notes.md).
Timings: wall clock, median of --repeat (CPU peers: of --cpu-repeat). Correctness: the
probabilities of (a) and (b) agree to 1e-6 (max |diff| reported); the ids of (c) equal (b)'s.
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import record  # noqa: E402  scripts/lib/record.py: the commit, the machine, where results go
import wisp_pkg  # noqa: E402  scripts/lib/wisp_pkg.py: wisp._capi, from the package (or this checkout)
capi = wisp_pkg.capi()

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NCAT = 26
BUCKETS = 100000

vp, sz, u64, ci, P = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int, ctypes.POINTER


def description():
    inputs = [{"name": "C%d" % k, "dtype": "string"} for k in range(1, NCAT + 1)]
    cols, off = [], 0
    for k in range(1, NCAT + 1):
        cols.append({"name": "C%d" % k, "type": "hash_bucket", "key": "C%d" % k, "buckets": BUCKETS, "offset": off})
        off += BUCKETS
    for i in range(1, NCAT + 1):
        for j in range(i + 1, NCAT + 1):
            cols.append({"name": "C%d_X_C%d" % (i, j), "type": "crossed", "keys": ["C%d" % i, "C%d" % j],
                         "buckets": BUCKETS, "offset": off})
            off += BUCKETS
    return {"format": "wisp-columns", "version": 1, "inputs": inputs, "columns": cols, "num_features": off}, off


def gen_tsv(rows, seed):
    rng = np.random.default_rng(seed)
    zipf = rng.zipf(1.2, size=(rows, NCAT)) % (1 << 28)
    mult = np.array([(2654435761 * (k + 1)) | 1 for k in range(NCAT)], dtype=np.uint64)
    cats = (zipf.astype(np.uint64) * mult) & np.uint64(0xFFFFFFFF)
    miss = rng.random((rows, NCAT)) < 0.1
    uniq, inv = np.unique(cats, return_inverse=True)
    hexes = ["%08x" % v for v in uniq.tolist()]
    inv = inv.reshape(rows, NCAT)
    lines = []
    for r in range(rows):
        ir, mr = inv[r], miss[r]
        lines.append("\t".join("" if mr[k] else hexes[ir[k]] for k in range(NCAT)))
    return ("\n".join(lines) + "\n").encode()


def load(path):
    lib = capi.load(path, ROOT)
    return lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.environ.get("WISP_LIB", os.path.join(ROOT, "build", "libwisp.so")))
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--cpu-repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--label", default="dev")
    ap.add_argument("--out", default=None)
    rec = record.take_record_flag(sys.argv)
    a = ap.parse_args()
    out_path = a.out or record.out_path("bench_transform_gpu-%s.json" % a.label, rec)
    L = load(a.lib)

    def ok(rc, what):
        if rc != 0:
            raise SystemExit("bench_transform_gpu: %s: %s" % (what, L.wisp_errmsg().decode()))

    eng = vp()
    ok(L.wisp_engine_new(0, ctypes.byref(eng)), "engine")
    ngpu = L.wisp_engine_gpu_count(eng)
    gpu_status = L.wisp_engine_gpu_status(eng).decode()
    if ngpu == 0:
        print("bench_transform_gpu: no usable GPU (%s): every \"GPU\" figure below is the CPU fallback (device cpu "
              "in the JSON); run it on a GPU machine for the real figures" % gpu_status, file=sys.stderr)
    spec, nf = description()
    text = json.dumps(spec).encode()
    cols = vp()
    ok(L.wisp_columns_parse(text, len(text), ctypes.byref(cols)), "columns")
    rng = np.random.default_rng(7)
    w = (rng.standard_normal(nf).astype(np.float32) * 0.05)
    mpath = "/tmp/bench_transform_gpu_%d.wisp" % os.getpid()
    ok(L.wisp_model_write(mpath.encode(), w.ctypes.data_as(P(ctypes.c_float)), nf, -1.0, 0, b"source=bench_transform_gpu\n",
                          text), "model write")
    del w
    model = vp()
    ok(L.wisp_model_load(eng, mpath.encode(), ctypes.byref(model)), "model load")
    os.unlink(mpath)

    t0 = time.perf_counter()
    tsv = gen_tsv(a.rows, 11)
    t_gen = time.perf_counter() - t0
    schema = ",".join("C%d" % k for k in range(1, NCAT + 1)).encode()

    def parse(chunk_text):
        raw = vp()
        ok(L.wisp_raw_new(eng, cols, ctypes.byref(raw)), "raw")
        ok(L.wisp_raw_set_schema(raw, schema, 9), "schema")
        line, used = u64(0), sz(0)
        ok(L.wisp_raw_parse_tsv(raw, chunk_text, len(chunk_text), 1, 0, ctypes.byref(line), ctypes.byref(used)), "parse")
        return raw

    raw = parse(tsv)
    rows = L.wisp_raw_rows(raw)
    # the all-cores peer's raw batches: the same rows cut into --threads pieces
    lines = tsv.split(b"\n")[:rows]
    nt = max(1, a.threads)
    per = (rows + nt - 1) // nt
    raws = [parse(b"\n".join(lines[i:i + per]) + b"\n") for i in range(0, rows, per)]
    del lines
    out_gpu = (ctypes.c_float * rows)()
    out_cpu = (ctypes.c_float * rows)()
    dev = b"gpu" if ngpu else b"cpu"
    sess = vp()
    ok(L.wisp_session_new(eng, model, dev, ctypes.byref(sess)), "session")
    stat_names = {}
    i = 0
    while True:
        s = L.wisp_stat_name(i)
        if s is None:
            break
        stat_names[s.decode()] = i
        i += 1

    def stats():
        return {k: int(L.wisp_session_stat(sess, v)) for k, v in stat_names.items()}

    def timed(fn, n):
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return ts

    # (a) fused on the device
    ok(L.wisp_session_score_raw(sess, raw, out_gpu), "score_raw (warm-up)")
    last_dev = L.wisp_session_last_device(sess).decode()
    L.wisp_session_reset_stats(sess)
    t_a = timed(lambda: ok(L.wisp_session_score_raw(sess, raw, out_gpu), "score_raw"), a.repeat)
    st_a = stats()
    calls = a.repeat
    bytes_h2d = st_a["bytes_h2d"] / calls
    stages_a = {k: st_a[k] / calls / 1e6 for k in ("ns_h2d", "ns_transform", "ns_kernel", "ns_d2h", "ns_sync", "ns_overhead", "ns_total")}

    # (b) 1 thread: CPU transform, then ship every id and score on the GPU
    batch = vp()
    ok(L.wisp_batch_new(eng, ctypes.byref(batch)), "batch")

    def cpu1_transform():
        L.wisp_batch_clear(batch)
        ok(L.wisp_transform(raw, batch), "transform")

    def score_batch():
        ok(L.wisp_session_score(sess, batch, out_cpu), "score")

    cpu1_tr, cpu1_sc = [], []
    L.wisp_session_reset_stats(sess)
    for _ in range(a.cpu_repeat):
        cpu1_tr += timed(cpu1_transform, 1)
        cpu1_sc += timed(score_batch, 1)
    st_b = stats()
    nnz = L.wisp_batch_nnz(batch)
    bytes_b = st_b["bytes_h2d"] / a.cpu_repeat
    diff = np.abs(np.frombuffer(out_gpu, dtype=np.float32).astype(np.float64) -
                  np.frombuffer(out_cpu, dtype=np.float32).astype(np.float64))
    maxdiff = float(np.nanmax(diff)) if rows else 0.0
    nan_mismatch = int(np.sum(np.isnan(np.frombuffer(out_gpu, dtype=np.float32)) !=
                              np.isnan(np.frombuffer(out_cpu, dtype=np.float32))))

    # (c) ids from the GPU, compared with the CPU's
    gb = vp()
    ok(L.wisp_batch_new(eng, ctypes.byref(gb)), "batch")
    ok(L.wisp_session_transform(sess, raw, gb), "session transform (warm-up)")

    def gpu_transform():
        L.wisp_batch_clear(gb)
        ok(L.wisp_session_transform(sess, raw, gb), "session transform")
    t_c = timed(gpu_transform, max(3, a.repeat // 2))
    same_ids = L.wisp_batch_nnz(gb) == nnz and \
        ctypes.string_at(L.wisp_batch_ids(gb), nnz * 4) == ctypes.string_at(L.wisp_batch_ids(batch), nnz * 4) and \
        ctypes.string_at(L.wisp_batch_indptr(gb), (rows + 1) * 4) == ctypes.string_at(L.wisp_batch_indptr(batch), (rows + 1) * 4)

    # (b') all cores: one raw batch per thread, transformed in parallel, then submitted back to back
    batches = []
    for _ in raws:
        b = vp()
        ok(L.wisp_batch_new(eng, ctypes.byref(b)), "batch")
        batches.append(b)
    outs = [(ctypes.c_float * L.wisp_raw_rows(r))() for r in raws]

    def cpun_transform():
        errs = []

        def work(k):
            L.wisp_batch_clear(batches[k])
            if L.wisp_transform(raws[k], batches[k]) != 0:
                errs.append(k)
        th = [threading.Thread(target=work, args=(k,)) for k in range(len(raws))]
        for t in th:
            t.start()
        for t in th:
            t.join()
        if errs:
            raise SystemExit("bench_transform_gpu: parallel transform failed")

    def cpun_score():
        for b, o in zip(batches, outs):
            ok(L.wisp_session_submit(sess, b, o), "submit")
        for _ in batches:
            ok(L.wisp_session_wait(sess, None), "wait")
    cpun_tr, cpun_sc = [], []
    for _ in range(a.cpu_repeat):
        cpun_tr += timed(cpun_transform, 1)
        cpun_sc += timed(cpun_score, 1)
    joined = np.concatenate([np.frombuffer(o, dtype=np.float32) for o in outs])
    maxdiff_n = float(np.nanmax(np.abs(joined.astype(np.float64) - np.frombuffer(out_cpu, dtype=np.float32).astype(np.float64))))

    med = statistics.median
    e2e_a = med(t_a)
    peer1 = med([x + y for x, y in zip(cpu1_tr, cpu1_sc)])
    peern = med([x + y for x, y in zip(cpun_tr, cpun_sc)])
    floor = bytes_h2d / 50e9
    res = {
        "name": "bench_transform_gpu", "label": a.label,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "commit": record.commit(),
        "peers": "in results: peer_cpu1 and peer_cpu_all (the CPU transform on 1 / all threads, then the GPU score), same run",
        "machine": {"host": platform.node(), "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                                                         if l.startswith("model name")), platform.processor()),
                    "cores": os.cpu_count(), "gpu": L.wisp_engine_gpu_name(eng, 0).decode() if ngpu else None,
                    "gpu_status": gpu_status, "load_average_1m": round(os.getloadavg()[0], 2)},
        "model": {"inputs": NCAT, "columns": len(spec["columns"]), "crosses": 325, "buckets": BUCKETS,
                  "num_features": nf, "dtype": "f32"},
        "rows": rows, "ids_per_batch": nnz, "device": last_dev, "tsv_generation_s": round(t_gen, 2),
        "gpu_e2e_ms": {"median": e2e_a * 1e3, "best": min(t_a) * 1e3, "all": [t * 1e3 for t in t_a],
                       "stages_ms": stages_a, "bytes_h2d": bytes_h2d,
                       "floor_ms_at_50GBps": floor * 1e3, "over_floor": e2e_a / floor if floor else None},
        "peer_cpu1": {"transform_ms": med(cpu1_tr) * 1e3, "ship_and_score_ms": med(cpu1_sc) * 1e3, "total_ms": peer1 * 1e3,
                      "bytes_h2d": bytes_b},
        "peer_cpu_all": {"threads": len(raws), "transform_ms": med(cpun_tr) * 1e3, "ship_and_score_ms": med(cpun_sc) * 1e3,
                         "total_ms": peern * 1e3},
        "gpu_transform_ids_back_ms": {"median": med(t_c) * 1e3, "ids_equal_cpu": bool(same_ids)},
        "ratio_vs_cpu1": peer1 / e2e_a, "ratio_vs_cpu_all": peern / e2e_a, "target_ratio": 5.0,
        "correctness": {"max_abs_diff_gpu_vs_cpu_transform": maxdiff, "nan_mismatches": nan_mismatch,
                        "max_abs_diff_threads_vs_one": maxdiff_n},
    }
    record.write(out_path, res)
    print("rows %d, %d ids a batch (%d columns), device %s" % (rows, nnz, len(spec["columns"]), last_dev))
    print("(a) GPU end to end (raw -> probabilities): %.3f ms median (best %.3f); raw bytes shipped %.1f MB, floor %.3f ms at 50 GB/s (%.2fx)"
          % (e2e_a * 1e3, min(t_a) * 1e3, bytes_h2d / 1e6, floor * 1e3, e2e_a / floor if floor else 0))
    print("    stages (ms/call): " + ", ".join("%s %.3f" % (k[3:], v) for k, v in stages_a.items()))
    print("(b) CPU transform 1 thread %.1f ms + ship %.0f MB of ids and score on the GPU %.3f ms = %.1f ms -> %.1fx"
          % (med(cpu1_tr) * 1e3, bytes_b / 1e6, med(cpu1_sc) * 1e3, peer1 * 1e3, peer1 / e2e_a))
    print("    CPU transform %d threads %.1f ms + ship and score %.3f ms = %.1f ms -> %.1fx"
          % (len(raws), med(cpun_tr) * 1e3, med(cpun_sc) * 1e3, peern * 1e3, peern / e2e_a))
    print("(c) GPU transform with ids back: %.3f ms; ids equal to the CPU's: %s" % (med(t_c) * 1e3, same_ids))
    print("max |p_gpu - p_cpu| = %.3g (NaN mismatches %d); threads vs one %.3g" % (maxdiff, nan_mismatch, maxdiff_n))
    print("wrote " + out_path)
    for b in batches:
        L.wisp_batch_free(b)
    for r in raws:
        L.wisp_raw_free(r)
    L.wisp_batch_free(batch)
    L.wisp_batch_free(gb)
    L.wisp_raw_free(raw)
    L.wisp_session_free(sess)
    L.wisp_model_free(model)
    L.wisp_columns_free(cols)
    L.wisp_engine_free(eng)


if __name__ == "__main__":
    main()
