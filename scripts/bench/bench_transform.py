#!/usr/bin/env python3
"""bench_transform.py — CPU transform throughput on the Criteo layout (TSV in -> CSR out), wisp against TensorFlow's own preprocessing, one core each, side by side.

Usage: scripts/bench/bench_transform.py [--rows 200000] [--crosses adjacent|all] [--repeat 5] [--batch 8192]
                                  [--tf-rows 50000] [--no-tf] [--baseline-lib OLD/libwisp.so]
                                  [--out scripts/results/bench_transform.json]

Data: synthetic Criteo-layout TSV (label, I1..I13 integers, C1..C26 8-hex-digit
categoricals, Zipf-distributed, about 10% empty fields), made here with a fixed seed.
Feature columns (the same description for both, built by scripts/tools/tf_export.py's bridge):
  13 numeric (float32, default 0, (x - 4) / 16), 13 bucketized of them (10 boundaries),
  26 hash_bucket (10^6 buckets each: not a power of two, so no mask shortcut) and the
  crosses: "adjacent" = C1xC2 .. C25xC26 (25), "all" = every pair of the 26 categoricals
  (325; 10^5 buckets each so the weight table stays under 2^32).
wisp:  libwisp through ctypes, an engine of 1 thread: wisp_raw_parse_tsv (text -> raw
       columns) then wisp_transform (raw columns -> CSR batch), chunks of 8192 rows, the
       whole text, text already in memory.
TensorFlow: tf.io.decode_csv on batches of --batch lines, then every column's
       get_sparse_tensors / get_dense_tensor (tf.feature_column), in one tf.function,
       intra- and inter-op threads 1, passes over --tf-rows rows. wisp and TensorFlow take
turns (one wisp run, one TensorFlow pass, --repeat times), so both see the same load.
Timing: CPU seconds of the process (time.process_time: every thread counts, time spent
descheduled does not: the machine may be shared), median and best of --repeat runs; wall
seconds too. rows/s per core = rows / CPU seconds.
Also: bytes/s of merely reading the text (read() of the file from the page cache, and a
memchr scan for line ends in C through ctypes' libc), the floor for any text reader.
--baseline-lib: another libwisp.so (say, a build of an older commit) timed the same
way in the same run, taking turns with the measured one, and checked to give the
same batch; the JSON gets its figures and measured/baseline.
Correctness: for the first 2000 rows the ids of every column must be the same in both.
Writes the figures (rows/s, bytes/s, the ratio) with the machine, commit, date and command.
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "scripts", "tools"), os.path.join(ROOT, "scripts", "lib")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import tf_export  # noqa: E402
import wisp_pkg  # noqa: E402  scripts/lib/wisp_pkg.py: wisp._capi, from the package (or this checkout)
capi = wisp_pkg.capi()
import record  # noqa: E402  scripts/lib/record.py: the commit, the machine, where results go

BOUNDS = [0, 1, 2, 4, 8, 16, 32, 64, 256, 1024]


def description(crosses, buckets=1000000):
    inputs = [{"name": "I%d" % k, "dtype": "float32", "default": 0.0} for k in range(1, 14)] + \
             [{"name": "C%d" % k, "dtype": "string"} for k in range(1, 27)]
    cols = []
    for k in range(1, 14):
        cols.append({"name": "I%d" % k, "type": "numeric", "key": "I%d" % k,
                     "normalizer": {"type": "standard", "mean": 4.0, "std": 16.0}})
    for k in range(1, 14):
        cols.append({"name": "I%d_bucketized" % k, "type": "bucketized",
                     "source": {"type": "numeric", "key": "I%d" % k}, "boundaries": BOUNDS})
    for k in range(1, 27):
        cols.append({"name": "C%d" % k, "type": "hash_bucket", "key": "C%d" % k, "buckets": buckets})
    pairs = [(i, i + 1) for i in range(1, 26)] if crosses == "adjacent" else \
            [(i, j) for i in range(1, 27) for j in range(i + 1, 27)]
    xb = buckets if crosses == "adjacent" else buckets // 10
    for i, j in pairs:
        cols.append({"name": "C%d_X_C%d" % (i, j), "type": "crossed", "keys": ["C%d" % i, "C%d" % j],
                     "buckets": xb})
    spec = {"format": "wisp-columns", "version": 1, "inputs": inputs, "columns": cols}
    tf_export.assign_offsets(spec)
    return spec


def gen_tsv(rows, seed):
    rng = np.random.default_rng(seed)
    lines = []
    ints = np.floor(rng.lognormal(1.0, 1.8, size=(rows, 13))).astype(np.int64) - (rng.random((rows, 13)) < 0.03)
    imiss = rng.random((rows, 13)) < 0.1
    zipf = rng.zipf(1.2, size=(rows, 26)) % (1 << 28)
    cmiss = rng.random((rows, 26)) < 0.1
    mult = np.array([(2654435761 * (k + 1)) | 1 for k in range(26)], dtype=np.uint64)
    cats = ((zipf.astype(np.uint64) * mult) & np.uint64(0xFFFFFFFF)).astype(np.int64)
    lab = rng.random(rows) < 0.25
    for r in range(rows):
        f = ["1" if lab[r] else "0"]
        f += ["" if imiss[r, k] else str(ints[r, k]) for k in range(13)]
        f += ["" if cmiss[r, k] else "%08x" % cats[r, k] for k in range(26)]
        lines.append("\t".join(f))
    return ("\n".join(lines) + "\n").encode()


def machine():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": "none used (CPU transform)",
            "load_average_1m": round(os.getloadavg()[0], 2)}


commit = record.commit


# ---- wisp -----------------------------------------------------------------------------

class Wisp:
    def __init__(self, spec_text, lib_path=None):
        lib = capi.load(lib_path, ROOT)
        self.lib = lib
        vp = ctypes.c_void_p
        self.eng, self.cols, self.raw, self.batch = vp(), vp(), vp(), vp()
        self._ok(lib.wisp_engine_new(1, ctypes.byref(self.eng)))
        t = spec_text.encode()
        self._ok(lib.wisp_columns_parse(t, len(t), ctypes.byref(self.cols)))
        self._ok(lib.wisp_raw_new(self.eng, self.cols, ctypes.byref(self.raw)))
        self._ok(lib.wisp_raw_set_schema(self.raw, b"criteo", 9))
        self._ok(lib.wisp_batch_new(self.eng, ctypes.byref(self.batch)))

    def _ok(self, rc):
        if rc != 0:
            raise SystemExit("bench_transform: wisp: " + self.lib.wisp_errmsg().decode())

    def run(self, text, chunk_rows=8192):
        """parse + transform the whole text in chunks of rows; returns (parse s, transform s)."""
        lib = self.lib
        line, used = ctypes.c_uint64(0), ctypes.c_size_t(0)
        buf = ctypes.c_char_p(text)
        base = ctypes.cast(buf, ctypes.c_void_p).value
        off, n = 0, len(text)
        lib.wisp_batch_clear(self.batch)
        tp = tt = 0.0
        w0 = time.perf_counter()
        while off < n:
            lib.wisp_raw_clear(self.raw)
            t0 = time.process_time()
            self._ok(lib.wisp_raw_parse_tsv(self.raw, ctypes.c_char_p(base + off), n - off, 1, chunk_rows,
                                            ctypes.byref(line), ctypes.byref(used)))
            t1 = time.process_time()
            self._ok(lib.wisp_transform(self.raw, self.batch))
            t2 = time.process_time()
            tp += t1 - t0
            tt += t2 - t1
            off += used.value
            if used.value == 0:
                break
        return tp, tt, time.perf_counter() - w0

    def ids(self, spec, rows):
        """Per row, per column: sorted local ids (numeric: the value)."""
        lib = self.lib
        rp, ids = lib.wisp_batch_indptr(self.batch), lib.wisp_batch_ids(self.batch)
        vp, vals = lib.wisp_batch_val_ptr(self.batch), lib.wisp_batch_vals(self.batch)
        slices = [(c["name"], c["offset"], tf_export.column_size(c), c["type"]) for c in spec["columns"]]
        out = []
        for r in range(rows):
            a, z = rp[r], rp[r + 1]
            nv = (vp[r + 1] - vp[r]) if vp else (z - a if vals else 0)
            v0 = vp[r] if vp else a
            row = {}
            for k in range(a, z):
                i = ids[k]
                for name, off, size, typ in slices:
                    if off <= i < off + size:
                        if k - a < nv:
                            row[name] = float(vals[v0 + k - a])
                        else:
                            row.setdefault(name, []).append(i - off)
                        break
            out.append({k: (sorted(v) if isinstance(v, list) else v) for k, v in row.items()})
        return out

    def close(self):
        lib = self.lib
        lib.wisp_batch_free(self.batch)
        lib.wisp_raw_free(self.raw)
        lib.wisp_columns_free(self.cols)
        lib.wisp_engine_free(self.eng)


def read_floor(path, text, repeat):
    """bytes/s of read() from the page cache, and of a memchr scan for '\\n' in C."""
    libc = ctypes.CDLL(None)
    libc.memchr.restype = ctypes.c_void_p
    libc.memchr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    t_read = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
        t_read.append(time.perf_counter() - t0)
    # memchr over the whole buffer in one C call per line would be Python-bound: time a
    # single C-side count via wisp's own line loop is not "merely reading"; use rawmemchr-like
    # scanning of the buffer for a byte that is absent (one call: pure memory bandwidth).
    buf = ctypes.create_string_buffer(text, len(text))
    t_scan = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        libc.memchr(buf, 0x01, len(text))
        t_scan.append(time.perf_counter() - t0)
    return len(text) / statistics.median(t_read), len(text) / statistics.median(t_scan)


# ---- TensorFlow -------------------------------------------------------------------------

def tf_setup(spec, text, rows, batch):
    """TensorFlow's pipeline, traced; returns (one_pass, rows, ids of the first 2000 rows, version)."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from tensorflow.python.feature_column import feature_column_v2 as fc2
    cols = tf_export.tf_columns(spec)
    names = ["label"] + ["I%d" % k for k in range(1, 14)] + ["C%d" % k for k in range(1, 27)]
    defaults = [[0.0]] + [[0.0]] * 13 + [[""]] * 26

    @tf.function
    def pre(lines):
        fields = tf.io.decode_csv(lines, record_defaults=defaults, field_delim="\t")
        feats = {n: tf.reshape(f, [-1, 1]) for n, f in zip(names, fields) if n != "label"}
        cache = fc2.FeatureTransformationCache(feats)
        out = []
        for c, tc in zip(spec["columns"], cols):
            if c["type"] == "numeric":
                out.append(tc.get_dense_tensor(cache, None))
            else:
                st = tc.get_sparse_tensors(cache, None).id_tensor
                out.append((st.indices, st.values))
        return out

    lines = text.split(b"\n")[:rows]
    batches = [tf.constant(lines[i:i + batch]) for i in range(0, len(lines), batch)]
    pre(batches[0])                                 # trace

    def one_pass():
        t0, w0 = time.process_time(), time.perf_counter()
        for b in batches:
            pre(b)
        return time.process_time() - t0, time.perf_counter() - w0
    sample = pre(tf.constant(lines[:2000]))
    ids = [dict() for _ in range(min(2000, len(lines)))]
    for c, o in zip(spec["columns"], sample):
        if c["type"] == "numeric":
            for r, v in enumerate(o.numpy().reshape(-1)):
                ids[r][c["name"]] = float(v)
        else:
            for (r, _), v in zip(o[0].numpy().tolist(), o[1].numpy().tolist()):
                if v >= 0:
                    ids[r].setdefault(c["name"], []).append(v)
    ids = [{k: (sorted(v) if isinstance(v, list) else v) for k, v in row.items()} for row in ids]
    return one_pass, len(lines), ids, tf.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--crosses", choices=["adjacent", "all"], default="adjacent")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--tf-rows", type=int, default=50000)
    ap.add_argument("--no-tf", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline-lib")
    ap.add_argument("--out")
    rec = record.take_record_flag(sys.argv)
    a = ap.parse_args()
    out = a.out or record.out_path("bench_transform%s.json" % ("" if a.crosses == "adjacent" else "_all_crosses"), rec)
    spec = description(a.crosses)
    cache = os.path.join(ROOT, "build", "bench_transform")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, "criteo_%d_%d.tsv" % (a.rows, a.seed))
    if not os.path.exists(path):
        print("bench_transform: generating %s" % path, file=sys.stderr)
        data = gen_tsv(a.rows, a.seed)
        with open(path, "wb") as f:
            f.write(data)
    with open(path, "rb") as f:
        text = f.read()
    nbytes = len(text)

    w = Wisp(json.dumps(spec))
    w.run(text)                                          # warm up (memory grows once)
    base = None
    if a.baseline_lib:
        base = Wisp(json.dumps(spec), a.baseline_lib)
        base.run(text)
    tf_pass = None
    if not a.no_tf:
        tf_pass, n_tf, tf_ids, tfv = tf_setup(spec, text, a.tf_rows, a.batch)
        tf_pass()                                        # warm up
    # wisp and TensorFlow take turns, so both see the same load on a shared machine
    runs, tf_runs, base_runs = [], [], []
    load0 = os.getloadavg()[0]
    for _ in range(a.repeat):
        runs.append(w.run(text))
        if base:
            base_runs.append(base.run(text))
        if tf_pass:
            tf_runs.append(tf_pass())
    load1 = os.getloadavg()[0]
    tp = statistics.median(r[0] for r in runs)
    tt = statistics.median(r[1] for r in runs)
    tot = statistics.median(r[0] + r[1] for r in runs)
    best = min(r[0] + r[1] for r in runs)
    wall = statistics.median(r[2] for r in runs)
    nnz = w.lib.wisp_batch_nnz(w.batch)
    bad = w.lib.wisp_batch_bad_count(w.batch)
    rows = w.lib.wisp_batch_rows(w.batch)
    read_bps, scan_bps = read_floor(path, text, a.repeat)
    res = {
        "benchmark": "bench_transform",
        "command": "scripts/bench/bench_transform.py " + " ".join(sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "peers": "in results.tensorflow: TensorFlow's own feature columns on the same rows, same run",
        "machine": dict(machine(), load_average_1m=[round(load0, 2), round(load1, 2)]),
        "data": {"rows": rows, "bytes": nbytes, "bytes_per_row": round(nbytes / rows, 1), "layout": "criteo TSV",
                 "columns": len(spec["columns"]), "crosses": a.crosses, "features_per_row": round(nnz / rows, 2),
                 "bad_rows": bad},
        "wisp": {"threads": 1, "rows_per_s": round(rows / tot), "rows_per_s_best": round(rows / best),
                 "parse_rows_per_s": round(rows / tp), "transform_rows_per_s": round(rows / tt),
                 "bytes_per_s": round(nbytes / tot), "cpu_seconds": round(tot, 4), "wall_seconds": round(wall, 4)},
        "read_floor": {"read_bytes_per_s": round(read_bps), "memchr_bytes_per_s": round(scan_bps),
                       "wisp_bytes_per_s": round(nbytes / tot), "wisp_parse_bytes_per_s": round(nbytes / tp),
                       "wisp_fraction_of_read": round(nbytes / tot / read_bps, 4)},
    }
    if base:
        same = (base.lib.wisp_batch_nnz(base.batch) == nnz and base.lib.wisp_batch_rows(base.batch) == rows and
                ctypes.string_at(base.lib.wisp_batch_ids(base.batch), 4 * nnz) ==
                ctypes.string_at(w.lib.wisp_batch_ids(w.batch), 4 * nnz))
        btot = statistics.median(r[0] + r[1] for r in base_runs)
        res["baseline"] = {"lib": a.baseline_lib, "rows_per_s": round(rows / btot),
                           "rows_per_s_best": round(rows / min(r[0] + r[1] for r in base_runs)),
                           "parse_rows_per_s": round(rows / statistics.median(r[0] for r in base_runs)),
                           "transform_rows_per_s": round(rows / statistics.median(r[1] for r in base_runs)),
                           "cpu_seconds": round(btot, 4), "same_ids": same}
        res["measured_over_baseline"] = round(btot / tot, 2)
        pair = [(b[0] + b[1]) / (r[0] + r[1]) for r, b in zip(runs, base_runs)]
        res["measured_over_baseline_per_turn"] = {"median": round(statistics.median(pair), 2), "min": round(min(pair), 2),
                                                  "max": round(max(pair), 2)}
        if not same:
            print("bench_transform: the baseline library gives other ids!", file=sys.stderr)
        if not a.no_tf:
            res["baseline"]["ratio_over_tf"] = None        # filled below
    if not a.no_tf:
        tf_times = [t[0] for t in tf_runs]
        tf_walls = [t[1] for t in tf_runs]
        t_tf = statistics.median(tf_times)
        w.run(b"\n".join(text.split(b"\n")[:2000]) + b"\n")
        wisp_ids = w.ids(spec, 2000)
        diffs = sum(1 for x, y in zip(wisp_ids, tf_ids) if x != y)
        res["tensorflow"] = {"version": tfv, "threads": "intra 1, inter 1", "rows": n_tf, "batch": a.batch,
                             "rows_per_s": round(n_tf / t_tf), "rows_per_s_best": round(n_tf / min(tf_times)),
                             "cpu_seconds": round(t_tf, 4), "wall_seconds": round(statistics.median(tf_walls), 4),
                             "pipeline": "tf.io.decode_csv + tf.feature_column get_sparse_tensors/get_dense_tensor in one tf.function"}
        res["ratio_wisp_over_tf"] = round(res["wisp"]["rows_per_s"] / res["tensorflow"]["rows_per_s"], 1)
        res["ratio_wisp_over_tf_best"] = round(res["wisp"]["rows_per_s_best"] / res["tensorflow"]["rows_per_s_best"], 1)
        # per turn: both measured back to back under the same load
        pair = [(rows / (r[0] + r[1])) / (n_tf / t) for r, t in zip(runs, tf_times)]
        res["ratio_per_turn"] = {"median": round(statistics.median(pair), 1), "min": round(min(pair), 1),
                                 "max": round(max(pair), 1)}
        res["check"] = {"rows_compared": len(tf_ids), "rows_differing": diffs}
        if base:
            res["baseline"]["ratio_over_tf"] = round(res["baseline"]["rows_per_s"] / res["tensorflow"]["rows_per_s"], 1)
        if diffs:
            print("bench_transform: %d of %d rows differ between wisp and TensorFlow!" % (diffs, len(tf_ids)), file=sys.stderr)
    w.close()
    if base:
        base.close()
    res = record.write(out, res)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
